"""``computewise runs`` with filters that match nothing says so, naming them, instead of "no runs recorded yet".

The ledger is a real SQLite file holding one run recorded by ``computewise run``; the CLI runs as its own
process, as a user would.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from computewise.ledger import Ledger

CLI = [sys.executable, "-m", "computewise.cli.app"]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COMPUTEWISE_FAKE_GPU": "", "COLUMNS": "200"}
    return subprocess.run([*CLI, *args], capture_output=True, text=True, env=env, timeout=120)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A ledger with one succeeded run tagged team=nlp."""
    db = f"sqlite:///{tmp_path_factory.mktemp('runs') / 'ledger.sqlite'}"
    result = _cli("run", "--db", db, "--tag", "team=nlp", "--", sys.executable, "-c", "")
    assert result.returncode == 0, result.stderr
    return db


@pytest.mark.parametrize(
    "filters",
    [
        ("--tag", "team=zzz"),
        ("--status", "running"),
        ("--since", "9998-12-31"),
        ("--tag", "team=nlp", "--status", "failed"),
    ],
    ids=" ".join,
)
def test_filters_that_match_no_run_are_named(recorded: str, filters: tuple[str, ...]) -> None:
    result = _cli("runs", "--db", recorded, *filters)
    assert result.returncode == 0, result.stderr
    assert "no runs recorded yet" not in result.stdout, "the ledger has a run: only the filters match none"
    assert result.stdout.startswith(f"no runs match {' '.join(filters)}: `computewise runs` without "), result.stdout


def test_a_tag_with_a_space_is_named_as_it_would_be_typed(recorded: str) -> None:
    result = _cli("runs", "--db", recorded, "--tag", "team=a b")
    assert result.stdout.startswith("no runs match --tag 'team=a b': "), result.stdout


def test_the_matching_run_is_still_listed(recorded: str) -> None:
    result = _cli("runs", "--db", recorded, "--tag", "team=nlp", "--status", "succeeded")
    assert result.returncode == 0, result.stderr
    assert "no runs" not in result.stdout and "team=nlp" in result.stdout


@pytest.mark.parametrize("filters", [(), ("--tag", "team=zzz")], ids=["no filter", "a filter"])
def test_an_empty_ledger_says_no_runs_are_recorded(tmp_path: Path, filters: tuple[str, ...]) -> None:
    db = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    Ledger.open(db, create=True).close()
    result = _cli("runs", "--db", db, *filters)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("no runs recorded yet: start one with `computewise run -- CMD ...`")
