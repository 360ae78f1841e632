"""``benchmarks/submit_overhead.py --quick``: both CLIs really submit to a Ray cluster of the script's own."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray.job_submission", reason="the ray extra is not installed: pip install 'computewise[ray]'")

# With the other Ray tests on one xdist worker, so two Ray clusters never compete for the two cores.
pytestmark = pytest.mark.xdist_group("ray")

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "submit_overhead.py"


def test_quick_run_times_both_ways_of_submitting(tmp_path: Path) -> None:
    out = tmp_path / "submit.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json", str(out)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "CPU" in done.stdout and "computewise / ray job submit" in done.stdout
    figures = json.loads(out.read_text())
    assert figures["repeats"] == 2
    assert figures["computewise_submit_s"] > 0 and figures["ray_job_submit_s"] > 0
    assert 0 < figures["in_process_submit_s"] < figures["computewise_submit_s"]
