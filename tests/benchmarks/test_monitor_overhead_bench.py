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
    assert figures["sampler_1hz"]["samples"] >= 1 and figures["sampler_1hz"]["core_pct"] > 0
    assert figures["sampler_20hz"]["samples"] >= 5
    assert figures["job"]["unwatched_s"] > 0 and figures["job"]["watched_s"] > 0
    assert figures["job"]["ratio"] == figures["job"]["watched_s"] / figures["job"]["unwatched_s"]
