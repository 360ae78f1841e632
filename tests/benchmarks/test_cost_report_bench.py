"""benchmarks/cost_report.py: the ledger it builds is the one it describes, and --quick times a report over it.

The script bulk-loads its samples with raw ``executemany`` (positional, past the ``Ledger`` API), so a
schema change can silently load them into the wrong columns or runs; the report would still run, and
the benchmark would time a report over nonsense. The ledger test reads it back through the real
report and checks it against the generation rules in the script's docstring and code.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from computewise.account.report import cost_report
from computewise.ledger import Ledger

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "cost_report.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("cost_report_bench", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_bulk_loaded_ledger_reads_back_as_generated(tmp_path: Path) -> None:
    """40 runs (every 50th still running), 4,000 one-second samples, every 17th idle, every 5th unmeasured."""
    bench = _load()
    path = tmp_path / "ledger.sqlite"
    run_ids = bench.build(path, n_runs=40, n_samples=4000)
    with sqlite3.connect(path) as raw:
        samples, orphans, runs_sampled = raw.execute(
            "SELECT count(*), sum(run_id NOT IN (SELECT id FROM runs)), count(DISTINCT run_id) FROM samples"
        ).fetchone()
        (inferences,) = raw.execute("SELECT sum(inferences) FROM runs").fetchone()
    assert (samples, orphans, runs_sampled) == (4000, 0, 40)
    with Ledger.open(f"sqlite:///{path}") as ledger:
        report = cost_report(ledger, ["team", "project"], since_s=None, until_s=None, now_s=bench.NOW_S)
    total = report.total
    assert total.runs == len(run_ids) == 40 and total.running == 1
    assert total.idle_s == len(range(0, 4000, 17))  # samples n = 0, 17, 34, ... are idle, 1 s each
    assert total.cpu_percent_mean is not None and 95.0 <= total.cpu_percent_mean <= 107.0  # 95 + n % 13
    assert total.gpu_util_pct_mean is not None and 3.0 < total.gpu_util_pct_mean <= 86.0  # 80 + n % 7 busy, 3 idle
    assert not total.energy_all_measured
    assert total.serving_runs > 0 and total.inferences == inferences > 0
    assert {dict(row.group)["team"] for row in report.rows} <= set(bench.TEAMS)
    assert sum(row.runs for row in report.rows) == 40


def test_quick_benchmark_times_the_report_on_this_machine(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    results = json.loads(out.read_text())
    assert f", {os.cpu_count()} cores, Python " in results["hardware"]
    assert results["hardware"] in done.stdout
    for key in ("baseline_group_by_s", "cost_report_all_time_s", "cost_report_30d_s"):
        assert 0 < results[key] < 60, key
    # The timed report is the one over the ledger the script describes: the same groups, rebuilt here.
    bench = _load()
    path = tmp_path / "ledger.sqlite"
    bench.build(path, results["runs"], results["samples"])
    with Ledger.open(f"sqlite:///{path}") as ledger:
        report = cost_report(ledger, ["team", "project"], since_s=None, until_s=None, now_s=bench.NOW_S)
    assert results["groups"] == len(report.rows) > 1
