"""``cli.common.flag_groups``: flags declared once as a group reach Typer one by one and the verb as the group."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import pytest
import typer
from typer.testing import CliRunner

from computewise.cli.common import FlagGroup, flag_groups  # noqa: TID251 (the decorator itself is under test)


@dataclass(frozen=True)
class _Window(FlagGroup):
    start: Annotated[int, typer.Option(help="First step.")] = 0
    stop: Annotated[int | None, typer.Option("--until", help="Last step.")] = None


_seen: list[tuple[str, _Window, bool]] = []


@flag_groups
def _verb(*, name: Annotated[str, typer.Option(help="Who.")] = "x", window: _Window, loud: bool = False) -> None:
    _seen.append((name, window, loud))


def _app() -> typer.Typer:
    app = typer.Typer()
    app.command()(_verb)
    return app


def test_a_group_is_spread_into_its_flags_where_the_verb_declares_it_and_gathered_back() -> None:
    runner = CliRunner()
    _seen.clear()
    assert runner.invoke(_app(), ["--until", "5", "--name", "y", "--loud"]).exit_code == 0
    assert runner.invoke(_app(), []).exit_code == 0
    assert _seen == [("y", _Window(0, 5), True), ("x", _Window(), False)]
    shown = runner.invoke(_app(), ["--help"]).output
    order = ["--name", "--start", "--until", "--loud"]
    assert all(flag in shown for flag in order) and sorted(order, key=shown.index) == order
    assert "First step." in shown and "--stop" not in shown and "--window" not in shown


def test_a_group_flag_named_as_another_parameter_fails_at_import() -> None:
    def clash(*, start: int = 0, window: _Window) -> None:
        del start, window

    with pytest.raises(ValueError, match="duplicate parameter name: 'start'"):
        flag_groups(clash)
