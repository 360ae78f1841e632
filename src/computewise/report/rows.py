"""What the reports show, as plain strings, computed once so the terminal and the HTML page never disagree.

Everything here reads the typed results (``TrainEstimate`` / ``InferEstimate``, ``Plan`` / ``InferPlan``), whose
``kind`` tells training from inference; they are imported for the type checker only, so printing starts fast.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from computewise.estimate.figures import MEMORY_PART_KEYS, DeviceMemory
from computewise.specs.finetune import METHOD_NAMES
from computewise.units import format_bytes, format_count, format_duration, format_flops, format_usd, plural

if TYPE_CHECKING:
    from computewise.estimate.data_movement import DataMovement
    from computewise.estimate.single import InferEstimate, TrainEstimate
    from computewise.plan.infer import InferOption
    from computewise.plan.onprem import BreakEven
    from computewise.plan.result import Option, Rejection, ScalingPoint

__all__ = [
    "BREAK_EVEN_NOTE",
    "MEMORY_PARTS",
    "Fit",
    "Grid",
    "RejectionGroup",
    "break_even_grid",
    "estimate_setup",
    "estimate_summary",
    "fit",
    "format_amount",
    "format_kg",
    "format_kwh",
    "format_share",
    "group_rejections",
    "memory_grid",
    "memory_parts",
    "memory_peaks",
    "option_grid",
    "option_point",
    "plural",
    "point_labels",
    "recommendation",
    "rejection_line",
    "scaling_grid",
    "step_rows",
]

# Parts of a device's memory (``DeviceMemory.per_device``) and their labels, in the order of MEMORY_PART_KEYS.
_LABELS = ("weights", "gradients", "optimizer states", "activations", "KV cache", "overhead")
MEMORY_PARTS = tuple(zip(MEMORY_PART_KEYS, _LABELS, strict=True))


@dataclass(frozen=True)
class Grid:
    """A table as strings; ``numeric`` columns are right-aligned so digits line up.

    On a narrow terminal (:mod:`computewise.report.table`) numeric and ``whole`` columns (ids,
    statuses, dates) are never cut, other text folds, and ``drop_order`` lists the columns that may
    be hidden, the least needed first.
    """

    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    numeric: frozenset[int]
    whole: frozenset[int] = frozenset()
    drop_order: tuple[int, ...] = ()


@dataclass(frozen=True)
class Fit:
    """Whether the per-device total fits the accelerator; ``fits`` is None when the dict has no capacity."""

    fits: bool | None
    text: str


@dataclass(frozen=True)
class RejectionGroup:
    stage: str
    candidates: int  # configurations removed at this stage, summed over its rejections
    rejections: tuple[Rejection, ...]

    def counts(self) -> str:
        """``12 candidate configurations (3 rejections)``. A stage that held shapes back before the search
        (network: a link missing from the catalog) removed no configuration, so only its rejections count."""
        rejections = plural(len(self.rejections), "rejection")
        if self.candidates == 0:
            return rejections
        return f"{plural(self.candidates, 'candidate configuration')} ({rejections})"


def format_amount(value: float) -> str:
    """Three significant digits from 0.00123 to 999; above that, grouped integers: 1,320 reads, 1.32e+03 does not."""
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def _quantity(value: float, unit: str) -> str:
    return f"{format_amount(value)} {unit}"


def format_kwh(kwh: float, like: float | None = None) -> str:
    """kWh down to 0.0001 kWh; a monitored few-second job reads better in Wh or J than as 1.6e-06 kWh.

    ``like``: the unit is the one this value would get, so a column (its total as ``like``) reads in
    one unit rather than J, Wh and kWh row by row."""
    scale = like if like is not None else kwh
    if scale == 0 or abs(scale) >= 1e-4:
        return _quantity(kwh, "kWh")
    if abs(scale) >= 1e-6:
        return _quantity(kwh * 1e3, "Wh")
    return _quantity(kwh * 3.6e6, "J")


def format_kg(kg: float, like: float | None = None) -> str:
    """kg down to 1 g, then grams: a short run emits milligrams, not 7.67e-07 kg. ``like`` as in ``format_kwh``."""
    scale = like if like is not None else kg
    if scale == 0 or abs(scale) >= 1e-3:
        return _quantity(kg, "kg")
    return _quantity(kg * 1e3, "g")


def format_share(share: float) -> str:
    return f"{share:.1%}"


def memory_parts(memory: DeviceMemory) -> list[tuple[str, float]]:
    """(label, bytes per device) of the non-zero parts: a zero row only says what the job does not do."""
    per_device = memory.per_device
    return [(label, per_device[key]) for key, label in MEMORY_PARTS if per_device.get(key, 0.0) > 0]


def memory_grid(memory: DeviceMemory) -> Grid:
    """Part, size and share of the per-device total, then the peaks (or the total) without a share."""
    parts = memory_parts(memory)
    total = sum(value for _, value in parts)
    rows = [(label, format_bytes(value), format_share(value / total) if total else "") for label, value in parts]
    rows += [(label, format_bytes(value), "") for label, value in memory_peaks(memory) or [("total", total)]]
    return Grid(("part", "size", "share"), tuple(rows), frozenset({1, 2}))


def memory_peaks(memory: DeviceMemory) -> list[tuple[str, float]]:
    """The step's peak, as PyTorch reports it (allocated, reserved), then what must fit on the card.

    The parts above it are each at their largest and need not coexist (gradients and activations do
    not, without accumulation), so the peak can be less than their sum. Empty for figures without them.
    """
    per_device = memory.per_device
    if "allocated_peak" not in per_device:
        return []
    return [
        ("peak allocated", per_device["allocated_peak"]),
        ("peak reserved", per_device["reserved_peak"]),
        ("total", memory.total),
    ]


def fit(memory: DeviceMemory) -> Fit:
    """'fits: 31.2 GiB of 80.0 GiB' or 'does not fit: ...'; the estimate's own verdict wins over recomputing it."""
    total = memory.total
    capacity = memory.capacity_bytes
    if capacity is None:
        return Fit(None, f"{format_bytes(total)} per device")
    fits = memory.fits if memory.fits is not None else total <= capacity
    if fits:
        return Fit(True, f"fits: {format_bytes(total)} of {format_bytes(capacity)}")
    return Fit(False, f"does not fit: {format_bytes(total)} > {format_bytes(capacity)} per device")


# Degrees shown only when they are used (> 1): context, expert, interleaved pipeline chunks.
_EXTRA_DEGREES = (("cp", "cp"), ("ep", "ep"), ("virtual_stages", "virtual stages"))
_EXTRA_SHORT = (("cp", "cp"), ("ep", "ep"), ("virtual_stages", "v"))


class _Degrees(Protocol):
    """A parallel layout's degrees: a ``specs.Parallelism`` or a plan's ``Option``."""

    @property
    def dp(self) -> int: ...
    @property
    def tp(self) -> int: ...
    @property
    def pp(self) -> int: ...
    @property
    def cp(self) -> int: ...
    @property
    def ep(self) -> int: ...
    @property
    def virtual_stages(self) -> int: ...
    @property
    def zero(self) -> int: ...


def _extra(layout: _Degrees, names: Sequence[tuple[str, str]]) -> list[tuple[str, int]]:
    degrees = {"cp": layout.cp, "ep": layout.ep, "virtual_stages": layout.virtual_stages}
    return [(name, degrees[key]) for key, name in names if degrees[key] > 1]


def _layout(layout: _Degrees, sequence_parallel: bool = False, zero_group: int = 0, tp_overlap: bool = False) -> str:
    text = f"dp {layout.dp} · tp {layout.tp} · pp {layout.pp}"
    for name, degree in _extra(layout, _EXTRA_DEGREES):
        text += f" · {name} {degree}"
    if layout.zero:
        text += f" · ZeRO-{layout.zero}" + (f" in groups of {zero_group}" if zero_group else "")
    if sequence_parallel:
        text += " · sequence parallel"
    if tp_overlap and layout.tp > 1:
        text += " · TP overlapped"
    return text


def _short_layout(o: Option) -> str:
    """'dp8 tp1 pp1 z1 bf16 mb2' ('tp8+ov': its collectives overlapped): a table column has no room for the
    long form."""
    parts = [f"dp{o.dp}", f"tp{o.tp}" + ("+ov" if o.tp_overlap else ""), f"pp{o.pp}"]
    if o.method != "full":
        parts.insert(0, o.method)
    parts.extend(f"{short}{degree}" for short, degree in _extra(o, _EXTRA_SHORT))
    if o.zero:
        parts.append(f"z{o.zero}")
    parts.append(o.precision)
    parts.append(f"mb{o.micro_batch}")
    return " ".join(parts)


# How a job's attention kernel reads in its settings line; unfused attention is not named.
_ATTENTION_WORDS = {"flash": "flash attention", "triton": "Triton flash attention", "flash-v1": "FlashAttention-1"}


def _job(
    *,
    method: str = "full",
    rank: int | None = None,
    precision: str | None = None,
    counts: Sequence[tuple[str, int]] = (),
    image_size: int | None = None,
    tokens: float | None = None,
    optimizer: str | None = None,
    recompute: str | None = None,
    attention: str | None = None,
    framework: str | None = None,
    loss: str = "standard",
    grad_reduce: str = "auto",
) -> str:
    """The job settings a result has, in one fixed order; train and infer jobs have different ones."""
    parts: list[str] = []
    if method != "full":
        parts.append(METHOD_NAMES.get(method, method) + (f" rank {rank}" if rank else ""))
    if precision is not None:
        parts.append(precision)
    parts.extend(f"{label} {count}" for label, count in counts)
    if image_size:
        parts.append(f"{image_size}×{image_size} images")
    if tokens is not None:
        parts.append(f"{format_count(tokens)} tokens")
    if optimizer is not None:
        parts.append(optimizer)
    if recompute is not None:
        parts.append(f"recompute {recompute}")
    if attention in _ATTENTION_WORDS:
        parts.append(_ATTENTION_WORDS[attention])
    if framework is not None:
        parts.append(f"{framework} layout")
    if loss != "standard":
        parts.append(f"{loss} loss")
    if grad_reduce != "auto":
        parts.append(f"{grad_reduce} gradient reduce")
    return ", ".join(parts)


def _option_job(o: Option | InferOption) -> str:
    if o.kind == "infer":
        return _job(precision=o.precision, counts=[("batch", o.batch)])
    counts = [("micro-batch", o.micro_batch)]
    return _job(method=o.method, precision=o.precision, counts=counts, recompute=o.recompute, framework=o.framework)


def _estimate_job(e: TrainEstimate | InferEstimate) -> str:
    if e.kind == "infer":
        job, kind = e.job, e.input
        counts = [("batch", job.batch)]
        if kind == "sequences":
            counts.append(("sequence", job.context_len))
        elif kind is None:
            counts.extend([("context", job.context_len), ("output", job.output_len)])
        image_size = e.model.image_size if kind == "images" else None
        return _job(precision=job.precision, counts=counts, image_size=image_size, framework=job.framework)
    t = e.job
    adapted = e.adapters is not None
    return _job(
        method=t.finetune.method if adapted else "full",
        rank=t.finetune.rank if adapted else None,
        precision=t.precision,
        counts=[("micro-batch", t.micro_batch), ("global batch", t.global_batch), ("sequence", t.seq_len)],
        tokens=float(t.tokens),
        optimizer=t.optimizer,
        recompute=t.recompute,
        attention=t.attention,
        framework=t.framework,
        loss=t.loss,
        grad_reduce=t.grad_reduce,
    )


def estimate_setup(e: TrainEstimate | InferEstimate) -> str:
    """One line naming what was estimated, so a saved report says what it is about."""
    gpus = e.gpus if e.kind == "train" else e.tp
    text = f"{e.model.name} ({format_count(float(e.model.params))} parameters) on {gpus} × {e.accelerator.slug}"
    if e.kind == "train":
        p = e.parallelism
        text += f", {_layout(p, p.sequence_parallel, p.zero_group, p.tp_overlap)}"
    job = _estimate_job(e)
    return f"{text}; {job}" if job else text


def _timing_rows(e: TrainEstimate | InferEstimate, seconds: float, unit: str) -> list[tuple[str, str, str]]:
    """Time and throughput: steps for training; first token and per token, or per batch, for inference."""
    time = format_duration(seconds)
    if e.kind == "train":
        steps = f"{format_count(e.steps)} steps of {format_duration(e.step_seconds)}"
        return [("time", time, steps), ("throughput", f"{format_count(e.tokens_per_second)} tokens/s", "")]
    requests = f"{format_amount(e.requests_per_second)} {unit}/s"
    if e.input is not None:  # an image or encoder model: one forward pass per batch
        return [("time", time, f"per batch of {e.job.batch} {unit}"), ("throughput", requests, "")]
    first = (
        f"first token {format_duration(e.time_to_first_token_seconds)}, "
        f"{format_duration(e.seconds_per_output_token)} per output token"
    )
    tokens = f"{format_count(e.output_tokens_per_second)} output tokens/s"
    return [("time", time, first), ("throughput", requests, tokens)]


def estimate_summary(e: TrainEstimate | InferEstimate) -> list[tuple[str, str, str]]:
    """(quantity, value, detail) rows: FLOPs, time, throughput, cost, energy, CO2 and, for training, storage."""
    flops = format_flops(e.flops)
    unit = (e.input if e.kind == "infer" else None) or "requests"  # what one request is: images for an image model
    seconds = e.seconds
    if seconds is None:  # it does not fit, or a link of unknown speed: memory and FLOPs only
        missing = "not shown: does not fit" if fit(e.device_memory).fits is False else "not available"
        return [("compute", flops, ""), ("time, cost, energy, CO2", missing, "see the notes")]
    mfu = f"MFU {e.mfu:.0%}" if e.kind == "train" else ""
    rows = [("compute", flops, mfu), *_timing_rows(e, seconds, unit)]
    if e.usd is None or e.usd_per_hour is None:  # no offering rents the accelerator: not available, never $0
        rows.append(("cost", "not available", "see the notes"))
    else:
        detail = f"{e.quote.pricing} at {format_usd(e.usd_per_hour)}/h"
        if e.kind == "infer" and e.usd_per_1000_requests is not None:
            detail += f", {format_usd(e.usd_per_1000_requests)} per 1000 {unit}"
        rows.append(("cost", format_usd(e.usd), detail))
    if e.kwh is None or e.co2_kg is None:  # no published TDP: not available, never 0
        return [*rows, ("energy, CO2", "not available", "see the notes"), *_storage_rows(e)]
    rows.append(("energy", format_kwh(e.kwh), f"{e.energy_counts}, PUE {e.quote.pue:.2f}"))
    rows.append(("CO2", format_kg(e.co2_kg), f"{e.quote.carbon.g_co2_per_kwh:.0f} g/kWh"))
    return [*rows, *_storage_rows(e)]


def _storage_rows(e: TrainEstimate | InferEstimate) -> list[tuple[str, str, str]]:
    """A training estimate's read rate and checkpoints; none for inference."""
    if e.kind == "infer":
        return []
    return [
        (
            "storage",
            f"{format_bytes(e.read_bytes_per_second)}/s read",
            f"checkpoint {format_bytes(e.checkpoint_bytes)} every {format_duration(e.checkpoint_interval_seconds)}",
        )
    ]


def _hardware(o: Option | InferOption) -> str:
    text = f"{o.cloud} {o.instance_type} {o.region}"
    instances = o.instances if o.kind == "train" else 1
    return f"{instances} × {text}" if instances > 1 else text


def data_movement_text(data: DataMovement) -> str:
    """The dataset's trip to the GPUs (egress, copy time, both already in the time and cost) and the read rate."""
    size = f"{format_count(data.dataset_bytes)}B"  # decimal, as the user gave it and clouds bill it
    read = f"storage beside the GPUs must read {format_count(data.read_bytes_per_s)}B/s"
    if data.scope == "same-region":
        return f"{size} already in {data.origin}: no egress; {read}"
    return (
        f"{size} copied from {data.origin} ({data.scope}, {format_usd(data.usd_per_gb)}/GB): "
        f"{format_usd(data.egress_usd)} egress and {format_duration(data.transfer_s)} "
        f"before training, in the time and cost above; {read}"
    )


def _energy(o: Option) -> str:
    """Energy and CO2 of a training option, or why they are unknown: an unknown is never printed as 0."""
    if o.energy_kwh is None or o.co2_kg is None:
        return "not available: the accelerator publishes no power figure (TDP)"
    return f"{format_kwh(o.energy_kwh)}, {format_kg(o.co2_kg)} CO2"


def recommendation(o: Option | InferOption) -> list[tuple[str, str]]:
    """(label, value) lines that say what to rent, how to lay it out, and what it costs."""
    job = _option_job(o)
    hardware = f"{_gpus(o)} × {o.accelerator} on {_hardware(o)}"
    if o.kind == "infer":
        lines = [("hardware", f"{plural(o.replicas, 'replica')} of {hardware}")]
        if o.rental:
            lines.append(("rental", o.rental))
        lines.append(("job", job))
        lines.append(("latency", f"{format_duration(o.latency_s)} per request"))
        lines.append(("cost", f"{format_usd(o.usd_per_1000_requests)} per 1000 requests"))
        lines.append(
            (
                "per month",
                f"{format_usd(o.always_on_usd_per_month)} always on, "
                f"{format_usd(o.scale_to_zero_usd_per_month)} scaling to zero",
            )
        )
    else:
        lines = [("hardware", hardware)]
        lines.append(("layout", f"{_layout(o, tp_overlap=o.tp_overlap)}; {job}"))
        lines.append(("time", format_duration(o.time_s)))
        lines.append(("cost", f"{format_usd(o.cost_usd)} {o.pricing} at {format_usd(o.usd_per_h)}/h"))
        lines.append(("energy", _energy(o)))
        lines.append(("MFU", f"{o.mfu:.0%}"))
        if o.data is not None:
            lines.append(("data", data_movement_text(o.data)))
        parts = step_rows(o.step_breakdown_s)
        if parts:
            shares = ", ".join(f"{part} {share}" for part, _, share in parts)
            lines.append(("step", f"{format_duration(o.step_s)}: {shares}"))
        if o.bottleneck:
            lines.append(("attack", o.bottleneck))
    lines.append(("memory", fit(o.device_memory).text))
    return lines


def _gpus(o: Option | InferOption) -> int:
    return o.gpus if o.kind == "train" else o.gpus_per_replica


_TRAIN_HEADERS = ("GPUs", "hardware", "pricing", "layout", "time", "cost", "$/h", "MFU", "memory")
# With --data-region: what moving the dataset added to the cost (its copy time is in "time").
_TRAIN_DATA_HEADERS = (*_TRAIN_HEADERS[:6], "egress", *_TRAIN_HEADERS[6:])
_INFER_HEADERS = (
    "replicas",
    "GPUs",
    "hardware",
    "job",
    "latency",
    "$/1000 req",
    "$/mo always on",
    "$/mo to zero",
    "memory",
)
_NUMERIC_HEADERS = frozenset(
    {"#", "replicas", "time", "cost", "egress", "$/h", "MFU", "memory", "latency", "$/1000 req"}
    | {"$/mo always on", "$/mo to zero"}
)
# "16384 × h100-sxm" and "on-demand" read wrong when folded; the hardware and the layout may fold.
_WHOLE_HEADERS = frozenset({"GPUs", "pricing"})
# What a narrow terminal hides first; the recommendation panel above the table still has all of it.
_DROP_HEADERS = ("$/h", "MFU", "memory", "egress", "layout", "pricing", "job", "$/mo to zero", "latency")


def _train_row(o: Option) -> tuple[str, ...]:
    row: tuple[str, ...] = (
        f"{o.gpus} × {o.accelerator}",
        _hardware(o),
        o.pricing,
        _short_layout(o),
        format_duration(o.time_s),
        format_usd(o.cost_usd),
    )
    if o.data is not None:  # the egress column, with --data-region
        row += (format_usd(o.data.egress_usd) if o.data.egress_usd else "$0",)
    return (*row, format_usd(o.usd_per_h), f"{o.mfu:.0%}", format_bytes(o.device_memory.total))


def _infer_row(o: InferOption) -> tuple[str, ...]:
    return (
        str(o.replicas),
        f"{o.gpus_per_replica} × {o.accelerator}",
        _hardware(o),
        _option_job(o),
        format_duration(o.latency_s),
        format_usd(o.usd_per_1000_requests),
        format_usd(o.always_on_usd_per_month),
        format_usd(o.scale_to_zero_usd_per_month),
        format_bytes(o.device_memory.total),
    )


def _row(o: Option | InferOption) -> tuple[str, ...]:
    return _infer_row(o) if o.kind == "infer" else _train_row(o)


def option_grid(options: Sequence[Option | InferOption], ranked: bool = False) -> Grid:
    """Candidates or the Pareto frontier as one table; columns follow the kind of the first option."""
    first = options[0] if options else None
    columns: tuple[str, ...]
    if first is not None and first.kind == "infer":
        columns = _INFER_HEADERS
    elif first is not None and first.data is not None:
        columns = _TRAIN_DATA_HEADERS
    else:
        columns = _TRAIN_HEADERS
    rows = tuple((str(rank), *_row(o)) if ranked else _row(o) for rank, o in enumerate(options, start=1))
    headers = ("#", *columns) if ranked else columns
    return Grid(
        headers,
        rows,
        frozenset(i for i, h in enumerate(headers) if h in _NUMERIC_HEADERS),
        whole=frozenset(i for i, h in enumerate(headers) if h in _WHOLE_HEADERS),
        drop_order=_indices(headers, _DROP_HEADERS),
    )


def _indices(headers: Sequence[str], names: Sequence[str]) -> tuple[int, ...]:
    """Positions of ``names`` in ``headers``, in the order of ``names``, skipping the absent ones."""
    return tuple(headers.index(name) for name in names if name in headers)


def option_point(o: Option | InferOption) -> tuple[float, float]:
    """(seconds, USD) placing an option on the cost-vs-time chart: job time and cost, or latency and $/1000 requests."""
    if o.kind == "infer":
        return o.latency_s, o.usd_per_1000_requests
    return o.time_s, o.cost_usd


def point_labels(o: Option | InferOption) -> tuple[str, str]:
    """Axis titles matching :func:`option_point`."""
    if o.kind == "infer":
        return "latency per request", "USD per 1000 requests"
    return "time to finish", "cost (USD)"


def scaling_grid(scaling: Sequence[ScalingPoint]) -> Grid:
    rows = tuple(
        (str(p.gpus), format_duration(p.time_s), format_usd(p.cost_usd), f"{p.efficiency:.0%}") for p in scaling
    )
    return Grid(("GPUs", "time", "cost", "efficiency"), rows, frozenset({0, 1, 2, 3}))


def rejection_line(r: Rejection) -> str:
    where = f" ({r.option})" if r.option else ""
    many = f" [{r.candidates} candidates]" if r.candidates > 1 else ""
    return f"{r.gpus} × {r.accelerator}{where}: {r.reason}{many}"


def group_rejections(rejected: Sequence[Rejection]) -> list[RejectionGroup]:
    """By stage, in the order stages first appear, which is the order the planner applies its filters."""
    groups: dict[str, list[Rejection]] = {}
    for r in rejected:
        groups.setdefault(r.stage, []).append(r)
    return [RejectionGroup(stage, sum(r.candidates for r in items), tuple(items)) for stage, items in groups.items()]


def _utilization(value: float) -> str:
    # Above 100 % owning never pays: the owned server costs more per hour even when it never idles.
    return "never (renting is cheaper)" if value > 1 else f"{value:.0%}"


BREAK_EVEN_NOTE = "break-even utilization = owned cost per hour at full use / rental price of the same GPUs"


def break_even_grid(rows: Sequence[BreakEven]) -> Grid:
    body = tuple(
        (
            f"{r.accelerator_count} × {r.accelerator}",
            r.pricing,
            f"{format_usd(r.owned_usd_per_h_at_full_use)}/h",
            f"{format_usd(r.rented_usd_per_h)}/h",
            r.rented_from,
            _utilization(r.break_even_utilization),
        )
        for r in rows
    )
    headers = ("server", "rental pricing", "owned at full use", "rented", "rented from", "owning wins above")
    return Grid(headers, body, frozenset({2, 3, 5}), whole=frozenset({0, 1}), drop_order=(4, 1))


def step_rows(breakdown: Mapping[str, float]) -> list[tuple[str, str, str]]:
    """(part, seconds, share) of one training step by cause, largest first; empty where there is no breakdown."""
    step_s = sum(breakdown.values())
    if step_s <= 0:
        return []
    parts = sorted(((k, v) for k, v in breakdown.items() if v > 0), key=lambda kv: -kv[1])
    return [(name.replace("_", " "), format_duration(seconds), f"{seconds / step_s:.0%}") for name, seconds in parts]
