"""One concept, one flag name in every verb; the old names still work, hidden from help."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import typer

from computewise.cli.app import conventional_help, whole_app  # noqa: TID251

CLI = [sys.executable, "-m", "computewise.cli.app"]

# Names users met for the same thing in different verbs (issue 27). A verb may show one of each set.
SYNONYMS = (
    {"--gpu", "--accelerator"},
    {"--utilization", "--target-utilization"},
    {"--rps", "--peak-rps"},
    {"--latency", "--latency-ms"},
    {"--context-len", "--input-len"},
    {"--batch", "--batch-size"},
)


def visible_flags() -> Iterator[tuple[str, str]]:
    """(command, flag) for every flag that some command's help shows, walking the real command tree."""

    def walk(command: Any, path: list[str]) -> Iterator[tuple[str, str]]:
        context = typer.Context(command, info_name=" ".join(path))
        for param in command.params:
            record = param.get_help_record(context)
            if record is not None:
                names = record[0].replace(",", " ").replace("/", " ").split()
                yield from ((" ".join(path), name) for name in names if name.startswith("--"))
        for name, subcommand in getattr(command, "commands", {}).items():
            yield from walk(subcommand, [*path, name])

    command = typer.main.get_command(whole_app())
    conventional_help(command)
    yield from walk(command, ["computewise"])


def test_no_two_names_for_one_concept() -> None:
    shown: dict[str, set[str]] = {}
    for command, flag in visible_flags():
        shown.setdefault(flag, set()).add(command)
    assert {"--gpu", "--peak-rps", "--target-utilization", "--input-len"} <= set(shown)
    for names in SYNONYMS:
        visible = {name: sorted(shown[name]) for name in names if name in shown}
        assert len(visible) <= 1, visible


def _json(*args: str) -> dict[str, Any]:
    done = subprocess.run([*CLI, *args, "--json"], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, (args, done.stderr)
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def test_old_names_still_work() -> None:
    plan_infer = ("plan", "infer", "--model", "gpt2", "--gpu", "t4", "--input-len", "256")
    assert _json(*plan_infer, "--peak-rps", "20", "--target-utilization", "0.5", "--max-latency", "2s") == _json(
        *plan_infer, "--rps", "20", "--utilization", "0.5", "--latency", "2s"
    )
    estimate_infer = ("estimate", "infer", "--model", "gpt2", "--gpu", "t4")
    assert _json(*estimate_infer, "--input-len", "300") == _json(*estimate_infer, "--context-len", "300")
    assert _json(*estimate_infer, "--batch-size", "4") == _json(*estimate_infer, "--batch", "4")
    plan_serve = ("plan", "serve", "--capacity-rps", "50", "--peak-rps", "100")
    assert _json(*plan_serve, "--gpu", "l4") == _json(*plan_serve, "--accelerator", "l4")


def test_every_command_takes_json_but_those_the_readme_names() -> None:
    """The README said every command takes --json; the servers and grafana-dashboard did not."""

    def leaves(command: Any, path: list[str]) -> Iterator[tuple[str, Any]]:
        subcommands = getattr(command, "commands", {})
        if not subcommands:
            yield " ".join(path), command
        for name, subcommand in subcommands.items():
            yield from leaves(subcommand, [*path, name])

    without = {path for path, command in leaves(typer.main.get_command(whole_app()), []) if not _takes_json(command)}
    assert without == {"serve", "dashboard", "grafana-dashboard"}
    readme = " ".join((Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8").split())
    claim = readme[readme.index("Every command takes `--json`") :].split(";")[0]
    assert all(f"`{path}`" in claim for path in without), claim


def _takes_json(command: Any) -> bool:
    return any("--json" in param.opts for param in command.params)


def test_help_names_each_value_under_a_typer_that_keeps_no_annotation() -> None:
    """Older typer (the H200 image's) builds plain click options with no ``type_descriptor``: the help
    still names each value as click does, and ``computewise bench`` no longer crashes there."""
    click = pytest.importorskip("click")
    from computewise.cli.app import _metavar  # noqa: TID251

    kinds = (int, float, click.Path(), str, click.Choice(["a", "b"]), bool)
    names = [_metavar(cast(Any, click.Option([f"--v{n}"], type=kind))) for n, kind in enumerate(kinds)]
    assert names == ["INTEGER", "FLOAT", "PATH", "TEXT", "TEXT", "BOOLEAN"]
