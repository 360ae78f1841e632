"""The ``computewise`` command: wires the verbs together and turns user errors into exit code 2."""

from __future__ import annotations

import sys

import typer
from rich.console import Console

from computewise.cli import catalog_cmd, estimate_cmd, plan_cmd
from computewise.errors import ComputewiseError

app = typer.Typer(
    name="computewise",
    help="Plan, measure and cut the compute cost of ML training and inference.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(estimate_cmd.app, name="estimate")
app.add_typer(plan_cmd.app, name="plan")
app.add_typer(catalog_cmd.app, name="catalog")

_stderr = Console(stderr=True)

EXIT_USER_ERROR = 2


def main() -> None:
    """Entry point of the console script: a ComputewiseError is the user's to fix, not a crash."""
    try:
        app(standalone_mode=True)
    except ComputewiseError as error:
        _stderr.print(f"[bold red]error:[/] {error.message}", highlight=False)
        if error.hint:
            _stderr.print(f"[bold]To fix:[/] {error.hint}", highlight=False)
        sys.exit(EXIT_USER_ERROR)


if __name__ == "__main__":
    main()
