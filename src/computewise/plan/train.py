"""``plan train``: every accelerator x count x layout x precision x micro-batch x recompute x pricing.

Enumerate, filter, rank, in three passes that are exact, not heuristic:

1. Layouts (tp, pp, dp, ZeRO, precision, micro-batch, recompute) for each GPU count, filtered by the
   model's shape (heads divisible by tp, enough layers for pp, a global batch that divides).
2. Each layout on each hardware shape (accelerator, devices per node, network) through the same
   ``evaluate_train`` as ``estimate``; layouts that do not fit in memory are dropped.
3. Prices. For one rental, cost and energy grow with time, so the fastest layout of a hardware
   shape is also its cheapest: each (offering, instances, pricing) keeps that one layout, and the
   deadline, budget, ranking and Pareto frontier work on those options.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np
import numpy.typing as npt

from computewise.errors import InfeasiblePlanError, InputError
from computewise.estimate.arrays import FloatArray, col
from computewise.estimate.assumptions import Assumptions
from computewise.estimate.memory import bytes_per_value, optimizer_bytes_per_param
from computewise.estimate.train import TrainRows, evaluate_train
from computewise.plan.result import Option, Plan, Rejection, pareto_front, scaling_curve
from computewise.specs import PRECISIONS, RECOMPUTES, Accelerator, ModelSpec, Optimizer, Precision, Pricing
from computewise.units import format_bytes, format_duration, format_usd

if TYPE_CHECKING:
    from computewise.catalog import Catalog

__all__ = ["TrainConstraints", "plan_train"]

IntArray = npt.NDArray[np.int64]
Objective = Literal["cost", "time"]

_TP = (1, 2, 4, 8)
_PP = (1, 2, 4, 8, 16)
_ZERO = (0, 1, 2, 3)
_MICRO = (1, 2, 4, 8, 16, 32)
_INSTANCES = (1, 2, 4, 8, 16, 32, 64, 128)


@dataclass(frozen=True)
class TrainConstraints:
    tokens: float
    seq_len: int
    global_batch: int
    optimizer: Optimizer = "adamw"
    deadline_s: float | None = None
    budget_usd: float | None = None
    max_gpus: int = 1024
    accelerators: tuple[str, ...] = ()  # slugs; empty: all
    clouds: tuple[str, ...] = ()
    regions: tuple[str, ...] = ()
    pricings: tuple[Pricing, ...] = ("on-demand", "spot", "reserved-1y", "reserved-3y")
    precisions: tuple[Precision, ...] = PRECISIONS
    objective: Objective = "cost"


@dataclass(frozen=True)
class _Layouts:
    """Hardware-independent layouts, one column entry each."""

    gpus: IntArray
    tp: IntArray
    pp: IntArray
    zero: IntArray
    precision: IntArray  # index into PRECISIONS
    micro: IntArray
    recompute: IntArray


def _layouts(model: ModelSpec, gpu_counts: Sequence[int], c: TrainConstraints) -> _Layouts:
    rows: list[tuple[int, int, int, int, int, int, int]] = []
    precision_codes = [PRECISIONS.index(p) for p in c.precisions]
    splittable = model.is_transformer
    for gpus in sorted(set(gpu_counts)):
        for tp in _TP if splittable else (1,):
            if model.heads % tp:
                continue
            for pp in _PP if splittable else (1,):
                if gpus % (tp * pp) or (splittable and pp > model.total_layers):
                    continue
                dp = gpus // (tp * pp)
                for micro in _MICRO:
                    if c.global_batch % (dp * micro):
                        continue
                    for zero in _ZERO if dp > 1 else (0,):
                        for precision in precision_codes:
                            for recompute in range(len(RECOMPUTES)) if splittable else (0,):
                                rows.append((gpus, tp, pp, zero, precision, micro, recompute))
    table = np.array(rows, dtype=np.int64).reshape(-1, 7)
    return _Layouts(*(table[:, i] for i in range(7)))


@dataclass(frozen=True)
class _Hardware:
    """One machine shape: offerings that differ only in price or region share its speed."""

    accelerator: Accelerator
    devices_per_node: int
    inter_node_bytes_per_s: float  # per device
    prices: tuple[tuple[str, str, str, Pricing, float, float], ...]  # cloud, type, region, pricing, $/h, gCO2/kWh


def _hardware(catalog: Catalog, c: TrainConstraints, assumptions: Assumptions) -> list[_Hardware]:
    wanted = set(c.accelerators)
    shapes: dict[tuple[str, int, float], list[tuple[str, str, str, Pricing, float, float]]] = {}
    cloud_pricings = [p for p in c.pricings if p != "on-prem"]
    for o in catalog.offerings:
        if (wanted and o.accelerator not in wanted) or (c.clouds and o.cloud not in c.clouds):
            continue
        if c.regions and o.region not in c.regions:
            continue
        key = (o.accelerator, o.accelerator_count, o.network_bytes_per_s / o.accelerator_count)
        carbon = catalog.carbon_g_per_kwh(o.cloud, o.region)
        for pricing in cloud_pricings:
            hourly = o.usd_per_h(pricing)
            if hourly is not None:
                shapes.setdefault(key, []).append((o.cloud, o.instance_type, o.region, pricing, hourly, carbon))
    if "on-prem" in c.pricings:
        for server in catalog.onprem:
            if wanted and server.accelerator not in wanted:
                continue
            accel = catalog.accelerator(server.accelerator)
            hourly = server.usd_per_h(
                assumptions.onprem_power_usd_per_kwh, assumptions.onprem_pue, assumptions.onprem_utilization
            )
            key = (server.accelerator, server.accelerator_count, accel.interconnect_bytes_per_s / 8)
            entry = ("on-prem", f"{server.accelerator_count}x {accel.name} server", "owned", "on-prem")
            shapes.setdefault(key, []).append((*entry, hourly, assumptions.world_g_co2_per_kwh))  # type: ignore[arg-type]
    return [
        _Hardware(catalog.accelerator(slug), count, network, tuple(prices))
        for (slug, count, network), prices in sorted(shapes.items())
    ]


def plan_train(model: ModelSpec, catalog: Catalog, assumptions: Assumptions, constraints: TrainConstraints) -> Plan:
    c = constraints
    hardware = _hardware(catalog, c, assumptions)
    if not hardware:
        raise InputError(
            "no offering in the catalog matches the accelerator, cloud, region and pricing filters",
            "drop a filter, or run `computewise catalog list offerings` to see what is sold where",
        )
    units = [
        (h_index, n) for h_index, h in enumerate(hardware) for n in _INSTANCES if n * h.devices_per_node <= c.max_gpus
    ]
    if not units:
        raise InputError(
            f"--max-gpus {c.max_gpus} is smaller than the smallest matching instance",
            "raise --max-gpus or choose an accelerator sold in smaller instances",
        )
    layouts = _layouts(model, [n * hardware[h].devices_per_node for h, n in units], c)
    by_gpus = {int(g): np.flatnonzero(layouts.gpus == g) for g in np.unique(layouts.gpus)}

    # Join units with their layouts; rows of one unit stay contiguous.
    layout_index = np.concatenate(
        [by_gpus.get(n * hardware[h].devices_per_node, np.empty(0, np.int64)) for h, n in units]
    )
    unit_index = np.repeat(
        np.arange(len(units)), [len(by_gpus.get(n * hardware[h].devices_per_node, ())) for h, n in units]
    )
    # Every layout of a unit is a candidate once per offering and pricing sharing that hardware shape.
    considered = sum(len(by_gpus.get(n * hardware[h].devices_per_node, ())) * len(hardware[h].prices) for h, n in units)
    peak_table = np.array(
        [[h.accelerator.peak_flops.get(p, 0.0) for p in PRECISIONS] for h in hardware], dtype=np.float64
    )
    unit_hw = np.array([h for h, _ in units], dtype=np.int64)[unit_index]
    precision = layouts.precision[layout_index]
    peak = peak_table[unit_hw, precision]
    supported = peak > 0

    rejections: list[Rejection] = []
    for h_index, h in enumerate(hardware):
        missing = [p for p in c.precisions if h.accelerator.peak_flops.get(p, 0.0) <= 0]
        if missing and len(missing) < len(c.precisions):
            continue
        if missing:
            rejections.append(
                Rejection(
                    h.accelerator.slug,
                    0,
                    "precision",
                    f"{h.accelerator.name} supports none of {', '.join(c.precisions)}",
                    int(np.sum(unit_hw == h_index)),
                )
            )

    keep = np.flatnonzero(supported)
    layout_index, unit_index, unit_hw, peak = layout_index[keep], unit_index[keep], unit_hw[keep], peak[keep]
    rows = _rows(layouts, layout_index, hardware, unit_hw, peak, c, assumptions)
    columns = evaluate_train(model, c.tokens, rows, assumptions)
    capacity = np.array([h.accelerator.memory_bytes for h in hardware])[unit_hw]
    total_memory = columns.memory.total
    fits = total_memory <= capacity

    # Units where nothing fits are rejected with their closest miss.
    for u, (h_index, n) in enumerate(units):
        mask = unit_index == u
        if mask.any() and not (fits & mask).any():
            need = float(total_memory[mask].min())
            accel = hardware[h_index].accelerator
            gpus = n * hardware[h_index].devices_per_node
            rejections.append(
                Rejection(
                    accel.slug,
                    gpus,
                    "memory",
                    f"does not fit: {format_bytes(need)} > {format_bytes(accel.memory_bytes)} on {accel.name} "
                    f"even with the leanest layout on {gpus} GPUs",
                    int(mask.sum()),
                )
            )

    base_time = columns.steps * columns.step_s
    spot_time = columns.time_s
    options: list[Option] = []
    for u, (h_index, n) in enumerate(units):
        ok = np.flatnonzero((unit_index == u) & fits)
        if not len(ok):
            continue
        best = {False: ok[np.argmin(base_time[ok])], True: ok[np.argmin(spot_time[ok])]}
        h = hardware[h_index]
        gpus = n * h.devices_per_node
        for cloud, instance_type, region, pricing, hourly, carbon in h.prices:
            r = int(best[pricing == "spot"])
            time_s = float(spot_time[r] if pricing == "spot" else base_time[r])
            kwh = (
                gpus
                * h.accelerator.tdp_w
                * assumptions.gpu_power_fraction_of_tdp
                * time_s
                / 3.6e6
                * (assumptions.onprem_pue if pricing == "on-prem" else assumptions.cloud_pue)
            )
            li = layout_index[r]
            options.append(
                Option(
                    accelerator=h.accelerator.slug,
                    gpus=gpus,
                    instances=n,
                    cloud=cloud,
                    instance_type=instance_type,
                    region=region,
                    pricing=pricing,
                    usd_per_h=n * hourly,
                    tp=int(layouts.tp[li]),
                    pp=int(layouts.pp[li]),
                    dp=gpus // int(layouts.tp[li] * layouts.pp[li]),
                    zero=int(layouts.zero[li]),
                    precision=PRECISIONS[int(layouts.precision[li])],
                    micro_batch=int(layouts.micro[li]),
                    recompute=RECOMPUTES[int(layouts.recompute[li])],
                    memory_bytes={
                        k: float(getattr(columns.memory, k)[r])
                        for k in ("weights", "gradients", "optimizer_states", "activations", "kv_cache", "overhead")
                    },
                    capacity_bytes=h.accelerator.memory_bytes,
                    flops=float(columns.model_flops[r]),
                    time_s=time_s,
                    cost_usd=n * hourly * time_s / 3600.0,
                    energy_kwh=kwh,
                    co2_kg=kwh * carbon / 1000.0,
                    mfu=float(columns.mfu[r]),
                )
            )
    return _select(options, rejections, c, considered)


def _rows(
    layouts: _Layouts,
    li: IntArray,
    hardware: list[_Hardware],
    hw: IntArray,
    peak: FloatArray,
    c: TrainConstraints,
    assumptions: Assumptions,
) -> TrainRows:
    tp, pp = col(layouts.tp[li]), col(layouts.pp[li])
    gpus = col(layouts.gpus[li])
    precision = layouts.precision[li]
    weight = np.array([bytes_per_value(p) for p in PRECISIONS])[precision]
    optimizer = np.array([optimizer_bytes_per_param(c.optimizer, p) for p in PRECISIONS])[precision]

    def per_hw(values: list[float]) -> FloatArray:
        return np.array(values, dtype=np.float64)[hw]

    zeros = np.zeros(len(li))
    return TrainRows(
        tp=tp,
        pp=pp,
        dp=gpus / (tp * pp),
        zero=col(layouts.zero[li]),
        micro_batch=col(layouts.micro[li]),
        global_batch=zeros + c.global_batch,
        seq_len=zeros + c.seq_len,
        recompute=col(layouts.recompute[li]),
        sequence_parallel=col(tp > 1),
        flash_attention=zeros + 1.0,
        weight_bytes=weight,
        optimizer_bytes=optimizer,
        peak_flops=peak,
        intra_node_bytes_per_s=per_hw([h.accelerator.interconnect_bytes_per_s for h in hardware]),
        inter_node_bytes_per_s=per_hw([h.inter_node_bytes_per_s for h in hardware]),
        devices_per_node=per_hw([float(h.devices_per_node) for h in hardware]),
        tdp_w=per_hw([h.accelerator.tdp_w for h in hardware]),
        rental_usd_per_h=zeros,
        spot=zeros + 1.0,
        g_co2_per_kwh=zeros,
        pue=zeros + 1.0,
        utilization=zeros + assumptions.achievable_mfu_train,
    )


def _select(options: list[Option], rejections: list[Rejection], c: TrainConstraints, considered: int) -> Plan:
    if not options:
        closest = min((r for r in rejections if r.stage == "memory"), key=lambda r: -r.gpus, default=None)
        raise InfeasiblePlanError(
            "no accelerator in the catalog can hold this job: "
            + (closest.reason if closest else "every option was filtered out"),
            "raise --max-gpus, allow --recompute full / ZeRO-3 (default), shorten --seq-len, or use a smaller model",
        )
    survivors = options
    if c.deadline_s is not None:
        fastest = min(survivors, key=lambda o: o.time_s)
        late = [o for o in survivors if o.time_s > c.deadline_s]
        rejections.extend(
            Rejection.for_option(
                o, "deadline", f"takes {format_duration(o.time_s)} > deadline {format_duration(c.deadline_s)}"
            )
            for o in late
        )
        survivors = [o for o in survivors if o.time_s <= c.deadline_s]
        if not survivors:
            raise InfeasiblePlanError(
                f"the deadline removed the last candidates: the fastest option ({fastest.label}) takes "
                f"{format_duration(fastest.time_s)} > {format_duration(c.deadline_s)}",
                f"raise --deadline to at least {format_duration(fastest.time_s * 1.01)}, raise --max-gpus, "
                "or train on fewer tokens",
            )
    if c.budget_usd is not None:
        cheapest = min(survivors, key=lambda o: o.cost_usd)
        over = [o for o in survivors if o.cost_usd > c.budget_usd]
        rejections.extend(
            Rejection.for_option(o, "budget", f"costs {format_usd(o.cost_usd)} > budget {format_usd(c.budget_usd)}")
            for o in over
        )
        survivors = [o for o in survivors if o.cost_usd <= c.budget_usd]
        if not survivors:
            relax = " or relax --deadline" if c.deadline_s is not None else ""
            raise InfeasiblePlanError(
                f"the budget removed the last candidates: the cheapest option ({cheapest.label}) costs "
                f"{format_usd(cheapest.cost_usd)} > {format_usd(c.budget_usd)}",
                f"raise --budget to at least {format_usd(cheapest.cost_usd * 1.01)}{relax}",
            )
    key = (lambda o: (o.cost_usd, o.time_s)) if c.objective == "cost" else (lambda o: (o.time_s, o.cost_usd))
    ranked = sorted(survivors, key=key)
    return Plan(
        scaling=scaling_curve(options, ranked[0]),
        recommended=ranked[0],
        pareto=pareto_front(ranked),
        candidates=tuple(ranked),
        rejected=tuple(rejections),
        considered=considered,
    )
