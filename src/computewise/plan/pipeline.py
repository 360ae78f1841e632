"""``plan serve --pipeline``: replicas, bottleneck, end-to-end p99 and $ per 1000 requests of a multi-stage pipeline.

A pipeline request passes its stages in order; stage ``i`` makes ``fan_out_i`` calls per pipeline
request (a detector finding 3 objects makes 3 captioning calls), all at once, and the stage is done
when the last of them is. For a traffic level of ``R`` pipeline requests/s:

- **replicas**: stage ``i`` gets ``R x fan_out_i`` calls/s and is sized like ``plan serve`` sizes a
  service: ``ceil(calls / (capacity x u))``, ``u`` the target utilization; a replica's capacity is
  ``batch / latency of one batch``, from ``estimate``'s inference model on the stage's accelerator
  (a ``model`` stage), a latency measured at a batch size (``latency_ms``), or a loadtest result;
- **latency of a stage**: one batch's latency ``S`` plus the wait in a replica's queue, each replica
  an M/M/1 queue (Kleinrock 1975, vol. 1, ch. 3, the model ``plan.serve`` plans with) whose wait
  exceeds ``t`` with probability ``rho x exp(-(mu - lambda) t)``; ``k`` parallel calls finish at the
  maximum of ``k`` waits, whose quantile ``q`` is a single wait's quantile ``q^(1/k)``;
- **end-to-end p99**: the stages' latencies are **added as independent** variables. For Poisson
  arrivals through tandem M/M/1 queues a request's sojourn times at successive queues are
  independent (Reich 1957, "Waiting times when queues are in tandem", Ann. Math. Statist. 28; the
  product form of Jackson 1957), so the p99 of the sum is computed from that sum's distribution
  (sampled with a fixed seed). The **sum of the stage p99s** is also given: it is an upper bound,
  reached only if every stage were slow for the same requests;
- **bottleneck**: the stage whose replicas sustain the fewest pipeline requests/s
  (``replicas x capacity / fan_out``): the first to saturate when the traffic grows;
- **$ per 1000 requests**: every stage's replicas x its price per hour (``estimate.quote``, the one
  price quote), per 3.6 million pipeline requests an hour;
- **cheaper placements**: each ``model`` stage re-estimated on every other accelerator the catalog
  rents (it must fit in memory), kept when it is cheaper and the end-to-end p99 still meets the
  pipeline's ``slo_p99_ms``. A measured stage stays where it was measured.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np

from computewise.errors import ComputewiseError, InputError
from computewise.estimate.arrays import col
from computewise.estimate.assumptions import Assumptions
from computewise.estimate.collectives import bus_bytes_per_s, fabric_for
from computewise.estimate.cost import server_w_per_device
from computewise.estimate.infer import (
    SERVING_EXECUTION,
    SERVING_FRAMEWORK,
    InferRows,
    evaluate_infer,
    inference_act_bytes,
    inference_weight_bytes,
)
from computewise.estimate.kernels import attention_peak_ratio, profile_shares, serving_quantiser, sustained_share
from computewise.estimate.quote import Ask, PriceRequest, quote
from computewise.estimate.single import default_precision
from computewise.estimate.traced import tensor_core_flag
from computewise.limits import BATCH, LATENCY_MS, SEQUENCE_TOKENS, Limit
from computewise.plan.serve import replicas_needed
from computewise.specs import ModelSpec, Pricing
from computewise.specs.codec import Document, Jsonable, Layout, json_field, json_property
from computewise.units import check_range, format_bytes

if TYPE_CHECKING:
    from computewise.catalog import Catalog

__all__ = [
    "Alternative",
    "PipelinePlan",
    "PipelineSpec",
    "StagePlan",
    "StageSpec",
    "parse_pipeline",
    "plan_pipeline",
    "stage_latency_s",
]

_AT_LEAST_1 = json_field(minimum=1)

StageSource = Literal["model", "latency", "loadtest"]
_STAGE_KEYS = (
    "name",
    "model",
    "latency_ms",
    "loadtest",
    "accelerator",
    "gpus",
    "batch",
    "fan_out",
    "input_len",
    "output_len",
    "precision",
)
_TOP_KEYS = ("stages", "slo_p99_ms")
_FAN_OUT = Limit(0.001, 1e4, "a stage calling another more than 1e4 times per request is a batch job", "3")
_GPUS = Limit(1, 64, "a replica spans at most a few nodes", "1", integer=True)
_OUTPUT_TOKENS = Limit(0, 1e7, "0 for encoders and vision models; no model writes 1e7 tokens", "128", integer=True)
_SAMPLES = 200_000  # draws of the end-to-end latency: the p99 from 2,000 tail samples, to about 1 %
_SEED = 20_261_124
_ALTERNATIVES_PER_STAGE = 3


@dataclass(frozen=True)
class StageSpec:
    """One stage as the YAML file says it: what runs (a model, a measured latency, a loadtest) and where."""

    name: str
    accelerator: str  # catalog slug
    batch: int
    fan_out: float
    gpus: int = 1
    model: ModelSpec | None = None
    input_len: int = 512
    output_len: int = 0
    precision: str | None = None  # None: the accelerator's default serving precision
    latency_ms: float | None = None  # one batch of ``batch``, measured
    loadtest: str | None = None  # path of a loadtest --json result, relative to the pipeline file

    @property
    def source(self) -> StageSource:
        if self.model is not None:
            return "model"
        return "latency" if self.latency_ms is not None else "loadtest"


@dataclass(frozen=True)
class PipelineSpec:
    stages: tuple[StageSpec, ...]
    slo_p99_s: float | None
    source: str


@dataclass(frozen=True)
class Measured:
    """What a loadtest says of a stage's replica: its capacity and the median latency at it."""

    capacity_rps: float
    latency_s: float


@dataclass(frozen=True)
class StagePlan(Jsonable):
    """One stage placed and sized for the traffic."""

    name: str
    source: StageSource
    accelerator: str
    gpus: int = field(metadata=_AT_LEAST_1)
    batch: int = field(metadata=_AT_LEAST_1)
    fan_out: float
    calls_per_s: float
    capacity_rps_per_replica: float
    service_s: float  # one batch
    replicas: int = field(metadata=_AT_LEAST_1)
    utilization: float  # calls per replica / capacity
    p50_s: float
    p99_s: float
    usd_per_h_per_replica: float
    price: str

    @json_property(after="usd_per_h_per_replica")
    def usd_per_h(self) -> float:
        return self.replicas * self.usd_per_h_per_replica

    @json_property(after="usd_per_h")
    def max_pipeline_rps(self) -> float:
        """Pipeline requests/s these replicas sustain at full capacity."""
        return self.replicas * self.capacity_rps_per_replica / self.fan_out


@dataclass(frozen=True)
class Alternative(Jsonable):
    """A stage moved to another accelerator: cheaper, and the pipeline still within its SLO."""

    stage: str
    accelerator: str
    replicas: int
    usd_per_h: float
    saves_usd_per_1000_requests: float
    p99_s: float  # end-to-end, with this stage moved


@dataclass(frozen=True)
class PipelinePlan(Jsonable):
    json_document: ClassVar[Document] = Document(
        "plan-pipeline",
        "plan serve --pipeline FILE --json",
        "A multi-stage pipeline sized and priced for a traffic level (plan.pipeline.PipelinePlan): replicas per "
        "stage, the bottleneck, end-to-end p99, $ per 1000 requests, cheaper placements.",
    )
    json_layout: ClassVar[Layout] = (
        "rps",
        "target_utilization",
        "slo_p99_s",
        "meets_slo",
        "stages",
        "bottleneck_name",
        ("latency", ("p99_s", "p99_upper_s", "latency_rule")),
        "usd_per_h",
        "usd_per_1000_requests",
        "alternatives",
        "notes",
    )
    rps: float
    target_utilization: float
    slo_p99_s: float | None
    stages: tuple[StagePlan, ...] = field(metadata=json_field(min_items=1))
    p99_s: float  # end-to-end, stages independent (Reich 1957)
    p99_upper_s: float = field(metadata=json_field(name="p99_upper_bound_s"))  # sum of the stage p99s
    alternatives: tuple[Alternative, ...]
    notes: tuple[str, ...]

    @json_property(name="usd_per_hour")
    def usd_per_h(self) -> float:
        return sum(s.usd_per_h for s in self.stages)

    @json_property()
    def usd_per_1000_requests(self) -> float:
        return _per_1000(self.usd_per_h, self.rps)

    @property
    def bottleneck(self) -> StagePlan:
        return min(self.stages, key=lambda s: (s.max_pipeline_rps, -s.usd_per_h))

    @json_property(name="bottleneck")
    def bottleneck_name(self) -> str:
        return self.bottleneck.name

    @json_property()
    def meets_slo(self) -> bool | None:
        return None if self.slo_p99_s is None else self.p99_s <= self.slo_p99_s

    @json_property(name="rule")
    def latency_rule(self) -> str:
        """How ``p99_s`` adds the stages up, in words: the JSON and the tables both say it."""
        return (
            "stages independent (tandem M/M/1 queues, Reich 1957): p99 of the sum of stage latencies; "
            "the sum of stage p99s is an upper bound"
        )


# ----------------------------------------------------------------------------------------------- parsing


def parse_pipeline(data: object, source: str, catalog: Catalog, resolve_model: Any) -> PipelineSpec:
    """The YAML document (already loaded) checked key by key; every error names the stage and the key.

    ``resolve_model`` turns a ``model:`` value into a ``ModelSpec`` (``models.resolve_model``: a preset,
    a config.json path, a parameter count), as ``plan infer --model`` does.
    """
    if not isinstance(data, Mapping):
        raise InputError(f"{source}: expected a mapping with a 'stages' list", _EXAMPLE)
    _unknown_keys(data, _TOP_KEYS, source)
    stages_data = data.get("stages")
    if not isinstance(stages_data, list) or not stages_data:
        raise InputError(f"{source}: 'stages' must be a non-empty list", _EXAMPLE)
    slo = data.get("slo_p99_ms")
    slo_s = None if slo is None else _number(slo, f"{source}: slo_p99_ms", LATENCY_MS) / 1000.0
    stages: list[StageSpec] = []
    for index, raw in enumerate(stages_data):
        stage = _stage(raw, index, source, catalog, resolve_model)
        if any(s.name == stage.name for s in stages):
            raise InputError(f"{source}: stage {stage.name!r} is named twice", "give each stage its own name")
        stages.append(stage)
    return PipelineSpec(tuple(stages), slo_s, source)


_EXAMPLE = (
    "write e.g. stages: [{name: detect, model: vit-b-16, accelerator: t4, batch: 8, fan_out: 1}, "
    "{name: caption, model: llama-3-8b, accelerator: a100, batch: 16, fan_out: 3}]"
)


def _stage(raw: object, index: int, source: str, catalog: Catalog, resolve_model: Any) -> StageSpec:
    where = f"{source}: stage {index + 1}"
    if not isinstance(raw, Mapping):
        raise InputError(f"{where}: expected a mapping of keys", _EXAMPLE)
    name = raw.get("name")
    if not isinstance(name, str) or not name.strip():
        raise InputError(f"{where}: key 'name' must be a non-empty string", "e.g. name: detect")
    where = f"{source}: stage {name!r}"
    _unknown_keys(raw, _STAGE_KEYS, where)
    given = [key for key in ("model", "latency_ms", "loadtest") if raw.get(key) is not None]
    if len(given) != 1:
        raise InputError(
            f"{where}: give exactly one of 'model', 'latency_ms' or 'loadtest'"
            + (f" (got {', '.join(given)})" if given else ""),
            "model: a preset or config.json; latency_ms: one batch measured at 'batch'; loadtest: a --json result",
        )
    accelerator = raw.get("accelerator")
    if not isinstance(accelerator, str):
        raise InputError(f"{where}: key 'accelerator' must name a catalog accelerator", "e.g. accelerator: t4")
    try:
        slug = catalog.accelerator(accelerator).slug
    except ComputewiseError as error:
        raise InputError(f"{where}: key 'accelerator': {error.message}", error.hint) from None
    if "batch" not in raw:
        raise InputError(f"{where}: key 'batch' is missing", "e.g. batch: 8")
    batch = int(_number(raw["batch"], f"{where}: key 'batch'", BATCH))
    fan_out = _number(raw.get("fan_out", 1), f"{where}: key 'fan_out'", _FAN_OUT)
    gpus = int(_number(raw.get("gpus", 1), f"{where}: key 'gpus'", _GPUS))
    model = None
    if raw.get("model") is not None:
        try:
            model = resolve_model(str(raw["model"]))
        except ComputewiseError as error:
            raise InputError(f"{where}: key 'model': {error.message}", error.hint) from None
    default_input = (model.image_size // model.patch_size) ** 2 + 1 if model and model.patch_size else 512
    default_output = 128 if model is not None and model.architecture == "decoder" else 0
    input_len = int(_number(raw.get("input_len", default_input), f"{where}: key 'input_len'", SEQUENCE_TOKENS))
    output_len = int(_number(raw.get("output_len", default_output), f"{where}: key 'output_len'", _OUTPUT_TOKENS))
    precision = raw.get("precision")
    if precision is not None and precision not in ("fp32", "bf16", "fp16", "fp8", "int8"):
        raise InputError(f"{where}: key 'precision' must be fp32, bf16, fp16, fp8 or int8", "e.g. precision: bf16")
    latency = raw.get("latency_ms")
    loadtest = raw.get("loadtest")
    if loadtest is not None and not isinstance(loadtest, str):
        raise InputError(f"{where}: key 'loadtest' must be a file path", "e.g. loadtest: detect.json")
    return StageSpec(
        name=name.strip(),
        accelerator=slug,
        batch=batch,
        fan_out=fan_out,
        gpus=gpus,
        model=model,
        input_len=input_len,
        output_len=output_len,
        precision=None if precision is None else str(precision),
        latency_ms=None if latency is None else _number(latency, f"{where}: key 'latency_ms'", LATENCY_MS),
        loadtest=loadtest,
    )


def _unknown_keys(data: Mapping[Any, Any], known: Sequence[str], where: str) -> None:
    for key in data:
        if key not in known:
            close = difflib.get_close_matches(str(key), known, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"the keys are: {', '.join(known)}"
            raise InputError(f"{where}: unknown key {key!r}", hint)


def _number(value: object, what: str, limit: Limit) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(f"{what} must be a number, got {value!r}", f"e.g. {limit.example}")
    return check_range(float(value), what, limit)


# ----------------------------------------------------------------------------------------------- planning


def stage_latency_s(service_s: float, mu: float, lam: float, fan_out: float, q: float) -> float:
    """Quantile ``q`` of a stage's latency: one batch plus the longest of ``fan_out`` M/M/1 queue waits."""
    rho = lam / mu
    per_call_q = q ** (1.0 / fan_out)
    if rho <= 1.0 - per_call_q:
        return service_s
    return service_s + math.log(rho / (1.0 - per_call_q)) / (mu - lam)


@dataclass(frozen=True)
class _Placed:
    plan: StagePlan
    mu: float
    lam: float


def plan_pipeline(
    spec: PipelineSpec,
    rps: float,
    catalog: Catalog,
    assumptions: Assumptions,
    *,
    target_utilization: float,
    measured: Mapping[str, Measured] | None = None,
    pricing: Pricing = "on-demand",
    cloud: str | None = None,
    region: str | None = None,
) -> PipelinePlan:
    """Every stage sized and priced for ``rps`` pipeline requests/s, the end-to-end p99, and cheaper placements."""
    if not (rps > 0 and math.isfinite(rps)):
        raise InputError(f"pipeline traffic must be positive, got {rps} requests/s", "e.g. --peak-rps 50")
    if not 0 < target_utilization <= 1:
        raise InputError(f"target utilization must be in (0, 1], got {target_utilization}", "e.g. 0.65")
    flags = PriceRequest(None, None, cloud, region, pricing)
    measured = measured or {}
    placed: list[_Placed] = []
    for stage in spec.stages:
        if stage.source == "loadtest" and stage.name not in measured:
            raise InputError(f"{spec.source}: stage {stage.name!r}: its loadtest was not read", "give the file path")
        result = _place(stage, stage.accelerator, rps, catalog, assumptions, target_utilization, flags, measured)
        if isinstance(result, str):
            raise InputError(f"{spec.source}: stage {stage.name!r}: {result}", _FIX_PLACEMENT)
        placed.append(result)
    p99 = _end_to_end_p99_s(placed)
    alternatives: list[Alternative] = []
    for i, stage in enumerate(spec.stages):
        if stage.model is None:
            continue
        options: list[Alternative] = []
        for accelerator in catalog.accelerators:
            if accelerator.slug == stage.accelerator:
                continue
            moved = _place(stage, accelerator.slug, rps, catalog, assumptions, target_utilization, flags, measured)
            if isinstance(moved, str) or moved.plan.usd_per_h >= placed[i].plan.usd_per_h:
                continue
            trial = [*placed[:i], moved, *placed[i + 1 :]]
            trial_p99 = _end_to_end_p99_s(trial)
            if spec.slo_p99_s is not None and trial_p99 > spec.slo_p99_s:
                continue
            saves = _per_1000(placed[i].plan.usd_per_h - moved.plan.usd_per_h, rps)
            options.append(
                Alternative(stage.name, accelerator.slug, moved.plan.replicas, moved.plan.usd_per_h, saves, trial_p99)
            )
        options.sort(key=lambda a: (-a.saves_usd_per_1000_requests, a.p99_s))
        alternatives += options[:_ALTERNATIVES_PER_STAGE]
    notes = [
        "fan-out calls of a stage run at once; the stage waits for the last (the maximum of its calls' waits)",
        "each replica is its own M/M/1 queue (random or round-robin routing), as plan serve plans",
    ]
    if spec.slo_p99_s is None:
        notes.append("no slo_p99_ms in the pipeline file: cheaper placements are not held to a latency")
    elif p99 > spec.slo_p99_s:
        notes.append(
            f"the end-to-end p99 {p99 * 1000:.0f} ms misses the SLO of {spec.slo_p99_s * 1000:.0f} ms: "
            "lower the target utilization, the batch sizes or move the slowest stage to a faster accelerator"
        )
    if any(s.model is None for s in spec.stages):
        notes.append("measured stages stay on the accelerator they were measured on; give a model to compare places")
    return PipelinePlan(
        rps=rps,
        target_utilization=target_utilization,
        slo_p99_s=spec.slo_p99_s,
        stages=tuple(p.plan for p in placed),
        p99_s=p99,
        p99_upper_s=sum(p.plan.p99_s for p in placed),
        alternatives=tuple(alternatives),
        notes=tuple(notes),
    )


_FIX_PLACEMENT = "choose an accelerator the catalog rents, or price it in a catalog file (--catalog PATH)"


def _place(
    stage: StageSpec,
    accelerator: str,
    rps: float,
    catalog: Catalog,
    assumptions: Assumptions,
    utilization: float,
    flags: PriceRequest,
    measured: Mapping[str, Measured],
) -> _Placed | str:
    """The stage on ``accelerator``, sized for ``rps``; a string says why it cannot run there."""
    acc = catalog.accelerator(accelerator)
    if stage.model is not None:
        timed = _model_service(stage, stage.model, accelerator, catalog, assumptions)
        if isinstance(timed, str):
            return timed
        service_s, capacity = timed
    elif stage.latency_ms is not None:
        service_s = stage.latency_ms / 1000.0
        capacity = stage.batch / service_s
    else:
        capacity, service_s = measured[stage.name].capacity_rps, measured[stage.name].latency_s
    try:
        price = quote(catalog, Ask(acc, stage.gpus), flags)
    except ComputewiseError as error:
        return f"no price for {stage.gpus} x {acc.slug}: {error.message}"
    calls = rps * stage.fan_out
    replicas = replicas_needed(calls, capacity * utilization)
    lam = calls / replicas
    mu = capacity
    return _Placed(
        StagePlan(
            name=stage.name,
            source=stage.source,
            accelerator=acc.slug,
            gpus=stage.gpus,
            batch=stage.batch,
            fan_out=stage.fan_out,
            calls_per_s=calls,
            capacity_rps_per_replica=capacity,
            service_s=service_s,
            replicas=replicas,
            utilization=lam / capacity,
            p50_s=stage_latency_s(service_s, mu, lam, stage.fan_out, 0.5),
            p99_s=stage_latency_s(service_s, mu, lam, stage.fan_out, 0.99),
            usd_per_h_per_replica=price.hourly_usd,
            price=price.explanation,
        ),
        mu,
        lam,
    )


def _model_service(
    stage: StageSpec, model: ModelSpec, accelerator: str, catalog: Catalog, assumptions: Assumptions
) -> tuple[float, float] | str:
    """(latency of one batch, requests/s of a replica) from ``estimate``'s inference model, or why not."""
    acc = catalog.accelerator(accelerator)
    precision = stage.precision or default_precision(acc)
    peak = acc.peak_flops.get(precision, 0.0)  # type: ignore[call-overload]
    if peak <= 0:
        return f"{acc.slug} has no {precision} support"
    if model.heads and model.heads % stage.gpus:
        return f"{model.heads} heads do not split over {stage.gpus} GPUs"
    profile = catalog.kernel_profile(acc.slug)
    shares = profile_shares(profile, precision, assumptions)
    columns = evaluate_infer(
        model,
        InferRows(
            tp=col(stage.gpus),
            batch=col(stage.batch),
            context_len=col(stage.input_len),
            output_len=col(stage.output_len),
            weight_bytes=col(inference_weight_bytes(precision)),
            kv_bytes=col(1.0 if precision in ("fp8", "int8") else 2.0),
            act_bytes=col(inference_act_bytes(precision)),
            tensor_cores=col(tensor_core_flag(precision)),
            peak_flops=col(peak),
            memory_bandwidth_bytes_per_s=col(acc.memory_bandwidth_bytes_per_s),
            tp_bus_bytes_per_s=bus_bytes_per_s(
                "all-reduce",
                col(stage.gpus),
                col(stage.gpus),
                fabric_for(acc, None, catalog, assumptions, devices_per_node=stage.gpus),
            ),
            tdp_w=col(server_w_per_device(acc, assumptions.server_host_power_fraction_of_tdp)),
            rental_usd_per_h=col(0.0),
            g_co2_per_kwh=col(0.0),
            pue=col(1.0),
            framework=col(SERVING_FRAMEWORK),
            execution=col(SERVING_EXECUTION),
            all_logits=col(0.0),
            matmul_fraction=col(shares[0]),
            stream_fraction=col(shares[1]),
            attention_peak_ratio=col(attention_peak_ratio(acc.peak_flops, precision)),
            sustained_fraction=col(sustained_share(profile, assumptions)),
            quantiser=col(serving_quantiser(precision)),
        ),
        assumptions,
    )
    total = float(columns.memory.total.reshape(-1)[0])
    if total > acc.memory_bytes:
        return f"does not fit: {format_bytes(total)} > {format_bytes(acc.memory_bytes)} on {acc.slug}"
    latency_s = float(columns.latency_s.reshape(-1)[0])
    return latency_s, stage.batch / latency_s


def _end_to_end_p99_s(placed: Sequence[_Placed]) -> float:
    """p99 of the sum of independent stage latencies, sampled by inverse transform with a fixed seed."""
    rng = np.random.default_rng(_SEED)
    total = np.zeros(_SAMPLES)
    for p in placed:
        u = rng.random(_SAMPLES) ** (1.0 / p.plan.fan_out)  # the largest of fan_out waits, by its CDF F^k
        rho = p.lam / p.mu
        wait = np.where(u <= 1.0 - rho, 0.0, np.log(rho / np.maximum(1.0 - u, 1e-300)) / (p.mu - p.lam))
        total += p.plan.service_s + wait
    return float(np.quantile(total, 0.99))


def _per_1000(usd_per_h: float, rps: float) -> float:
    return usd_per_h / (rps * 3600.0) * 1000.0
