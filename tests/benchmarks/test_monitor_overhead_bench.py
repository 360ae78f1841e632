"""benchmarks/monitor_overhead.py runs end to end in --quick mode (figures are not checked: shared machine)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "monitor_overhead.py"


def test_quick_run_prints_and_writes_the_figures(tmp_path: Path) -> None:
    out = tmp_path / "overhead.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--fake-gpu", "a100-training", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "COMPUTEWISE_CATALOG_DIR": str(tmp_path)},  # the bundled catalog only
    )
    assert done.returncode == 0, done.stderr
    assert "hardware:" in done.stdout and "logical CPUs" in done.stdout
    assert "replaying a100-training.csv" in done.stdout
    figures = json.loads(out.read_text())
    # Each sampler ran at its own rate over its window (edges and a busy machine allowed for):
    # the cost per sample is measured from the samples really taken.
    slow, fast = figures["sampler_1hz"], figures["sampler_20hz"]
    assert slow["core_pct"] > 0 and slow["window_s"] - 1.5 <= slow["samples"] <= slow["window_s"] + 1.5, slow
    assert 0.5 * 20 * fast["window_s"] <= fast["samples"] <= 20 * fast["window_s"] + 2, fast
    job = figures["job"]  # the calibrated job (0.3 s in --quick) ran watched and unwatched
    assert 0.05 < job["unwatched_s"] < 10 and 0.05 < job["watched_s"] < 10, job
