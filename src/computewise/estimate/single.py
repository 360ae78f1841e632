"""``estimate train|infer``: one configuration in, one frozen estimate out (scalars, JSON-ready)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

import numpy as np

from computewise.catalog.track_record import Kind, Scope, load_track_record, scope_for
from computewise.errors import InputError
from computewise.estimate.adapters import Adapters
from computewise.estimate.arrays import FloatArray, col
from computewise.estimate.assumptions import Assumptions
from computewise.estimate.bottleneck import bottleneck
from computewise.estimate.calibrated import calibrated_compute, calibration_note, matmul_sizes
from computewise.estimate.collectives import bus_bytes_per_s, fabric_for, link_problem
from computewise.estimate.cost import needs_host, server_w_per_device
from computewise.estimate.figures import DeviceMemory
from computewise.estimate.infer import (
    InferColumns,
    InferRows,
    evaluate_infer,
    inference_act_bytes,
    inference_weight_bytes,
)
from computewise.estimate.kernels import attention_peak_ratio, profile_shares, serving_quantiser, sustained_share
from computewise.estimate.layout import check_layout, heads_fix
from computewise.estimate.memory import (
    MemoryBreakdown,
    optimizer_state_bytes,
)
from computewise.estimate.quantized import qlora_unsupported_reason
from computewise.estimate.quote import Ask, PriceRequest, Quote, quote
from computewise.estimate.sections import (
    Accuracy,
    AdapterTraining,
    Bottleneck,
    Co2,
    Cost,
    Energy,
    ErrorBand,
    FullTraining,
    InferCompute,
    InferCost,
    InferJobSection,
    InferTime,
    LayoutSection,
    LayoutsFit,
    MemorySection,
    Storage,
    TrainCompute,
    TrainJobSection,
    TrainTime,
    Untimed,
)
from computewise.estimate.traced import tensor_core_flag
from computewise.estimate.train import TrainColumns, TrainHardware, TrainLayout, evaluate_train
from computewise.specs import (
    EXECUTIONS,
    FRAMEWORKS,
    PAGED_OPTIMIZERS,
    PRECISIONS,
    Accelerator,
    InferJob,
    ModelSpec,
    Parallelism,
    Precision,
    Pricing,
    TrainJob,
)
from computewise.specs.codec import Document, Jsonable, Layout, json_field, json_property
from computewise.specs.finetune import METHOD_NAMES
from computewise.units import format_bytes, format_count, format_duration, plural

if TYPE_CHECKING:
    from computewise.catalog import Catalog
    from computewise.catalog.calibration import Calibration

__all__ = [
    "InferEstimate",
    "TrainEstimate",
    "default_precision",
    "estimate_infer",
    "estimate_train",
    "input_kind",
    "memory_dict",
    "peak_for",
    "track_record_note",
]


# What one request is to a model that generates nothing: it answers each in one forward pass.
_INPUTS: dict[str, str] = {
    "cnn": "images",
    "vision-transformer": "images",
    "encoder": "sequences",
    "generic": "samples",
}


def input_kind(model: ModelSpec) -> str | None:
    """ "images", "sequences" or "samples" for a model that generates no tokens (image and encoder models,
    a traced module), whose requests are inputs answered once per batch; None for a decoder or an
    encoder-decoder, whose requests are prompts that it answers token by token."""
    return _INPUTS.get(model.architecture)


def default_precision(accelerator: Accelerator) -> Precision:
    """bf16 where the chip has it (no loss scaling needed), else fp16, else fp32: what AMP users pick."""
    for precision in ("bf16", "fp16"):
        if accelerator.peak_flops.get(precision, 0.0) > 0:
            return precision
    return "fp32"


def peak_for(accelerator: Accelerator, precision: Precision) -> float:
    """Dense peak FLOP/s at a training precision; a precision the chip lacks is the user's to change."""
    peak = accelerator.peak_flops.get(precision, 0.0)
    if peak <= 0:
        supported = [p for p in PRECISIONS if accelerator.peak_flops.get(p, 0.0) > 0]
        raise InputError(
            f"{accelerator.name} has no {precision} support",
            f"use --precision {' or '.join(supported)}",
        )
    return peak


def memory_dict(memory: MemoryBreakdown, row: int = 0) -> dict[str, float]:
    """The parts (each at its largest), then the step's peak: ``allocated_peak`` as
    ``max_memory_allocated`` reads it, ``reserved_peak`` as ``max_memory_reserved`` does, and
    ``total`` (reserved plus the CUDA context), the figure that must fit on the card."""
    parts = ("weights", "gradients", "optimizer_states", "activations", "kv_cache", "overhead")
    values = {name: float(getattr(memory, name).reshape(-1)[row]) for name in parts}
    for name in ("allocated_peak", "reserved_peak", "total"):
        values[name] = float(col(getattr(memory, name)).reshape(-1)[row])
    return values


def _scalar(values: Any) -> float:
    return float(col(values).reshape(-1)[0])


def _link_problem(accelerator: Accelerator, gpus: int, hw: Quote) -> tuple[str, str] | None:
    """(what, fix) when the job communicates over a link of unknown speed, whose time is unknowable."""
    if (problem := link_problem(accelerator, gpus)) is not None:
        return problem
    if not hw.timeable:
        name = f"{hw.offering.cloud} {hw.offering.instance_type}" if hw.offering else hw.explanation
        return (
            f"the catalog has no network bandwidth for {name}, so {hw.instances} instances cannot be timed",
            "add network_bytes_per_s for the instance in a catalog file (--catalog PATH), or use one instance",
        )
    return None


def _require_links(accelerator: Accelerator, gpus: int, hw: Quote) -> None:
    """Say so instead of printing infinity: inference has nothing to give without the time."""
    problem = _link_problem(accelerator, gpus, hw)
    if problem is not None:
        raise InputError(*problem)


def _does_not_fit(memory: MemoryBreakdown, accelerator: Accelerator, fix: str) -> str:
    """Why a job that does not fit cannot run, with how to make it fit; "" when it fits. It comes before a
    link of unknown speed: a job that cannot run at all is not timed whatever the links."""
    if _fits(memory, accelerator):
        return ""
    return (
        f"does not fit: {format_bytes(memory_dict(memory)['total'])} > "
        f"{format_bytes(accelerator.memory_bytes)} per device, so it cannot run as set up. To fix: {fix}"
    )


def _with_fit_note(reason: str, notes: tuple[str, ...]) -> tuple[str, ...]:
    """The notes, led by why nothing is timed where the job does not fit (``reason`` from ``_does_not_fit``)."""
    return (f"memory and FLOPs only, no time, cost or energy: {reason}", *notes) if reason else notes


# What shrinks a job's memory per device, for the note of one that does not fit.
_TRAIN_FIX = (
    "more devices with --zero 3 or --tp/--pp, --recompute full, a smaller --micro-batch or --seq-len, "
    "or an accelerator with more memory"
)
# Adapters on a frozen base: PEFT runs data parallel only, and the logits and activations dominate.
_ADAPTER_FIX = {
    "lora": "--recompute full, a smaller --micro-batch or --seq-len, --method qlora (a 4-bit base), "
    "more devices with --zero 3, or an accelerator with more memory",
    "qlora": "--recompute full, a smaller --micro-batch or --seq-len, fewer --lora-targets, more devices with "
    "--zero 3, or an accelerator with more memory",
}
_INFER_FIX = (
    "a smaller --batch, more devices per replica (--gpus), lower --precision, or an accelerator with more memory"
)


def _bottleneck(columns: TrainColumns, zero: int) -> Bottleneck:
    found = bottleneck(columns.step.breakdown_s(), _scalar(columns.compute_fraction), zero)
    return Bottleneck(found.part, found.share, found.sentence())


def _compute_note(columns: TrainColumns, utilization: float | None, precision: Precision) -> str:
    if utilization is not None:
        return f"utilization {utilization:.0%} of peak {precision} FLOP/s, as given by --mfu"
    return (
        f"compute reaches {_scalar(columns.compute_fraction):.0%} of peak {precision} FLOP/s: each kernel the "
        "code launches, timed by shape, bytes and host launches (docs/ACCURACY.md)"
    )


def _transformer_record(model: ModelSpec) -> bool:
    """Whether the track record speaks for ``model``: its measured and published runs are all transformers,
    so a traced network (a CNN) has no error band from them."""
    return model.is_transformer or model.traced is None


def accuracy(scope: Scope, kind: Kind, model: ModelSpec) -> Accuracy:
    """How far estimates of this kind of run have been from measured ones (``catalog.track_record``)."""
    records = load_track_record() if _transformer_record(model) else {}

    def band(figure: Literal["time", "memory"]) -> ErrorBand | None:
        record = records.get((scope, kind, figure))
        if record is None:
            return None
        return ErrorBand(record.median_abs_error, record.worst_abs_error, record.rows, record.source)

    published = records.get((scope, kind, "fits"))
    fit = None
    if published is not None:
        fit = LayoutsFit(published.rows, round(published.rows * (1.0 - published.worst_abs_error)), published.source)
    return Accuracy(scope, band("time"), band("memory"), fit)


def _percent(fraction: float) -> str:
    return f"{fraction:.0%}" if fraction >= 0.01 else "<1%"


def track_record_note(scope: Scope, kind: Kind, model: ModelSpec) -> str:
    """One line for the terminal: the error band of time and memory on measured runs of this kind."""
    what = {"train": "training", "infer": "inference"}[kind]
    if not _transformer_record(model):
        checked = (
            "time within 25 % of NVIDIA's published ResNet-50 throughput at batch 16-256 (fp32 and fp16) and "
            "of Hugging Face's eager batch-1 latency, up to 2.9x optimistic on NVIDIA's 2021 host at batch 1-8"
            if kind == "infer"
            else "time within 25 % of NVIDIA's published ResNet-50 training in fp32 and mixed precision, not TF32"
        )
        memory = (
            "activations as a real forward allocates them on the CPU"
            if kind == "infer"
            else "allocated peak within 5 % of a real ResNet-50 AdamW step on the CPU"
        )
        return f"accuracy on a traced network's {what}: {checked}; {memory} (docs/ACCURACY.md)"
    section = accuracy(scope, kind, model)
    parts = []
    for figure, band in (("time", section.time), ("memory", section.memory)):
        if band is None:
            parts.append(f"{figure} not yet checked against a measured run of this kind")
        else:
            parts.append(
                f"{figure} ±{_percent(band.median_abs_error)} (median |error| over "
                f"{plural(band.measured_runs, 'measured run')}, worst {_percent(band.worst_abs_error)})"
            )
    published = section.published_layouts_fit
    if published is not None:  # a one-sided check of memory: those runs ran, so they fit
        n = plural(published.published_layouts, "published layout")
        parts[-1] += f", and {published.fit} of {n} of this kind fit, as they did when they ran"
    return f"accuracy on {scope} {what} so far: " + "; ".join(parts) + " (docs/ACCURACY.md)"


def _fits(memory: MemoryBreakdown, accelerator: Accelerator) -> bool:
    return memory_dict(memory)["total"] <= accelerator.memory_bytes


_NOTED_SLOWDOWN = 0.01  # interruptions are worth a note once they add 1 % to the job's time


def _interruption_note(columns: TrainColumns, gpus: int, assumptions: Assumptions) -> str:
    """What failures (and preemptions on spot) add to a job large or long enough for them to matter."""
    added = _scalar(columns.interruption_slowdown) - 1.0
    if not added >= _NOTED_SLOWDOWN:
        return ""
    failures_per_h, preemptions_per_h = _scalar(columns.failures_per_h), _scalar(columns.preemptions_per_h)
    per_h = failures_per_h + preemptions_per_h
    causes = f"{24.0 * failures_per_h:.2g} device failures a day across {gpus:,} devices, Llama 3's rate"
    if preemptions_per_h > 0:
        causes += f", and {24.0 * preemptions_per_h:.2g} spot preemptions a day"
    return (
        f"interruptions add {added:.1%} to the time: one every {format_duration(3600.0 / per_h)} ({causes}), "
        f"each costing a restart ({format_duration(assumptions.restart_overhead_s)}) and the work since the "
        f"last checkpoint (every {format_duration(_scalar(columns.checkpoint_interval_s))})"
    )


def _power_notes(accelerator: Accelerator, assumptions: Assumptions) -> list[str]:
    """What the energy counts, so that it can be set beside a server's power rating or a meter."""
    if accelerator.tdp_w <= 0:
        return [
            f"energy and CO2 not available: {accelerator.name} has no published TDP in the catalog. To fix: add "
            f"tdp_w for {accelerator.slug} in a catalog file (--catalog PATH)"
        ]
    full_load_w = server_w_per_device(accelerator, assumptions.server_host_power_fraction_of_tdp)
    draw = f"at {assumptions.gpu_power_fraction_of_tdp:.0%} of full load on average, times the PUE"
    if not needs_host(accelerator):
        return [f"energy counts {accelerator.name}'s own {accelerator.tdp_w:.0f} W, {draw}"]
    return [
        f"energy counts the whole server: each {accelerator.slug}'s {accelerator.tdp_w:.0f} W TDP plus "
        f"{assumptions.server_host_power_fraction_of_tdp:.0%} for its share of the host (CPUs, memory, network, "
        f"fans), {full_load_w:.0f} W per device at full load, {draw}"
    ]


def adapters_for(model: ModelSpec, accelerator: Accelerator, job: TrainJob) -> Adapters | None:
    """The job's LoRA/QLoRA adapters on ``model`` (None for full training), refused where they cannot run:
    under Megatron's layout (PEFT runs on Hugging Face and PyTorch modules), in fp8, or QLoRA on an
    accelerator without bitsandbytes' 4-bit kernels."""
    finetune = job.finetune
    if not finetune.adapted:
        return None
    if job.framework == "megatron":
        raise InputError(
            f"{METHOD_NAMES[finetune.method]} is estimated as PEFT runs it, on Hugging Face or PyTorch modules, "
            "not on Megatron's",
            hint="use --framework transformers (the default for --method lora and qlora) or --framework pytorch",
        )
    if job.precision == "fp8":
        raise InputError(
            f"{METHOD_NAMES[finetune.method]} computes in 16 or 32 bits (PEFT's layers, bitsandbytes' compute "
            "dtype); fp8 training needs Transformer Engine's layers, which PEFT does not wrap",
            hint="use --precision bf16 (or fp16 where the GPU has no bf16)",
        )
    if finetune.quantized:
        reason = qlora_unsupported_reason(accelerator, finetune.four_bit)
        if reason is not None:
            raise InputError(reason, hint="use --method lora (a 16-bit base), or an NVIDIA or AMD GPU (--gpu)")
    return Adapters.of(model, finetune, job.optimizer)


def finetune_note(model: ModelSpec, adapters: Adapters) -> str:
    """One line saying what trains and how the frozen base is stored, so the memory reads right."""
    f = adapters.finetune
    share = adapters.trainable_params / max(model.params, 1)
    double = " with double quantization" if f.double_quant else ""
    base = f"{f.four_bit.upper()} 4-bit{double}" if f.quantized else "16 bits"
    layers = plural(len(adapters.targets), "layer")
    return (
        f"{METHOD_NAMES[f.method]} rank {f.rank} on {', '.join(f.targets)} ({layers} per block): "
        f"{format_count(adapters.trainable_params)} trainable parameters "
        f"({share:.2%} of {format_count(model.params)}); "
        f"frozen base in {base}, adapters in {'fp32' if f.adapter_bytes == 4 else 'bf16'}"
    )


def finetune_section(adapters: Adapters | None) -> FullTraining | AdapterTraining:
    """The ``job.finetune`` object of ``--json``: the method, and for adapters what they are."""
    if adapters is None:
        return FullTraining()
    f = adapters.finetune
    return AdapterTraining(
        method=f.method,
        rank=f.rank,
        alpha=f.alpha,
        targets=f.targets,
        train_embeddings=f.train_embeddings,
        train_head=f.train_head,
        adapter_bytes=f.adapter_bytes,
        four_bit=f.four_bit if f.quantized else None,
        double_quant=f.double_quant if f.quantized else None,
        trainable_params=adapters.trainable_params,
    )


class _Columns(Protocol):
    """What both estimators' columns have: the memory, and the cost and footprint of the job or batch."""

    @property
    def memory(self) -> MemoryBreakdown: ...
    @property
    def cost_usd(self) -> FloatArray: ...
    @property
    def energy_kwh(self) -> FloatArray: ...
    @property
    def co2_kg(self) -> FloatArray: ...


# The sections both estimates write, in this order, between what identifies the job and what is theirs alone.
_SECTIONS: Layout = (
    "job_section",
    "memory_section",
    "accuracy_section",
    "compute_section",
    "time_section",
    "cost_section",
    "energy_section",
    "co2_section",
)


class _Figures(ABC, Jsonable):
    """What both estimates show, typed: time, price and footprint are None where they are not known (the job
    does not fit, a link of unknown speed, no offering, no published TDP), never 0. The printers read these;
    ``to_dict`` writes the same figures for ``--json``, as the sections of ``estimate.sections`` that the
    ``json_property`` figures build and ``json_layout`` orders."""

    model: ModelSpec
    accelerator: Accelerator
    quote: Quote
    columns: _Columns
    notes: tuple[str, ...]
    scope: Scope
    kind: ClassVar[Kind]

    @property
    @abstractmethod
    def unavailable(self) -> str:
        """Why time, cost and energy are unknown; "" when they are known (each estimate has its own reasons)."""

    @property
    def _memory(self) -> MemoryBreakdown:
        return self.columns.memory

    @property
    def memory_per_device(self) -> dict[str, float]:
        return memory_dict(self.columns.memory)

    @property
    def fits(self) -> bool:
        return _fits(self.columns.memory, self.accelerator)

    @property
    def usd(self) -> float | None:
        return self._cost_figure(self.columns.cost_usd)

    @property
    def kwh(self) -> float | None:
        return self._footprint_figure(self.columns.energy_kwh)

    @property
    def co2_kg(self) -> float | None:
        return self._footprint_figure(self.columns.co2_kg)

    def _figure(self, values: Any) -> float | None:
        return None if self.unavailable else _scalar(values)

    @property
    def device_memory(self) -> DeviceMemory:
        return DeviceMemory(
            memory_dict(self._memory), self.accelerator.memory_bytes, _fits(self._memory, self.accelerator)
        )

    @property
    def usd_per_hour(self) -> float | None:
        return self.quote.hourly_usd if self.quote.priced else None

    @property
    def energy_counts(self) -> Literal["whole server", "device"]:
        return "whole server" if needs_host(self.accelerator) else "device"

    @json_property(name="model")
    def model_name(self) -> str:
        return self.model.name

    @json_property()
    def params(self) -> int:
        return self.model.params

    @json_property(name="accelerator")
    def accelerator_slug(self) -> str:
        return self.accelerator.slug

    @json_property(name="memory")
    def memory_section(self) -> MemorySection:
        values = memory_dict(self._memory)
        return MemorySection(
            values,
            values["allocated_peak"],
            values["reserved_peak"],
            self.accelerator.memory_bytes,
            _fits(self._memory, self.accelerator),
        )

    @json_property(name="accuracy")
    def accuracy_section(self) -> Accuracy:
        return accuracy(self.scope, self.kind, self.model)

    @json_property(name="energy")
    def energy_section(self) -> Energy:
        return Energy(self.kwh, self.quote.pue, self.energy_counts)

    @json_property(name="co2")
    def co2_section(self) -> Co2:
        return Co2(self.co2_kg, self.quote.carbon.g_co2_per_kwh)

    @property
    def _unpriced(self) -> str | None:
        """Why every money figure is None (no offering rents the accelerator); None when priced."""
        return None if self.quote.priced else self.quote.explanation

    def _untimed(self) -> Untimed | None:
        return Untimed(None, self.unavailable) if self.unavailable else None

    def _footprint_figure(self, values: Any) -> float | None:
        """Energy or CO2: None without a time or without a published TDP."""
        return self._figure(values) if self.accelerator.tdp_w > 0 else None

    def _cost_figure(self, values: Any) -> float | None:
        return self._figure(values) if self.quote.priced else None


@dataclass(frozen=True)
class TrainEstimate(_Figures):
    json_document: ClassVar[Document] = Document(
        "estimate-train",
        "estimate train --json",
        "One training configuration, every number broken down (estimate.single.TrainEstimate).",
    )
    json_layout: ClassVar[Layout] = (
        "model_name",
        "params",
        "accelerator_slug",
        "gpus",
        "layout_section",
        *_SECTIONS,
        "storage_section",
        "all_notes",
    )
    model: ModelSpec
    accelerator: Accelerator
    gpus: int
    parallelism: Parallelism
    job: TrainJob
    quote: Quote
    utilization: float | None  # the user's --mfu; None: the calibrated compute model
    columns: TrainColumns
    notes: tuple[str, ...] = field(default_factory=tuple)
    untimed: str = ""  # why time, cost and energy are unknown (a link of unknown speed); "" when known
    scope: Scope = "single-gpu"  # the kind of run, for the error band it prints
    adapters: Adapters | None = None  # a LoRA/QLoRA job's adapters; None for full training
    kind: ClassVar[Literal["train"]] = "train"  # tells it from an ``InferEstimate`` in the printers

    @property
    def unavailable(self) -> str:
        fix = _TRAIN_FIX if self.adapters is None else _ADAPTER_FIX[self.adapters.finetune.method]
        return _does_not_fit(self.columns.memory, self.accelerator, fix) or self.untimed

    @json_property(name="notes")
    def all_notes(self) -> tuple[str, ...]:
        """The notes, led by why nothing is timed where the job does not fit."""
        return _with_fit_note("" if self.fits else self.unavailable, self.notes)

    @property
    def seconds(self) -> float | None:
        return self._figure(self.columns.time_s)

    @property
    def flops(self) -> float:
        return _scalar(self.columns.model_flops)

    @property
    def mfu(self) -> float:
        return _scalar(self.columns.mfu)

    @property
    def steps(self) -> float:
        return _scalar(self.columns.steps)

    @property
    def step_seconds(self) -> float:
        return _scalar(self.columns.step_s)

    @property
    def tokens_per_second(self) -> float:
        return _scalar(self.columns.tokens_per_s)

    @property
    def read_bytes_per_second(self) -> float:
        return _scalar(self.columns.read_bytes_per_s)

    @property
    def checkpoint_bytes(self) -> float:
        return _scalar(self.columns.checkpoint_bytes)

    @property
    def checkpoint_interval_seconds(self) -> float:
        return _scalar(self.columns.checkpoint_interval_s)

    @property
    def step_breakdown_s(self) -> dict[str, float]:
        """Seconds of one step by cause; empty where the step is not timed."""
        return {} if self.unavailable else self.columns.step.breakdown_s()

    @property
    def advice(self) -> str:
        """The part of a step to attack first."""
        columns = self.columns
        return bottleneck(
            columns.step.breakdown_s(), _scalar(columns.compute_fraction), self.parallelism.zero
        ).sentence()

    @json_property(name="layout")
    def layout_section(self) -> LayoutSection:
        p = self.parallelism
        return LayoutSection(
            p.dp, p.tp, p.pp, p.zero, p.sequence_parallel, p.cp, p.ep, p.virtual_stages, p.zero_group, p.tp_overlap
        )

    @json_property(name="job")
    def job_section(self) -> TrainJobSection:
        j = self.job
        return TrainJobSection(
            tokens=j.tokens,
            seq_len=j.seq_len,
            micro_batch=j.micro_batch,
            global_batch=j.global_batch,
            precision=j.precision,
            optimizer=j.optimizer,
            recompute=j.recompute,
            flash_attention=j.flash_attention,
            attention=j.attention,
            framework=j.framework,
            execution=j.execution,
            loss=j.loss,
            grad_reduce=j.grad_reduce,
            finetune=finetune_section(self.adapters),
        )

    @json_property(name="compute")
    def compute_section(self) -> TrainCompute:
        c = self.columns
        mfu = None if self.unavailable else _scalar(c.mfu)
        return TrainCompute(
            _scalar(c.model_flops), _scalar(c.hardware_flops), mfu, _scalar(c.compute_fraction), self.utilization
        )

    @json_property(name="time")
    def time_section(self) -> TrainTime | Untimed:
        c = self.columns
        return self._untimed() or TrainTime(
            seconds=_scalar(c.time_s),
            step_seconds=_scalar(c.step_s),
            steps=_scalar(c.steps),
            compute_seconds_per_step=_scalar(c.compute_s),
            comm_exposed_seconds_per_step=_scalar(c.comm_exposed_s),
            pipeline_bubble_fraction=_scalar(c.bubble_fraction),
            breakdown_seconds_per_step=c.step.breakdown_s(),
            bottleneck=_bottleneck(c, self.parallelism.zero),
            interruption_slowdown=_scalar(c.interruption_slowdown),
            tokens_per_second=_scalar(c.tokens_per_s),
        )

    @json_property(name="cost")
    def cost_section(self) -> Cost:
        q = self.quote
        return Cost(self.usd, q.pricing, self.usd_per_hour, q.explanation, q.shared, self._unpriced)

    @json_property(name="storage")
    def storage_section(self) -> Storage:
        c = self.columns
        timed = not self.unavailable
        return Storage(
            _scalar(c.read_bytes_per_s) if timed else None,
            _scalar(c.checkpoint_bytes),
            _scalar(c.checkpoint_interval_s) if timed else None,
        )


def estimate_train(
    model: ModelSpec,
    accelerator: Accelerator,
    gpus: int,
    job: TrainJob,
    parallelism: Parallelism,
    catalog: Catalog,
    assumptions: Assumptions,
    pricing: Pricing = "on-demand",
    cloud: str | None = None,
    region: str | None = None,
    instance_type: str | None = None,
    utilization: float | None = None,
    calibration: Calibration | None = None,
) -> TrainEstimate:
    """Memory, FLOPs, time, cost and footprint of one training configuration.

    ``calibration`` (from ``computewise bench --save``, for this accelerator) replaces the data
    sheet's peak and the assumed efficiency with measured ones (``calibrated_compute``); a
    ``utilization`` the user gives still wins over it.

    Rented on the cheapest offering whose links can be timed (``estimate.quote``; the notes name the
    cheaper ones skipped). Where no link speed is known, an ``instance_type`` asked for included,
    the estimate still gives memory and FLOPs, which need no network, and ``untimed`` says why time,
    cost and energy are missing and how to supply them: a memory answer is never held back.
    """
    check_layout(model, gpus, parallelism, job.global_batch, job.micro_batch, job.seq_len)
    adapters = adapters_for(model, accelerator, job)
    peak = peak_for(accelerator, job.precision)
    bandwidth = accelerator.memory_bandwidth_bytes_per_s
    calibrated = None
    calibrated_note = ""
    share = None if utilization is None else col(utilization)
    if calibration is not None and utilization is None:
        size = matmul_sizes(model, col(job.micro_batch), col(job.seq_len), col(parallelism.cp), col(parallelism.tp))
        calibrated = calibrated_compute(calibration, job.precision, size, whole_steps=accelerator.kind == "cpu")
        if calibrated is not None:
            peak = calibrated.peak_flops
            bandwidth = calibrated.memory_bandwidth_bytes_per_s or bandwidth
            share = calibrated.utilization
            calibrated_note = calibration_note(calibration, job.precision, float(size.reshape(-1)[0]), calibrated)
    hw = quote(
        catalog, Ask(accelerator, gpus, estimate=True), PriceRequest(None, instance_type, cloud, region, pricing)
    )
    problem = _link_problem(accelerator, gpus, hw)
    layout = TrainLayout.for_job(parallelism, job)
    profile = catalog.kernel_profile(accelerator.slug)
    profiled = profile_shares(profile, job.precision, assumptions)
    hardware = TrainHardware(
        peak_flops=col(peak),
        memory_bandwidth_bytes_per_s=col(bandwidth),
        fabric=fabric_for(accelerator, hw.offering, catalog, assumptions, devices_per_node=hw.devices_per_node),
        tdp_w=col(server_w_per_device(accelerator, assumptions.server_host_power_fraction_of_tdp)),
        rental_usd_per_h=col(hw.hourly_usd),
        spot=col(pricing == "spot"),
        g_co2_per_kwh=col(hw.carbon.g_co2_per_kwh),
        pue=col(hw.pue),
        utilization=share,
        matmul_fraction=col(profiled[0]) if calibrated is None else calibrated.matmul_fraction,
        stream_fraction=col(1.0 if calibrated is not None and calibrated.memory_bandwidth_bytes_per_s else profiled[1]),
        attention_peak_ratio=col(attention_peak_ratio(accelerator.peak_flops, job.precision)),
        sustained_fraction=col(sustained_share(profile, assumptions)),
    )
    with np.errstate(divide="ignore", invalid="ignore"):  # a link of unknown speed: its time is dropped below
        columns = evaluate_train(model, job.tokens, layout, hardware, assumptions, adapters=adapters)
    notes = [hw.explanation, *hw.notes, calibrated_note or _compute_note(columns, utilization, job.precision)]
    if adapters is not None:
        notes.append(finetune_note(model, adapters))
    if job.optimizer in PAGED_OPTIMIZERS:
        trained = model.params if adapters is None else adapters.trainable_params
        paged = trained * optimizer_state_bytes(job.optimizer) / gpus
        notes.append(
            f"{job.optimizer}: {format_bytes(paged)} of optimizer states per device in CUDA unified memory, paged "
            "to host RAM when the GPU runs short; not counted in the device's memory above"
        )
    if calibration is not None and calibrated is None and utilization is None:
        notes.append(f"calibration of {calibration.device_slug} not used: it has no {job.precision} matmul figure")
    untimed = ""
    if problem is not None:
        untimed = f"{problem[0]}. To fix: {problem[1]}"
        notes.append(f"memory and FLOPs only, no time, cost or energy: {untimed}")
    timed = not untimed and _fits(columns.memory, accelerator)
    if timed and (interruptions := _interruption_note(columns, gpus, assumptions)):
        notes.append(interruptions)
    step_tokens = job.global_batch * job.seq_len
    if job.tokens < step_tokens:  # a job is whole optimizer steps: a fraction of one is timed as one
        unit, step = ("images", "the global batch") if model.architecture == "cnn" else ("tokens", "batch x sequence")
        notes.append(
            f"{job.tokens:.3g} {unit} are less than one optimizer step ({step_tokens:,}: {step}), so one whole "
            "step is timed; a smaller --global-batch times less"
        )
    scope = scope_for(gpus, hw.devices_per_node, model.experts, accelerator.kind)
    notes.append(track_record_note(scope, "train", model))
    notes.extend(_power_notes(accelerator, assumptions))
    notes.extend(model.notes)
    return TrainEstimate(
        model=model,
        accelerator=accelerator,
        gpus=gpus,
        parallelism=parallelism,
        job=job,
        quote=hw,
        utilization=utilization,
        columns=columns,
        notes=tuple(notes),
        untimed=untimed,
        scope=scope,
        adapters=adapters,
    )


@dataclass(frozen=True)
class InferEstimate(_Figures):
    json_document: ClassVar[Document] = Document(
        "estimate-infer",
        "estimate infer --json",
        "One serving replica: memory, latency, throughput and $ per 1000 requests (estimate.single.InferEstimate).",
    )
    # A timed model that generates tokens has its first-token and per-token figures.
    json_constraints: ClassVar[Mapping[str, object]] = {
        "if": {
            "properties": {"job": {"required": ["output_len"]}, "time": {"properties": {"seconds": {"type": "number"}}}}
        },
        "then": {
            "properties": {
                "time": {
                    "required": ["output_tokens_per_second", "seconds_per_output_token", "time_to_first_token_seconds"]
                }
            }
        },
    }
    json_layout: ClassVar[Layout] = (
        "model_name",
        "params",
        "accelerator_slug",
        "tp",
        *_SECTIONS,
        "all_notes",
    )
    model: ModelSpec
    accelerator: Accelerator
    tp: int = field(metadata=json_field(name="gpus"))
    job: InferJob
    quote: Quote
    columns: InferColumns
    notes: tuple[str, ...] = field(default_factory=tuple)
    scope: Scope = "single-gpu"  # the kind of run, for the error band it prints
    kind: ClassVar[Literal["infer"]] = "infer"  # tells it from a ``TrainEstimate`` in the printers

    @property
    def unavailable(self) -> str:
        return _does_not_fit(self.columns.memory, self.accelerator, _INFER_FIX)

    @json_property(name="notes")
    def all_notes(self) -> tuple[str, ...]:
        """The notes, led by why nothing is timed where the job does not fit."""
        return _with_fit_note(self.unavailable, self.notes)

    @property
    def input(self) -> str | None:
        """What one request is to a model that generates nothing (``input_kind``); None for one that generates."""
        return input_kind(self.model)

    @property
    def seconds(self) -> float | None:
        return self._figure(self.columns.latency_s)

    @property
    def flops(self) -> float:
        return _scalar(self.columns.flops)

    @property
    def requests_per_second(self) -> float:
        return _scalar(self.columns.requests_per_s)

    @property
    def time_to_first_token_seconds(self) -> float:
        return _scalar(self.columns.prefill_s)

    @property
    def seconds_per_output_token(self) -> float:
        return _scalar(self.columns.decode_step_s)

    @property
    def output_tokens_per_second(self) -> float:
        return _scalar(self.columns.output_tokens_per_s)

    @property
    def usd_per_1000_requests(self) -> float | None:
        return self._cost_figure(self.columns.usd_per_1000_requests)

    @json_property(name="job")
    def job_section(self) -> InferJobSection:
        """A prompt and an output for a model that generates; what one input is for one that does not."""
        j = self.job
        kind = input_kind(self.model)
        shape = InferJobSection(j.batch, j.precision, j.framework, j.execution)
        if kind is None:
            return replace(shape, context_len=j.context_len, output_len=j.output_len)
        if kind == "images":
            return replace(shape, input=kind, image_size=self.model.image_size)
        return replace(shape, input=kind, seq_len=j.context_len if kind == "sequences" else None)

    @json_property(name="compute")
    def compute_section(self) -> InferCompute:
        return InferCompute(_scalar(self.columns.flops))

    @json_property(name="time")
    def time_section(self) -> InferTime | Untimed:
        """Latency of one batch and requests per second; first-token and per-token figures where tokens are made."""
        c = self.columns
        untimed = self._untimed()
        if untimed is not None:
            return untimed
        time = InferTime(_scalar(c.latency_s), _scalar(c.requests_per_s))
        if input_kind(self.model) is not None:
            return time
        return replace(
            time,
            time_to_first_token_seconds=_scalar(c.prefill_s),
            seconds_per_output_token=_scalar(c.decode_step_s),
            output_tokens_per_second=_scalar(c.output_tokens_per_s),
        )

    @json_property(name="cost")
    def cost_section(self) -> InferCost:
        q = self.quote
        return InferCost(
            self.usd,
            q.pricing,
            self.usd_per_hour,
            q.explanation,
            q.shared,
            self._unpriced,
            usd_per_1000_requests=self.usd_per_1000_requests,
        )


def estimate_infer(
    model: ModelSpec,
    accelerator: Accelerator,
    job: InferJob,
    catalog: Catalog,
    assumptions: Assumptions,
    tp: int = 1,
    pricing: Pricing = "on-demand",
    cloud: str | None = None,
    region: str | None = None,
    instance_type: str | None = None,
) -> InferEstimate:
    """Memory, latency, throughput and price of one replica serving batches of ``job.batch`` requests.

    A model that generates no tokens (``input_kind``) answers a batch in one forward pass over inputs
    of ``job.context_len`` tokens (1 for a CNN), so its ``job.output_len`` must be 0.
    """
    kind = input_kind(model)
    if kind is not None and job.output_len:
        raise InputError(
            f"{model.name} is a {model.architecture} model: it generates no tokens, so output_len must be 0, "
            f"not {job.output_len}",
            f"build the InferJob with output_len=0; batch counts {kind}",
        )
    if model.heads and model.heads % tp:
        raise InputError(
            f"{model.heads} attention heads are not divisible by --gpus {tp} (tensor parallel)",
            heads_fix(model, "--gpus"),
        )
    peak = peak_for(accelerator, job.precision)
    hw = quote(catalog, Ask(accelerator, tp, estimate=True), PriceRequest(None, instance_type, cloud, region, pricing))
    _require_links(accelerator, tp, hw)
    profile = catalog.kernel_profile(accelerator.slug)
    profiled = profile_shares(profile, job.precision, assumptions)
    rows = InferRows(
        tp=col(tp),
        batch=col(job.batch),
        context_len=col(job.context_len),
        output_len=col(job.output_len),
        weight_bytes=col(inference_weight_bytes(job.precision)),
        kv_bytes=col(job.kv_cache_bytes_per_value),
        act_bytes=col(inference_act_bytes(job.precision)),
        tensor_cores=col(tensor_core_flag(job.precision)),
        peak_flops=col(peak),
        memory_bandwidth_bytes_per_s=col(accelerator.memory_bandwidth_bytes_per_s),
        # One node's link, or the network where the TP group spans nodes (or TPU slices).
        tp_bus_bytes_per_s=bus_bytes_per_s(
            "all-reduce",
            col(tp),
            col(hw.devices_per_node),
            fabric_for(accelerator, hw.offering, catalog, assumptions, devices_per_node=hw.devices_per_node),
        ),
        tdp_w=col(server_w_per_device(accelerator, assumptions.server_host_power_fraction_of_tdp)),
        rental_usd_per_h=col(hw.hourly_usd),
        g_co2_per_kwh=col(hw.carbon.g_co2_per_kwh),
        pue=col(hw.pue),
        framework=col(FRAMEWORKS.index(job.framework)),
        execution=col(EXECUTIONS.index(job.execution)),
        all_logits=col(job.framework == "transformers"),
        matmul_fraction=col(profiled[0]),
        stream_fraction=col(profiled[1]),
        attention_peak_ratio=col(attention_peak_ratio(accelerator.peak_flops, job.precision)),
        sustained_fraction=col(sustained_share(profile, assumptions)),
        quantiser=col(serving_quantiser(job.precision)),
    )
    scope = scope_for(tp, hw.devices_per_node, model.experts, accelerator.kind)
    notes = (
        hw.explanation,
        *hw.notes,
        track_record_note(scope, "infer", model),
        *_power_notes(accelerator, assumptions),
        *model.notes,
    )
    return InferEstimate(
        model=model,
        accelerator=accelerator,
        tp=tp,
        job=job,
        quote=hw,
        columns=evaluate_infer(model, rows, assumptions),
        notes=notes,
        scope=scope,
    )
