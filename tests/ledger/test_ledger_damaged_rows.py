"""A ledger row damaged by hand or by another tool is a ``LedgerError`` naming the file, the row and the column.

Each case writes a real SQLite ledger through the API, damages one column with the ``sqlite3`` module (as
an ``UPDATE`` typed at a shell would), then reads it back through ``Ledger``; the CLI half checks that
every read command turns the same damage into a message and exit code 2, never a traceback.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from computewise.errors import LedgerError
from computewise.ledger import Ledger, NewRun
from computewise.ledger.queries import RunFilter

CLI = [sys.executable, "-m", "computewise.cli.app"]

# (column, value written by hand, what the message says is wrong)
DAMAGE = [
    ("tags", "'not json'", "not JSON"),
    ("argv", "'null'", "list of strings"),
    ("started_at_s", "1e30", "Unix time"),
    ("tags", """'{"team": 3}'""", "text values"),
    ("price", "'{}'", "price snapshot"),
    ("status", "'weird'", "one of running"),
    ("summary", "'[1, 2]'", "JSON object"),
]


def _damage(path: Path, sql: str) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute(sql)


@pytest.fixture
def filled(tmp_path: Path, new_run: Callable[..., NewRun]) -> tuple[Path, int]:
    """A SQLite ledger with one finished run and one budget; the path and the run id."""
    path = tmp_path / "ledger.sqlite"
    with Ledger.open(str(path)) as ledger:
        run = new_run()
        run_id = ledger.start_run(run)
        ledger.finish_run(run_id, "succeeded", run.started_at_s + 60, exit_code=0)
        ledger.set_budget("team=nlp", 100.0, (50.0, 100.0), None, None, run.started_at_s)
    return path, run_id


@pytest.mark.parametrize(("column", "value", "says"), DAMAGE)
def test_a_damaged_run_column_is_named_with_its_run_and_a_fix(
    filled: tuple[Path, int], column: str, value: str, says: str
) -> None:
    path, run_id = filled
    _damage(path, f"UPDATE runs SET {column} = {value} WHERE id = {run_id}")
    with Ledger.open(str(path), create=False) as ledger:
        reads: list[Callable[[], object]] = [
            ledger.runs,
            lambda: ledger.run(run_id),
            lambda: ledger.runs_page(RunFilter(), "started", True, time.time()),
        ]
        for read in reads:
            with pytest.raises(LedgerError) as info:
                read()
            message, hint = info.value.message, info.value.hint or ""
            assert str(path) in message and f"run {run_id}" in message and repr(column) in message, message
            assert says in message, message
            assert f'"SELECT {column} FROM runs WHERE id = {run_id}"' in hint
            assert f"DELETE FROM runs WHERE id = {run_id}" in hint


def test_a_damaged_budget_or_alert_is_named_too(filled: tuple[Path, int]) -> None:
    path, _ = filled
    with Ledger.open(str(path)) as ledger:
        ledger.record_alert("budget", "half spent", 1.0e9, scope="team=nlp", budget_id=1, period="2001-09")
    _damage(path, "UPDATE budgets SET alert_at_pct = 'fifty' WHERE id = 1")
    _damage(path, "UPDATE alerts SET delivery = 'null'")
    with Ledger.open(str(path), create=False) as ledger:
        with pytest.raises(LedgerError, match=r"budget 1, column 'alert_at_pct'.*'fifty'"):
            ledger.budgets()
        with pytest.raises(LedgerError, match=r"alert 1, column 'delivery'") as info:
            ledger.alerts()
        assert "UPDATE alerts SET delivery = '{}' WHERE id = 1" in (info.value.hint or "")


def test_undamaged_rows_read_back_as_written(filled: tuple[Path, int], new_run: Callable[..., NewRun]) -> None:
    path, run_id = filled
    with Ledger.open(str(path), create=False) as ledger:
        run = ledger.run(run_id)
        assert run.tags == new_run().tags and run.argv == new_run().argv and run.status == "succeeded"
        assert [budget.alert_at_pct for budget in ledger.budgets()] == [(50.0, 100.0)]


@pytest.mark.parametrize(("column", "value"), [("tags", "'not json'"), ("argv", "'null'"), ("started_at_s", "1e30")])
def test_every_read_command_stops_with_the_message_and_exit_2(
    filled: tuple[Path, int], column: str, value: str
) -> None:
    path, run_id = filled
    _damage(path, f"UPDATE runs SET {column} = {value} WHERE id = {run_id}")
    for command in (["runs"], ["cost", "report"], ["budget", "status"], ["runs", "show", str(run_id)]):
        done = subprocess.run(
            [*CLI, *command, "--db", str(path)], capture_output=True, text=True, timeout=120, check=False
        )
        assert done.returncode == 2, (command, done.stderr)
        assert "Traceback" not in done.stderr, done.stderr
        assert f"run {run_id}, column '{column}'" in done.stderr and "To fix:" in done.stderr, done.stderr
