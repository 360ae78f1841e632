"""Speed of one variant: latency percentiles, throughput, peak memory, measured until stable.

Each batch size gets an untimed warm-up pass (first-call allocation, lazy compilation, the
thread pool waking up), then timed passes over the same examples until two consecutive passes agree
within 5 % (at most ``max_passes``). Latency is per call; throughput is examples per second over a
whole pass. Text is measured twice at batch sizes above one: in arrival order, each batch padded to
its longest sentence (what a naive server does), and sorted by length (what a length-aware batcher
does); the report shows what sorting buys.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from types import TracebackType

import numpy as np
import psutil

from computewise.optimize.feeds import Batch, Feed, batches_of

__all__ = ["BatchSpeed", "PeakMemory", "measure_speed"]

_STABLE_FRACTION = 0.05


@dataclass(frozen=True)
class BatchSpeed:
    """One batch size: latency per call (arrival order) and throughput both ways."""

    batch_size: int
    p50_ms: float
    p90_ms: float
    p99_ms: float
    items_per_s: float
    sorted_items_per_s: float | None
    passes: int

    @property
    def best_items_per_s(self) -> float:
        return max(self.items_per_s, self.sorted_items_per_s or 0.0)

    def to_dict(self) -> dict[str, float | int | None]:
        return asdict(self) | {"best_items_per_s": self.best_items_per_s}


def _timed_passes(
    predictor: Callable[[Batch], np.ndarray], batches: list[Batch], items: int, max_passes: int
) -> tuple[list[float], list[float]]:
    """(per-call latencies in s, per-pass throughputs) after one warm-up pass."""
    for batch in batches:
        predictor(batch)
    latencies: list[float] = []
    throughputs: list[float] = []
    while len(throughputs) < max_passes:
        start = time.perf_counter()
        for batch in batches:
            call_start = time.perf_counter()
            predictor(batch)
            latencies.append(time.perf_counter() - call_start)
        throughputs.append(items / (time.perf_counter() - start))
        if len(throughputs) >= 2 and abs(throughputs[-1] - throughputs[-2]) <= _STABLE_FRACTION * throughputs[-2]:
            break
    return latencies, throughputs


def measure_speed(
    predictor: Callable[[Batch], np.ndarray], feed: Feed, batch_size: int, max_items: int, max_passes: int = 5
) -> BatchSpeed:
    """Speed at ``batch_size`` over the first ``max_items`` examples of ``feed``."""
    items = min(len(feed), max(max_items, batch_size))
    sample = feed.subset(range(items))
    arrival = [sample.batch(indices) for indices in batches_of(sample, batch_size, by_length=False)]
    latencies, throughputs = _timed_passes(predictor, arrival, items, max_passes)
    sorted_speed = None
    if batch_size > 1 and sample.lengths() is not None:
        by_length = [sample.batch(indices) for indices in batches_of(sample, batch_size, by_length=True)]
        sorted_speed = float(np.median(_timed_passes(predictor, by_length, items, max_passes)[1]))
    p50, p90, p99 = np.percentile(np.asarray(latencies) * 1000, [50, 90, 99])
    return BatchSpeed(
        batch_size=batch_size,
        p50_ms=float(p50),
        p90_ms=float(p90),
        p99_ms=float(p99),
        items_per_s=float(np.median(throughputs)),
        sorted_items_per_s=sorted_speed,
        passes=len(throughputs),
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
