"""What ``computewise optimize --json`` prints and the exported manifest quotes, as typed values.

``SearchResult`` is the live search (its model, its built sessions, its workspace); these are the
figures it leaves behind, plain data that reads back. The search builds them (``SearchResult.summary``),
so a figure is computed once: the ranking the report prints, the speed-ups the manifest records and the
``--json`` a script reads all come from here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

from computewise.optimize.bench import BatchSpeed
from computewise.optimize.workspace import Doctor
from computewise.specs.codec import Document, Jsonable, json_field
from computewise.system.hardware import Hardware

__all__ = [
    "MAX_DROP_DESCRIPTION",
    "WORST_DESCRIPTION",
    "HardwareLine",
    "MetricLine",
    "ModelLine",
    "OptimizeSummary",
    "Speedup",
    "VariantStatus",
    "VariantSummary",
]

VariantStatus = Literal["ok", "failed", "skipped"]
_RATIO = "Variant over baseline; null where either was not timed."
WORST_DESCRIPTION = "The worst example's score, where it means one."
MAX_DROP_DESCRIPTION = "The budget as given (--max-drop), e.g. '1%'."


@dataclass(frozen=True)
class Speedup(Jsonable):
    """Against the baseline at the same batching: what the model change buys, sorting left out.

    ``suspect`` marks a ratio above ``search.SUSPECT_RATIO`` (or below its inverse); ``contended`` a figure
    timed while other processes held the CPUs."""

    json_description: ClassVar[str] = "Speed-ups over the FP32 baseline at the same batching."

    throughput: float | None = field(
        metadata=json_field(description="Items/s at the largest batch, both in arrival order. " + _RATIO)
    )
    sorted_throughput: float | None = field(
        metadata=json_field(description="Items/s at the largest batch, both length-sorted (text only). " + _RATIO)
    )
    latency: float | None = field(
        metadata=json_field(description="The baseline's p50 at the smallest batch over the variant's. " + _RATIO)
    )
    sorting: float | None = field(
        metadata=json_field(description="What length-sorting alone gives this variant at the largest batch.")
    )
    suspect: bool = field(metadata=json_field(description="A ratio too large to come from software alone."))
    contended: bool = field(metadata=json_field(description="Timed while other processes held the CPUs."))


@dataclass(frozen=True)
class VariantSummary(Jsonable):
    """One variant as measured: how it was built, its quality, its speeds and whether it can be exported."""

    json_description: ClassVar[str] = "One variant as built, graded and timed."

    name: str
    family: str
    status: VariantStatus
    reason: str | None = field(metadata=json_field(description="Why a variant failed or was skipped."))
    recipe: tuple[str, ...] = field(metadata=json_field(description="What was done to the model, step by step."))
    quality: float | None
    quality_worst: float | None = field(metadata=json_field(description=WORST_DESCRIPTION))
    meets_budget: bool
    batch_invariance: float | None = field(
        metadata=json_field(description="Lowest cosine between an item's outputs alone and in a batch.")
    )
    batch_invariant: bool | None
    speeds: tuple[BatchSpeed, ...]
    peak_memory_bytes: int | None
    size_bytes: int | None
    load_time_s: float | None
    build_time_s: float | None
    kept_fp32: tuple[str, ...] | None = field(
        metadata=json_field(description="Layers selective precision kept in FP32; null for every other variant.")
    )
    format: str | None
    exportable: bool
    export_blocker: str | None
    providers: tuple[str, ...]
    speedup: Speedup | None = field(metadata=json_field(description="Null for a variant never timed."))


@dataclass(frozen=True)
class HardwareLine(Jsonable):
    """The machine the variants were timed on, as the report and the manifest name it.

    ``system.hardware.Hardware`` lives below the codec's layer, so its JSON is this view of it: the CPU
    features that decide a variant rather than every flag."""

    json_description: ClassVar[str] = "The machine the variants were built and timed on."

    cpu: str
    cpu_features: tuple[str, ...] = field(
        metadata=json_field(description="The CPU flags that decide a variant (VNNI, BF16, AMX), in a fixed order.")
    )
    vnni: bool = field(metadata=json_field(description="INT8 dot-product instructions (AVX512-VNNI, AVX-VNNI, AMX)."))
    threads: int = field(metadata=json_field(minimum=1))
    cuda_device: str | None
    providers: tuple[str, ...] = field(metadata=json_field(description="ONNX Runtime's execution providers here."))
    notes: tuple[str, ...]

    @classmethod
    def of(cls, hardware: Hardware) -> HardwareLine:
        return cls(
            cpu=hardware.cpu,
            cpu_features=tuple(hardware.cpu_features),
            vnni=hardware.has_vnni,
            threads=hardware.threads,
            cuda_device=hardware.cuda_device,
            providers=hardware.providers,
            notes=hardware.notes,
        )


@dataclass(frozen=True)
class ModelLine(Jsonable):
    """The model optimized: where it came from, its kind and task."""

    source: str
    kind: str
    task: str


@dataclass(frozen=True)
class MetricLine(Jsonable):
    """How quality was judged: the metric, the baseline's score, the budget and the examples used."""

    name: str
    baseline: float
    max_drop: str = field(metadata=json_field(description=MAX_DROP_DESCRIPTION))
    allowed_drop: float = field(metadata=json_field(minimum=0, description="The budget in the metric's units."))
    item_floor: float | None
    eval_examples: int = field(metadata=json_field(minimum=0))
    calibration_examples: int = field(metadata=json_field(minimum=0))


@dataclass(frozen=True)
class OptimizeSummary(Jsonable):
    """``optimize --json``: every variant tried, the one chosen and why, on which machine."""

    json_document: ClassVar[Document] = Document(
        "optimize",
        "optimize MODEL --json",
        "Every variant of a model built, graded against the FP32 baseline and timed; the fastest that fits the "
        "quality budget is chosen (and exported with --out).",
    )

    model: ModelLine
    hardware: HardwareLine
    metric: MetricLine
    target: str = field(metadata=json_field(enum=["throughput", "latency"]))
    batch_sizes: tuple[int, ...]
    batch_invariant_required: bool
    variants: tuple[VariantSummary, ...] = field(metadata=json_field(description="The FP32 baseline first."))
    chosen: str | None = field(
        metadata=json_field(description="The variant exported; null when none beat the baseline.")
    )
    best_quality: str | None
    best_speed: str | None = field(metadata=json_field(description="The fastest exportable variant, in budget or not."))
    doctor: Doctor
    notes: tuple[str, ...]
    warnings: tuple[str, ...] = field(metadata=json_field(description="What to know before trusting the speeds."))
    time_budget_s: float = field(metadata=json_field(exclusive_minimum=0))
    exported_to: str | None

    def variant(self, name: str) -> VariantSummary:
        return next(v for v in self.variants if v.name == name)
