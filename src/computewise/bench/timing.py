"""One figure from repeated timings: warm up, time each call, keep the median and the spread.

The median, not the mean or the best: on a shared machine one call in ten is slowed by someone
else, and a median of repeats shrugs that off without pretending the machine is quieter than it is
(the best of N would). The spread is kept beside it (min/max, or p10/p90 once there are ten
repeats, where one outlier should not set it) so a reader can see how noisy the figure was. On a
GPU the work is queued, so ``sync`` (``torch.cuda.synchronize``) runs before the clock stops;
otherwise the timing would measure the launch, not the kernel.

A kernel shorter than its launch needs more than a synchronised clock: each call costs the host
some microseconds (Python, the dispatcher, the driver), so timed one at a time, or even queued in a
Python loop, a 1024^3 bf16 product on an H100 (3 us of tensor-core work) reads as the host's launch
rate (about 10 us a call: 28 % of the measured peak in the first H100 run). ``time_back_to_back`` queues
``count`` calls between one pair of synchronisations and, on a GPU, captures them first in a CUDA
graph, whose replay launches the kernels from the device itself; what is left per call is the
kernel. The launch cost is then its own figure (``bench.launch``), not a hidden share of every other.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Self

from computewise.errors import InputError
from computewise.specs.codec import Jsonable, json_field

__all__ = ["CALL_S", "Measured", "calls_to_fill", "device_sync", "time_back_to_back", "time_repeats"]

_PERCENTILE_REPEATS = 10  # from this many repeats on, the spread is p10..p90 instead of min..max
CALL_S = 0.01  # one timed call lasts about this long: 1000x the clock's resolution and a synchronisation
_MAX_CALLS = 4096  # back-to-back calls in one timed span: bounds a CUDA graph's nodes and the sizing loop
_GRAPH_WARMUP = 3  # eager calls on the capture stream before capture: cuBLAS handles and workspaces exist


@dataclass(frozen=True)
class Measured(Jsonable):
    """A median over ``repeats`` measurements and their spread, in the unit of the field that holds it."""

    json_description: ClassVar[str] = (
        "A median over repeats after warm-up, with its spread: min/max below 10 repeats, p10/p90 from 10 on "
        "(bench.timing.Measured)."
    )
    median: float
    low: float
    high: float
    repeats: int = field(metadata=json_field(minimum=1))

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

    @classmethod
    def from_dict(cls, data: object, source: str = "bench result") -> Self:
        """The fields, then their order: a repeat at least, and low <= median <= high."""
        measured = super().from_dict(data, source)
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


def device_sync(device: str) -> Callable[[], None] | None:
    """What waits for ``device``'s queued work: ``torch.cuda.synchronize`` on a GPU, nothing on the CPU."""
    if not device.startswith("cuda"):
        return None
    import torch

    return lambda: torch.cuda.synchronize(device)


def calls_to_fill(fn: Callable[[], None], seconds: float, *, device: str) -> int:
    """How many calls of ``fn`` queued back to back last about ``seconds`` (1 to ``_MAX_CALLS``).

    Doubling from one call until the span is half of ``seconds``, then scaled: a first call's time
    alone would include a synchronisation and size the loop by the launch, not the work.
    """
    sync = device_sync(device)
    count = 1
    while True:
        (elapsed,) = time_repeats(_eager_loop(fn, count), warmup=1 if count == 1 else 0, repeats=1, sync=sync)
        if elapsed >= seconds / 2 or count >= _MAX_CALLS:
            return max(1, min(_MAX_CALLS, math.ceil(count * seconds / max(elapsed, 1e-9))))
        count *= 2


def time_back_to_back(
    fn: Callable[[], None], *, count: int, warmup: int, repeats: int, device: str, graph: bool = False
) -> list[float]:
    """Seconds per call of ``fn``: each repeat times ``count`` calls between one pair of synchronisations.

    With ``graph`` on a CUDA device the calls are captured once in a CUDA graph and each repeat
    replays it, so the host's launch cost (which ``bench.launch`` measures on its own) is not billed
    to a kernel shorter than it; on the CPU there is no launch to remove and the calls run in a loop.
    ``fn`` must write into preallocated tensors only: a graph replays the same addresses.
    """
    if count < 1:
        raise ValueError(f"need count >= 1, got {count}")
    loop = _graph_loop(fn, count, device) if graph and device.startswith("cuda") else _eager_loop(fn, count)
    return [t / count for t in time_repeats(loop, warmup=warmup, repeats=repeats, sync=device_sync(device))]


def _eager_loop(fn: Callable[[], None], count: int) -> Callable[[], None]:
    def loop() -> None:
        for _ in range(count):
            fn()

    return loop


def _graph_loop(fn: Callable[[], None], count: int, device: str) -> Callable[[], None]:
    """``count`` calls of ``fn`` captured in one CUDA graph; the returned callable replays it.

    As torch's CUDA Graphs notes prescribe: warm-up calls on a side stream first (so lazily created
    cuBLAS handles and workspaces are not allocated mid-capture), that same stream then used for the
    capture, and the replay made on ``device`` whatever the current device is.
    """
    import torch

    with torch.cuda.device(device):
        stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(_GRAPH_WARMUP):
                fn()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            for _ in range(count):
                fn()

    def replay() -> None:
        with torch.cuda.device(device):
            graph.replay()

    return replay
