"""benchmarks/preemption_time.py --quick: a child SIGTERMed mid-step saves and exits 75; the figure is printed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytestmark = pytest.mark.torch

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "preemption_time.py"


def test_quick_run_reports_the_time_from_sigterm_to_a_durable_checkpoint(tmp_path: Path) -> None:
    out = tmp_path / "preemption.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SIGTERM -> durable checkpoint" in done.stdout and "grace window 30 s: PASS" in done.stdout
    results = json.loads(out.read_text())
    assert results["quick"] is True and results["exit_code"] == 75 and results["verdict"] == "PASS"
    assert results["stopped_after_step"] >= 3  # two warm steps, then the one the signal interrupted
    assert 0 < results["signal_to_durable_s"] <= results["grace_s"] == 30.0
    assert results["finish_step_s"] >= 0 and results["save_s"] >= 0 and results["kill_to_exit_s"] > 0
    assert results["checkpoint_bytes"] > 4 * results["parameters"]  # weights and AdamW's two moments
    assert "cores" in results["hardware"]
