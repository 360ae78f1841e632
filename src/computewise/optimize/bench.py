"""Speed of one variant: latency percentiles and throughput, measured until stable, with contention detected.

Each batch size gets an untimed warm-up pass (first-call allocation, lazy compilation, the thread
pool waking up), then timed passes over the same examples. A pass lasts at least
``MIN_PASS_S`` (short passes are repeated), so that the CPU accounting below has something to
count. While a pass runs, the CPU time that *other* processes take on this process's CPUs is read
from the kernel (``/proc/stat`` through psutil; hypervisor steal counts too): a pass is *contended*
when they took the CPUs the measured threads need, that is more than the CPUs left over beyond
those threads plus ``CONTENDED_SHARE`` of the threads' own. Contention only ever adds
time, so the stable figure is the fastest quiet pass and the passes within 5 % of it; passes go on
until two agree (at most ``max_passes``, or until the search's deadline). When every pass was
contended, the figure is kept and marked as such, and the report says so instead of printing it
as a clean measurement.

Text is measured twice at batch sizes above one: in arrival order, each batch padded to its longest
sentence (what a naive server does), and sorted by length (what a length-aware batcher does). Both
the baseline and every variant get both, so a speed-up is always quoted at the same batching and
what sorting adds is reported on its own.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType

import numpy as np
import psutil

from computewise.optimize.feeds import Batch, Feed, batches_of
from computewise.specs.codec import Jsonable, json_property

__all__ = ["CONTENDED_SHARE", "BatchSpeed", "PeakMemory", "measure_speed"]

_STABLE_FRACTION = 0.05
MIN_PASS_S = 0.05
# Other processes taking more than this share of the CPUs our threads need make a pass contended.
CONTENDED_SHARE = 0.25
# /proc/stat columns that mean a CPU ran something (steal: the hypervisor ran another machine instead)
_BUSY_FIELDS = ("user", "nice", "system", "irq", "softirq", "steal")


@dataclass(frozen=True)
class BatchSpeed(Jsonable):
    """One batch size: latency per call (arrival order) and throughput in arrival and length-sorted order."""

    batch_size: int
    p50_ms: float
    p90_ms: float
    p99_ms: float
    items_per_s: float
    sorted_items_per_s: float | None
    passes: int
    threads: int = 0
    # the largest share of this process's CPUs that other processes took during a kept pass
    others_cpu_share: float = 0.0
    # whether every pass was contended, so that even the kept figure is slower than a quiet machine's
    contended: bool = False

    @json_property()
    def best_items_per_s(self) -> float:
        return max(self.items_per_s, self.sorted_items_per_s or 0.0)


class _CpuWatch:
    """CPU seconds used on this process's CPUs by everything, and by this process, read before and after."""

    def __init__(self) -> None:
        self._process = psutil.Process(os.getpid())
        usable = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else range(psutil.cpu_count() or 1)
        self._cpus = sorted(usable)

    def contended_above(self, threads: int) -> float:
        """The others' share of our CPUs beyond which they take CPUs that ``threads`` threads need."""
        cpus = len(self._cpus)
        if threads <= 0:
            return CONTENDED_SHARE
        return (max(0, cpus - threads) + CONTENDED_SHARE * min(threads, cpus)) / cpus

    def _busy_s(self) -> float:
        per_cpu = psutil.cpu_times(percpu=True)
        total = 0.0
        for index in self._cpus:
            if index < len(per_cpu):
                times = per_cpu[index]._asdict()
                # guest time is already inside user time on Linux; idle and iowait are nobody's
                total += sum(times.get(field, 0.0) for field in _BUSY_FIELDS)
        return total

    def _own_s(self) -> float:
        times = self._process.cpu_times()
        return float(times.user + times.system)

    def start(self) -> tuple[float, float, float]:
        return time.perf_counter(), self._busy_s(), self._own_s()

    def others_share(self, started: tuple[float, float, float]) -> float:
        """Share of our CPUs' capacity that other processes used since ``started`` (0 to 1)."""
        wall_s = time.perf_counter() - started[0]
        others_s = (self._busy_s() - started[1]) - (self._own_s() - started[2])
        return min(1.0, max(0.0, others_s / max(wall_s * len(self._cpus), 1e-9)))


@dataclass(frozen=True)
class _Pass:
    latencies_s: list[float]
    items_per_s: float
    others_share: float


def _stable(passes: list[_Pass], contended_above: float) -> list[_Pass]:
    """The fastest quiet pass and those within 5 % of it (all passes when none was quiet)."""
    quiet = [p for p in passes if p.others_share <= contended_above] or passes
    best = max(p.items_per_s for p in quiet)
    return [p for p in quiet if p.items_per_s >= best * (1 - _STABLE_FRACTION)]


def _timed_passes(
    predictor: Callable[[Batch], np.ndarray],
    batches: list[Batch],
    items: int,
    max_passes: int,
    out_of_time: Callable[[], bool],
    threads: int,
) -> tuple[list[_Pass], bool]:
    """The stable passes after one warm-up pass, and whether even they were contended.

    At least one pass is timed, even past the deadline."""
    warm_start = time.perf_counter()
    for batch in batches:
        predictor(batch)
    rounds = max(1, min(1000, math.ceil(MIN_PASS_S / max(time.perf_counter() - warm_start, 1e-6))))
    watch = _CpuWatch()
    limit = watch.contended_above(threads)
    passes: list[_Pass] = []
    while len(passes) < max_passes:
        started = watch.start()
        latencies: list[float] = []
        for _round in range(rounds):
            for batch in batches:
                call_start = time.perf_counter()
                predictor(batch)
                latencies.append(time.perf_counter() - call_start)
        elapsed_s = time.perf_counter() - started[0]
        passes.append(_Pass(latencies, items * rounds / elapsed_s, watch.others_share(started)))
        if len(_stable(passes, limit)) >= 2 or out_of_time():
            break
    kept = _stable(passes, limit)
    return kept, all(p.others_share > limit for p in kept)


def _never() -> bool:
    return False


def measure_speed(
    predictor: Callable[[Batch], np.ndarray],
    feed: Feed,
    batch_size: int,
    max_items: int,
    max_passes: int = 5,
    threads: int = 0,
    out_of_time: Callable[[], bool] = _never,
) -> BatchSpeed:
    """Speed at ``batch_size`` over the first ``max_items`` examples of ``feed``, run with ``threads`` threads."""
    items = min(len(feed), max(max_items, batch_size))
    sample = feed.subset(range(items))
    arrival = [sample.batch(indices) for indices in batches_of(sample, batch_size, by_length=False)]
    kept, contended = _timed_passes(predictor, arrival, items, max_passes, out_of_time, threads)
    shares = [p.others_share for p in kept]
    sorted_speed = None
    if batch_size > 1 and sample.lengths() is not None:
        by_length = [sample.batch(indices) for indices in batches_of(sample, batch_size, by_length=True)]
        sorted_passes, sorted_contended = _timed_passes(predictor, by_length, items, max_passes, out_of_time, threads)
        sorted_speed = float(np.median([p.items_per_s for p in sorted_passes]))
        shares += [p.others_share for p in sorted_passes]
        contended = contended or sorted_contended
    latencies = np.asarray([latency for p in kept for latency in p.latencies_s]) * 1000
    p50, p90, p99 = np.percentile(latencies, [50, 90, 99])
    return BatchSpeed(
        batch_size=batch_size,
        p50_ms=float(p50),
        p90_ms=float(p90),
        p99_ms=float(p99),
        items_per_s=float(np.median([p.items_per_s for p in kept])),
        sorted_items_per_s=sorted_speed,
        passes=len(kept),
        threads=threads,
        others_cpu_share=max(shares),
        contended=contended,
    )


class PeakMemory:
    """The peak rise of this process's resident memory inside a ``with`` block, sampled every 5 ms.

    Variants share one process, so the rise over the level at entry is what the variant itself
    needs: its weights, its runtime's arenas and its activations at the measured batch sizes.
    """

    def __init__(self, interval_s: float = 0.005) -> None:
        self._process = psutil.Process(os.getpid())
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._start_bytes = 0
        self._peak_bytes = 0
        self._thread = threading.Thread(target=self._watch, name="computewise-peak-memory", daemon=True)

    def _watch(self) -> None:
        while not self._stop.wait(self._interval_s):
            self._peak_bytes = max(self._peak_bytes, self._process.memory_info().rss)

    def __enter__(self) -> PeakMemory:
        self._start_bytes = self._peak_bytes = self._process.memory_info().rss
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join()
        self._peak_bytes = max(self._peak_bytes, self._process.memory_info().rss)

    @property
    def rise_bytes(self) -> int:
        return max(0, self._peak_bytes - self._start_bytes)
