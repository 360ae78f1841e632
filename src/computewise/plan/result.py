"""A frozen plan: the recommendation, the cost-vs-time frontier, every candidate and every rejection."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from computewise.specs import Pricing

__all__ = ["Option", "Plan", "Rejection", "ScalingPoint", "merge_rejections", "pareto_front", "scaling_curve"]


@dataclass(frozen=True)
class Option:
    """One way to run the job: hardware, price, layout and what it costs."""

    accelerator: str
    gpus: int
    instances: int
    cloud: str
    instance_type: str
    region: str
    pricing: Pricing
    usd_per_h: float  # all instances
    tp: int
    pp: int
    dp: int
    zero: int
    precision: str
    micro_batch: int
    recompute: str
    memory_bytes: dict[str, float]  # per device: the parts, the allocated and reserved peaks, and the total
    capacity_bytes: float
    flops: float
    time_s: float
    cost_usd: float
    energy_kwh: float
    co2_kg: float
    mfu: float
    cp: int = 1  # context parallel: each sequence split over cp ranks; gpus = tp * pp * cp * dp
    ep: int = 1  # expert parallel inside the dp * cp ranks (MoE); adds no GPUs
    virtual_stages: int = 1  # model chunks per pipeline rank: > 1 is the interleaved 1F1B schedule
    framework: str = "pytorch"  # whose activation layout: megatron | pytorch (see specs.FRAMEWORKS)
    step_s: float = 0.0  # one optimizer step
    step_breakdown_s: dict[str, float] = field(default_factory=dict)  # by cause (estimate.step)
    bottleneck: str = ""  # the part of the step to attack first, in words

    @property
    def label(self) -> str:
        return f"{self.instances} x {self.cloud} {self.instance_type} {self.region} {self.pricing}"

    def to_dict(self) -> dict[str, Any]:
        """The same fields as ``estimate --json``: memory.per_device_bytes, compute.flops, time.seconds, ..."""
        memory = dict(self.memory_bytes)
        return {
            "accelerator": self.accelerator,
            "gpus": self.gpus,
            "hardware": {
                "cloud": self.cloud,
                "instance_type": self.instance_type,
                "instances": self.instances,
                "region": self.region,
            },
            "layout": {
                "dp": self.dp,
                "tp": self.tp,
                "pp": self.pp,
                "cp": self.cp,
                "ep": self.ep,
                "virtual_stages": self.virtual_stages,
                "zero": self.zero,
            },
            "job": {
                "precision": self.precision,
                "micro_batch": self.micro_batch,
                "recompute": self.recompute,
                "framework": self.framework,
            },
            "memory": {"per_device_bytes": memory, "capacity_bytes": self.capacity_bytes},
            "compute": {"flops": self.flops, "mfu": self.mfu},
            "time": {
                "seconds": self.time_s,
                "step_seconds": self.step_s,
                "breakdown_seconds_per_step": dict(self.step_breakdown_s),
                "bottleneck": {"advice": self.bottleneck},
            },
            "cost": {"usd": self.cost_usd, "pricing": self.pricing, "usd_per_hour": self.usd_per_h},
            "energy": {"kwh": self.energy_kwh},
            "co2": {"kg": self.co2_kg},
        }


@dataclass(frozen=True)
class Rejection:
    """Why an accelerator, a GPU count or a priced option was dropped, and how many candidates went with it."""

    accelerator: str
    gpus: int
    stage: str  # precision | memory | deadline | budget | latency
    reason: str
    candidates: int
    option: str = ""

    @classmethod
    def for_option(cls, option: Option, stage: str, reason: str) -> Rejection:
        return cls(option.accelerator, option.gpus, stage, reason, 1, option.label)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def merge_rejections(rejections: Sequence[Rejection]) -> tuple[Rejection, ...]:
    """One entry per accelerator, GPU count and reason: regions selling the same machine add up."""
    merged: dict[tuple[str, int, str, str], Rejection] = {}
    for r in rejections:
        key = (r.accelerator, r.gpus, r.stage, r.reason)
        seen = merged.get(key)
        merged[key] = r if seen is None else replace(seen, candidates=seen.candidates + r.candidates)
    return tuple(merged.values())


def pareto_front(options: Sequence[Option]) -> tuple[Option, ...]:
    """Options no other option beats on both time and cost, fastest first."""
    front: list[Option] = []
    best_cost = float("inf")
    for option in sorted(options, key=lambda o: (o.time_s, o.cost_usd)):
        if option.cost_usd < best_cost:
            front.append(option)
            best_cost = option.cost_usd
    return tuple(front)


@dataclass(frozen=True)
class ScalingPoint:
    """Time and cost at one GPU count; efficiency = speed-up over the smallest count / GPU ratio."""

    gpus: int
    time_s: float
    cost_usd: float
    efficiency: float


def scaling_curve(options: Sequence[Option], like: Option) -> tuple[ScalingPoint, ...]:
    """How ``like``'s instance type scales with more instances: where efficiency falls, communication wins."""
    same = sorted(
        (
            o
            for o in options
            if (o.cloud, o.instance_type, o.region, o.pricing)
            == (like.cloud, like.instance_type, like.region, like.pricing)
        ),
        key=lambda o: o.gpus,
    )
    if not same:
        return ()
    base = same[0]
    return tuple(
        ScalingPoint(o.gpus, o.time_s, o.cost_usd, (base.time_s * base.gpus) / (o.time_s * o.gpus)) for o in same
    )


@dataclass(frozen=True)
class Plan:
    recommended: Option
    pareto: tuple[Option, ...]
    candidates: tuple[Option, ...]  # ranked, best first
    rejected: tuple[Rejection, ...]
    considered: int  # candidate configurations evaluated (layouts x offerings x pricings)
    scaling: tuple[ScalingPoint, ...] = ()

    def to_dict(self, top: int | None = None) -> dict[str, Any]:
        candidates = self.candidates if top is None else self.candidates[:top]
        return {
            "recommended": self.recommended.to_dict(),
            "pareto": [o.to_dict() for o in self.pareto],
            "candidates": [o.to_dict() for o in candidates],
            "rejected": [r.to_dict() for r in self.rejected],
            "considered": self.considered,
            "feasible": len(self.candidates),
            "scaling": [asdict(p) for p in self.scaling],
        }
