"""A frozen plan: the recommendation, the cost-vs-time frontier, every candidate and every rejection."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, ClassVar, Literal

from computewise.errors import InputError
from computewise.estimate.data_movement import DataMovement
from computewise.estimate.figures import DeviceMemory
from computewise.specs import PRICINGS, Pricing
from computewise.specs.document import (
    SCHEMA_VERSION,
    read_float,
    read_int,
    read_list,
    read_mapping,
    read_optional_float,
    read_str,
    require_object,
)

__all__ = ["Option", "Plan", "Rejection", "ScalingPoint", "merge_rejections", "pareto_front", "scaling_curve"]


@dataclass(frozen=True)
class Option:
    """One way to run the job: hardware, price, layout and what it costs."""

    kind: ClassVar[Literal["train"]] = "train"  # tells it from a ``plan.infer.InferOption`` in the printers
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
    energy_kwh: float | None  # None: the accelerator publishes no power figure (unknown is never zero)
    co2_kg: float | None
    mfu: float
    cp: int = 1  # context parallel: each sequence split over cp ranks; gpus = tp * pp * cp * dp
    ep: int = 1  # expert parallel inside the dp * cp ranks (MoE); adds no GPUs
    virtual_stages: int = 1  # model chunks per pipeline rank: > 1 is the interleaved 1F1B schedule
    framework: str = "pytorch"  # whose activation layout: megatron | pytorch (see specs.FRAMEWORKS)
    step_s: float = 0.0  # one optimizer step
    step_breakdown_s: dict[str, float] = field(default_factory=dict)  # by cause (estimate.step)
    bottleneck: str = ""  # the part of the step to attack first, in words
    data: DataMovement | None = None  # moving the dataset here (plan train --data-region); in time_s and cost_usd
    method: str = "full"  # what trains: full | lora | qlora (see specs.FINETUNE_METHODS)

    @property
    def device_memory(self) -> DeviceMemory:
        return DeviceMemory(self.memory_bytes, self.capacity_bytes)

    @property
    def label(self) -> str:
        trains = "" if self.method == "full" else f" {self.method}"
        return f"{self.instances} x {self.cloud} {self.instance_type} {self.region} {self.pricing}{trains}"

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
                "method": self.method,
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
        } | ({} if self.data is None else {"data": self.data.to_dict()})

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "the plan") -> Option:
        """The option ``to_dict`` wrote; a missing or mistyped field is an ``InputError`` naming it."""
        hardware, layout = read_mapping(data, "hardware", source), read_mapping(data, "layout", source)
        job, memory = read_mapping(data, "job", source), read_mapping(data, "memory", source)
        compute, time = read_mapping(data, "compute", source), read_mapping(data, "time", source)
        cost = read_mapping(data, "cost", source)
        return cls(
            accelerator=read_str(data, "accelerator", source),
            gpus=read_int(data, "gpus", source),
            instances=read_int(hardware, "instances", source),
            cloud=read_str(hardware, "cloud", source),
            instance_type=read_str(hardware, "instance_type", source),
            region=read_str(hardware, "region", source),
            pricing=_pricing(read_str(cost, "pricing", source), source),
            usd_per_h=read_float(cost, "usd_per_hour", source),
            tp=read_int(layout, "tp", source),
            pp=read_int(layout, "pp", source),
            dp=read_int(layout, "dp", source),
            zero=read_int(layout, "zero", source),
            precision=read_str(job, "precision", source),
            micro_batch=read_int(job, "micro_batch", source),
            recompute=read_str(job, "recompute", source),
            memory_bytes=_floats(read_mapping(memory, "per_device_bytes", source), source),
            capacity_bytes=read_float(memory, "capacity_bytes", source),
            flops=read_float(compute, "flops", source),
            time_s=read_float(time, "seconds", source),
            cost_usd=read_float(cost, "usd", source),
            energy_kwh=read_optional_float(read_mapping(data, "energy", source), "kwh", source),
            co2_kg=read_optional_float(read_mapping(data, "co2", source), "kg", source),
            mfu=read_float(compute, "mfu", source),
            cp=read_int(layout, "cp", source),
            ep=read_int(layout, "ep", source),
            virtual_stages=read_int(layout, "virtual_stages", source),
            framework=read_str(job, "framework", source),
            step_s=read_float(time, "step_seconds", source),
            step_breakdown_s=_floats(read_mapping(time, "breakdown_seconds_per_step", source), source),
            bottleneck=read_str(read_mapping(time, "bottleneck", source), "advice", source),
            data=DataMovement.from_dict(read_mapping(data, "data", source), source) if "data" in data else None,
            method=read_str(job, "method", source) if "method" in job else "full",  # plans saved before LoRA
        )


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

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "the plan") -> Rejection:
        return cls(
            accelerator=read_str(data, "accelerator", source),
            gpus=read_int(data, "gpus", source),
            stage=read_str(data, "stage", source),
            reason=read_str(data, "reason", source),
            candidates=read_int(data, "candidates", source),
            option=read_str(data, "option", source),
        )


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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "the plan") -> ScalingPoint:
        return cls(
            gpus=read_int(data, "gpus", source),
            time_s=read_float(data, "time_s", source),
            cost_usd=read_float(data, "cost_usd", source),
            efficiency=read_float(data, "efficiency", source),
        )


def scaling_curve(options: Sequence[Option], like: Option) -> tuple[ScalingPoint, ...]:
    """How ``like``'s instance type scales with more instances, training the same way (full, LoRA or
    QLoRA): where efficiency falls, communication wins."""
    same = sorted(
        (
            o
            for o in options
            if (o.cloud, o.instance_type, o.region, o.pricing, o.method)
            == (like.cloud, like.instance_type, like.region, like.pricing, like.method)
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
    """A training plan: what ``plan train --json`` prints (``to_dict``) and ``submit --plan`` reads (``from_dict``).

    Read back from a file written with ``--top``, ``candidates`` holds only the few that were written.
    """

    kind: ClassVar[Literal["train"]] = "train"  # tells it from a ``plan.infer.InferPlan`` in the printers
    recommended: Option
    pareto: tuple[Option, ...]
    candidates: tuple[Option, ...]  # ranked, best first
    rejected: tuple[Rejection, ...]
    considered: int  # candidate configurations evaluated (layouts x offerings x pricings)
    scaling: tuple[ScalingPoint, ...] = ()
    top: int | None = None  # candidates written and shown (``--top``); None: all
    warnings: tuple[str, ...] = ()  # said before anything else (a run that takes years)
    notes: tuple[str, ...] = ()  # defaults taken and calibrations used, said after the tables

    @property
    def shown(self) -> tuple[Option, ...]:
        """The candidates ``--top`` keeps, best first."""
        return self.candidates if self.top is None else self.candidates[: self.top]

    def to_dict(self, top: int | None = None) -> dict[str, Any]:
        """The ``plan train --json`` document; ``top`` overrides the plan's own."""
        candidates = self.shown if top is None else self.candidates[:top]
        return {
            "schema_version": SCHEMA_VERSION,
            "recommended": self.recommended.to_dict(),
            "pareto": [o.to_dict() for o in self.pareto],
            "candidates": [o.to_dict() for o in candidates],
            "rejected": [r.to_dict() for r in self.rejected],
            "considered": self.considered,
            "feasible": len(self.candidates),
            "scaling": [p.to_dict() for p in self.scaling],
        } | _said(self.warnings, self.notes)

    @classmethod
    def from_dict(cls, data: object, source: str = "the plan") -> Plan:
        """A plan read back from ``computewise plan train --json``; anything else is an ``InputError``."""
        plan = require_object(data, "`computewise plan train ... --json`", source)
        if not isinstance(plan.get("recommended"), Mapping):
            raise InputError(
                f"{source} has no recommended option: it is not a computewise training plan",
                "write it with `computewise plan train ... --json > plan.json`",
            )

        def options(key: str) -> tuple[Option, ...]:
            return tuple(Option.from_dict(_object(o, key, source), source) for o in read_list(plan, key, source))

        return cls(
            recommended=Option.from_dict(read_mapping(plan, "recommended", source), source),
            pareto=options("pareto"),
            candidates=options("candidates"),
            rejected=tuple(
                Rejection.from_dict(_object(r, "rejected", source), source) for r in read_list(plan, "rejected", source)
            ),
            considered=read_int(plan, "considered", source),
            scaling=tuple(
                ScalingPoint.from_dict(_object(p, "scaling", source), source)
                for p in read_list(plan, "scaling", source)
            ),
            warnings=_strings(plan, "warnings", source),
            notes=_strings(plan, "notes", source),
        )


def _said(warnings: Sequence[str], notes: Sequence[str]) -> dict[str, Any]:
    """A plan's ``warnings`` and ``notes``, each written only when there is one (older plans had neither)."""
    return ({"warnings": list(warnings)} if warnings else {}) | ({"notes": list(notes)} if notes else {})


def _strings(data: Mapping[str, Any], key: str, source: str) -> tuple[str, ...]:
    if key not in data:
        return ()
    return tuple(read_str({key: item}, key, source) for item in read_list(data, key, source))


def _object(value: object, key: str, source: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise InputError(f"{source}: every entry of {key} must be a JSON object, got {type(value).__name__}")
    return value


def _floats(values: Mapping[str, Any], source: str) -> dict[str, float]:
    return {key: read_float(values, key, source) for key in values}


def _pricing(text: str, source: str) -> Pricing:
    for pricing in PRICINGS:
        if pricing == text:
            return pricing
    raise InputError(f"{source}: unknown pricing {text!r}", f"one of {', '.join(PRICINGS)}")
