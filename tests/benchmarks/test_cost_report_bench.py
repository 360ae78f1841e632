"""benchmarks/cost_report.py --quick runs end to end and reports the figures the full run is judged by."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "cost_report.py"


def test_quick_benchmark_reports_hardware_timings_and_the_target(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "hardware" in done.stdout and "cost_report_all_time_s" in done.stdout
    results = json.loads(out.read_text())
    assert results["samples"] == 20_000 and results["runs"] == 100
    assert "cores" in results["hardware"]
    assert results["groups"] > 1
    assert results["cost_report_all_time_s"] > 0 and results["baseline_group_by_s"] > 0
    assert results["ratio_to_baseline"] == results["cost_report_all_time_s"] / results["baseline_group_by_s"]
    assert results["target_s"] == 2.0
