"""Overhead of ``computewise.track()`` on a real CPU training step, against the target of < 1 %.

Two measurements, both in this run, on a small PyTorch MLP training on in-memory batches (a few
ms per step) with steps going to a real SQLite ledger:

1. **The tracker's costs, one by one** (steady on a busy machine): the hot path per step (loader
   wrapper, clock reads, buffering; on the training thread), the work per step of turning
   buffered steps into rows and inserting them, and the fixed cost of one flush (a transaction
   for the rows and one for the heartbeat). Together they give the overhead at any step time and
   flush period: ``(hot + per_row) / step_time + flush / flush_period``, reported for the bare
   step measured here and the default period of 1 s. With ``flush_in_background`` (the default)
   only the hot path runs on the training thread.
2. **End to end**: loops of the same training steps bare, tracked with background flushes and
   tracked with inline flushes, rotating every round; each tracked loop is paired with the bare
   loop of its round and the median ratio is reported with the spread of the pairs, in wall time
   and in CPU time of the training thread. Neighbours on a shared machine move these by more than
   the overhead itself; read them with their spread.

Opening the ledger and finishing the run happen once per run and are not timed. torch runs on
``--threads`` threads (1 by default) so its work stays on the training thread.

Usage: python benchmarks/track_overhead.py [--steps 30] [--rounds 60] [--quick] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import torch

from computewise.monitor.track import track
from computewise.system.cpu import cpu_model_name

TARGET_PCT = 1.0
DEFAULT_FLUSH_EVERY_S = 1.0
MODES = ("bare", "track-background", "track-inline")
# Every timed loop starts after the same pause: a process that just slept (opening the ledger) is
# favoured by the scheduler of a busy machine for a while, which would flatter the tracked loops.
SETTLE_S = 0.02
NEVER_S = 1e9


class Timing(NamedTuple):
    wall_s: float
    thread_cpu_s: float


def _now() -> Timing:
    return Timing(time.perf_counter(), time.thread_time())


def _since(start: Timing) -> Timing:
    end = _now()
    return Timing(end.wall_s - start.wall_s, end.thread_cpu_s - start.thread_cpu_s)


def _training_step(width: int, batch_size: int, steps: int) -> tuple[Callable[[Any], None], list[Any]]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, width),
        torch.nn.GELU(),
        torch.nn.Linear(width, width),
        torch.nn.GELU(),
        torch.nn.Linear(width, 10),
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batches = [(torch.randn(batch_size, 256), torch.randint(0, 10, (batch_size,))) for _ in range(steps)]

    def step(batch: Any) -> None:
        inputs, targets = batch
        optimizer.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(inputs), targets).backward()  # type: ignore[no-untyped-call]
        optimizer.step()

    return step, batches


# -- 1. the tracker's costs, one by one -----------------------------------------------------------


def _tracked_empty_loop_s(db: str, steps: int, flush_every_s: float, then_summary: bool) -> float:
    """Training-thread CPU seconds for ``steps`` empty steps through ``t.loader`` (inline flushes)."""
    with track(db=db, flush_every_s=flush_every_s, flush_in_background=False) as t:
        start = _now()
        for _ in t.loader(range(steps)):
            pass
        if then_summary:
            t.summary()  # turns every buffered step into a row and inserts them, in one flush
        return _since(start).thread_cpu_s


def _bare_empty_loop_s(steps: int) -> float:
    start = _now()
    for _ in range(steps):
        pass
    return _since(start).thread_cpu_s


def _costs(db: str, steps: int, repeat: int) -> dict[str, float]:
    """Median costs in seconds: hot path per step, rows per step, one flush."""
    bare = statistics.median(_bare_empty_loop_s(steps) for _ in range(repeat))
    hot = statistics.median(_tracked_empty_loop_s(db, steps, NEVER_S, False) for _ in range(repeat))
    rows = statistics.median(_tracked_empty_loop_s(db, steps, NEVER_S, True) for _ in range(repeat))
    flush_steps = max(steps // 20, 10)
    every_step = statistics.median(_tracked_empty_loop_s(db, flush_steps, 1e-9, False) for _ in range(repeat))
    hot_s = (hot - bare) / steps
    rows_s = (rows - hot) / steps
    return {"hot_s": hot_s, "rows_s": rows_s, "flush_s": every_step / flush_steps - hot_s - rows_s}


# -- 2. end to end ----------------------------------------------------------------------------------


def _loop(mode: str, step: Callable[[Any], None], batches: list[Any], db: str) -> Timing:
    if mode == "bare":
        time.sleep(SETTLE_S)
        start = _now()
        for batch in batches:
            step(batch)
        return _since(start)
    with track(db=db, tags={"bench": "track_overhead"}, flush_in_background=mode == "track-background") as t:
        time.sleep(SETTLE_S)
        start = _now()
        for batch in t.loader(batches):
            step(batch)
        return _since(start)


def _end_to_end(step: Callable[[Any], None], batches: list[Any], rounds: int, db: str) -> dict[str, list[Timing]]:
    timings: dict[str, list[Timing]] = {mode: [] for mode in MODES}
    _loop("bare", step, batches, db)  # warm-up: allocator, caches
    for index in range(rounds):
        for mode in MODES[index % 3 :] + MODES[: index % 3]:
            timings[mode].append(_loop(mode, step, batches, db))
    return timings


def _paired_pct(tracked: list[Timing], bare: list[Timing], field: str) -> tuple[float, float, float]:
    """Median overhead % of the pairs, and their quartiles."""
    pcts = sorted((getattr(t, field) / getattr(b, field) - 1) * 100 for t, b in zip(tracked, bare, strict=True))
    q1, median, q3 = statistics.quantiles(pcts, n=4) if len(pcts) >= 2 else (pcts[0], pcts[0], pcts[0])
    return median, q1, q3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=30, help="training steps per timed loop")
    parser.add_argument("--rounds", type=int, default=60, help="rounds of bare / background / inline, rotating")
    parser.add_argument("--width", type=int, default=512, help="hidden width of the MLP (sets the step time)")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--quick", action="store_true", help="a few seconds: fewer rounds and repeats")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    # Fewer steps than the tracker buffers before it flushes on its own (4096), so "hot" holds no flush.
    rounds, repeat, cost_steps = (4, 3, 2000) if args.quick else (args.rounds, 9, 4000)
    torch.set_num_threads(args.threads)

    print(
        f"hardware: {cpu_model_name()}, {os.cpu_count()} logical cores; torch {torch.__version__} "
        f"on {torch.get_num_threads()} thread(s); Python {platform.python_version()}"
    )
    step, batches = _training_step(args.width, args.batch, args.steps)
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "ledger.sqlite")
        costs = _costs(db, cost_steps, repeat)
        timings = _end_to_end(step, batches, rounds, db)

    step_s = statistics.median(t.wall_s for t in timings["bare"]) / args.steps
    training_thread_pct = costs["hot_s"] / step_s * 100
    inline_pct = (costs["hot_s"] + costs["rows_s"]) / step_s * 100 + costs["flush_s"] / DEFAULT_FLUSH_EVERY_S * 100
    print(
        f"training step: MLP 256-{args.width}-{args.width}-10, batch {args.batch}, AdamW: "
        f"median bare step {step_s * 1e3:.2f} ms"
    )
    print(
        f"tracker costs: hot path {costs['hot_s'] * 1e6:.2f} us/step, rows {costs['rows_s'] * 1e6:.2f} us/step, "
        f"one flush {costs['flush_s'] * 1e3:.3f} ms"
    )
    print(
        f"overhead at this step time, flushing every {DEFAULT_FLUSH_EVERY_S:g} s: "
        f"{training_thread_pct:.3f} % on the training thread with background flushes, "
        f"{inline_pct:.3f} % with inline flushes  (target < {TARGET_PCT:g} %: "
        f"{'ok' if max(training_thread_pct, inline_pct) < TARGET_PCT else 'OVER TARGET'})"
    )
    results: dict[str, Any] = {
        "hardware": cpu_model_name(),
        "logical_cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "bare_step_s": step_s,
        "hot_path_us_per_step": costs["hot_s"] * 1e6,
        "rows_us_per_step": costs["rows_s"] * 1e6,
        "flush_ms": costs["flush_s"] * 1e3,
        "modelled_overhead_pct": {"track-background": training_thread_pct, "track-inline": inline_pct},
        "end_to_end_pct": {},
    }
    print(f"end to end, {rounds} rounds of {args.steps} steps, median [quartiles] of tracked/bare pairs - 1:")
    for mode in MODES[1:]:
        wall = _paired_pct(timings[mode], timings["bare"], "wall_s")
        cpu = _paired_pct(timings[mode], timings["bare"], "thread_cpu_s")
        print(
            f"  {mode:<17} wall {wall[0]:+6.2f} % [{wall[1]:+.1f}, {wall[2]:+.1f}]   "
            f"training-thread CPU {cpu[0]:+6.2f} % [{cpu[1]:+.1f}, {cpu[2]:+.1f}]"
        )
        results["end_to_end_pct"][mode] = {"wall": wall[0], "thread_cpu": cpu[0]}
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
