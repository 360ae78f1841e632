"""A frozen plan: the recommendation, the cost-vs-time frontier, every candidate and every rejection."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import ClassVar, Literal, Self

from computewise.errors import InfeasiblePlanError, InputError
from computewise.estimate.cost import needs_host
from computewise.estimate.data_movement import DataMovement
from computewise.estimate.figures import DeviceMemory
from computewise.specs import Accelerator, Pricing
from computewise.specs.codec import Document, Jsonable, Layout, json_field, json_property
from computewise.specs.document import require_object

__all__ = [
    "Option",
    "Plan",
    "Rejection",
    "ScalingPoint",
    "largest_first",
    "merge_rejections",
    "pareto_front",
    "refuse_unrun_precision",
    "scaling_curve",
]


@dataclass(frozen=True)
class Option(Jsonable):
    """One way to run the job: hardware, price, layout and what it costs.

    Written with the same keys as ``estimate --json`` (memory.per_device_bytes, compute.flops,
    time.seconds, ...), grouped by ``json_layout``."""

    kind: ClassVar[Literal["train"]] = "train"  # tells it from a ``plan.infer.InferOption`` in the printers
    json_description: ClassVar[str] = (
        "One way to run the job (plan.result.Option): hardware, price, layout and what it costs."
    )
    json_layout: ClassVar[Layout] = (
        "accelerator",
        "gpus",
        ("hardware", ("cloud", "instance_type", "instances", "region")),
        ("layout", ("dp", "tp", "pp", "cp", "ep", "virtual_stages", "zero", "tp_overlap")),
        ("job", ("precision", "micro_batch", "recompute", "framework", "method")),
        ("memory", ("memory_bytes", "capacity_bytes")),
        ("compute", ("flops", "mfu")),
        ("time", ("time_s", "step_s", "step_breakdown_s", ("bottleneck", ("bottleneck",)))),
        ("cost", ("cost_usd", "pricing", "usd_per_h")),
        ("energy", ("energy_kwh",)),
        ("co2", ("co2_kg",)),
        "data",
    )
    accelerator: str
    gpus: int
    instances: int
    cloud: str
    instance_type: str
    region: str
    pricing: Pricing
    usd_per_h: float = field(metadata=json_field(name="usd_per_hour"))  # all instances
    tp: int
    pp: int
    dp: int
    zero: int
    precision: str
    micro_batch: int
    recompute: str
    # per device: the parts, the allocated and reserved peaks, and the total
    memory_bytes: dict[str, float] = field(metadata=json_field(name="per_device_bytes"))
    capacity_bytes: float
    flops: float
    time_s: float = field(metadata=json_field(name="seconds"))
    cost_usd: float = field(metadata=json_field(name="usd"))
    # None: the accelerator publishes no power figure (unknown is never zero)
    energy_kwh: float | None = field(metadata=json_field(name="kwh"))
    co2_kg: float | None = field(metadata=json_field(name="kg"))
    mfu: float
    cp: int = 1  # context parallel: each sequence split over cp ranks; gpus = tp * pp * cp * dp
    ep: int = 1  # expert parallel inside the dp * cp ranks (MoE); adds no GPUs
    virtual_stages: int = 1  # model chunks per pipeline rank: > 1 is the interleaved 1F1B schedule
    framework: str = "pytorch"  # whose activation layout: megatron | pytorch (see specs.FRAMEWORKS)
    tp_overlap: bool = False  # TP collectives hidden behind the GEMMs (``plan train --tp-overlap``, tp > 1 only)
    step_s: float = field(default=0.0, metadata=json_field(name="step_seconds"))  # one optimizer step
    step_breakdown_s: dict[str, float] = field(  # by cause (estimate.step)
        default_factory=dict, metadata=json_field(name="breakdown_seconds_per_step")
    )
    bottleneck: str = field(default="", metadata=json_field(name="advice"))  # the part of the step to attack first
    data: DataMovement | None = field(  # moving the dataset here (plan train --data-region); in time_s and cost_usd
        default=None,
        metadata=json_field(
            omit_empty=True,
            description="Present with --data-region: the dataset copied to this option's region before training; "
            "egress_usd is in cost.usd and transfer_seconds in time.seconds.",
        ),
    )
    method: str = field(  # what trains: full | lora | qlora (see specs.FINETUNE_METHODS); "full" in older plans
        default="full",
        metadata=json_field(
            enum=["full", "lora", "qlora"],
            description="What trains: every weight, LoRA adapters on a frozen 16-bit base, or adapters on a "
            "4-bit base.",
        ),
    )

    @property
    def device_memory(self) -> DeviceMemory:
        return DeviceMemory(self.memory_bytes, self.capacity_bytes)

    @property
    def label(self) -> str:
        trains = "" if self.method == "full" else f" {self.method}"
        return f"{self.instances} x {self.cloud} {self.instance_type} {self.region} {self.pricing}{trains}"


@dataclass(frozen=True)
class Rejection(Jsonable):
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


def largest_first(accelerator: Accelerator) -> tuple[bool, float]:
    """Sort key of the accelerators a job that fits nowhere is measured against: the largest memory first, a CPU
    socket's host RAM last; their shortfall says how far the job is from fitting, the smallest devices' nothing."""
    return not needs_host(accelerator), -accelerator.memory_bytes


def refuse_unrun_precision(rejections: Sequence[Rejection], precisions: Sequence[str]) -> None:
    """Where nothing was planned for want of the precision asked, not of memory (fp8 on an A100), say that."""
    if any(r.stage == "memory" for r in rejections):
        return
    unrun = sorted({r.reason for r in rejections if r.stage == "precision"})
    if unrun:
        raise InfeasiblePlanError(
            "no accelerator runs the precision asked: " + "; ".join(unrun[:3]),
            f"choose --gpu models that run {' or '.join(precisions)}, or another --precision",
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
class ScalingPoint(Jsonable):
    """Time and cost at one GPU count; efficiency = speed-up over the smallest count / GPU ratio."""

    gpus: int
    time_s: float
    cost_usd: float
    efficiency: float


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
class Plan(Jsonable):
    """A training plan: what ``plan train --json`` prints (``to_dict``) and ``submit --plan`` reads (``from_dict``).

    Read back from a file written with ``--top``, ``candidates`` holds only the few that were written.
    """

    kind: ClassVar[Literal["train"]] = "train"  # tells it from a ``plan.infer.InferPlan`` in the printers
    json_document: ClassVar[Document] = Document(
        "plan-train",
        "plan train --json",
        "The training plan (plan.result.Plan): recommendation, cost-vs-time frontier, candidates, rejections. "
        "`submit --plan` and `run --backend ... --plan` read it back with Plan.from_dict.",
    )
    recommended: Option
    pareto: tuple[Option, ...]
    candidates: tuple[Option, ...] = field(metadata=json_field(written=False))  # ranked, best first; see shown
    rejected: tuple[Rejection, ...]
    considered: int  # candidate configurations evaluated (layouts x offerings x pricings)
    scaling: tuple[ScalingPoint, ...] = ()
    top: int | None = field(default=None, metadata=json_field(written=False))  # candidates shown (--top); None: all
    warnings: tuple[str, ...] = field(  # said before anything else (a run that takes years)
        default=(),
        metadata=json_field(
            omit_empty=True,
            description="What the user should look at before acting on the plan (a recommended run longer than a "
            "year); absent when there is none.",
        ),
    )
    notes: tuple[str, ...] = field(  # defaults taken and calibrations used, said after the tables
        default=(), metadata=json_field(omit_empty=True)
    )

    @json_property(after="pareto", name="candidates", description="Best first; only the --top best (all with --top 0).")
    def shown(self) -> tuple[Option, ...]:
        """The candidates ``--top`` keeps, best first."""
        return self.candidates if self.top is None else self.candidates[: self.top]

    @json_property(after="considered", description="Candidates that survived, also those --top left out.")
    def feasible(self) -> int:
        return len(self.candidates)

    @classmethod
    def from_dict(cls, data: object, source: str = "the plan") -> Self:
        """A plan read back from ``computewise plan train --json``; anything else is an ``InputError``."""
        if not isinstance(require_object(data, cls.json_document.title, source).get("recommended"), Mapping):
            raise InputError(
                f"{source} has no recommended option: it is not a computewise training plan",
                "write it with `computewise plan train ... --json > plan.json`",
            )
        return super().from_dict(data, source)
