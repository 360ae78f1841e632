"""``benchmarks/spot_resume.py --quick`` end to end: a Ray cluster of its own, three supervised spot runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray.job_submission", reason="the ray extra is not installed: pip install 'computewise[ray]'")
pytest.importorskip("torch", reason="the spot job trains with torch: pip install 'computewise[torch]'")

# With the other Ray tests on one xdist worker, so two Ray clusters never compete for the two cores.
pytestmark = pytest.mark.xdist_group("ray")

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "spot_resume.py"


def test_quick_run_resumes_preempted_and_killed_runs_to_the_same_loss(tmp_path: Path) -> None:
    out = tmp_path / "spot.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json", str(out)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "CPU" in done.stdout
    runs = {run["label"]: run for run in json.loads(out.read_text())["runs"]}
    assert set(runs) == {"uninterrupted", "preempted", "killed"}
    assert all(run["same_loss"] for run in runs.values())
    assert [outcome for outcome, _ in runs["preempted"]["attempts"]] == ["preempted", "succeeded"]
    assert [outcome for outcome, _ in runs["killed"]["attempts"]] == ["failed", "succeeded"]
    assert runs["preempted"]["ledger_added_s"] > 0 and runs["killed"]["ledger_added_s"] > 0
