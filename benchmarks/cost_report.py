"""How fast `cost report` answers over a big ledger: target under 2 s for 1,000,000 samples.

Builds a SQLite ledger of ~1,000 runs (tags team/project, command, track and serve kinds, a few
still running) through the real ``Ledger`` API, then bulk-loads the samples straight into the same
``samples`` table with ``sqlite3.executemany`` (the columns are read from ``SampleRow``, so the
script follows the schema). It then times, as the median of ``--repeat`` calls:

- ``cost_report(by=["team", "project"])`` over all time and over the last 30 days;
- the baseline: one bare ``SELECT run_id, count(*), sum(interval_s) ... GROUP BY run_id`` through
  ``sqlite3``, the least any report over these samples must pay, so the ratio shows our overhead
  and a slow machine shows up as a slow baseline rather than a false regression.

Usage: python benchmarks/cost_report.py [--samples 1000000] [--runs 1000] [--repeat 5] [--quick] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from computewise.account.report import cost_report
from computewise.ledger import Ledger, NewRun, PriceSnapshot, RunKind, SampleRow
from computewise.system.cpu import cpu_model_name

TARGET_S = 2.0
NOW_S = 1_742_472_000.0  # 2025-03-20 12:00 UTC
DAY_S = 86400.0
TEAMS = ("nlp", "vision", "speech", "recsys", "infra", "research", "ads", "search")
BATCH = 100_000


def _median_s(work: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def build(path: Path, n_runs: int, n_samples: int, seed: int = 0) -> list[int]:
    """A ledger at ``path`` with ``n_runs`` runs over 60 days and ``n_samples`` samples spread over them."""
    rng = random.Random(seed)
    price = PriceSnapshot(
        hourly_usd=0.0,
        source="benchmark",
        explanation="synthetic",
        assumed=False,
        carbon_g_per_kwh=475.0,
        carbon_source="benchmark",
        pue=1.1,
    )
    run_ids = []
    with Ledger.open(f"sqlite:///{path}") as ledger:
        for i in range(n_runs):
            start_s = NOW_S - rng.uniform(0, 60) * DAY_S
            kinds: tuple[RunKind, ...] = ("command", "command", "track", "serve")
            kind = rng.choice(kinds)
            tags = {"team": rng.choice(TEAMS)}
            if rng.random() < 0.9:
                tags["project"] = f"p{rng.randrange(30)}"
            gpus = rng.choice((0, 1, 2, 4, 8))
            run = NewRun(
                kind=kind,
                command=f"python job_{i}.py",
                argv=("python", f"job_{i}.py"),
                tags=tags,
                host="bench",
                pid=10_000 + i,
                user="bench",
                cwd="/tmp",
                started_at_s=start_s,
                interval_s=1.0,
                price=PriceSnapshot(**{**price.to_dict(), "hourly_usd": 0.5 + 4.0 * gpus}),
                gpu_count=gpus,
            )
            run_id = ledger.start_run(run)
            run_ids.append(run_id)
            if kind == "serve":
                ledger.add_inferences(run_id, rng.randrange(1_000, 5_000_000))
            if i % 50:  # every 50th run is still running
                ledger.finish_run(run_id, "succeeded", min(NOW_S, start_s + rng.uniform(0.1, 48) * 3600), exit_code=0)
    fields = tuple(SampleRow.__dataclass_fields__)
    insert = f"INSERT INTO samples ({', '.join(fields)}) VALUES ({', '.join('?' * len(fields))})"
    per_run = max(1, n_samples // n_runs)
    with sqlite3.connect(path) as conn:
        rows: list[tuple[Any, ...]] = []
        for n in range(n_samples):
            run_id = run_ids[min(n // per_run, len(run_ids) - 1)]
            busy = n % 17 != 0
            rows.append(
                (run_id, NOW_S - n, 1.0, 95.0 + n % 13, 2_000_000_000, 0, 0, 0, 0, 40.0, 8_000_000_000,
                 1, 80.0 + n % 7 if busy else 3.0, 10_000_000_000, 300.0, 300.0, n % 5 != 0, not busy)
            )  # fmt: skip
            if len(rows) == BATCH:
                conn.executemany(insert, rows)
                rows.clear()
        if rows:
            conn.executemany(insert, rows)
    return run_ids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=1_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="20k samples over 100 runs, 3 repeats (for tests)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.quick:
        args.samples, args.runs, args.repeat = 20_000, 100, 3

    with tempfile.TemporaryDirectory(prefix="computewise-bench-") as tmp:
        path = Path(tmp) / "ledger.sqlite"
        start = time.perf_counter()
        build(path, args.runs, args.samples)
        build_s = time.perf_counter() - start
        with Ledger.open(f"sqlite:///{path}") as ledger, sqlite3.connect(path) as raw:
            report = cost_report(ledger, ["team", "project"], since_s=None, until_s=None, now_s=NOW_S)
            all_time_s = _median_s(
                lambda: cost_report(ledger, ["team", "project"], since_s=None, until_s=None, now_s=NOW_S), args.repeat
            )
            last_30d_s = _median_s(
                lambda: cost_report(ledger, ["team", "project"], since_s=NOW_S - 30 * DAY_S, until_s=None, now_s=NOW_S),
                args.repeat,
            )
            baseline_s = _median_s(
                lambda: raw.execute("SELECT run_id, count(*), sum(interval_s) FROM samples GROUP BY run_id").fetchall(),
                args.repeat,
            )
    results: dict[str, Any] = {
        "hardware": f"{cpu_model_name()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"SQLite {sqlite3.sqlite_version}",
        "samples": args.samples,
        "runs": args.runs,
        "groups": len(report.rows),
        "build_s": build_s,
        "baseline_group_by_s": baseline_s,
        "cost_report_all_time_s": all_time_s,
        "cost_report_30d_s": last_30d_s,
        "ratio_to_baseline": all_time_s / baseline_s,
        "target_s": TARGET_S,
        "within_target": all_time_s < TARGET_S and last_30d_s < TARGET_S,
    }
    width = max(len(key) for key in results)
    for key, value in results.items():
        print(f"{key:<{width}}  {value:.3f}" if isinstance(value, float) else f"{key:<{width}}  {value}")
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
