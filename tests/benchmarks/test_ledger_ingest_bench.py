"""benchmarks/ledger_ingest.py runs end to end in --quick mode and reports every scenario."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "ledger_ingest.py"


def test_quick_run_reports_every_scenario_with_the_hardware(tmp_path: Path) -> None:
    out = tmp_path / "ingest.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "cores" in done.stdout.splitlines()[0]
    report = json.loads(out.read_text())
    assert report["quick"] is True and report["verdict"] in ("PASS", "FAIL")
    assert set(report["scenarios"]) == {
        "flush x1",
        "flush x8",
        "flush x64",
        "bulk 1,000",
        "sqlite3 alone, bulk 1,000 (baseline)",
    }
    for row in report["scenarios"].values():
        assert row["samples"] > 0 and row["seconds"] > 0 and row["samples_per_s"] > 0
    assert report["bulk_vs_sqlite3"] > 0
