"""The ledger verbs' JSON documents (``runs``, ``runs show``, ``run``, ``cost report``, ``cost anomalies``)
carry ``schema_version`` first and match their schemas in docs/schemas/.

Each document comes from the real CLI in a child process over the golden tests' seeded ledger (four runs
in January 2026), so the schema is checked against what a script really reads.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from test_golden_output import seed_ledger

CLI = [sys.executable, "-m", "computewise.cli.app"]
Check = Callable[[object, str], None]


@pytest.fixture
def db(tmp_path: Path) -> str:
    path = tmp_path / "ledger.sqlite"
    seed_ledger(path)
    return f"sqlite:///{path}"


def cli_json(*args: str) -> dict[str, object]:
    result = subprocess.run([*CLI, *args, "--json"], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert isinstance(data, dict)
    assert next(iter(data)) == "schema_version" and data["schema_version"] == 1
    return data


def test_the_runs_list_matches_its_schema(db: str, json_schema: Check) -> None:
    data = cli_json("runs", "--db", db)
    json_schema(data, "runs")


def test_a_run_summary_matches_its_schema_from_runs_show_and_from_run(db: str, json_schema: Check) -> None:
    json_schema(cli_json("runs", "show", "1", "--db", db), "run-summary")
    done = subprocess.run(
        [*CLI, "run", "--db", db, "--json", "--", sys.executable, "-c", "pass"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert next(iter(summary)) == "schema_version"
    json_schema(summary, "run-summary")
    assert summary["child_stdout"] == "stderr"  # --json keeps stdout for the document


def test_the_spend_anomalies_match_their_schema(db: str, json_schema: Check) -> None:
    data = cli_json("cost", "anomalies", "--by", "team", "--since", "2026-01-01", "--db", db)
    json_schema(data, "cost-anomalies")
    series = data["series"]
    assert isinstance(series, list) and [group["group"] for group in series] == [{"team": "nlp"}, {"team": "vision"}]


def test_the_cost_report_and_its_storage_savings_are_one_document(db: str, json_schema: Check) -> None:
    data = cli_json("cost", "report", "--by", "team", "--since", "2026-01-01", "--db", db)
    json_schema(data, "cost-report")
    assert list(data)[-1] == "storage"  # the savings follow the compute spend, as before
