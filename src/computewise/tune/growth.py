"""Filling the device: the micro-batch grown until memory or throughput stops it, and whether the host is the limit.

**Growth.** The micro-batch sizes a step can use are the divisors of the global batch (accumulation
keeps what the model learns fixed, so the global batch is the ceiling). Starting from the smallest
size the old default list began at (global / 32), each next size is the smallest divisor at least
twice the last, measured in one short trial, until one of:

- **memory model**: the estimate (``prune.estimate_memory``, the planner's formulas) says the size
  does not fit the device; no trial is run for it;
- **out of memory**: the trial ran out of memory although the estimate said it fits;
- **throughput**: ``PATIENCE`` sizes in a row raised samples/s by less than ``MIN_GAIN`` over the
  best so far, so a larger micro-batch only costs memory (a step that no longer speeds up is
  compute-bound already); one size is not enough, since a short trial on a busy machine can read
  a size slower than it is;
- **global batch**: the whole global batch is one micro-batch;
- **failed**: a trial failed otherwise (its message is kept);
- **time budget**: ``tune --time-budget`` was spent before the next trial (answered ``out-of-time``).

After a memory stop the largest size that fits lies between the largest measured size and the
failed one; the divisors between them are bisected (each probe skipped by the memory model or
measured).

**Launch-bound (host-bound).** One micro-batch of ``m`` samples takes ``t(m) = fixed + m x
per_sample``: the fixed part is what does not grow with the batch (kernel launches, Python, the
dispatcher), the per-sample part is the device's arithmetic and memory traffic. From the two
largest micro-batches growth measured, ``fixed_share = fixed / t(m)`` at the chosen size. The step
is called **launch-bound when ``fixed_share >= LAUNCH_BOUND_SHARE`` (one half)**: more than half of
each micro-batch's time would be paid at any batch size, so on a GPU the device waits for the
host. A compute-bound step doubles its micro-batch time when the batch doubles (share near 0);
a launch-bound one barely changes it (share near 1). What helps is more work per launch (a larger
micro-batch, or a larger global batch where the growth already reached it) or fewer launches
(CUDA graphs: ``torch.compile(mode="reduce-overhead")``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Literal

from computewise.specs.codec import Jsonable, Layout, json_property

__all__ = [
    "LAUNCH_BOUND_SHARE",
    "MIN_GAIN",
    "PATIENCE",
    "Growth",
    "GrowthPoint",
    "HostBound",
    "Probe",
    "divisors",
    "grow_micro_batch",
    "host_bound",
    "start_size",
]

# Growth goes on only while a larger micro-batch is at least this much faster: below it, the
# difference is within a short trial's noise and the larger size only costs memory.
MIN_GAIN = 0.05
# Sizes in a row without that gain before growth stops on throughput.
PATIENCE = 2
# The share of a micro-batch's time that does not grow with its size from which the step is launch-bound.
LAUNCH_BOUND_SHARE = 0.5
# The old default list began at global / 32 (six power-of-two sizes); growth starts there.
_START_FRACTION = 32

Outcome = Literal["measured", "oom", "failed", "does-not-fit", "out-of-time"]
Stop = Literal["memory model", "out of memory", "throughput", "global batch", "failed", "time budget"]


@dataclass(frozen=True)
class Probe(Jsonable):
    """What one growth trial answered: ``measured`` with samples/s and the step time, or ``oom``/``failed``
    with the trial's message, or ``out-of-time`` where the tuning's time budget left no trial to run.
    Growth itself answers ``does-not-fit`` where the memory model refuses a size."""

    outcome: Outcome
    samples_per_s: float | None = None
    step_s: float | None = None
    message: str | None = None


@dataclass(frozen=True, kw_only=True)
class GrowthPoint(Probe):
    """One micro-batch size growth considered, and what became of it."""

    micro: int
    json_layout: ClassVar[Layout] = ("micro", "outcome", "samples_per_s", "step_s", "message")


@dataclass(frozen=True)
class Growth(Jsonable):
    """The sizes growth went through, the fastest one, and why it stopped."""

    points: tuple[GrowthPoint, ...]
    best: int | None
    stopped: Stop
    global_batch_size: int

    @property
    def measured(self) -> tuple[GrowthPoint, ...]:
        return tuple(point for point in self.points if point.outcome == "measured")

    @json_property(after="best")
    def largest_fitting(self) -> int | None:
        """The largest size measured to fit (it may be slower than ``best``)."""
        return max((point.micro for point in self.measured), default=None)

    def choices(self) -> tuple[int, ...]:
        """The micro-batches the rest of the search tries: the fastest and the good size below it.

        The size below keeps precisions that need more memory than the growth's (FP32 beside BF16)
        in the search where they do not fit at the fastest size.
        """
        if self.best is None:
            return ()
        below = [point.micro for point in self.measured if point.micro < self.best]
        return (max(below), self.best) if below else (self.best,)


def start_size(global_batch_size: int) -> int:
    """The smallest divisor of the global batch at least global / 32: where the old default list began."""
    floor = max(1, global_batch_size // _START_FRACTION)
    return min(size for size in divisors(global_batch_size) if size >= floor)


def divisors(number: int) -> list[int]:
    return [size for size in range(1, number + 1) if number % size == 0]


def grow_micro_batch(
    global_batch_size: int, fits: Callable[[int], bool], measure: Callable[[int], Probe], start: int | None = None
) -> Growth:
    """Double the micro-batch, then bisect below a memory stop (the rules are in the module docstring)."""
    sizes = divisors(global_batch_size)
    points: dict[int, GrowthPoint] = {}
    best: tuple[int, float] | None = None

    def probe(micro: int) -> GrowthPoint:
        if micro in points:  # bisection may come back to a size doubling measured
            return points[micro]
        if not fits(micro):
            point = GrowthPoint("does-not-fit", message="the memory estimate exceeds the device", micro=micro)
        else:
            answer = measure(micro)
            point = GrowthPoint(answer.outcome, answer.samples_per_s, answer.step_s, answer.message, micro=micro)
        points[micro] = point
        return point

    def gains(point: GrowthPoint) -> bool:
        rate = point.samples_per_s or 0.0
        return best is None or rate > best[1] * (1.0 + MIN_GAIN)

    micro = start if start is not None else start_size(global_batch_size)
    misses = 0
    stopped: Stop
    while True:
        point = probe(micro)
        if point.outcome != "measured":
            stopped = _stop_for(point)
            break
        if gains(point):
            best, misses = (micro, point.samples_per_s or 0.0), 0
        else:
            misses += 1
            if misses >= PATIENCE:
                stopped = "throughput"
                break
        larger = [size for size in sizes if size >= 2 * micro]
        if not larger:
            stopped = "global batch"
            break
        micro = larger[0]
    if stopped in ("memory model", "out of memory") and best is not None:
        low = max(size for size, point in points.items() if point.outcome == "measured")
        high = micro
        while between := [size for size in sizes if low < size < high]:
            point = probe(between[len(between) // 2])
            if point.outcome in ("failed", "out-of-time"):
                break
            if point.outcome != "measured":
                high = point.micro
                continue
            low = point.micro
            if gains(point):
                best = (point.micro, point.samples_per_s or 0.0)
    return Growth(tuple(points.values()), best[0] if best else None, stopped, global_batch_size)


def _stop_for(point: GrowthPoint) -> Stop:
    if point.outcome == "does-not-fit":
        return "memory model"
    if point.outcome == "out-of-time":
        return "time budget"
    return "out of memory" if point.outcome == "oom" else "failed"


@dataclass(frozen=True)
class HostBound(Jsonable):
    """The launch-bound verdict: the fixed share of one micro-batch's time at ``micro``, from two sizes."""

    micro: int
    fixed_share: float
    fixed_step_s: float  # the fixed part summed over one optimizer step's micro-batches: what CUDA graphs could save
    launch_bound: bool


def host_bound(growth: Growth) -> HostBound | None:
    """Fit ``t(m) = fixed + m x per_sample`` through the two largest measured sizes, read at the best one.

    None with fewer than two measured sizes (nothing to fit) or no best size.
    """
    measured = sorted((p for p in growth.measured if p.step_s is not None), key=lambda point: point.micro)
    if len(measured) < 2 or growth.best is None:
        return None
    small, large = measured[-2], measured[-1]
    # One micro-batch's time: the step's time over its accumulation steps.
    t_small = _micro_time(small, growth.global_batch_size)
    t_large = _micro_time(large, growth.global_batch_size)
    per_sample = max(0.0, (t_large - t_small) / (large.micro - small.micro))
    fixed = max(0.0, t_large - per_sample * large.micro)
    at_best = fixed + per_sample * growth.best
    share = min(1.0, fixed / at_best) if at_best > 0 else 0.0
    accumulation = growth.global_batch_size // growth.best
    return HostBound(growth.best, share, fixed * accumulation, share >= LAUNCH_BOUND_SHARE)


def _micro_time(point: GrowthPoint, global_batch_size: int) -> float:
    return (point.step_s or 0.0) * point.micro / global_batch_size
