"""What the reports show, as plain strings, computed once so the terminal and the HTML page never disagree.

Everything here reads the JSON-ready dicts (``estimate --json``, ``plan --json``); nothing
imports the estimators or the planner, so a saved JSON file renders the same as a live run.
Training and inference dicts share one shape but differ in a few keys; the one test for which
kind a dict is lives in :func:`is_inference`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from computewise.specs.finetune import METHOD_NAMES
from computewise.units import format_bytes, format_count, format_duration, format_flops, format_usd, plural

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
    "is_inference",
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

# Keys of memory.per_device_bytes in the order a user reasons about them: state first, then per-step buffers.
MEMORY_PARTS = (
    ("weights", "weights"),
    ("gradients", "gradients"),
    ("optimizer_states", "optimizer states"),
    ("activations", "activations"),
    ("kv_cache", "KV cache"),
    ("overhead", "overhead"),
)


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
    rejections: tuple[dict[str, Any], ...]

    def counts(self) -> str:
        """``12 candidate configurations (3 rejections)``. A stage that held shapes back before the search
        (network: a link missing from the catalog) removed no configuration, so only its rejections count."""
        rejections = plural(len(self.rejections), "rejection")
        if self.candidates == 0:
            return rejections
        return f"{plural(self.candidates, 'candidate configuration')} ({rejections})"


def is_inference(d: dict[str, Any]) -> bool:
    """Inference estimates and options price per request; training ones do not."""
    return "usd_per_1000_requests" in d["cost"]


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


def memory_parts(memory: dict[str, Any]) -> list[tuple[str, float]]:
    """(label, bytes per device) of the non-zero parts: a zero row only says what the job does not do."""
    per_device = memory["per_device_bytes"]
    return [(label, float(per_device[key])) for key, label in MEMORY_PARTS if float(per_device.get(key, 0.0)) > 0]


def memory_grid(memory: dict[str, Any]) -> Grid:
    """Part, size and share of the per-device total, then the peaks (or the total) without a share."""
    parts = memory_parts(memory)
    total = sum(value for _, value in parts)
    rows = [(label, format_bytes(value), format_share(value / total) if total else "") for label, value in parts]
    rows += [(label, format_bytes(value), "") for label, value in memory_peaks(memory) or [("total", total)]]
    return Grid(("part", "size", "share"), tuple(rows), frozenset({1, 2}))


def memory_peaks(memory: dict[str, Any]) -> list[tuple[str, float]]:
    """The step's peak, as PyTorch reports it (allocated, reserved), then what must fit on the card.

    The parts above it are each at their largest and need not coexist (gradients and activations do
    not, without accumulation), so the peak can be less than their sum. Empty for older dicts.
    """
    per_device = memory["per_device_bytes"]
    if "allocated_peak" not in per_device:
        return []
    return [
        ("peak allocated", float(per_device["allocated_peak"])),
        ("peak reserved", float(per_device["reserved_peak"])),
        ("total", _total(memory)),
    ]


def _total(memory: dict[str, Any]) -> float:
    per_device = memory["per_device_bytes"]
    if "total" in per_device:
        return float(per_device["total"])
    return sum(float(per_device.get(key, 0.0)) for key, _ in MEMORY_PARTS)


def fit(memory: dict[str, Any]) -> Fit:
    """'fits: 31.2 GiB of 80.0 GiB' or 'does not fit: ...'; the estimate's own verdict wins over recomputing it."""
    total = _total(memory)
    if "capacity_bytes" not in memory:
        return Fit(None, f"{format_bytes(total)} per device")
    capacity = float(memory["capacity_bytes"])
    fits = bool(memory["fits"]) if "fits" in memory else total <= capacity
    if fits:
        return Fit(True, f"fits: {format_bytes(total)} of {format_bytes(capacity)}")
    return Fit(False, f"does not fit: {format_bytes(total)} > {format_bytes(capacity)} per device")


# Degrees shown only when they are used (> 1): context, expert, interleaved pipeline chunks.
_EXTRA_DEGREES = (("cp", "cp"), ("ep", "ep"), ("virtual_stages", "virtual stages"))
_EXTRA_SHORT = (("cp", "cp"), ("ep", "ep"), ("virtual_stages", "v"))


def _layout(layout: dict[str, Any]) -> str:
    text = f"dp {layout['dp']} · tp {layout['tp']} · pp {layout['pp']}"
    for key, name in _EXTRA_DEGREES:
        if int(layout.get(key, 1)) > 1:
            text += f" · {name} {layout[key]}"
    if int(layout.get("zero", 0)):
        text += f" · ZeRO-{layout['zero']}"
    if layout.get("sequence_parallel"):
        text += " · sequence parallel"
    return text


def _short_layout(layout: dict[str, Any], job: dict[str, Any]) -> str:
    """'dp8 tp1 pp1 z1 bf16 mb2': a table column has no room for the long form."""
    parts = [f"dp{layout['dp']}", f"tp{layout['tp']}", f"pp{layout['pp']}"]
    if job.get("method", "full") != "full":
        parts.insert(0, str(job["method"]))
    parts.extend(f"{short}{layout[key]}" for key, short in _EXTRA_SHORT if int(layout.get(key, 1)) > 1)
    if int(layout.get("zero", 0)):
        parts.append(f"z{layout['zero']}")
    if "precision" in job:
        parts.append(str(job["precision"]))
    if "micro_batch" in job:
        parts.append(f"mb{job['micro_batch']}")
    return " ".join(parts)


def _job(job: dict[str, Any]) -> str:
    """The job settings present in the dict, in a fixed order; train and infer jobs carry different keys."""
    parts: list[str] = []
    method = job.get("method") or job.get("finetune", {}).get("method", "full")
    if method != "full":
        rank = job.get("finetune", {}).get("rank")
        parts.append(METHOD_NAMES.get(method, method) + (f" rank {rank}" if rank else ""))
    if "precision" in job:
        parts.append(str(job["precision"]))
    for key, label in (
        ("micro_batch", "micro-batch"),
        ("global_batch", "global batch"),
        ("batch", "batch"),
        ("seq_len", "sequence"),
        ("context_len", "context"),
        ("output_len", "output"),
    ):
        if key in job:
            parts.append(f"{label} {job[key]}")
    if job.get("image_size"):
        parts.append(f"{job['image_size']}×{job['image_size']} images")
    if "tokens" in job:
        parts.append(f"{format_count(float(job['tokens']))} tokens")
    if "optimizer" in job:
        parts.append(str(job["optimizer"]))
    if "recompute" in job:
        parts.append(f"recompute {job['recompute']}")
    if job.get("attention") == "triton":
        parts.append("Triton flash attention")
    elif job.get("flash_attention"):
        parts.append("flash attention")
    if "framework" in job:
        parts.append(f"{job['framework']} layout")
    return ", ".join(parts)


def estimate_setup(d: dict[str, Any]) -> str:
    """One line naming what was estimated, so a saved report says what it is about."""
    text = f"{d['model']} ({format_count(float(d['params']))} parameters) on {d['gpus']} × {d['accelerator']}"
    if "layout" in d:
        text += f", {_layout(d['layout'])}"
    job = _job(d.get("job", {}))
    return f"{text}; {job}" if job else text


def estimate_summary(d: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(quantity, value, detail) rows: FLOPs, time, throughput, cost, energy, CO2 and, for training, storage."""
    compute, time, cost = d["compute"], d["time"], d["cost"]
    unit = str(d.get("job", {}).get("input", "requests"))  # what one request is: images for an image model
    rows: list[tuple[str, str, str]] = []
    if time.get("seconds") is None:  # it does not fit, or a link of unknown speed: memory and FLOPs only
        rows.append(("compute", format_flops(float(compute["flops"])), ""))
        missing = "not shown: does not fit" if fit(d["memory"]).fits is False else "not available"
        return [*rows, ("time, cost, energy, CO2", missing, "see the notes")]
    detail = f"MFU {float(compute['mfu']):.0%}" if "mfu" in compute else ""
    rows.append(("compute", format_flops(float(compute["flops"])), detail))
    if "steps" in time:
        detail = f"{format_count(float(time['steps']))} steps of {format_duration(float(time['step_seconds']))}"
    elif "time_to_first_token_seconds" in time:
        detail = (
            f"first token {format_duration(float(time['time_to_first_token_seconds']))}, "
            f"{format_duration(float(time['seconds_per_output_token']))} per output token"
        )
    elif "requests_per_second" in time:  # an image or encoder model: one forward pass per batch
        detail = f"per batch of {int(d['job']['batch'])} {unit}"
    else:
        detail = ""
    rows.append(("time", format_duration(float(time["seconds"])), detail))
    if "tokens_per_second" in time:
        rows.append(("throughput", f"{format_count(float(time['tokens_per_second']))} tokens/s", ""))
    if "requests_per_second" in time:
        tokens = time.get("output_tokens_per_second")
        rows.append(
            (
                "throughput",
                f"{format_amount(float(time['requests_per_second']))} {unit}/s",
                "" if tokens is None else f"{format_count(float(tokens))} output tokens/s",
            )
        )
    if cost.get("usd") is None:  # no offering rents the accelerator: not available, never $0
        rows.append(("cost", "not available", "see the notes"))
    else:
        detail = f"{cost['pricing']} at {format_usd(float(cost['usd_per_hour']))}/h"
        if "usd_per_1000_requests" in cost:
            detail += f", {format_usd(float(cost['usd_per_1000_requests']))} per 1000 {unit}"
        rows.append(("cost", format_usd(float(cost["usd"])), detail))
    energy, co2 = d["energy"], d["co2"]
    if energy["kwh"] is None:  # no published TDP: not available, never 0
        return [*rows, ("energy, CO2", "not available", "see the notes"), *_storage_rows(d)]
    counted = ", ".join(
        part for part in (energy.get("counts"), f"PUE {float(energy['pue']):.2f}" if "pue" in energy else "") if part
    )
    rows.append(("energy", format_kwh(float(energy["kwh"])), counted))
    detail = f"{float(co2['g_per_kwh']):.0f} g/kWh" if "g_per_kwh" in co2 else ""
    rows.append(("CO2", format_kg(float(co2["kg"])), detail))
    return [*rows, *_storage_rows(d)]


def _storage_rows(d: dict[str, Any]) -> list[tuple[str, str, str]]:
    """A training estimate's read rate and checkpoints; none for inference."""
    storage = d.get("storage")
    if not storage:
        return []
    return [
        (
            "storage",
            f"{format_bytes(float(storage['read_bytes_per_second']))}/s read",
            f"checkpoint {format_bytes(float(storage['checkpoint_bytes']))} "
            f"every {format_duration(float(storage['checkpoint_interval_seconds']))}",
        )
    ]


def _hardware(option: dict[str, Any]) -> str:
    hw = option["hardware"]
    text = f"{hw['cloud']} {hw['instance_type']} {hw['region']}"
    instances = int(hw.get("instances", 1))
    return f"{instances} × {text}" if instances > 1 else text


def data_movement_text(data: dict[str, Any]) -> str:
    """The dataset's trip to the GPUs (egress, copy time, both already in the time and cost) and the read rate."""
    size = f"{format_count(float(data['dataset_bytes']))}B"  # decimal, as the user gave it and clouds bill it
    read = f"storage beside the GPUs must read {format_count(float(data['read_bytes_per_s']))}B/s"
    if data["scope"] == "same-region":
        return f"{size} already in {data['origin']}: no egress; {read}"
    return (
        f"{size} copied from {data['origin']} ({data['scope']}, {format_usd(float(data['usd_per_gb']))}/GB): "
        f"{format_usd(float(data['egress_usd']))} egress and {format_duration(float(data['transfer_seconds']))} "
        f"before training, in the time and cost above; {read}"
    )


def recommendation(option: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, value) lines that say what to rent, how to lay it out, and what it costs."""
    job = _job(option.get("job", {}))
    cost, time = option["cost"], option["time"]
    lines = [("hardware", f"{option['gpus']} × {option['accelerator']} on {_hardware(option)}")]
    if option["hardware"].get("rental"):
        lines.append(("rental", str(option["hardware"]["rental"])))
    if is_inference(option):
        lines[0] = ("hardware", f"{plural(int(option['replicas']), 'replica')} of {lines[0][1]}")
        lines.append(("job", job))
        lines.append(("latency", f"{format_duration(float(time['seconds']))} per request"))
        lines.append(("cost", f"{format_usd(float(cost['usd_per_1000_requests']))} per 1000 requests"))
        lines.append(
            (
                "per month",
                f"{format_usd(float(cost['always_on_usd_per_month']))} always on, "
                f"{format_usd(float(cost['scale_to_zero_usd_per_month']))} scaling to zero",
            )
        )
    else:
        lines.append(("layout", f"{_layout(option['layout'])}; {job}"))
        lines.append(("time", format_duration(float(time["seconds"]))))
        lines.append(
            (
                "cost",
                f"{format_usd(float(cost['usd']))} {cost['pricing']} at {format_usd(float(cost['usd_per_hour']))}/h",
            )
        )
        lines.append(
            ("energy", f"{format_kwh(float(option['energy']['kwh']))}, {format_kg(float(option['co2']['kg']))} CO2")
        )
        if "mfu" in option.get("compute", {}):
            lines.append(("MFU", f"{float(option['compute']['mfu']):.0%}"))
        if "data" in option:
            lines.append(("data", data_movement_text(option["data"])))
        parts = step_rows(option)
        if parts:
            shares = ", ".join(f"{part} {share}" for part, _, share in parts)
            lines.append(("step", f"{format_duration(float(time['step_seconds']))}: {shares}"))
        advice = time.get("bottleneck", {}).get("advice")
        if advice:
            lines.append(("attack", advice))
    lines.append(("memory", fit(option["memory"]).text))
    return lines


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


def _train_row(o: dict[str, Any]) -> tuple[str, ...]:
    cost, job = o["cost"], o.get("job", {})
    mfu = o.get("compute", {}).get("mfu")
    return (
        f"{o['gpus']} × {o['accelerator']}",
        _hardware(o),
        str(cost["pricing"]),
        _short_layout(o["layout"], job),
        format_duration(float(o["time"]["seconds"])),
        format_usd(float(cost["usd"])),
        format_usd(float(cost["usd_per_hour"])),
        f"{float(mfu):.0%}" if mfu is not None else "",
        format_bytes(_total(o["memory"])),
    )


def _train_data_row(o: dict[str, Any]) -> tuple[str, ...]:
    row = _train_row(o)
    egress_usd = float(o["data"]["egress_usd"])
    return (*row[:6], format_usd(egress_usd) if egress_usd else "$0", *row[6:])


def _infer_row(o: dict[str, Any]) -> tuple[str, ...]:
    cost, job = o["cost"], o.get("job", {})
    return (
        str(o["replicas"]),
        f"{o['gpus']} × {o['accelerator']}",
        _hardware(o),
        _job(job),
        format_duration(float(o["time"]["seconds"])),
        format_usd(float(cost["usd_per_1000_requests"])),
        format_usd(float(cost["always_on_usd_per_month"])),
        format_usd(float(cost["scale_to_zero_usd_per_month"])),
        format_bytes(_total(o["memory"])),
    )


def option_grid(options: Sequence[dict[str, Any]], ranked: bool = False) -> Grid:
    """Candidates or the Pareto frontier as one table; columns follow the kind of the first option."""
    inference = bool(options) and is_inference(options[0])
    columns: tuple[str, ...]
    row: Callable[[dict[str, Any]], tuple[str, ...]]
    if inference:
        columns, row = _INFER_HEADERS, _infer_row
    elif options and "data" in options[0]:
        columns, row = _TRAIN_DATA_HEADERS, _train_data_row
    else:
        columns, row = _TRAIN_HEADERS, _train_row
    rows = tuple((str(rank), *row(o)) if ranked else row(o) for rank, o in enumerate(options, start=1))
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


def option_point(option: dict[str, Any]) -> tuple[float, float]:
    """(seconds, USD) placing an option on the cost-vs-time chart: job time and cost, or latency and $/1000 requests."""
    cost = option["cost"]
    usd = cost["usd_per_1000_requests"] if is_inference(option) else cost["usd"]
    return float(option["time"]["seconds"]), float(usd)


def point_labels(option: dict[str, Any]) -> tuple[str, str]:
    """Axis titles matching :func:`option_point`."""
    if is_inference(option):
        return "latency per request", "USD per 1000 requests"
    return "time to finish", "cost (USD)"


def scaling_grid(scaling: Sequence[dict[str, Any]]) -> Grid:
    rows = tuple(
        (
            str(p["gpus"]),
            format_duration(float(p["time_s"])),
            format_usd(float(p["cost_usd"])),
            f"{float(p['efficiency']):.0%}",
        )
        for p in scaling
    )
    return Grid(("GPUs", "time", "cost", "efficiency"), rows, frozenset({0, 1, 2, 3}))


def rejection_line(r: dict[str, Any]) -> str:
    where = f" ({r['option']})" if r.get("option") else ""
    count = int(r.get("candidates", 1))
    many = f" [{count} candidates]" if count > 1 else ""
    return f"{r['gpus']} × {r['accelerator']}{where}: {r['reason']}{many}"


def group_rejections(rejected: Sequence[dict[str, Any]]) -> list[RejectionGroup]:
    """By stage, in the order stages first appear, which is the order the planner applies its filters."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rejected:
        groups.setdefault(str(r["stage"]), []).append(r)
    return [
        RejectionGroup(stage, sum(int(r.get("candidates", 1)) for r in items), tuple(items))
        for stage, items in groups.items()
    ]


def _utilization(value: float) -> str:
    # Above 100 % owning never pays: the owned server costs more per hour even when it never idles.
    return "never (renting is cheaper)" if value > 1 else f"{value:.0%}"


BREAK_EVEN_NOTE = "break-even utilization = owned cost per hour at full use / rental price of the same GPUs"


def break_even_grid(rows: Sequence[dict[str, Any]]) -> Grid:
    body = tuple(
        (
            f"{r['accelerator_count']} × {r['accelerator']}",
            str(r["pricing"]),
            f"{format_usd(float(r['owned_usd_per_hour_at_full_use']))}/h",
            f"{format_usd(float(r['rented_usd_per_hour']))}/h",
            str(r["rented_from"]),
            _utilization(float(r["break_even_utilization"])),
        )
        for r in rows
    )
    headers = ("server", "rental pricing", "owned at full use", "rented", "rented from", "owning wins above")
    return Grid(headers, body, frozenset({2, 3, 5}), whole=frozenset({0, 1}), drop_order=(4, 1))


def step_rows(d: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(part, seconds, share) of one training step, largest first; empty for inference estimates."""
    breakdown = d["time"].get("breakdown_seconds_per_step", {})
    step_s = sum(float(v) for v in breakdown.values())
    if step_s <= 0:
        return []
    parts = sorted(((k, float(v)) for k, v in breakdown.items() if float(v) > 0), key=lambda kv: -kv[1])
    return [(name.replace("_", " "), format_duration(seconds), f"{seconds / step_s:.0%}") for name, seconds in parts]
