"""``plan infer``: accelerator, GPUs per replica, precision and batch for a traffic level and latency target.

Replicas run at a target utilization (default: the catalog's ``serving_target_utilization``) so
queueing does not blow the latency up at peak. Their GPUs are quoted by ``estimate.quote``, the rule
``estimate infer`` uses: replicas that leave GPUs of an instance over pay their share of it, and the
option says so. A replica's tensor-parallel group stays on one instance's links, or on one TPU
slice's (``_replica_tps``).

Scale-to-zero can only drop a replica while traffic has idle gaps. A traffic level alone has none
(constant traffic), so there it costs what always-on costs; with a mean below the peak the traffic
is taken as on/off: the peak's replicas for mean/peak of the hours, none in the rest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Literal

import numpy as np

from computewise.errors import InfeasiblePlanError, InputError
from computewise.estimate.arrays import col
from computewise.estimate.assumptions import Assumptions
from computewise.estimate.collectives import bus_bytes_per_s, fabric_for, sold_by_the_chip
from computewise.estimate.cost import server_w_per_device
from computewise.estimate.figures import DeviceMemory
from computewise.estimate.infer import (
    SERVING_EXECUTION,
    SERVING_FRAMEWORK,
    InferRows,
    evaluate_infer,
    inference_act_bytes,
    inference_weight_bytes,
)
from computewise.estimate.kernels import attention_peak_ratio, profile_shares, serving_quantiser, sustained_share
from computewise.estimate.pricing import cheapest_rental
from computewise.estimate.quote import offering_quote
from computewise.estimate.single import memory_dict
from computewise.estimate.traced import tensor_core_flag
from computewise.plan.result import Rejection, largest_first, merge_rejections, refuse_unrun_precision
from computewise.specs import ModelSpec, Precision, Pricing
from computewise.specs.codec import Document, Jsonable, Layout, json_field, json_property
from computewise.units import format_bytes, format_duration, plural

if TYPE_CHECKING:
    from computewise.catalog import Catalog
    from computewise.specs.hardware import Accelerator, Offering

__all__ = ["INFER_PRECISIONS", "InferConstraints", "InferOption", "InferPlan", "plan_infer"]

_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
_TP = (1, 2, 4, 8)
HOURS_PER_MONTH = 730.0


INFER_PRECISIONS: tuple[Precision, ...] = ("bf16", "fp16")  # fp8 weights change accuracy: opt in


@dataclass(frozen=True)
class InferConstraints:
    requests_per_s: float  # peak
    input_len: int
    output_len: int
    latency_s: float | None = None  # per request, first token to last
    mean_requests_per_s: float | None = None  # for scale-to-zero; default: peak
    target_utilization: float | None = None  # default: the catalog's serving_target_utilization
    precisions: tuple[Precision, ...] = INFER_PRECISIONS
    accelerators: tuple[str, ...] = ()
    clouds: tuple[str, ...] = ()
    regions: tuple[str, ...] = ()
    pricing: Pricing = "on-demand"


@dataclass(frozen=True)
class InferOption(Jsonable):
    kind: ClassVar[Literal["infer"]] = "infer"  # tells it from a training ``plan.result.Option`` in the printers
    json_description: ClassVar[str] = "One accelerator and replica count for the traffic (plan.infer.InferOption)."
    json_layout: ClassVar[Layout] = (
        "accelerator",
        ("hardware", ("cloud", "instance_type", "region", "rental", "shared")),
        "gpus_per_replica",
        "replicas",
        ("job", ("precision", "batch")),
        ("memory", ("memory_bytes",)),
        ("time", ("latency_s", "requests_per_s_per_replica")),
        (
            "cost",
            (
                "usd_per_1000_requests",
                "pricing",
                "usd_per_h_per_replica",
                "always_on_usd_per_month",
                "scale_to_zero_usd_per_month",
            ),
        ),
    )
    accelerator: str
    cloud: str
    instance_type: str
    region: str
    gpus_per_replica: int = field(metadata=json_field(name="gpus"))
    precision: str
    batch: int
    replicas: int
    latency_s: float = field(metadata=json_field(name="seconds"))
    requests_per_s_per_replica: float = field(metadata=json_field(name="requests_per_second_per_replica"))
    memory_bytes: dict[str, float] = field(metadata=json_field(name="per_device_bytes"))
    usd_per_h_per_replica: float = field(metadata=json_field(name="usd_per_hour_per_replica"))
    usd_per_1000_requests: float
    always_on_usd_per_month: float
    scale_to_zero_usd_per_month: float
    pricing: Pricing = "on-demand"
    rental: str = ""  # how the replicas' GPUs are rented (``Rental.describe``)
    # the replicas leave GPUs of an instance to other work and pay their share
    shared: bool = field(default=False, metadata=json_field(name="share_of_instance"))

    @property
    def device_memory(self) -> DeviceMemory:
        """Per device, with no capacity: every option kept fits, so the printers show the total alone."""
        return DeviceMemory(self.memory_bytes)


@dataclass(frozen=True)
class InferPlan(Jsonable):
    """An inference plan: what ``plan infer --json`` prints, and what its table and report show."""

    kind: ClassVar[Literal["infer"]] = "infer"  # tells it from a training ``plan.result.Plan`` in the printers
    json_document: ClassVar[Document] = Document(
        "plan-infer",
        "plan infer --json",
        "Accelerator and replicas for a traffic level (plan.infer.InferPlan).",
    )
    recommended: InferOption
    candidates: tuple[InferOption, ...] = field(metadata=json_field(written=False))  # written: shown
    rejected: tuple[Rejection, ...]
    considered: int
    top: int | None = field(default=None, metadata=json_field(written=False))  # candidates shown (--top); None: all

    @json_property(after="recommended")
    def pareto(self) -> tuple[InferOption, ...]:
        """Options no other beats on both latency and cost per request, fastest first."""
        front: list[InferOption] = []
        best_cost = float("inf")
        for option in sorted(self.candidates, key=lambda o: (o.latency_s, o.usd_per_1000_requests)):
            if option.usd_per_1000_requests < best_cost:
                front.append(option)
                best_cost = option.usd_per_1000_requests
        return tuple(front)

    @json_property(after="pareto", name="candidates")
    def shown(self) -> tuple[InferOption, ...]:
        """The candidates ``--top`` keeps, best first."""
        return self.candidates if self.top is None else self.candidates[: self.top]

    @json_property()
    def feasible(self) -> int:
        return len(self.candidates)


def _no_offering(catalog: Catalog, c: InferConstraints) -> InputError:
    """Which filter left no offering: an accelerator nobody rents, or the cloud/region given with it."""
    rented = {o.accelerator for o in catalog.offerings}
    unrented = [slug for slug in c.accelerators if slug not in rented]
    if c.accelerators and len(unrented) == len(c.accelerators):
        return InputError(
            f"the catalog rents no {', '.join(unrented)}",
            "choose an accelerator that is rented (`computewise catalog list offerings`), "
            "or add its offering in a catalog file",
        )
    where = " ".join((*c.clouds, *c.regions))
    what = ", ".join(c.accelerators) or "accelerator"
    return InputError(
        f"the catalog rents no {what} in {where}",
        "drop --cloud/--region, or run `computewise catalog list offerings` to see where it is sold",
    )


def _replica_tps(accelerator: Accelerator, offering: Offering) -> tuple[int, ...]:
    """Tensor-parallel degrees one replica can span: up to the instance's GPUs on their own links; for a chip
    rented one at a time out of slices (Cloud TPU), one chip or a whole slice on its chips' links (ICI),
    as JetStream and vLLM on TPU shard a model over a v5e-4 or v5e-8. A group split over slices would
    all-reduce over the data-center network every layer, so none is planned."""
    if sold_by_the_chip(accelerator, offering):
        return tuple(tp for tp in _TP if tp == 1 or tp in accelerator.slice_sizes)
    return tuple(tp for tp in _TP if tp <= offering.accelerator_count)


def plan_infer(model: ModelSpec, catalog: Catalog, assumptions: Assumptions, c: InferConstraints) -> InferPlan:
    mean_rps = c.mean_requests_per_s
    if c.requests_per_s <= 0 or (mean_rps is not None and not 0 < mean_rps <= c.requests_per_s):
        raise InputError(
            "--peak-rps must be > 0 and --mean-rps in (0, --peak-rps]", "e.g. --peak-rps 200 --mean-rps 60"
        )
    utilization = assumptions.serving_target_utilization if c.target_utilization is None else c.target_utilization
    if not 0 < utilization <= 1:
        raise InputError(f"target utilization must be in (0, 1], got {utilization}", "e.g. 0.65")
    offerings = [
        o
        for o in catalog.offerings
        if (not c.accelerators or o.accelerator in c.accelerators)
        and (not c.clouds or o.cloud in c.clouds)
        and (not c.regions or o.region in c.regions)
    ]
    if not offerings:
        raise _no_offering(catalog, c)
    cheapest_rental(offerings, 1, c.pricing, "the offerings the filters leave")  # none priced: says which are
    offerings = [o for o in offerings if o.usd_per_h(c.pricing) is not None]
    options: list[InferOption] = []
    rejected: list[Rejection] = []
    fastest: dict[str, float] = {}  # accelerator slug -> its fastest request, where none meets the latency target
    considered = 0
    mean_rps = c.mean_requests_per_s if c.mean_requests_per_s is not None else c.requests_per_s
    for offering in offerings:
        accel = catalog.accelerator(offering.accelerator)
        one_gpu = offering_quote(catalog, offering, 1, c.pricing)
        profile = catalog.kernel_profile(accel.slug)
        rows = [
            (tp, precision, batch)
            for tp in _replica_tps(accel, offering)
            if (not model.heads or model.heads % tp == 0) and (tp == 1 or accel.interconnect_bytes_per_s > 0)
            for precision in c.precisions
            if accel.peak_flops.get(precision, 0.0) > 0
            for batch in _BATCHES
        ]
        considered += len(rows)
        if not any(accel.peak_flops.get(p, 0.0) > 0 for p in c.precisions):
            unsupported = f"{accel.name} runs none of {', '.join(c.precisions)}"
            rejected.append(Rejection(accel.slug, offering.accelerator_count, "precision", unsupported, 0))
        if not rows:
            continue
        tp = col([r[0] for r in rows])
        fabric = fabric_for(accel, offering, catalog, assumptions)  # a replica's TP group: one instance or slice
        shares = [profile_shares(profile, r[1], assumptions) for r in rows]
        columns = evaluate_infer(
            model,
            InferRows(
                tp=tp,
                batch=col([r[2] for r in rows]),
                context_len=col(c.input_len) + 0 * tp,
                output_len=col(c.output_len) + 0 * tp,
                weight_bytes=col([inference_weight_bytes(r[1]) for r in rows]),
                kv_bytes=col([1.0 if r[1] == "fp8" else 2.0 for r in rows]),
                act_bytes=col([inference_act_bytes(r[1]) for r in rows]),
                tensor_cores=col([tensor_core_flag(r[1]) for r in rows]),
                peak_flops=col([accel.peak_flops[r[1]] for r in rows]),
                memory_bandwidth_bytes_per_s=col(accel.memory_bandwidth_bytes_per_s) + 0 * tp,
                tp_bus_bytes_per_s=bus_bytes_per_s("all-reduce", tp, tp, fabric),
                tdp_w=col(server_w_per_device(accel, assumptions.server_host_power_fraction_of_tdp)) + 0 * tp,
                rental_usd_per_h=tp * one_gpu.hourly_usd,
                g_co2_per_kwh=col(one_gpu.carbon.g_co2_per_kwh) + 0 * tp,
                pue=col(one_gpu.pue) + 0 * tp,
                framework=col(SERVING_FRAMEWORK) + 0 * tp,
                execution=col(SERVING_EXECUTION) + 0 * tp,
                all_logits=col(0.0) + 0 * tp,
                matmul_fraction=col([share[0] for share in shares]),
                stream_fraction=col([share[1] for share in shares]),
                attention_peak_ratio=col([attention_peak_ratio(accel.peak_flops, r[1]) for r in rows]),
                sustained_fraction=col(sustained_share(profile, assumptions)) + 0 * tp,
                quantiser=col([serving_quantiser(r[1]) for r in rows]),
            ),
            assumptions,
        )
        fits = columns.memory.total <= accel.memory_bytes
        fast = columns.latency_s <= (c.latency_s if c.latency_s is not None else np.inf)
        if not fits.any():
            rejected.append(
                Rejection(
                    accel.slug,
                    offering.accelerator_count,
                    "memory",
                    f"does not fit: {format_bytes(float(columns.memory.total.min()))} > "
                    f"{format_bytes(accel.memory_bytes)} on {accel.name}",
                    len(rows),
                    offering.instance_type,
                )
            )
            continue
        if not (fits & fast).any():
            best = float(columns.latency_s[fits].min())
            fastest[accel.slug] = min(best, fastest.get(accel.slug, best))
            rejected.append(
                Rejection(
                    accel.slug,
                    offering.accelerator_count,
                    "latency",
                    f"fastest request takes {format_duration(best)} > target {format_duration(c.latency_s or 0.0)}",
                    len(rows),
                    offering.instance_type,
                )
            )
            continue
        ok = np.flatnonzero(fits & fast)
        best_row = int(ok[np.argmin(columns.usd_per_1000_requests[ok])])
        tp_best, precision, batch = rows[best_row]
        capacity = float(columns.requests_per_s[best_row]) * utilization
        replicas = max(1, math.ceil(round(c.requests_per_s / capacity, 9)))
        rented = offering_quote(catalog, offering, replicas * tp_best, c.pricing)
        hourly = rented.hourly_usd / replicas
        options.append(
            InferOption(
                accelerator=accel.slug,
                cloud=offering.cloud,
                instance_type=offering.instance_type,
                region=offering.region,
                gpus_per_replica=tp_best,
                precision=precision,
                batch=batch,
                replicas=replicas,
                latency_s=float(columns.latency_s[best_row]),
                requests_per_s_per_replica=float(columns.requests_per_s[best_row]),
                memory_bytes=memory_dict(columns.memory, best_row),
                usd_per_h_per_replica=hourly,
                usd_per_1000_requests=replicas * hourly / (c.requests_per_s * 3600.0) * 1000.0,
                always_on_usd_per_month=replicas * hourly * HOURS_PER_MONTH,
                scale_to_zero_usd_per_month=replicas * mean_rps / c.requests_per_s * hourly * HOURS_PER_MONTH,
                pricing=c.pricing,
                rental=rented.explanation,
                shared=rented.shared,
            )
        )
    if not options:
        # The binding constraint speaks first: accelerators too small to hold the model say nothing about latency.
        if fastest:
            raise InfeasiblePlanError(
                _too_slow(fastest, c.latency_s or 0.0), "raise --max-latency or use a smaller --output-len"
            )
        refuse_unrun_precision(rejected, c.precisions)
        raise InfeasiblePlanError(
            "no accelerator meets the memory need: " + "; ".join(_nearest_misses(rejected, catalog)),
            "use a larger accelerator, --precision fp8, or tensor parallelism across more GPUs",
        )
    ranked = sorted(options, key=lambda o: (o.always_on_usd_per_month, o.latency_s))
    return InferPlan(ranked[0], tuple(ranked), merge_rejections(rejected), considered)


def _nearest_misses(rejected: list[Rejection], catalog: Catalog, shown: int = 3) -> list[str]:
    """The memory rejections of the accelerators first by ``largest_first``, each reason once."""
    memory = (r for r in rejected if r.stage == "memory")
    short = sorted(memory, key=lambda r: largest_first(catalog.accelerator(r.accelerator)))
    return list(dict.fromkeys(r.reason for r in short))[:shown]


def _too_slow(fastest: dict[str, float], target_s: float) -> str:
    """The latency target once, then the fastest accelerators by name, quickest first.

    Each offering of an accelerator is rejected on its own; read out one by one, they repeated
    "fastest request takes 1.1 s" without saying which accelerator was that fast.
    """
    ranked = sorted(fastest.items(), key=lambda item: item[1])
    shown = ", ".join(f"{format_duration(latency)} on {slug}" for slug, latency in ranked[:3])
    more = f" (and {plural(len(ranked) - 3, 'slower accelerator')})" if len(ranked) > 3 else ""
    target = format_duration(target_s)
    return f"no accelerator meets the latency target of {target}: the fastest request takes {shown}{more}"
