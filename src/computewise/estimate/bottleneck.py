"""Which part of a training step to attack first, in words a user can act on.

The step breakdown (``estimate.step``) says where the time goes; this names the largest part that
is not useful arithmetic and the changes that shrink it. Arithmetic itself is the answer only
when nothing else takes a tenth of the step.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["BREAKDOWN_LABELS", "Bottleneck", "bottleneck"]

# Keys of the breakdown (``single.step_breakdown``), in the order a report shows them.
BREAKDOWN_LABELS: dict[str, str] = {
    "compute": "compute",
    "pipeline_bubble": "pipeline bubble",
    "tensor_parallel": "exposed TP communication",
    "context_parallel": "exposed CP communication",
    "expert_parallel": "exposed EP all-to-all",
    "pipeline_parallel": "exposed PP sends",
    "data_parallel": "exposed gradient sync",
}

_ADVICE: dict[str, str] = {
    "pipeline_bubble": (
        "raise the micro-batches per step (a larger --global-batch or a smaller --micro-batch), interleave "
        "with --virtual-stages, or lower --pp"
    ),
    "tensor_parallel": "lower --tp (keep it inside one node), or shard activations with --sequence-parallel",
    "context_parallel": "lower --cp: attention is too short to hide the K/V exchange",
    "expert_parallel": "keep --ep inside one node, or lower it",
    "pipeline_parallel": "use fewer --virtual-stages, or an instance with a faster network",
}
_MORE_BACKWARD = "raise the global batch (more backward to hide it under)"
_FASTER_NETWORK = "or rent an instance with a faster network"
_WORTH_ATTACKING = 0.10  # a part under a tenth of the step is not where the time goes


@dataclass(frozen=True)
class Bottleneck:
    part: str  # a key of BREAKDOWN_LABELS
    share: float  # of the step
    advice: str

    def sentence(self) -> str:
        return f"{BREAKDOWN_LABELS[self.part]} is {self.share:.0%} of the step: {self.advice}"


def _data_parallel_advice(zero: int) -> str:
    """What shrinks an exposed gradient sync, given the ZeRO stage the step already runs (``estimate.step``).

    ZeRO-1/2 hide the reduce-scatter under the backward and the all-gather under the next forward, where plain
    data parallelism exposes a whole all-reduce; ZeRO-3 moves the weights every micro-batch.
    """
    if zero >= 3:
        gathers = "ZeRO-3 gathers the weights every micro-batch"
        return f"{_MORE_BACKWARD}, use ZeRO-1/2 (--zero 1) if the states fit ({gathers}), {_FASTER_NETWORK}"
    if zero >= 1:
        return f"{_MORE_BACKWARD}, {_FASTER_NETWORK}"
    return f"{_MORE_BACKWARD}, shard with ZeRO-1/2 (--zero 1), {_FASTER_NETWORK}"


def bottleneck(breakdown_s: Mapping[str, float], compute_fraction: float, zero: int = 0) -> Bottleneck:
    """The part to attack first; ``compute_fraction`` is the achieved share of peak while computing, ``zero``
    the ZeRO stage the step runs (the advice never suggests what is already set)."""
    step_s = sum(breakdown_s.values())
    if step_s <= 0:
        return Bottleneck("compute", 1.0, "nothing to overlap")
    waste = {k: v for k, v in breakdown_s.items() if k != "compute"}
    worst = max(waste, key=lambda k: waste[k], default="compute")
    if worst != "compute" and waste[worst] >= _WORTH_ATTACKING * step_s:
        advice = _data_parallel_advice(zero) if worst == "data_parallel" else _ADVICE[worst]
        return Bottleneck(worst, waste[worst] / step_s, advice)
    advice = (
        f"arithmetic runs at {compute_fraction:.0%} of peak; larger micro-batches or wider layers raise it, "
        "a faster accelerator or more of them shorten it"
    )
    return Bottleneck("compute", breakdown_s.get("compute", 0.0) / step_s, advice)
