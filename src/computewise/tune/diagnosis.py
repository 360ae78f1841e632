"""Why the tuned step runs at the speed it does: launch-bound or not, and what keeps its MFU down.

Each limit is read from what the search measured, never guessed: the launch-bound verdict from
the micro-batch growth (``growth.host_bound``: the share of a micro-batch's time that does not
grow with its size), a memory cap from where growth stopped, recomputation from the configuration,
and, where MFU is low and none of those applies, the time a step spends outside large matmuls.
"""

from __future__ import annotations

from dataclasses import dataclass

from computewise.specs.codec import Jsonable, json_property
from computewise.tune.growth import Growth, HostBound
from computewise.tune.savings import Measured
from computewise.tune.space import DeviceKind

__all__ = ["LAUNCH_BOUND_GPU", "LOW_MFU", "Diagnosis", "diagnose"]

LAUNCH_BOUND_GPU = "the GPU waits for the host: larger batches or CUDA graphs"
# Below this share of the peak, the report says what limits the step (nanoGPT reaches ~37 % on an A100).
LOW_MFU = 0.3


@dataclass(frozen=True)
class Diagnosis(Jsonable):
    """The launch-bound measurement and verdict, and the limits of the winner's MFU, in words."""

    host: HostBound | None
    verdict: str | None
    limits: tuple[str, ...]

    @json_property(after="host")
    def launch_bound(self) -> bool | None:
        """The host's verdict beside its measurement, None where it was not measured."""
        return self.host.launch_bound if self.host is not None else None


def diagnose(device: DeviceKind, growth: Growth | None, host: HostBound | None, best: Measured) -> Diagnosis:
    """The verdict on the host and what limits ``best``'s MFU (the criteria are in ``growth``)."""
    limits: list[str] = []
    verdict = None
    if host is not None and host.launch_bound:
        fixed = (
            f"{host.fixed_share:.0%} of each micro-batch's time at {host.micro} samples does not grow with the batch"
        )
        if device == "cuda":
            verdict = f"launch-bound: {fixed}, so {LAUNCH_BOUND_GPU}"
        else:
            verdict = f"overhead-bound: {fixed} (operator dispatch and Python): larger batches or torch.compile"
        limits.append(verdict)
        if device == "cuda" and not best.config.cuda_graphs:
            limits.append("the winner runs without CUDA graphs (compile_mode=reduce-overhead): each kernel is launched")
    if growth is not None and growth.best is not None:
        accumulation = growth.global_batch_size // growth.best
        if growth.stopped in ("memory model", "out of memory") and accumulation > 1:
            limits.append(
                f"memory caps the micro-batch at {growth.largest_fitting or growth.best} samples "
                f"({growth.stopped}), so a step accumulates {accumulation} micro-batches"
            )
        if growth.stopped == "global batch" and host is not None and host.launch_bound:
            limits.append(
                f"the micro-batch is already the whole global batch ({growth.global_batch_size}): only a larger "
                "global batch (with the learning rate scaled to it) gives each launch more work"
            )
    if best.config.activation_checkpointing:
        limits.append("activation checkpointing recomputes the forward pass, which MFU does not count")
    if best.mfu is not None and best.mfu < LOW_MFU and not limits:
        limits.append(
            "the step spends its time outside large matmuls (attention, normalisation, element-wise kernels, "
            "the loss and the optimizer), which run below the matmul peak MFU is measured against"
        )
    return Diagnosis(host, verdict, tuple(limits))
