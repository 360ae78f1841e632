"""benchmarks/data_formats.py runs end to end on a small table; its counts must match the rows it wrote.

The figures are not checked (a shared machine); the structure is: four rows (CSV and Parquet at 1 and
2 workers), each counting every row written, both ratios and the overhead lines.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "data_formats.py"


def test_data_formats_benchmark_reads_every_row_in_every_configuration() -> None:
    rows = 20_000
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--rows", str(rows), "--repeats", "1"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    table = [line for line in done.stdout.splitlines() if line.startswith(("| csv", "| parquet"))]
    assert [line.split("|")[1:3] for line in table] == [
        [" csv ", " 1 "],
        [" csv ", " 2 "],
        [" parquet ", " 1 "],
        [" parquet ", " 2 "],
    ]
    assert all(line.split("|")[7].strip() == f"{rows:,}" for line in table)
    assert done.stdout.count("Parquet / CSV at") == 2
    assert "overhead of the measured loop" in done.stdout and "bookkeeping of the measured loop" in done.stdout
