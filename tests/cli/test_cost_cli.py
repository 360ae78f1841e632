"""``cost`` and ``budget`` refuse what they cannot answer (times past the calendar, a future anomaly window,
tags no budget could name) with a message and exit code 2, over the golden tests' seeded ledger, in a child
process as users run them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from test_golden_output import seed_ledger

CLI = [sys.executable, "-m", "computewise.cli.app"]


@pytest.fixture
def db(tmp_path: Path) -> str:
    path = tmp_path / "ledger.sqlite"
    seed_ledger(path)
    return str(path)


def _refused(*args: str) -> str:
    """Run the CLI and return its stderr, which must be a refusal (exit 2, a fix, no traceback)."""
    done = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2, (args, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and "To fix:" in done.stderr, done.stderr
    return done.stderr


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("cost", "report", "--since", "99999999d"), "more than 100 years"),
        (("cost", "report", "--since", "1e30d"), "more than 100 years"),
        (("cost", "report", "--until", "1e30d"), "more than 100 years"),
        (("cost", "anomalies", "--since", "99999999d"), "more than 100 years"),
        (("cost", "report", "--since", "0001-01-01T00:00+05:00"), "between 1970-01-01 and 9998-12-31"),
        (("cost", "report", "--until", "9999-12-31T23:00-12:00"), "between 1970-01-01 and 9998-12-31"),
        (("cost", "report", "--since", "0001-01-01", "--json"), "between 1970-01-01 and 9998-12-31"),
        (("cost", "anomalies", "--since", "2999-01-01"), "in the future"),
    ],
)
def test_times_the_reports_cannot_cover_are_refused(db: str, args: tuple[str, ...], says: str) -> None:
    assert says in _refused(*args, "--db", db)


def test_the_widest_window_still_reports(db: str) -> None:
    done = subprocess.run(
        [*CLI, "cost", "report", "--since", "1970-01-01", "--until", "9998-12-31", "--db", db, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert '"since": "1970-01-01T00:00:00Z"' in done.stdout and '"until": "9998-12-31T00:00:00Z"' in done.stdout


def test_a_tag_value_with_a_comma_is_refused_by_run_and_by_budget_scopes(db: str) -> None:
    assert "holds a comma" in _refused("run", "--db", db, "--tag", "team=a,b", "--", sys.executable, "-c", "pass")
    assert "cannot hold one" in _refused("budget", "set", "--scope", "team=a,b", "--monthly-usd", "10", "--db", db)
