"""``plan train``: every accelerator x count x layout x precision x micro-batch x recompute x pricing.

Enumerate, filter, rank, in three passes that are exact, not heuristic:

1. Layouts for each GPU count, independent of the hardware: tensor (tp), pipeline (pp, with
   interleaved virtual stages), context (cp), expert (ep) and data (dp) parallelism, ZeRO stage,
   precision, micro-batch and recomputation, filtered by the model's shape and the global batch
   (see ``_layouts`` for the search space). Memory is computed once per layout.
2. Each hardware shape (accelerator, devices per node, network) at each instance count pairs with
   the layouts of its GPU count it can run and hold, timed through the same ``evaluate_train`` as
   ``estimate``.
3. Prices. For one rental, cost and energy grow with time, so the fastest layout of a hardware
   shape is also its cheapest: each (offering, instances, pricing) keeps that one layout, and the
   deadline, budget, ranking and Pareto frontier work on those options.

Step 2 leaves out, untimed, only rows that could not change the answer: a precision whose rows are as
fast as those of one listed before it on that accelerator and hold no less (same bytes, same gradient
buffer, same peak) could at best tie, and ties go to the first row. One exception is a policy, not a tie:
fp16 asked beside bf16 is planned only on chips without bf16 (``fp16_stands_in_for_bf16``). Every recompute
level that fits is timed: recomputing adds work, but a time model that hides more communication
behind a longer backward may still rank it first, so pruning it would be a heuristic.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt

from computewise.catalog.calibration import Calibration, find_calibration
from computewise.errors import InfeasiblePlanError, InputError
from computewise.estimate.adapters import Adapters
from computewise.estimate.arrays import FloatArray, col
from computewise.estimate.assumptions import Assumptions
from computewise.estimate.bottleneck import bottleneck
from computewise.estimate.calibrated import calibrated_compute, matmul_sizes
from computewise.estimate.collectives import (
    Fabric,
    fabric_for,
    node_network_bytes_per_s,
    sold_by_the_chip,
    stack_fabrics,
)
from computewise.estimate.cost import energy_kwh, server_w_per_device
from computewise.estimate.data_movement import DataSite, data_movement, egress_scope
from computewise.estimate.kernels import attention_peak_ratio, profile_shares, sustained_share
from computewise.estimate.layout import VIRTUAL_STAGES, stage_slots
from computewise.estimate.memory import (
    MemoryBreakdown,
    bytes_per_value,
    gradient_bytes_per_param,
    optimizer_bytes_per_param,
)
from computewise.estimate.pricing import cheapest_rental
from computewise.estimate.quantized import qlora_unsupported_reason
from computewise.estimate.quote import Quote, egress_usd_per_gb, offering_quote, server_quote
from computewise.estimate.single import memory_dict
from computewise.estimate.train import TrainColumns, TrainHardware, TrainLayout, evaluate_train, train_memory
from computewise.plan.result import (
    Option,
    Plan,
    Rejection,
    largest_first,
    merge_rejections,
    pareto_front,
    refuse_unrun_precision,
    scaling_curve,
)
from computewise.specs import (
    ATTENTION_KERNELS,
    CLOUD_PRICINGS,
    FRAMEWORKS,
    PRECISIONS,
    RECOMPUTES,
    Accelerator,
    FineTune,
    KernelProfile,
    ModelSpec,
    Offering,
    Optimizer,
    Precision,
    Pricing,
)
from computewise.specs.finetune import FULL_TRAINING, METHOD_NAMES
from computewise.units import format_bytes, format_duration, format_usd, plural

if TYPE_CHECKING:
    from computewise.catalog import Catalog

__all__ = [
    "CLOUD_PRICINGS",
    "DEFAULT_MAX_GPUS",
    "PLANNED_RECOMPUTES",
    "TRAIN_PRECISIONS",
    "TrainConstraints",
    "instance_counts",
    "plan_train",
]

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
Objective = Literal["cost", "time"]
_Table = dict[str, IntArray]

_ZERO = (0, 1, 2, 3)
_MICRO = (1, 2, 4, 8, 16, 32)
_CP = (1, 2, 4, 8, 16)
# Context parallelism pays a ring of K/V transfers per layer to save activation memory; below 8K
# tokens tp, sequence parallelism and recomputation already hold a sequence. From 8K on it competes
# with tp: Llama 3 405B ran cp 1 at 8K and cp 16 at 128K, NVIDIA's recipe for it runs cp 2 at 8K
# (NVIDIA/dgxc-benchmarking llama3.1): no published large run splits a sequence into chunks under
# 4K tokens, where each ring step has too little attention to hide its transfer behind and the
# attention kernels run on short tiles (the time model assumes the transfer hidden, so the rule
# keeps it where that holds).
_CP_MIN_SEQ_LEN = 8192
_CP_MIN_CHUNK_TOKENS = 4096
_EVAL_CHUNK_ROWS = 1 << 15  # rows per evaluate_train call: its temporaries stay in cache (2^15 measured fastest)

# The default (64 eight-GPU nodes) answers in well under a second over the whole catalog
# (benchmarks/speed.py); frontier runs raise it (16,384 plans in about half a second in-process,
# 131,072 works); limits.FLAG_LIMITS bounds --max-gpus.
DEFAULT_MAX_GPUS = 512

# Recompute levels the search tries, codes 0..2 of RECOMPUTES: none, Megatron's selective, full. PyTorch's
# op-level selective checkpointing is left to `estimate train --recompute op-selective`: the planner lays
# out split models the Megatron way, where Megatron's own policy is the one that exists.
PLANNED_RECOMPUTES = RECOMPUTES[:3]
_MEGATRON = FRAMEWORKS.index("megatron")
_PYTORCH = FRAMEWORKS.index("pytorch")
_TRANSFORMERS = FRAMEWORKS.index("transformers")

TRAIN_PRECISIONS: tuple[Precision, ...] = ("bf16", "fp16", "fp32")  # fp8 needs Transformer Engine: opt in


@dataclass(frozen=True)
class TrainConstraints:
    tokens: float
    seq_len: int
    global_batch: int
    optimizer: Optimizer = "adamw"
    deadline_s: float | None = None
    budget_usd: float | None = None
    max_gpus: int = DEFAULT_MAX_GPUS
    accelerators: tuple[str, ...] = ()  # slugs; empty: all
    clouds: tuple[str, ...] = ()
    regions: tuple[str, ...] = ()
    pricings: tuple[Pricing, ...] = CLOUD_PRICINGS
    precisions: tuple[Precision, ...] = TRAIN_PRECISIONS
    objective: Objective = "cost"
    data: DataSite | None = None  # where the dataset lives (--data-region, --dataset-size)
    methods: tuple[FineTune, ...] = (FULL_TRAINING,)  # what trains; several: the cheapest of them wins
    # Tensor-parallel layouts hide their collectives behind the GEMMs (Transformer Engine's userbuffers, as
    # NVIDIA's Llama 3 70B and 405B recipes run; ``estimate.step._overlapped_tp_s``): opt in, as fp8 is.
    tp_overlap: bool = False


def instance_counts(devices_per_node: int, max_gpus: int) -> list[int]:
    """Powers of two of instances up to ``max_gpus`` devices.

    Not every count: dp x micro-batch must divide the global batch, which is a power of two of
    sequences in practice, so a count with an odd factor needs pp or tp to absorb it, which the
    model's shape rarely allows; doubling also keeps a 100k-GPU search to 17 counts per machine.
    """
    counts: list[int] = []
    n = 1
    while n * devices_per_node <= max_gpus:
        counts.append(n)
        n *= 2
    return counts


def _tp_degrees(model: ModelSpec, max_tp: int) -> list[int]:
    """Divisors of the attention heads up to the largest node: each rank keeps whole heads."""
    if not model.is_transformer:
        return [1]
    return [t for t in range(1, max_tp + 1) if model.heads % t == 0]


def _pp_degrees(model: ModelSpec) -> list[int]:
    """Stage counts that split the layers evenly, or evenly once the embedding and head count as a
    layer each (Llama 3 405B: 126 layers on 16 stages, the first and last holding 7; arXiv:2407.21783
    section 3.3.2). At most one layer per stage."""
    layers = model.total_layers
    if not model.is_transformer or layers < 2:
        return [1]
    return [p for p in range(1, layers + 1) if layers % p == 0 or (layers + 2) % p == 0]


def _cp_degrees(model: ModelSpec, seq_len: int) -> list[int]:
    """Ranks a sequence is split over: long sequences only, in 2 x cp load-balanced causal chunks."""
    if not model.is_transformer or seq_len < _CP_MIN_SEQ_LEN:
        return [1]
    return [c for c in _CP if c == 1 or (seq_len % (2 * c) == 0 and seq_len // c >= _CP_MIN_CHUNK_TOKENS)]


def _ep_degrees(model: ModelSpec) -> list[int]:
    """Ranks the experts of an MoE layer are spread over: divisors of the expert count."""
    if model.experts <= 1 or not model.is_transformer:
        return [1]
    return [e for e in range(1, model.experts + 1) if model.experts % e == 0]


def _cross(table: _Table, name: str, values: Iterable[int]) -> _Table:
    """Every row of ``table`` with every one of ``values`` as column ``name``, which varies fastest."""
    column = np.fromiter(values, dtype=np.int64)
    rows = len(next(iter(table.values())))
    out = {key: np.repeat(v, len(column)) for key, v in table.items()}
    out[name] = np.tile(column, rows)
    return out


def _where(table: _Table, keep: BoolArray) -> _Table:
    return {key: v[keep] for key, v in table.items()}


@dataclass(frozen=True)
class _Layouts:
    """Every layout of every GPU count, sorted by GPU count.

    The recompute levels of one layout are ``levels`` consecutive rows that differ in nothing else.
    """

    rows: TrainLayout
    gpus: IntArray
    tp: IntArray
    precision: IntArray  # index in PRECISIONS
    levels: int


def _layouts(
    model: ModelSpec, gpu_counts: Sequence[int], max_tp: int, c: TrainConstraints, finetune: FineTune = FULL_TRAINING
) -> _Layouts:
    """Every layout the model's shape and the global batch allow, for each GPU count.

    - tp: divisors of the heads up to ``max_tp`` (the largest node; pairing keeps tp inside one node,
      where every published frontier run keeps it: its all-reduces sit on every layer's critical path);
    - pp: see ``_pp_degrees``; cp: see ``_cp_degrees``; ep (MoE only): divisors of the experts that
      divide the dp x cp ranks it spreads experts over, adding no GPUs;
    - virtual stages v > 1 (Megatron's interleaved 1F1B) when pp > 1, the stage slots split into
      pp x v chunks, and the micro-batches per step are a multiple of pp, as Megatron requires;
    - dp = gpus / (tp pp cp), dp x micro-batch dividing the global batch; ZeRO only with dp > 1;
    - framework: Megatron (its activation layout) whenever tp, pp, cp or ep > 1, which only
      Megatron-style frameworks run; plain data parallelism is PyTorch DDP/FSDP under autocast,
      what most users of it run and what ``computewise train`` runs; LoRA and QLoRA run as PEFT
      runs them, on Hugging Face's modules (``estimate.layout.default_framework``), data parallel
      only (DDP, FSDP or DeepSpeed ZeRO: PEFT's models are not split by tp, pp or cp).
    """
    splittable = model.is_transformer and not finetune.adapted  # PEFT runs data parallel (DDP, FSDP, ZeRO)
    layers = max(model.total_layers, 1)
    t: _Table = {"gpus": np.array(sorted(set(gpu_counts)), dtype=np.int64)}
    t = _cross(t, "tp", _tp_degrees(model, max_tp) if splittable else (1,))
    t = _cross(t, "pp", _pp_degrees(model) if splittable else (1,))
    t = _cross(t, "cp", _cp_degrees(model, c.seq_len) if splittable else (1,))
    t = _where(t, t["gpus"] % (t["tp"] * t["pp"] * t["cp"]) == 0)
    t["dp"] = t["gpus"] // (t["tp"] * t["pp"] * t["cp"])
    t = _cross(t, "micro", _MICRO)
    t = _where(t, c.global_batch % (t["dp"] * t["micro"]) == 0)
    t = _cross(t, "v", VIRTUAL_STAGES if splittable else (1,))
    microbatches = c.global_batch // (t["dp"] * t["micro"])
    interleavable = (
        (t["pp"] > 1) & (stage_slots(layers, t["pp"]) % (t["pp"] * t["v"]) == 0) & (microbatches % t["pp"] == 0)
    )
    t = _where(t, (t["v"] == 1) | interleavable)
    t = _cross(t, "ep", _ep_degrees(model) if splittable else (1,))
    t = _where(t, (t["dp"] * t["cp"]) % t["ep"] == 0)
    t = _cross(t, "zero", _ZERO)
    # ZeRO shards over dp x cp (the ranks holding the same weights); over one rank every stage is stage 0.
    t = _where(t, (t["dp"] * t["cp"] > 1) | (t["zero"] == 0))
    t = _where(t, (t["pp"] == 1) | (t["zero"] < 3))  # ZeRO-3 gathers every layer each micro-batch: no pipeline
    # PEFT's adapters compute in 16 or 32 bits (estimate.single.adapters_for refuses fp8 for them).
    precisions = [p for p in c.precisions if not (finetune.adapted and p == "fp8")]
    if not precisions:
        raise InputError(
            f"{METHOD_NAMES[finetune.method]} computes in 16 or 32 bits (PEFT's layers): --precision fp8 leaves none",
            "add --precision bf16 (or fp16 where the GPU has no bf16)",
        )
    t = _cross(t, "precision", (PRECISIONS.index(p) for p in precisions))
    levels = len(PLANNED_RECOMPUTES) if model.is_transformer else 1
    t = _cross(t, "recompute", range(levels))

    rows = len(t["gpus"])
    precision = t["precision"]
    weight = np.array([bytes_per_value(p) for p in PRECISIONS])
    optimizer = np.array([optimizer_bytes_per_param(c.optimizer, p) for p in PRECISIONS])
    model_parallel = (t["tp"] > 1) | (t["pp"] > 1) | (t["cp"] > 1) | (t["ep"] > 1)
    layout = TrainLayout(
        tp=col(t["tp"]),
        pp=col(t["pp"]),
        dp=col(t["dp"]),
        zero=col(t["zero"]),
        micro_batch=col(t["micro"]),
        global_batch=np.full(rows, float(c.global_batch)),
        seq_len=np.full(rows, float(c.seq_len)),
        recompute=col(t["recompute"]),
        sequence_parallel=col(t["tp"] > 1),
        attention=np.full(rows, float(ATTENTION_KERNELS.index("flash"))),
        weight_bytes=weight[precision],
        optimizer_bytes=optimizer[precision],
        cp=col(t["cp"]),
        ep=col(t["ep"]),
        virtual_stages=col(t["v"]),
        framework=col(np.where(model_parallel, _MEGATRON, _PYTORCH))
        if not finetune.adapted
        else np.full(rows, float(_TRANSFORMERS)),
        execution=np.zeros(rows),
        loss=np.zeros(rows),  # the framework's own cross entropy
        grad_reduce=np.zeros(rows),  # the framework's default width
        precision=col(precision),
        zero_group=np.zeros(rows),  # ZeRO over all dp x cp ranks
        tp_overlap=np.where((t["tp"] > 1) & c.tp_overlap, 1.0, 0.0),  # exposed unless asked: Megatron's default
    )
    return _Layouts(rows=layout, gpus=t["gpus"], tp=t["tp"], precision=precision, levels=levels)


@dataclass(frozen=True)
class _Hardware:
    """One machine shape: offerings that differ only in price or region share its speed."""

    accelerator: Accelerator
    devices_per_node: int  # on their own links: an instance's, a server's, or a TPU slice's chips
    node_network_bytes_per_s: float  # all NICs of one node
    prices: tuple[Quote, ...]  # one instance (or owned server) of each offering, at each pricing
    fabric: Fabric  # one row: the links and NICs with their efficiencies and latencies
    profile: KernelProfile | None  # the catalog's burst shares of its kernels (kernel_profiles.csv)
    calibration: Calibration | None = None  # what ``computewise bench --save`` measured on this accelerator


def _matching(catalog: Catalog, c: TrainConstraints) -> list[Offering]:
    """Offerings that train and pass the accelerator, cloud and region filters, at any price."""
    wanted = set(c.accelerators)
    return [
        o
        for o in catalog.offerings
        if (not wanted or o.accelerator in wanted)
        and (not c.clouds or o.cloud in c.clouds)
        and (not c.regions or o.region in c.regions)
        and catalog.accelerator(o.accelerator).trains
    ]


def _hardware(
    catalog: Catalog,
    c: TrainConstraints,
    assumptions: Assumptions,
    calibrations: Mapping[str, Calibration] | None = None,
) -> list[_Hardware]:
    """Machine shapes with their prices: one whole instance or owned server each, quoted by ``estimate.quote``."""
    wanted = set(c.accelerators)
    shapes: dict[tuple[str, int, float, str], list[Quote]] = {}
    fabrics: dict[tuple[str, int, float, str], Fabric] = {}
    cloud_pricings = [p for p in c.pricings if p != "on-prem"]
    for o in _matching(catalog, c):
        accel = catalog.accelerator(o.accelerator)
        for devices in _node_sizes(accel, o):
            network = node_network_bytes_per_s(o, devices)
            key = (o.accelerator, devices, network, o.fabric)
            if key not in fabrics:
                fabrics[key] = fabric_for(accel, o, catalog, assumptions, devices_per_node=devices)
            for pricing in cloud_pricings:
                if o.usd_per_h(pricing) is not None:
                    shapes.setdefault(key, []).append(offering_quote(catalog, o, o.accelerator_count, pricing))
    if "on-prem" in c.pricings:
        for server in catalog.onprem:
            if wanted and server.accelerator not in wanted:
                continue
            accel = catalog.accelerator(server.accelerator)
            owned = server_quote(catalog, server, server.accelerator_count)
            network = owned.node_network_bytes_per_s
            key = (server.accelerator, server.accelerator_count, network, "")
            if key not in fabrics:
                alone = fabric_for(accel, None, catalog, assumptions, devices_per_node=server.accelerator_count)
                fabrics[key] = replace(alone, node_network_bytes_per_s=col(network))
            shapes.setdefault(key, []).append(owned)
    measured = {slug: _calibration(slug, calibrations) for slug in {key[0] for key in shapes}}
    return [
        _Hardware(
            catalog.accelerator(key[0]),
            key[1],
            key[2],
            tuple(prices),
            fabrics[key],
            catalog.kernel_profile(key[0]),
            measured[key[0]],
        )
        for key, prices in sorted(shapes.items())
    ]


def _node_sizes(accelerator: Accelerator, offering: Offering) -> tuple[int, ...]:
    """The nodes an offering makes: its instance, or each slice of a chip rented one at a time (Cloud TPU),
    whose chips share their own links (``estimate.collectives.node_devices``)."""
    if sold_by_the_chip(accelerator, offering):
        return accelerator.slice_sizes
    return (offering.accelerator_count,)


def _planned_slices(h: _Hardware, nodes: int) -> bool:
    """Whether to plan ``nodes`` of ``h``: any count of instances, but for a chip sold in slices one slice, or
    equal slices of the largest size that divides the count where no single slice holds it (Multislice). A job
    that one slice holds is never split over the data-center network (no 2-chip TPU v5e: no engine runs it)."""
    sizes = h.accelerator.slice_sizes
    if not sizes:
        return True
    chips = nodes * h.devices_per_node
    return h.accelerator.slice_chips(chips) == h.devices_per_node and (nodes == 1 or chips > sizes[-1])


def _calibration(slug: str, given: Mapping[str, Calibration] | None) -> Calibration | None:
    """The calibration given for ``slug``, else the one ``bench --save`` left in the user catalog, else None."""
    if given is not None and slug in given:
        return given[slug]
    return find_calibration(slug)


def _units(hardware: Sequence[_Hardware], c: TrainConstraints) -> tuple[list[tuple[int, int]], list[Rejection]]:
    """(hardware shape, instances) pairs to plan, and the shapes held to fewer devices by unknown links."""
    rejections: list[Rejection] = []
    units: list[tuple[int, int]] = []
    for h_index, h in enumerate(hardware):
        for n in instance_counts(h.devices_per_node, c.max_gpus):
            if not _planned_slices(h, n):
                continue
            if n * h.devices_per_node > 1 and h.accelerator.interconnect_bytes_per_s <= 0:
                reason = (
                    f"interconnect bandwidth of {h.accelerator.name} is not in the catalog; planned on one device only"
                )
                rejections.append(Rejection(h.accelerator.slug, n * h.devices_per_node, "network", reason, 0))
                break
            if n > 1 and h.node_network_bytes_per_s <= 0:
                name = h.prices[0].instance_type
                reason = f"network bandwidth of {name} is not in the catalog; planned on one instance only"
                rejections.append(Rejection(h.accelerator.slug, n * h.devices_per_node, "network", reason, 0))
                break
            units.append((h_index, n))
    return units, rejections


@dataclass(frozen=True)
class _Pairing:
    """The layouts one (accelerator, devices per node, GPU count) times, or why it times none."""

    rows: IntArray  # layout rows that fit, in a precision the accelerator runs, precisions deduplicated
    runnable: int  # layouts of this GPU count with tp inside the node: the candidates it considered
    stage: str = ""  # precision | memory | batch, when ``rows`` is empty
    reason: str = ""


# What makes a job that does not fit smaller, by method: the planner already tried every recompute
# level, ZeRO stage and micro-batch down to 1, so these are what is left to the user.
_MEMORY_FIXES: dict[str, str] = {
    "full": "LoRA or QLoRA (--method lora,qlora) train a fraction of the weights, or a shorter --seq-len",
    "lora": "QLoRA (--method qlora) stores the frozen base in 4 bits, or a shorter --seq-len",
    "qlora": "a shorter --seq-len, fewer --lora-targets or a smaller --lora-rank, or a GPU with more memory",
}


def fp16_stands_in_for_bf16(accelerator: Accelerator, precisions: Sequence[str]) -> bool:
    """Whether fp16 is left out on ``accelerator``: asked beside bf16, it is planned only on chips without
    bf16 (V100, T4). Its narrow range needs loss scaling that bf16 made unnecessary, and under Megatron its
    16-bit gradient reduce would win it every large run by a few percent of communication, a trade no
    published frontier run makes. Asked alone, fp16 is planned everywhere."""
    return "bf16" in precisions and accelerator.peak_flops.get("bf16", 0.0) > 0


def _interchangeable(accelerator: Accelerator, c: TrainConstraints) -> BoolArray:
    """Per FRAMEWORKS x PRECISIONS index: whether to time it on ``accelerator``. A precision with the bytes,
    the gradient buffer and the peak of one listed before it yields rows as fast, so it could only tie,
    and ties go to the first (fp16 after bf16 under autocast: the same time and memory). Under Megatron's
    layout fp16 differs: it reduces 16-bit gradients where bf16 reduces fp32 ones, and keeps an fp32
    gradient copy more."""
    keep = np.zeros((len(FRAMEWORKS), len(PRECISIONS)), dtype=np.bool_)
    skipped = {"fp16"} if fp16_stands_in_for_bf16(accelerator, c.precisions) else set()
    planned = [p for p in c.precisions if p not in skipped]
    for f in range(len(FRAMEWORKS)):
        seen: set[tuple[float, float, float, float]] = set()
        for p in planned:
            peak = accelerator.peak_flops.get(p, 0.0)
            gradients = gradient_bytes_per_param(
                col(float(f)), col(float(PRECISIONS.index(p))), col(bytes_per_value(p))
            )
            signature = (bytes_per_value(p), optimizer_bytes_per_param(c.optimizer, p), peak, float(gradients))
            if peak > 0 and signature not in seen:
                seen.add(signature)
                keep[f, PRECISIONS.index(p)] = True
    return keep


def _pair(
    layouts: _Layouts,
    total_bytes: FloatArray,
    span: tuple[int, int],
    accelerator: Accelerator,
    devices_per_node: int,
    c: TrainConstraints,
    finetune: FineTune = FULL_TRAINING,
) -> _Pairing:
    """The layout rows worth timing on ``accelerator`` for one GPU count (rows ``span`` of ``layouts``).

    Exact: tp inside the node, a precision the chip runs, memory that fits; of precisions that would
    yield identical rows only the first is kept (see the module docstring).
    """
    lo, hi = span
    levels = layouts.levels
    gpus = int(layouts.gpus[lo]) if hi > lo else 0
    base = slice(lo, hi, levels)
    inside = devices_per_node % layouts.tp[base] == 0
    runnable = int(inside.sum()) * levels
    if not runnable:
        return _Pairing(np.empty(0, np.int64), 0, "batch", "")
    peaks = np.array([accelerator.peak_flops.get(p, 0.0) for p in PRECISIONS])
    runs = inside & (peaks[layouts.precision[base]] > 0)
    if not runs.any():
        return _Pairing(
            np.empty(0, np.int64), runnable, "precision", f"{accelerator.name} runs none of {', '.join(c.precisions)}"
        )
    fits = total_bytes[lo:hi].reshape(-1, levels) <= accelerator.memory_bytes
    frameworks = layouts.rows.framework.reshape(-1)[base].astype(np.intp)
    timed = runs & _interchangeable(accelerator, c)[frameworks, layouts.precision[base]] & fits.any(axis=1)
    if not timed.any():
        need = float(total_bytes[lo:hi].reshape(-1, levels)[runs].min())
        return _Pairing(
            np.empty(0, np.int64),
            runnable,
            "memory",
            f"does not fit: {format_bytes(need)} > {format_bytes(accelerator.memory_bytes)} on "
            f"{accelerator.name} even with the leanest layout on {plural(gpus, 'GPU')} "
            f"({format_bytes(need - accelerator.memory_bytes)} over); {_MEMORY_FIXES[finetune.method]}",
        )
    return _Pairing(lo + np.flatnonzero((fits & timed[:, None]).reshape(-1)), runnable)


def _take_memory(memory: MemoryBreakdown, index: IntArray) -> MemoryBreakdown:
    """Rows ``index`` of every column; optional columns that are absent (None) stay absent."""
    taken: dict[str, Any] = {}
    for f in fields(memory):
        column = getattr(memory, f.name)
        taken[f.name] = None if column is None else column[index]
    return replace(memory, **taken)


def _train_hardware(
    hardware: Sequence[_Hardware], shape: IntArray, precision: IntArray, assumptions: Assumptions
) -> TrainHardware:
    """Hardware columns for rows on shapes ``shape`` at PRECISIONS ``precision``; prices come per offering later."""

    def per_row(values: list[float]) -> FloatArray:
        return np.array(values, dtype=np.float64)[shape]

    peak_table = np.array([[h.accelerator.peak_flops.get(p, 0.0) for p in PRECISIONS] for h in hardware])
    shares = np.array([[profile_shares(h.profile, p, assumptions) for p in PRECISIONS] for h in hardware])
    ratios = np.array([[attention_peak_ratio(h.accelerator.peak_flops, p) for p in PRECISIONS] for h in hardware])
    zeros = np.zeros(len(shape))
    return TrainHardware(
        peak_flops=peak_table[shape, precision],
        memory_bandwidth_bytes_per_s=per_row([h.accelerator.memory_bandwidth_bytes_per_s for h in hardware]),
        fabric=stack_fabrics([h.fabric for h in hardware]).take(shape),
        tdp_w=per_row(
            [server_w_per_device(h.accelerator, assumptions.server_host_power_fraction_of_tdp) for h in hardware]
        ),
        rental_usd_per_h=zeros,  # priced per offering below
        spot=zeros + 1.0,  # time_s is the time on spot; failure_slowdown gives the time off it
        g_co2_per_kwh=zeros,
        pue=zeros + 1.0,
        matmul_fraction=shares[shape, precision, 0],
        stream_fraction=shares[shape, precision, 1],
        attention_peak_ratio=ratios[shape, precision],
        sustained_fraction=per_row([sustained_share(h.profile, assumptions) for h in hardware]),
    )


def _calibrated(
    plain: TrainHardware,
    calibrated: Sequence[tuple[int, Calibration]],
    shape: IntArray,
    precision: IntArray,
    model: ModelSpec,
    rows: TrainLayout,
    assumptions: Assumptions,
    kinds: Sequence[str],
) -> TrainHardware:
    """``plain`` with the measured peak, bandwidth and share on the rows of calibrated accelerators
    (``estimate.calibrated``, the same as ``estimate train``); other rows keep the assumed model (NaN)."""
    peak = plain.peak_flops.reshape(-1).copy()
    bandwidth = plain.memory_bandwidth_bytes_per_s.reshape(-1).copy()
    utilization = np.full(len(shape), np.nan)
    fraction = np.array(plain.matmul_fraction, dtype=np.float64).reshape(-1)
    stream = np.array(plain.stream_fraction, dtype=np.float64).reshape(-1)
    sizes = matmul_sizes(model, rows.micro_batch, rows.seq_len, rows.cp, rows.tp).reshape(-1)
    for h_index, calibration in calibrated:
        for p_index, name in enumerate(PRECISIONS):
            mask = (shape == h_index) & (precision == p_index)
            cpu = kinds[h_index] == "cpu"
            measured = calibrated_compute(calibration, name, sizes[mask], whole_steps=cpu) if mask.any() else None
            if measured is None:
                continue
            peak[mask] = measured.peak_flops
            if measured.memory_bandwidth_bytes_per_s:
                bandwidth[mask] = measured.memory_bandwidth_bytes_per_s
                stream[mask] = 1.0
            if measured.whole_step:
                utilization[mask] = measured.share
            else:
                fraction[mask] = measured.share
    return replace(
        plain,
        peak_flops=peak.reshape(plain.peak_flops.shape),
        memory_bandwidth_bytes_per_s=bandwidth.reshape(plain.memory_bandwidth_bytes_per_s.shape),
        utilization=utilization,
        matmul_fraction=fraction,
        stream_fraction=stream,
    )


@dataclass(frozen=True)
class _Timing:
    """What timing one method's rows needs beyond the rows themselves: the model, the method's layouts, their
    memory and adapters, and the machine shapes. Its rows are (layout, shape) index pairs, timed in chunks
    for the search and again in full for the chosen ones."""

    model: ModelSpec
    c: TrainConstraints
    assumptions: Assumptions
    layouts: _Layouts
    memory: MemoryBreakdown
    hardware: Sequence[_Hardware]
    adapters: Adapters | None

    def evaluate(self, layout_index: IntArray, shape: IntArray) -> TrainColumns:
        """``evaluate_train`` on (layout, shape) rows."""
        rows = self.layouts.rows.take(layout_index)
        precision = self.layouts.precision[layout_index]
        hardware, assumptions = self.hardware, self.assumptions
        train_hardware = _train_hardware(hardware, shape, precision, assumptions)
        calibrated = [(index, h.calibration) for index, h in enumerate(hardware) if h.calibration is not None]
        if calibrated:
            kinds = [h.accelerator.kind for h in hardware]
            train_hardware = _calibrated(
                train_hardware, calibrated, shape, precision, self.model, rows, assumptions, kinds
            )
        return evaluate_train(
            self.model,
            self.c.tokens,
            rows,
            train_hardware,
            assumptions,
            memory=_take_memory(self.memory, layout_index),
            adapters=self.adapters,
        )

    def times(self, layout_index: IntArray, shape: IntArray) -> tuple[FloatArray, FloatArray]:
        """(time on reserved or on-demand capacity, time on spot) of every row, a chunk at a time."""
        rows = len(layout_index)
        base_s, spot_s = np.empty(rows), np.empty(rows)
        for start in range(0, rows, _EVAL_CHUNK_ROWS):
            part = slice(start, start + _EVAL_CHUNK_ROWS)
            columns = self.evaluate(layout_index[part], shape[part])
            base_s[part] = columns.steps * columns.step_s * columns.failure_slowdown
            spot_s[part] = columns.time_s
        return base_s, spot_s


def _fastest(time_s: FloatArray, sizes: IntArray) -> IntArray:
    """Row of the least time in each group of ``sizes`` consecutive rows (the first on ties; -1 when empty)."""
    best = np.full(len(sizes), -1, dtype=np.int64)
    if not len(time_s):
        return best
    values = np.where(np.isnan(time_s), np.inf, time_s)
    starts = np.cumsum(sizes) - sizes
    nonempty = np.flatnonzero(sizes > 0)
    least = np.minimum.reduceat(values, starts[nonempty])
    hits = np.flatnonzero(values == np.repeat(least, sizes[nonempty]))
    group = np.repeat(np.arange(len(sizes)), sizes)[hits]
    groups, first = np.unique(group, return_index=True)
    best[groups] = hits[first]
    return best


def plan_train(
    model: ModelSpec,
    catalog: Catalog,
    assumptions: Assumptions,
    constraints: TrainConstraints,
    calibrations: Mapping[str, Calibration] | None = None,
) -> Plan:
    """The recommended configuration, its Pareto frontier and every rejection.

    An accelerator with a calibration (``calibrations`` by slug, else one ``bench --save`` left in
    the user catalog) is timed with its measured peak and efficiency, as ``estimate train`` does.
    """
    c = constraints
    hardware = _hardware(catalog, c, assumptions, calibrations)
    if not hardware:
        matching = _matching(catalog, c)
        for pricing in c.pricings:
            if matching and pricing != "on-prem":
                cheapest_rental(matching, 1, pricing, "the offerings the filters leave")  # says what is priced
        owned = sorted({s.accelerator for s in catalog.onprem if not c.accelerators or s.accelerator in c.accelerators})
        on_prem = (
            f"; the catalog lists {', '.join(owned)} as owned, not rented: add --pricing on-prem"
            if owned and "on-prem" not in c.pricings
            else ""
        )
        raise InputError(
            "no offering in the catalog matches the accelerator, cloud, region and pricing filters",
            f"drop a filter, or run `computewise catalog list offerings` to see what is sold where{on_prem}",
        )
    units, rejections = _units(hardware, c)
    if not units:
        raise InputError(
            f"--max-gpus {c.max_gpus} is smaller than the smallest matching instance",
            "raise --max-gpus or choose an accelerator sold in smaller instances",
        )
    options: list[Option] = []
    considered = 0
    for finetune in c.methods:
        found = _method_options(model, assumptions, c, hardware, units, finetune)
        options.extend(found.options)
        rejections.extend(found.rejections)
        considered += found.considered
    if c.data is not None:
        options = [_with_data(option, c.data, catalog, model, c.tokens) for option in options]
    # An accelerator's memory; a CPU socket's host RAM is not what a user asking where a model fits is after.
    sizes = {h.accelerator.slug: largest_first(h.accelerator) for h in hardware}
    return _select(options, rejections, c, considered, sizes)


@dataclass(frozen=True)
class _MethodOptions:
    """What one fine-tuning method yields: the fastest layout of each priced unit, and the rejections."""

    options: list[Option]
    rejections: list[Rejection]
    considered: int


def _method_options(
    model: ModelSpec,
    assumptions: Assumptions,
    c: TrainConstraints,
    hardware: Sequence[_Hardware],
    units: Sequence[tuple[int, int]],
    finetune: FineTune,
) -> _MethodOptions:
    """Passes 1 and 2 of the module docstring for one method: its layouts, their memory, each unit paired
    with the layouts it can hold, and the fastest of them priced. QLoRA skips accelerators that lack
    bitsandbytes' 4-bit kernels, with the reason as a rejection."""
    rejections: list[Rejection] = []
    if finetune.quantized:
        lacking = {i: qlora_unsupported_reason(hardware[i].accelerator, finetune.four_bit) for i, _ in units}
        for i, reason in sorted(lacking.items()):
            if reason is not None:
                rejections.append(Rejection(hardware[i].accelerator.slug, 0, "method", f"QLoRA: {reason}", 0))
        units = [(i, n) for i, n in units if lacking[i] is None]
    if not units:
        return _MethodOptions([], rejections, 0)
    adapters = Adapters.of(model, finetune, c.optimizer)
    unit_gpus = [n * hardware[h].devices_per_node for h, n in units]
    layouts = _layouts(model, unit_gpus, max(h.devices_per_node for h in hardware), c, finetune)
    memory = train_memory(model, layouts.rows, assumptions, adapters)
    total_bytes = memory.total

    # Pair each unit with the layouts of its GPU count it can run and hold.
    pieces: list[IntArray] = []
    considered = 0
    cache: dict[tuple[str, int, int], _Pairing] = {}
    too_wide: dict[str, int] = {}  # accelerator -> fewest GPUs no layout splits the global batch over
    for (h_index, _), gpus in zip(units, unit_gpus, strict=True):
        h = hardware[h_index]
        key = (h.accelerator.slug, h.devices_per_node, gpus)
        if key not in cache:
            span = (int(np.searchsorted(layouts.gpus, gpus, "left")), int(np.searchsorted(layouts.gpus, gpus, "right")))
            cache[key] = _pair(layouts, total_bytes, span, h.accelerator, h.devices_per_node, c, finetune)
        pairing = cache[key]
        pieces.append(pairing.rows)
        considered += pairing.runnable * len(h.prices)
        if pairing.stage == "batch":
            too_wide[h.accelerator.slug] = min(gpus, too_wide.get(h.accelerator.slug, gpus))
        elif pairing.stage:
            rejections.append(
                Rejection(h.accelerator.slug, gpus, pairing.stage, pairing.reason, pairing.runnable * len(h.prices))
            )
    rejections.extend(
        Rejection(
            slug,
            gpus,
            "batch",
            f"no layout of {model.name} splits a global batch of {c.global_batch} sequences over {gpus} or more GPUs "
            "(dp x micro-batch must divide it); raise --global-batch to use them",
            0,
        )
        for slug, gpus in too_wide.items()
    )
    sizes = np.array([len(p) for p in pieces], dtype=np.int64)
    layout_index = np.concatenate(pieces) if pieces else np.empty(0, np.int64)
    shape = np.repeat(np.array([h for h, _ in units], dtype=np.int64), sizes)
    timing = _Timing(model, c, assumptions, layouts, memory, hardware, adapters)
    base_s, spot_s = timing.times(layout_index, shape)

    # The fastest row of each unit, off spot and on spot; then their full columns.
    fastest = {False: _fastest(base_s, sizes), True: _fastest(spot_s, sizes)}
    chosen = np.unique(np.concatenate([fastest[False], fastest[True]]))
    chosen = chosen[chosen >= 0]
    columns = timing.evaluate(layout_index[chosen], shape[chosen])
    position = {int(row): i for i, row in enumerate(chosen)}
    options: list[Option] = []
    for u, (h_index, n) in enumerate(units):
        if not sizes[u]:
            continue
        h = hardware[h_index]
        for price in h.prices:
            row = int(fastest[price.pricing == "spot"][u])
            option = _option(h, n, price, position[row], int(layout_index[row]), layouts, columns, assumptions)
            options.append(replace(option, method=finetune.method))
    return _MethodOptions(options, rejections, considered)


def _with_data(option: Option, site: DataSite, catalog: Catalog, model: ModelSpec, tokens: float) -> Option:
    """``option`` with the dataset copied to its region first: egress in the cost, the copy in the wall time."""
    scope = egress_scope(site, option.cloud, option.region)
    moved = data_movement(
        site,
        scope,
        usd_per_gb=egress_usd_per_gb(catalog, site.cloud, scope),
        copy_bytes_per_s=catalog.assumption("cross_region_copy_bytes_per_s"),
        tokens=tokens,
        training_s=option.time_s,
        vocab_size=model.vocab_size,
    )
    return replace(
        option, time_s=option.time_s + moved.transfer_s, cost_usd=option.cost_usd + moved.egress_usd, data=moved
    )


def _option(
    h: _Hardware,
    nodes: int,
    price: Quote,
    r: int,
    li: int,
    layouts: _Layouts,
    columns: TrainColumns,
    assumptions: Assumptions,
) -> Option:
    """Option from row ``r`` of ``columns``, which timed layout ``li`` on ``nodes`` of ``h``: the instances
    rented are its devices over one instance's (a TPU slice's chips are rented one by one)."""
    pricing, hourly = price.pricing, price.hourly_usd
    gpus = nodes * h.devices_per_node
    instances = gpus // (price.offering.accelerator_count if price.offering is not None else h.devices_per_node)
    on_demand_s = columns.steps[r] * columns.step_s[r] * columns.failure_slowdown[r]
    time_s = float(columns.time_s[r] if pricing == "spot" else on_demand_s)
    kwh = (
        float(
            energy_kwh(
                col(gpus),
                col(server_w_per_device(h.accelerator, assumptions.server_host_power_fraction_of_tdp)),
                assumptions.gpu_power_fraction_of_tdp,
                col(time_s),
                col(price.pue),
            )
        )
        if h.accelerator.tdp_w > 0
        else None  # no published power figure (TPU v5e, v5p): unknown, never zero
    )
    rows = layouts.rows
    tp, pp, cp = int(rows.tp[li]), int(rows.pp[li]), int(rows.cp[li])
    breakdown_s = columns.step.breakdown_s(r)
    return Option(
        accelerator=h.accelerator.slug,
        gpus=gpus,
        instances=instances,
        cloud=price.cloud or "",
        instance_type=price.instance_type or "",
        region=price.region or "",
        pricing=pricing,
        usd_per_h=instances * hourly,
        tp=tp,
        pp=pp,
        dp=gpus // (tp * pp * cp),
        zero=int(rows.zero[li]),
        precision=PRECISIONS[int(layouts.precision[li])],
        micro_batch=int(rows.micro_batch[li]),
        recompute=RECOMPUTES[int(rows.recompute[li])],
        memory_bytes=memory_dict(columns.memory, r),
        capacity_bytes=h.accelerator.memory_bytes,
        flops=float(columns.model_flops[r]),
        time_s=time_s,
        cost_usd=instances * hourly * time_s / 3600.0,
        energy_kwh=kwh,
        co2_kg=None if kwh is None else kwh * price.carbon.g_co2_per_kwh / 1000.0,
        mfu=float(columns.mfu[r]),
        cp=cp,
        ep=int(rows.ep[li]),
        virtual_stages=int(rows.virtual_stages[li]),
        framework=FRAMEWORKS[int(rows.framework[li])],
        tp_overlap=bool(rows.tp_overlap[li]),
        step_s=float(columns.step_s[r]),
        step_breakdown_s=breakdown_s,
        bottleneck=bottleneck(breakdown_s, float(columns.compute_fraction[r]), int(rows.zero[li])).sentence(),
    )


def _select(
    options: list[Option],
    rejections: list[Rejection],
    c: TrainConstraints,
    considered: int,
    sizes: dict[str, tuple[bool, float]],
) -> Plan:
    """The plan from the options that passed, or, with none, the nearest miss: at the most GPUs, the device first
    by ``largest_first`` (``sizes``, by accelerator slug)."""
    if not options:
        refuse_unrun_precision(rejections, c.precisions)
        closest = min(
            (r for r in rejections if r.stage == "memory"),
            key=lambda r: (-r.gpus, sizes.get(r.accelerator, (True, 0.0))),
            default=None,
        )
        raise InfeasiblePlanError(
            "no accelerator in the catalog can hold this job: "
            + (closest.reason if closest else "every option was filtered out"),
            "raise --max-gpus, allow --recompute full / ZeRO-3 (default), shorten --seq-len, or use a smaller model",
        )
    survivors = options
    batch_bound = any(r.stage == "batch" for r in rejections)
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
                f"raise --deadline to at least {format_duration(fastest.time_s * 1.01)}, raise --max-gpus"
                + (", raise --global-batch (too few sequences to spread over more GPUs)" if batch_bound else "")
                + ", or train on fewer tokens",
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
