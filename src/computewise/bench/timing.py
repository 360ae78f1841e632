"""One figure from repeated timings: warm up, time each call, keep the median and the spread.

The median, not the mean or the best: on a shared machine one call in ten is slowed by someone
else, and a median of repeats shrugs that off without pretending the machine is quieter than it is
(the best of N would). The spread is kept beside it (min/max, or p10/p90 once there are ten
repeats, where one outlier should not set it) so a reader can see how noisy the figure was. On a
GPU the work is queued, so ``sync`` (``torch.cuda.synchronize``) runs before the clock stops;
otherwise the timing would measure the launch, not the kernel.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from computewise.errors import InputError
from computewise.specs.document import read_float, read_int

__all__ = ["Measured", "time_repeats"]

_PERCENTILE_REPEATS = 10  # from this many repeats on, the spread is p10..p90 instead of min..max


@dataclass(frozen=True)
class Measured:
    """A median over ``repeats`` measurements and their spread, in the unit of the field that holds it."""

    median: float
    low: float
    high: float
    repeats: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Measured:
        """The median and spread of ``values`` (min/max below ten values, p10/p90 from ten on)."""
        if not values:
            raise ValueError("a measurement needs at least one value")
        ordered = sorted(values)
        if len(ordered) >= _PERCENTILE_REPEATS:
            deciles = statistics.quantiles(ordered, n=10, method="inclusive")
            low, high = deciles[0], deciles[-1]
        else:
            low, high = ordered[0], ordered[-1]
        return cls(median=statistics.median(ordered), low=low, high=high, repeats=len(ordered))

    @property
    def spread(self) -> float:
        """How many times the high end of the spread is the low end (1.0: every repeat alike; inf: a zero low)."""
        return self.high / self.low if self.low > 0 else math.inf

    def to_dict(self) -> dict[str, float | int]:
        return {"median": self.median, "low": self.low, "high": self.high, "repeats": self.repeats}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "bench result") -> Measured:
        measured = cls(
            median=read_float(data, "median", source),
            low=read_float(data, "low", source),
            high=read_float(data, "high", source),
            repeats=read_int(data, "repeats", source),
        )
        if measured.repeats < 1 or not measured.low <= measured.median <= measured.high:
            raise InputError(
                f"{source}: a measurement needs repeats >= 1 and low <= median <= high, got {measured.to_dict()}",
                "pass the JSON that computewise bench wrote, unedited",
            )
        return measured


def time_repeats(
    fn: Callable[[], None], *, warmup: int, repeats: int, sync: Callable[[], None] | None = None
) -> list[float]:
    """Seconds per call of ``fn`` for ``repeats`` calls, after ``warmup`` untimed ones.

    The warm-up pays for first-call costs (allocation, kernel selection, a thread pool waking up) that
    are not the steady state being measured. ``sync`` runs after every call, inside the timed span, so
    queued GPU work is finished before the clock stops; it also runs once before the first timed call,
    so work left queued by the warm-up is not billed to it.
    """
    if repeats < 1 or warmup < 0:
        raise ValueError(f"need repeats >= 1 and warmup >= 0, got repeats={repeats}, warmup={warmup}")
    for _ in range(warmup):
        fn()
    if sync is not None:
        sync()
    times_s: list[float] = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        if sync is not None:
            sync()
        times_s.append(time.perf_counter() - start)
    return times_s
