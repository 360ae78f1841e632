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
    for mode in ("track-background", "track-inline"):
        # The tracker's own work per step is microseconds; a generous bound so a busy machine cannot fail it.
        assert 0 < figures[mode]["per_step_us"] < 500
