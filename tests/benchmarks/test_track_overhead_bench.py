"""benchmarks/track_overhead.py --quick runs end to end and prints its hardware and both overhead figures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

pytestmark = pytest.mark.torch

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "track_overhead.py"


def test_quick_run_prints_hardware_and_overheads(tmp_path: Path) -> None:
    out = tmp_path / "overhead.json"
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "logical cores" in result.stdout
    assert "track-background" in result.stdout and "track-inline" in result.stdout
    figures = json.loads(out.read_text())
    assert figures["bare_step_s"] > 0
    # Microseconds per step and a fraction of a millisecond per flush; generous bounds for a busy machine.
    assert 0 < figures["hot_path_us_per_step"] < 200
    assert 0 < figures["rows_us_per_step"] < 500
    assert 0 < figures["flush_ms"] < 50
    assert set(figures["end_to_end_pct"]) == {"track-background", "track-inline"}
