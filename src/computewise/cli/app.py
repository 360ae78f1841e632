"""The ``computewise`` command: wires the verbs together and turns user errors into exit code 2."""

from __future__ import annotations

import importlib
import sys
from functools import cache
from pathlib import Path
from typing import Annotated, Any, get_args

import typer
from typer.core import TyperArgument, TyperGroup, TyperOption

from computewise.cli.common import RENAMED_FLAGS, print_error
from computewise.errors import ComputewiseError

_PASS_THROUGH: dict[str, Any] = {"context_settings": {"allow_interspersed_args": False, "ignore_unknown_options": True}}
_NEEDS_ARGS: dict[str, Any] = {"no_args_is_help": True}

# Each verb: (module under computewise.cli, its attribute, app.command's keyword arguments). The
# attribute "app" is a group of subcommands. `computewise --help` lists them in this order.
VERBS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "estimate": ("estimate_cmd", "app", {}),
    "plan": ("plan_cmd", "app", {}),
    "catalog": ("catalog_cmd", "app", {}),
    "run": ("run_cmd", "run", _PASS_THROUGH),
    "runs": ("runs_cmd", "app", {}),
    "cost": ("cost_cmd", "app", {}),
    "budget": ("budget_cmd", "app", {}),
    "storage": ("storage_cmd", "app", {}),
    "optimize": ("optimize_cmd", "optimize", _NEEDS_ARGS),
    "distill": ("distill_cmd", "distill", _NEEDS_ARGS),
    "serve": ("serve_cmd", "serve", _NEEDS_ARGS),
    "deploy": ("deploy_cmd", "deploy", _NEEDS_ARGS),
    "loadtest": ("loadtest_cmd", "loadtest", _NEEDS_ARGS),
    "scaletest": ("scaletest_cmd", "scaletest", _NEEDS_ARGS),
    "tune": ("tune_cmd", "tune", _NEEDS_ARGS),
    "bench": ("bench_cmd", "bench", {}),
    "dashboard": ("dashboard_cmd", "dashboard", {}),
    "data": ("data_cmd", "app", {}),
    "grafana-dashboard": ("grafana_cmd", "grafana_dashboard", {}),
    "submit": ("submit_cmd", "submit", {**_PASS_THROUGH, **_NEEDS_ARGS}),
}


# Subcommands of a group that live in modules of their own, so that no CLI module imports another:
# (group verb, subcommand, module under computewise.cli, its function). Listed after the group's own.
SUBCOMMANDS: dict[str, tuple[tuple[str, str, str], ...]] = {
    "plan": (("serve", "plan_serve_cmd", "plan_serve"), ("federated", "plan_federated_cmd", "plan_federated")),
}


# `-h` as well as `--help`, as most command-line tools take; click hands this to every subcommand's context.
_CONTEXT: dict[str, Any] = {"help_option_names": ["-h", "--help"]}


def _typer(**settings: Any) -> typer.Typer:
    """The root app: Typer's shell completion (``--install-completion``, ``--show-completion``) stays on."""
    return typer.Typer(name="computewise", pretty_exceptions_enable=False, context_settings=_CONTEXT, **settings)


def _print_version(value: bool) -> None:
    if value:
        from computewise import __version__

        typer.echo(f"computewise {__version__}")
        raise typer.Exit()


def _root(
    version: Annotated[
        bool,
        typer.Option("--version", help="Print the version and exit.", is_eager=True, callback=_print_version),
    ] = False,
) -> None:
    # The root's options only (--version, completion); a callback also keeps a lone verb a subcommand.
    del version


def _add(target: typer.Typer, verb: str) -> None:
    """Import the module behind ``verb`` and register it on ``target``."""
    module_name, attribute, settings = VERBS[verb]
    if attribute == "app":
        target.add_typer(_group(verb), name=verb)
    else:
        module = importlib.import_module(f"computewise.cli.{module_name}")
        target.command(verb, **settings)(getattr(module, attribute))


@cache
def _group(verb: str) -> typer.Typer:
    """The group of subcommands behind ``verb``, with its ``SUBCOMMANDS`` added (once: the group is shared)."""
    group: typer.Typer = importlib.import_module(f"computewise.cli.{VERBS[verb][0]}").app
    for name, module_name, function in SUBCOMMANDS.get(verb, ()):
        group.command(name)(getattr(importlib.import_module(f"computewise.cli.{module_name}"), function))
    return group


@cache
def whole_app() -> typer.Typer:
    """Every verb: what ``computewise --help`` lists (built once per process)."""
    app = _typer(help="Plan, measure and cut the compute cost of ML training and inference.", no_args_is_help=True)
    app.callback()(_root)
    for verb in VERBS:
        _add(app, verb)
    return app


EXIT_USER_ERROR = 2

# Click's names for the value a flag takes: what `--help` of nearly every Python CLI shows.
_METAVARS: dict[object, str] = {int: "INTEGER", float: "FLOAT", str: "TEXT", Path: "PATH", bool: "BOOLEAN"}


class _ConventionalArgument(TyperArgument):
    """An argument shown as click shows one: ``RUN_ID`` when required, ``[RUN_ID]`` when not."""

    def _rich_display_name(self) -> str:
        return self.display_name_raw + ("..." if self.nargs != 1 else "")

    def _usage_display_name(self) -> str:
        name = self._rich_display_name()
        return name if self.required else f"[{name}]"

    def display_type_rich(self, ctx: Any) -> str | None:
        return None  # the name is the placeholder; a type beside it would repeat it


class _ConventionalOption(TyperOption):
    """An option whose help leaves out its old spellings (``common.RENAMED_FLAGS``), which still parse."""

    def get_help_record(self, ctx: Any) -> tuple[str, str] | None:
        every = self.opts
        self.opts = [name for name in every if name not in RENAMED_FLAGS]
        try:
            return super().get_help_record(ctx)
        finally:
            self.opts = every


def _metavar(param: TyperOption | TyperArgument) -> str:
    descriptor = getattr(param, "type_descriptor", None)
    if descriptor is None:  # an older typer (the H200 image's) keeps no annotation: click's type names it
        name = str(getattr(getattr(param, "type", None), "name", "text")).upper()
        return name if name in _METAVARS.values() else "TEXT"
    annotation: object = descriptor.annotation
    if descriptor.is_list:
        (annotation,) = get_args(annotation)
    return _METAVARS.get(annotation, "TEXT")


def conventional_help(command: Any) -> None:
    """Make ``command``'s help, and its subcommands', read as click's plain help does.

    Typer's own help shows Python types (``<str>``, ``<list[Path]>``, ``{run_id}``) and, drawn in Rich
    panels, cuts long flags at 80 columns (``--sequence-para…``). Click's plain layout prints every flag
    whole (``--sequence-parallel / --no-sequence-parallel``) with ``INTEGER``, ``PATH`` and ``TEXT``.
    """
    command.rich_markup_mode = None
    for param in command.params:
        if isinstance(param, TyperArgument):
            param.__class__ = _ConventionalArgument
            param.metavar = param.metavar or (param.name or "value").upper()
        elif isinstance(param, TyperOption):
            param.__class__ = _ConventionalOption
            if not param.is_flag:
                param.metavar = param.metavar or _metavar(param)
    if isinstance(command, TyperGroup):
        for subcommand in command.commands.values():
            conventional_help(subcommand)


def app_for(argv: list[str]) -> typer.Typer:
    """The app that runs ``argv``: only the verb it starts with, else the whole app.

    Importing every verb's module and turning its functions into click commands costs about 0.2 s
    on a 2-vCPU EPYC before a single argument is parsed, a fifth of ``computewise dashboard``'s 1 s
    start-up target. The verb's own parsing, help and errors are unchanged; ``computewise --help``, a
    bare ``computewise`` and an unknown verb get the whole app, so its listing and its "No such
    command" are too.
    """
    verb = argv[0] if argv else ""
    if verb not in VERBS:
        return whole_app()
    single = _typer()
    single.callback()(_root)
    _add(single, verb)
    return single


def main() -> None:
    """Entry point of the console script: a ComputewiseError is the user's to fix, not a crash.

    Only that tree is caught: a ``ControlFlow`` signal (``computewise.errors``) that gets this far is
    a bug in computewise and keeps its traceback.
    """
    argv = sys.argv[1:]
    command = typer.main.get_command(app_for(argv))
    conventional_help(command)
    try:
        command.main(argv, prog_name="computewise", standalone_mode=True)
    except ComputewiseError as error:
        print_error(error)
        sys.exit(EXIT_USER_ERROR)


if __name__ == "__main__":
    main()
