"""benchmarks/tune_efficiency.py --quick: the tuner and the full grid on both CPU workloads, figures printed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

pytestmark = pytest.mark.torch

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "tune_efficiency.py"


def test_quick_run_prints_the_efficiency_and_both_tuned_vs_naive_ratios(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--threads", "1", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "logical cores" in result.stdout
    assert "pick / grid best" in result.stdout and "tuner trial time / grid trial time" in result.stdout
    assert "tiny_gpt: tuned" in result.stdout and "digits_cnn: tuned" in result.stdout
    figures = json.loads(out.read_text())
    efficiency = figures["efficiency"]
    assert efficiency["grid_configs"] == 12 and efficiency["grid_failed"] == 0
    assert 0 < efficiency["time_share"] < 1  # the tuner ran fewer, shorter trials than the grid
    assert efficiency["grid_trial_cpu_s"] > efficiency["tuner_trial_cpu_s"] > 0
    assert efficiency["pick_vs_grid_best_confirmed"] > 0
    assert [row["workload"] for row in figures["tuned_vs_naive"]] == ["tiny_gpt", "digits_cnn"]
    assert all(row["tuned_vs_naive"] is not None for row in figures["tuned_vs_naive"])
