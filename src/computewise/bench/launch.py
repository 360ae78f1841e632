"""Launch latency: what one tiny kernel costs the host, back to back and synchronised, apart from any work.

A kernel shorter than its launch is bounded by the host, not the device: on an H100 a 1024^3 bf16
product takes 3 us while torch needs about 10 us of Python, dispatcher and driver to queue one. So
bench times its matmuls and triad back to back in a CUDA graph (``timing.time_back_to_back``), which
leaves the launch out, and measures the launch here as a figure of its own, which a time model adds
per kernel of a step that is not captured in a graph.

The kernel is a one-element ``torch.add`` into a preallocated output: no work to speak of, so its
time is the launch. Two figures:

- ``back_to_back_s``: per call, with calls queued in a loop between one pair of synchronisations:
  the rate at which the host can issue kernels, the cost of a launch-bound step's every kernel;
- ``synchronised_s``: one call followed by a synchronisation, timed alone: the round trip a
  ``.item()``, a host-side check or an unbatched request pays;
- ``matmul_back_to_back_s`` (GPUs only): a 128^3 TF32 ``torch.mm`` into a preallocated output,
  queued back to back. Its kernel takes a few microseconds, so this too is the host's issue rate,
  for a heavier op: the one the first H100 bench timed this way (its matmul sweep at 128, before
  the sweep moved into CUDA graphs), and so the only figure that compares this host with the one
  the estimator's host costs were fitted on.

On a CPU there is no queue: the first two are the dispatcher's cost for one small op, and a CPU
matmul would time its arithmetic, so there is no third.
"""

from __future__ import annotations

from computewise.bench.result import LaunchFigure
from computewise.bench.timing import CALL_S, Measured, calls_to_fill, device_sync, time_back_to_back, time_repeats

__all__ = ["measure_launch"]

# Ten repeats even for --quick (they take milliseconds): the spread is then p10..p90 (``timing.Measured``),
# which one repeat preempted by another process, as long as the whole loop of microsecond launches, cannot set.
_REPEATS = 10
# Round trips, each timed alone: many, since one microsecond call is at the mercy of the scheduler.
_SYNCHRONISED_CALLS, _SYNCHRONISED_WARMUP = 200, 20
_MATMUL_SIZE = 128


def measure_launch(device: str) -> LaunchFigure:
    """Seconds per launch of a one-element add on ``device``, back to back and synchronised."""
    import torch

    x = torch.ones(1, device=device)
    out = torch.empty(1, device=device)

    def launch() -> None:
        torch.add(x, x, out=out)

    count = calls_to_fill(launch, CALL_S, device=device)
    back_to_back = time_back_to_back(launch, count=count, warmup=1, repeats=_REPEATS, device=device)
    sync = device_sync(device)
    synchronised = time_repeats(launch, warmup=_SYNCHRONISED_WARMUP, repeats=_SYNCHRONISED_CALLS, sync=sync)
    matmul = _matmul_back_to_back(device) if device.startswith("cuda") else None
    return LaunchFigure(device, Measured.of(back_to_back), Measured.of(synchronised), matmul)


def _matmul_back_to_back(device: str) -> Measured:
    """Seconds per 128^3 TF32 ``torch.mm`` queued back to back: what the first H100 bench timed at 128."""
    import torch

    a = torch.randn(_MATMUL_SIZE, _MATMUL_SIZE, device=device)
    b = torch.randn(_MATMUL_SIZE, _MATMUL_SIZE, device=device)
    out = torch.empty(_MATMUL_SIZE, _MATMUL_SIZE, device=device)

    def product() -> None:
        torch.mm(a, b, out=out)

    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        count = calls_to_fill(product, CALL_S, device=device)
        return Measured.of(time_back_to_back(product, count=count, warmup=1, repeats=_REPEATS, device=device))
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before
