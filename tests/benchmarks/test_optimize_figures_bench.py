"""benchmarks/optimize_figures.py --quick runs both real models end to end and prints its figures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("torch")

pytestmark = pytest.mark.torch

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "optimize_figures.py"


def test_quick_run_prints_hardware_and_both_models(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "logical cores" in result.stdout
    assert "all-MiniLM-L6-v2" in result.stdout and "digits MLP" in result.stdout
    assert "ort-int8-default" in result.stdout  # ONNX Runtime's defaults are printed beside the winner
    figures = json.loads(out.read_text())
    baseline = figures["minilm"]["rows"][0]
    assert baseline["variant"] == "baseline" and baseline["throughput_x"] is not None
    assert figures["digits"]["rows"][0]["quality"] > 0.9
