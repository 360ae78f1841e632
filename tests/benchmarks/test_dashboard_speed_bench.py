"""benchmarks/dashboard_speed.py: the ledger it builds is the one it describes, and --quick times every page.

The script writes its ledger with SQLAlchemy Core past the ``Ledger`` API (one transaction, for
speed), so a schema change could silently leave it timing pages over nonsense; the first test reads
it back through the ledger and the real cost report and checks it against the generation rules.
The second runs the quick benchmark end to end (the real ``computewise dashboard`` process) and
checks the structure of what it reports, never a speed: a loaded machine must not fail it.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

from computewise.account.report import cost_report
from computewise.ledger import Ledger

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "dashboard_speed.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("dashboard_speed_bench", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while being defined
    spec.loader.exec_module(module)
    return module


def test_the_bulk_built_ledger_reads_back_as_generated(tmp_path: Path) -> None:
    """60 runs (every 50th still running), 100 samples each, the detail run's GPU samples and steps."""
    bench = _load()
    now_s = time.time()
    path = tmp_path / "ledger.sqlite"
    built = bench.build(path, n_runs=60, n_samples=6000, now_s=now_s)
    assert built.samples == 6000 and len(built.run_ids) == 60 and built.build_s > 0
    with sqlite3.connect(path) as raw:
        per_run = raw.execute("SELECT min(c), max(c), count(*) FROM (SELECT count(*) c FROM samples GROUP BY run_id)")
        assert per_run.fetchone() == (100, 100, 60)
        (orphans,) = raw.execute("SELECT count(*) FROM samples WHERE run_id NOT IN (SELECT id FROM runs)").fetchone()
        assert orphans == 0
        # The dollars by hand, from the rows alone: hourly price x wall time (now for a running run).
        (expected_usd,) = raw.execute(
            "SELECT sum(hourly_usd * (coalesce(ended_at_s, ?) - started_at_s) / 3600.0) FROM runs", (now_s,)
        ).fetchone()
        gpu_rows, steps = (
            raw.execute(f"SELECT count(*) FROM {table} WHERE run_id = ?", (built.detail_run,)).fetchone()[0]
            for table in ("gpu_samples", "steps")
        )
        assert (gpu_rows, steps) == (100, 100)
    with Ledger.open(f"sqlite:///{path}", create=False) as ledger:
        runs = ledger.runs(limit=None)
        assert sum(run.status == "running" for run in runs) == 2  # runs 0 and 50
        assert {run.tags["team"] for run in runs} <= set(bench.TEAMS)
        assert len(ledger.budgets()) == 4 and len(ledger.alerts()) == 50
        report = cost_report(ledger, ["team"], since_s=None, until_s=None, now_s=now_s)
        totals = ledger.run_totals([built.detail_run])[built.detail_run]
    assert report.total.runs == 60
    assert report.total.cost_usd == pytest.approx(expected_usd, rel=1e-9)
    assert totals.sample_count == 100 and totals.gpu_util_pct_mean is not None


def test_quick_benchmark_times_every_page_of_the_real_server(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json", str(out)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    bench = _load()
    assert result["runs"] == 50 and result["samples"] == 5000 and result["repeat"] == 2
    assert result["target_start_s"] == bench.TARGET_START_S == 1.0 and result["target_page_s"] == 1.0
    assert len(result["start_s"]["all"]) == 1 and result["start_s"]["max"] > 0
    # The server's CPU time by its first answer cannot exceed what two cores give it in that wall time.
    assert 0 < result["start_cpu_s"]["median"] <= 2 * result["start_s"]["max"] + 0.05
    # Start-up alone comes before the first 200 on / (which adds the cold overview) and uses no more CPU.
    assert 0 < result["listening_s"]["max"] <= result["start_s"]["max"]
    assert 0 < result["listening_cpu_s"]["median"] <= result["start_cpu_s"]["median"]
    assert len(result["load_average_1m"]) == 2
    names = [page["page"] for page in result["pages"]]
    paths = [page["path"] for page in result["pages"]]
    # Every page and every /api document the issue names, each answered 200.
    for wanted in ("/", "/runs", "/costs?", "/costs.csv?", "/budgets", "/plans", "/plans/view?", "/plans/compare?"):
        assert any(path == wanted or path.startswith(wanted) for path in paths), wanted
    for wanted in ("/api/overview", "/api/runs?", "/api/costs?", "/api/budgets", "/api/plans"):
        assert any(path.startswith(wanted) for path in paths), wanted
    assert any(path.startswith("/runs/") for path in paths) and any(path.startswith("/api/runs/") for path in paths)
    for page in result["pages"]:
        assert page["status"] == 200, page
        assert 0 < page["median_s"] <= page["max_s"] and page["first_s"] <= page["max_s"] and page["bytes"] > 0
        assert page["cpu_median_s"] >= 0
        assert page["pass"] == (page["max_s"] < 1.0)
    assert result["all_pass"] == (result["start_pass"] and all(page["pass"] for page in result["pages"]))
    # The printed table: one line per page with its verdict, and the start line with the target.
    lines = done.stdout.splitlines()
    assert any(line.startswith("start ") and "target < 1 s" in line for line in lines)
    for name in names:
        (line,) = [line for line in lines if re.match(rf"{re.escape(name)}\s{{2,}}200\s", line)]
        assert line.rstrip().endswith(("PASS", "FAIL"))
