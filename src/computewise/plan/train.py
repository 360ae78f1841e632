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

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np
import numpy.typing as npt

from computewise.errors import InfeasiblePlanError, InputError
from computewise.estimate.arrays import FloatArray, col
from computewise.estimate.assumptions import Assumptions
from computewise.estimate.cost import energy_kwh
from computewise.estimate.memory import MemoryBreakdown, bytes_per_value, optimizer_bytes_per_param
from computewise.estimate.pricing import onprem_network_per_device
from computewise.estimate.train import TrainColumns, TrainHardware, TrainLayout, evaluate_train, train_memory
from computewise.plan.result import Option, Plan, Rejection, merge_rejections, pareto_front, scaling_curve
from computewise.specs import PRECISIONS, RECOMPUTES, Accelerator, ModelSpec, Optimizer, Precision, Pricing
from computewise.units import format_bytes, format_duration, format_usd

if TYPE_CHECKING:
    from computewise.catalog import Catalog

__all__ = ["CLOUD_PRICINGS", "TRAIN_PRECISIONS", "TrainConstraints", "plan_train"]

IntArray = npt.NDArray[np.int64]
Objective = Literal["cost", "time"]

_TP = (1, 2, 4, 8)
_PP = (1, 2, 4, 8, 16)
_ZERO = (0, 1, 2, 3)
_MICRO = (1, 2, 4, 8, 16, 32)
_INSTANCES = (1, 2, 4, 8, 16, 32, 64, 128)


CLOUD_PRICINGS: tuple[Pricing, ...] = ("on-demand", "spot", "reserved-1y", "reserved-3y")
TRAIN_PRECISIONS: tuple[Precision, ...] = ("bf16", "fp16", "fp32")  # fp8 needs Transformer Engine: opt in


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
    pricings: tuple[Pricing, ...] = CLOUD_PRICINGS
    precisions: tuple[Precision, ...] = TRAIN_PRECISIONS
    objective: Objective = "cost"


def _layouts(model: ModelSpec, gpu_counts: Sequence[int], c: TrainConstraints) -> tuple[TrainLayout, IntArray]:
    """Every (gpus, tp, pp, ZeRO, precision, micro-batch, recompute) the model's shape allows.

    Returns the layouts and, per row, the index of its precision in PRECISIONS.
    """
    splittable = model.is_transformer
    grid = np.array(
        list(
            itertools.product(
                sorted(set(gpu_counts)),
                _TP if splittable else (1,),
                _PP if splittable else (1,),
                _ZERO,
                [PRECISIONS.index(p) for p in c.precisions],
                _MICRO,
                range(len(RECOMPUTES)) if splittable else (0,),
            )
        ),
        dtype=np.int64,
    ).reshape(-1, 7)
    gpus, tp, pp, zero, precision, micro, recompute = (grid[:, i] for i in range(7))
    ok = gpus % (tp * pp) == 0
    dp = np.where(ok, gpus // (tp * pp), 1)
    ok &= c.global_batch % (dp * micro) == 0
    ok &= (dp > 1) | (zero == 0)  # ZeRO shards over data parallelism; with dp = 1 every stage is stage 0
    if splittable:
        ok &= (model.heads % tp == 0) & (pp <= model.total_layers)
    keep = np.flatnonzero(ok)
    weight = np.array([bytes_per_value(p) for p in PRECISIONS])
    optimizer = np.array([optimizer_bytes_per_param(c.optimizer, p) for p in PRECISIONS])
    precision = precision[keep]
    tp_k = col(tp[keep])
    layout = TrainLayout(
        tp=tp_k,
        pp=col(pp[keep]),
        dp=col(dp[keep]),
        zero=col(zero[keep]),
        micro_batch=col(micro[keep]),
        global_batch=np.full(len(keep), float(c.global_batch)),
        seq_len=np.full(len(keep), float(c.seq_len)),
        recompute=col(recompute[keep]),
        sequence_parallel=col(tp_k > 1),
        flash_attention=np.ones(len(keep)),
        weight_bytes=weight[precision],
        optimizer_bytes=optimizer[precision],
        cp=np.ones(len(keep)),
        ep=np.ones(len(keep)),
        virtual_stages=np.ones(len(keep)),
        framework=np.zeros(len(keep)),
    )
    return layout, precision


@dataclass(frozen=True)
class _Hardware:
    """One machine shape: offerings that differ only in price or region share its speed."""

    accelerator: Accelerator
    devices_per_node: int
    node_network_bytes_per_s: float  # all NICs of one node
    prices: tuple[tuple[str, str, str, Pricing, float, float], ...]  # cloud, type, region, pricing, $/h, gCO2/kWh


def _hardware(catalog: Catalog, c: TrainConstraints, assumptions: Assumptions) -> list[_Hardware]:
    wanted = set(c.accelerators)
    shapes: dict[tuple[str, int, float], list[tuple[str, str, str, Pricing, float, float]]] = {}
    cloud_pricings = [p for p in c.pricings if p != "on-prem"]
    for o in catalog.offerings:
        if (wanted and o.accelerator not in wanted) or (c.clouds and o.cloud not in c.clouds):
            continue
        if not catalog.accelerator(o.accelerator).trains:
            continue
        if c.regions and o.region not in c.regions:
            continue
        key = (o.accelerator, o.accelerator_count, o.network_bytes_per_s)
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
            network = onprem_network_per_device(catalog, accel.slug) * server.accelerator_count
            key = (server.accelerator, server.accelerator_count, network)
            name = f"{server.accelerator_count}x {accel.name} server"
            shapes.setdefault(key, []).append(
                ("on-prem", name, "owned", "on-prem", hourly, assumptions.world_g_co2_per_kwh)
            )
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
    rejections: list[Rejection] = []
    units: list[tuple[int, int]] = []  # (hardware shape, instances)
    for h_index, h in enumerate(hardware):
        for n in _INSTANCES:
            if n * h.devices_per_node > c.max_gpus:
                break
            if n * h.devices_per_node > 1 and h.accelerator.interconnect_bytes_per_s <= 0:
                reason = (
                    f"interconnect bandwidth of {h.accelerator.name} is not in the catalog; planned on one device only"
                )
                rejections.append(Rejection(h.accelerator.slug, n * h.devices_per_node, "network", reason, 0))
                break
            if n > 1 and h.node_network_bytes_per_s <= 0:
                reason = f"network bandwidth of {h.prices[0][1]} is not in the catalog; planned on one instance only"
                rejections.append(Rejection(h.accelerator.slug, n * h.devices_per_node, "network", reason, 0))
                break
            units.append((h_index, n))
    if not units:
        raise InputError(
            f"--max-gpus {c.max_gpus} is smaller than the smallest matching instance",
            "raise --max-gpus or choose an accelerator sold in smaller instances",
        )
    unit_gpus = np.array([n * hardware[h].devices_per_node for h, n in units], dtype=np.int64)
    layouts, precision = _layouts(model, unit_gpus.tolist(), c)
    memory = train_memory(model, layouts, assumptions)
    total_memory = memory.total
    layout_gpus = layouts.gpus.astype(np.int64)

    # Pair each unit with the layouts of its GPU count that fit its memory and use a precision it runs.
    pieces: list[IntArray] = []
    considered = 0
    for u, (h_index, _) in enumerate(units):
        h = hardware[h_index]
        same_gpus = np.flatnonzero(layout_gpus == unit_gpus[u])
        considered += len(same_gpus) * len(h.prices)
        peaks = np.array([h.accelerator.peak_flops.get(p, 0.0) for p in PRECISIONS])
        runs = same_gpus[peaks[precision[same_gpus]] > 0]
        fitting = runs[total_memory[runs] <= h.accelerator.memory_bytes]
        pieces.append(fitting)
        if len(same_gpus) and not len(runs):
            rejections.append(
                Rejection(
                    h.accelerator.slug,
                    int(unit_gpus[u]),
                    "precision",
                    f"{h.accelerator.name} runs none of {', '.join(c.precisions)}",
                    len(same_gpus) * len(h.prices),
                )
            )
        elif len(runs) and not len(fitting):
            need = float(total_memory[runs].min())
            rejections.append(
                Rejection(
                    h.accelerator.slug,
                    int(unit_gpus[u]),
                    "memory",
                    f"does not fit: {format_bytes(need)} > {format_bytes(h.accelerator.memory_bytes)} on "
                    f"{h.accelerator.name} even with the leanest layout on {unit_gpus[u]} GPUs",
                    len(runs) * len(h.prices),
                )
            )
    sizes = np.array([len(p) for p in pieces], dtype=np.int64)
    layout_index = np.concatenate(pieces) if pieces else np.empty(0, np.int64)
    unit_index = np.repeat(np.arange(len(units)), sizes)
    unit_hw = np.array([h for h, _ in units], dtype=np.int64)[unit_index]

    def per_row(values: list[float]) -> FloatArray:
        return np.array(values, dtype=np.float64)[unit_hw]

    peak_table = np.array([[h.accelerator.peak_flops.get(p, 0.0) for p in PRECISIONS] for h in hardware])
    rows = len(layout_index)
    zeros = np.zeros(rows)
    columns = evaluate_train(
        model,
        c.tokens,
        layouts.take(layout_index),
        TrainHardware(
            peak_flops=peak_table[unit_hw, precision[layout_index]],
            intra_node_bytes_per_s=per_row([h.accelerator.interconnect_bytes_per_s for h in hardware]),
            memory_bandwidth_bytes_per_s=per_row([h.accelerator.memory_bandwidth_bytes_per_s for h in hardware]),
            node_network_bytes_per_s=per_row([h.node_network_bytes_per_s for h in hardware]),
            devices_per_node=per_row([float(h.devices_per_node) for h in hardware]),
            tdp_w=per_row([h.accelerator.tdp_w for h in hardware]),
            rental_usd_per_h=zeros,  # priced per offering below
            spot=zeros + 1.0,  # time_s carries the spot slowdown; steps * step_s is the time without it
            g_co2_per_kwh=zeros,
            pue=zeros + 1.0,
        ),
        assumptions,
        memory=MemoryBreakdown(**{k: getattr(memory, k)[layout_index] for k in _MEMORY_PARTS}),
    )
    base_time = columns.steps * columns.step_s
    spot_time = columns.time_s
    options: list[Option] = []
    ends = np.cumsum(sizes)
    for u, (h_index, n) in enumerate(units):
        start, stop = int(ends[u] - sizes[u]), int(ends[u])
        if start == stop:
            continue
        best = {
            False: start + int(np.argmin(base_time[start:stop])),
            True: start + int(np.argmin(spot_time[start:stop])),
        }
        h = hardware[h_index]
        for cloud, instance_type, region, pricing, hourly, carbon in h.prices:
            r = best[pricing == "spot"]
            options.append(
                _option(
                    h,
                    n,
                    (cloud, instance_type, region, pricing, hourly, carbon),
                    r,
                    int(layout_index[r]),
                    layouts,
                    precision,
                    columns,
                    assumptions,
                )
            )
    return _select(options, rejections, c, considered)


_MEMORY_PARTS = ("weights", "gradients", "optimizer_states", "activations", "kv_cache", "overhead")


def _option(
    h: _Hardware,
    instances: int,
    price: tuple[str, str, str, Pricing, float, float],
    r: int,
    li: int,
    layouts: TrainLayout,
    precision: IntArray,
    columns: TrainColumns,
    assumptions: Assumptions,
) -> Option:
    cloud, instance_type, region, pricing, hourly, carbon = price
    gpus = instances * h.devices_per_node
    time_s = float(columns.time_s[r] if pricing == "spot" else columns.steps[r] * columns.step_s[r])
    pue = assumptions.onprem_pue if pricing == "on-prem" else assumptions.cloud_pue
    kwh = float(
        energy_kwh(col(gpus), col(h.accelerator.tdp_w), assumptions.gpu_power_fraction_of_tdp, col(time_s), col(pue))
    )
    tp, pp = int(layouts.tp[li]), int(layouts.pp[li])
    return Option(
        accelerator=h.accelerator.slug,
        gpus=gpus,
        instances=instances,
        cloud=cloud,
        instance_type=instance_type,
        region=region,
        pricing=pricing,
        usd_per_h=instances * hourly,
        tp=tp,
        pp=pp,
        dp=gpus // (tp * pp),
        zero=int(layouts.zero[li]),
        precision=PRECISIONS[int(precision[li])],
        micro_batch=int(layouts.micro_batch[li]),
        recompute=RECOMPUTES[int(layouts.recompute[li])],
        memory_bytes={k: float(getattr(columns.memory, k)[r]) for k in _MEMORY_PARTS},
        capacity_bytes=h.accelerator.memory_bytes,
        flops=float(columns.model_flops[r]),
        time_s=time_s,
        cost_usd=instances * hourly * time_s / 3600.0,
        energy_kwh=kwh,
        co2_kg=kwh * carbon / 1000.0,
        mfu=float(columns.mfu[r]),
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
        rejected=merge_rejections(rejections),
        considered=considered,
    )
