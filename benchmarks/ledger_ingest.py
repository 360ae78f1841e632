"""Ledger ingest: samples per second into a fresh SQLite ledger, in the batches the monitor writes.

Every scenario opens a new file (WAL, the shipped tuning) and writes through ``Ledger.add_samples``,
one transaction per batch:

    flush x1      one run flushing one second of an 8-GPU node: 1 sample + 8 GPU rows per transaction
    flush x8      8 runs doing the same at once (threads sharing one Ledger, so their commits interleave)
    flush x64     64 runs at once
    bulk 1,000    batches of 1,000 samples (a monitor catching up after the database was away)

Baseline, measured in the same run: plain ``sqlite3`` ``executemany`` of the same 1,000-sample
batches into a file with the same pragmas (no SQLAlchemy, no ledger), so the ratio is the
ledger's own overhead. Target: >= 50,000 samples/s in bulk. A flush scenario's samples/s is also
how many runs sampling at 1 Hz one ledger file can absorb.

Usage: python benchmarks/ledger_ingest.py [--quick] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sqlite3
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from computewise.ledger import GpuSampleRow, Ledger, NewRun, PriceSnapshot, SampleRow
from computewise.system.cpu import cpu_model_name

TARGET_SAMPLES_PER_S = 50_000.0
GPUS = 8
PRICE = PriceSnapshot(
    hourly_usd=32.77,
    source="benchmark",
    explanation="AWS p4d.24xlarge on-demand",
    assumed=False,
    carbon_g_per_kwh=475.0,
    carbon_source="benchmark",
    pue=1.0,
)


def _sample(run_id: int, t_s: float) -> SampleRow:
    return SampleRow(
        run_id=run_id,
        t_s=t_s,
        interval_s=1.0,
        cpu_percent=187.5,
        rss_bytes=12_400_000_000,
        read_bytes=48_000_000,
        write_bytes=1_200_000,
        net_sent_bytes=3_000_000,
        net_recv_bytes=2_500_000,
        host_cpu_percent=41.5,
        host_memory_used_bytes=210_000_000_000,
        gpu_count=GPUS,
        gpu_util_pct=88.5,
        gpu_memory_used_bytes=GPUS * 35_500_000_000,
        gpu_power_w=GPUS * 312.0,
        energy_j=GPUS * 312.0 + 95.0,
        energy_measured=True,
        idle=False,
    )


def _gpu_rows(run_id: int, t_s: float) -> list[GpuSampleRow]:
    return [
        GpuSampleRow(
            run_id, t_s, i, 88.5, 1410.0, 35_500_000_000, 312.0, 4.2e6 + 312.0 * t_s, 2.1e9, 1.3e9, 35_000_000_000
        )
        for i in range(GPUS)
    ]


def _start(ledger: Ledger, name: str) -> int:
    return ledger.start_run(
        NewRun(
            kind="command",
            command=f"python train.py --run {name}",
            argv=("python", "train.py", "--run", name),
            tags={"team": "bench"},
            host=platform.node(),
            pid=os.getpid(),
            user="bench",
            cwd=os.getcwd(),
            started_at_s=time.time(),
            interval_s=1.0,
            price=PRICE,
            gpu_count=GPUS,
        )
    )


def _flush(directory: Path, runs: int, flushes: int) -> dict[str, float]:
    """``runs`` threads, each its own run, each committing ``flushes`` one-second batches."""
    with Ledger.open(str(directory / f"flush-{runs}.sqlite")) as ledger:
        run_ids = [_start(ledger, str(i)) for i in range(runs)]
        batches = {r: [([_sample(r, float(t))], _gpu_rows(r, float(t))) for t in range(flushes)] for r in run_ids}
        barrier = threading.Barrier(runs + 1)

        def work(run_id: int) -> None:
            barrier.wait()
            for rows, gpu_rows in batches[run_id]:
                ledger.add_samples(rows, gpu_rows)

        threads = [threading.Thread(target=work, args=(r,)) for r in run_ids]
        for thread in threads:
            thread.start()
        barrier.wait()
        start = time.perf_counter()
        for thread in threads:
            thread.join()
        elapsed_s = time.perf_counter() - start
        samples = runs * flushes
        _check_stored(ledger, run_ids, samples, samples * GPUS)
    return {"samples": samples, "seconds": elapsed_s, "samples_per_s": samples / elapsed_s, "transactions": samples}


def _bulk(directory: Path, batches: int, size: int = 1000) -> dict[str, float]:
    with Ledger.open(str(directory / "bulk.sqlite")) as ledger:
        run_id = _start(ledger, "bulk")
        data = [[_sample(run_id, float(b * size + i)) for i in range(size)] for b in range(batches)]
        start = time.perf_counter()
        for rows in data:
            ledger.add_samples(rows)
        elapsed_s = time.perf_counter() - start
        samples = batches * size
        _check_stored(ledger, [run_id], samples, 0)
    return {"samples": samples, "seconds": elapsed_s, "samples_per_s": samples / elapsed_s, "transactions": batches}


def _check_stored(ledger: Ledger, run_ids: list[int], samples: int, gpu_rows: int) -> None:
    """A throughput of rows that did not arrive is no throughput: count them, through the ledger's own door."""
    totals = ledger.run_totals(run_ids)
    stored = [sum(t.sample_count for t in totals.values()), sum(len(ledger.gpu_samples(r)) for r in run_ids)]
    if stored != [samples, gpu_rows]:
        raise RuntimeError(f"expected {samples} samples and {gpu_rows} GPU rows in the ledger, found {stored}")


def _raw_sqlite(directory: Path, batches: int, size: int = 1000) -> dict[str, float]:
    """The floor: the same batches through sqlite3 alone, into a copy of a ledger's schema."""
    path = directory / "raw.sqlite"
    with Ledger.open(str(path)) as ledger:
        run_id = _start(ledger, "raw")
    fields = tuple(SampleRow.__dataclass_fields__)
    sql = f"INSERT INTO samples ({', '.join(fields)}) VALUES ({', '.join('?' for _ in fields)})"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA synchronous = NORMAL")
    data = [
        [tuple(getattr(_sample(run_id, float(b * size + i)), f) for f in fields) for i in range(size)]
        for b in range(batches)
    ]
    start = time.perf_counter()
    for rows in data:
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(sql, rows)
        conn.execute("COMMIT")
    elapsed_s = time.perf_counter() - start
    conn.close()
    samples = batches * size
    return {"samples": samples, "seconds": elapsed_s, "samples_per_s": samples / elapsed_s, "transactions": batches}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a few hundred transactions per scenario")
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    args = parser.parse_args(argv)

    scale = 1 if args.quick else 10
    scenarios: dict[str, Callable[[Path], dict[str, float]]] = {
        "flush x1": lambda d: _flush(d, 1, 300 * scale),
        "flush x8": lambda d: _flush(d, 8, 40 * scale),
        "flush x64": lambda d: _flush(d, 64, 5 * scale),
        "bulk 1,000": lambda d: _bulk(d, 20 * scale),
        "sqlite3 alone, bulk 1,000 (baseline)": lambda d: _raw_sqlite(d, 20 * scale),
    }
    python = f"Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}"
    hardware = f"{cpu_model_name()}, {os.cpu_count()} cores, {python}"
    print(f"hardware: {hardware}")
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="computewise-ingest-") as tmp:
        for name, scenario in scenarios.items():
            results[name] = row = scenario(Path(tmp))
            print(
                f"{name:<38} {row['samples_per_s']:>10,.0f} samples/s  "
                f"{row['transactions'] / row['seconds']:>8,.0f} transactions/s  ({row['samples']:,.0f} samples)"
            )
    bulk = results["bulk 1,000"]["samples_per_s"]
    ratio = bulk / results["sqlite3 alone, bulk 1,000 (baseline)"]["samples_per_s"]
    verdict = "PASS" if bulk >= TARGET_SAMPLES_PER_S else "FAIL"
    print(f"bulk through the ledger: {ratio:.2f} x sqlite3 alone")
    print(f"target: bulk >= {TARGET_SAMPLES_PER_S:,.0f} samples/s: {verdict}")
    if args.json is not None:
        report: dict[str, Any] = {
            "hardware": hardware,
            "quick": args.quick,
            "scenarios": results,
            "bulk_vs_sqlite3": ratio,
            "target_samples_per_s": TARGET_SAMPLES_PER_S,
            "verdict": verdict,
        }
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
