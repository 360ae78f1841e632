"""The same table as CSV and as Parquet (>= 100 MB of CSV), read by `data bench` at 1 and 2 workers,
and the tool's own overhead: a bare loop over the same DataLoader against the measured loop, in one run.

    .venv/bin/python benchmarks/data_formats.py [--rows 1500000] [--repeats 3]

Prints ratios measured in this run (Parquet over CSV; measured loop over bare loop) and the CPU.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq

from computewise.data.bench import bare_loop_s, measure
from computewise.data.loader import LoaderConfig, parts_loader
from computewise.data.sources import open_source
from computewise.system.cpu import cpu_model_name, usable_cpus

BATCH_ROWS = 4096  # a columnar loader's block: per-batch IPC would otherwise hide the format's cost


def write_data(folder: Path, rows: int) -> tuple[Path, Path]:
    rng = np.random.default_rng(0)
    table = pa.table(
        {
            "id": np.arange(rows, dtype=np.int64),
            "feature_a": rng.random(rows),
            "feature_b": rng.random(rows),
            "feature_c": rng.standard_normal(rows),
            "token": rng.integers(0, 50_000, rows),
            "label": rng.integers(0, 10, rows),
        }
    )
    csv_path, parquet_path = folder / "table.csv", folder / "table.parquet"
    pcsv.write_csv(table, csv_path)
    pq.write_table(table, parquet_path, row_group_size=64 * 1024)
    return csv_path, parquet_path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=1_500_000)  # about 110 MB of CSV
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="computewise-data-bench-") as folder:
        csv_path, parquet_path = write_data(Path(folder), args.rows)
        load = os.getloadavg()[0]
        print(f"CPU: {cpu_model_name()}, {usable_cpus()} usable cores, load average {load:.1f}; {args.rows:,} rows")
        print(f"CSV {csv_path.stat().st_size / 1e6:.0f} MB, Parquet {parquet_path.stat().st_size / 1e6:.0f} MB")
        print("| format | workers | samples/s | MB/s read | first batch | CPU per worker | samples |")
        print("|---|---|---|---|---|---|---|")
        rates: dict[tuple[str, int], float] = {}
        for path in (csv_path, parquet_path):
            source = open_source(str(path))
            for workers in (1, 2):
                config = LoaderConfig(workers)
                m = measure(parts_loader(source, BATCH_ROWS, config), config, limit_s=600)
                assert m.samples == args.rows, (m.samples, args.rows)
                rates[(source.format, workers)] = m.samples_per_s
                print(
                    f"| {source.format} | {workers} | {m.samples_per_s:,.0f} | {m.bytes_per_s / 1e6:.1f} | "
                    f"{m.first_batch_s * 1e3:.0f} ms | {m.cpu_per_worker_pct:.0f} % | {m.samples:,} |"
                )
        for workers in (1, 2):
            ratio = rates[("parquet", workers)] / rates[("csv", workers)]
            print(f"Parquet / CSV at {workers} worker(s): {ratio:.2f}x")
        # Overhead: the same loader, bare loop vs measured loop, in ABBA order so drift hits both alike.
        source = open_source(str(parquet_path))
        config = LoaderConfig(2)
        bare, measured = [], []
        for repeat in range(
            2 * args.repeats
        ):  # ABBA order: whichever runs second does not always pay the first's teardown
            if repeat % 4 in (0, 3):
                bare.append(bare_loop_s(parts_loader(source, BATCH_ROWS, config)))
            else:
                measured.append(measure(parts_loader(source, BATCH_ROWS, config), config, limit_s=600).elapsed_s)
        bare_s, measured_s = statistics.median(bare), statistics.median(measured)
        items = list(parts_loader(source, BATCH_ROWS, LoaderConfig(0)))  # the same batches, held in memory
        in_memory_bare = statistics.median(bare_loop_s(items) for _ in range(args.repeats))
        in_memory_measured = statistics.median(
            measure(items, LoaderConfig(0), limit_s=600).elapsed_s for _ in range(args.repeats)
        )
        per_batch_us = 1e6 * (in_memory_measured - in_memory_bare) / len(items)
        print(
            f"bookkeeping of the measured loop: {per_batch_us:.2f} us per batch over {len(items)} in-memory batches "
            f"= {100 * per_batch_us * len(items) / 1e6 / bare_s:.3f} % of the bare DataLoader pass"
        )
        print(f"load average at the end: {os.getloadavg()[0]:.1f}")
        print(
            f"overhead of the measured loop (Parquet, 2 workers, median of {args.repeats}): bare {bare_s:.2f} s, "
            f"measured {measured_s:.2f} s: {100 * (measured_s - bare_s) / bare_s:+.1f} %"
        )


if __name__ == "__main__":
    main()
