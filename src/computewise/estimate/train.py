"""One training job on one layout: memory, FLOPs, time, money, energy, storage, as columns.

``evaluate_train`` is the single formula both ``estimate train`` (one row) and ``plan train``
(every candidate of the catalog at once) run, so the two can never disagree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np
import numpy.typing as npt

from computewise.estimate.adapters import Adapters
from computewise.estimate.arrays import FloatArray, col
from computewise.estimate.assumptions import Assumptions
from computewise.estimate.collectives import Fabric
from computewise.estimate.cost import co2_kg, energy_kwh, interruption_slowdown
from computewise.estimate.flops import training_flops_per_token
from computewise.estimate.memory import (
    RECOMPUTE_CODES,
    TRAINING_WORKSPACE_BYTES,
    MemoryBreakdown,
    activation_parts,
    bytes_per_value,
    expert_params,
    framework_state_bytes,
    model_state_bytes,
    optimizer_bytes_per_param,
    peak_activations,
    training_peak_bytes,
    with_overhead,
)
from computewise.estimate.step import StepTime, step_time
from computewise.specs import (
    ATTENTION_KERNELS,
    EXECUTIONS,
    FRAMEWORKS,
    GRAD_REDUCES,
    LOSSES,
    PRECISIONS,
    ModelSpec,
    Parallelism,
    TrainJob,
)

__all__ = [
    "TrainColumns",
    "TrainHardware",
    "TrainLayout",
    "default_global_batch",
    "default_global_batch_note",
    "evaluate_train",
    "token_bytes",
    "train_memory",
]


# An image model's batch is counted in images, not tokens: the recipes these architectures were published
# with. ResNet: SGD over mini-batches of 256 (He et al. 2016, section 3.4); ViT: pre-training at batch 4096
# (Dosovitskiy et al. 2021, section 4.1).
_IMAGE_BATCH = {"cnn": 256, "vision-transformer": 4096}
_IMAGE_MICRO_BATCH = 256  # NVIDIA DeepLearningExamples' ResNet-50 batch per GPU (AMP and TF32 on A100)


def default_global_batch(seq_len: int, params: float, step_multiple: int = 1, architecture: str = "decoder") -> int:
    """Sequences (images for an image model) per optimizer step when none is given: the one default of
    ``estimate train`` and ``plan train``.

    2^20 tokens at 8B parameters times sqrt(params / 8B), kept within 0.5M-16M: 0.5M for GPT-3's
    125M-760M models (Brown et al. 2020, table 2.1), 4M at 70B (Llama 2), 8M at 405B (Llama 3 ramped
    from 4M to 16M). As a power of two of sequences, then rounded to a multiple of ``step_multiple``
    (dp x micro-batch of a fixed layout) so every rank gets whole micro-batches. A batch of dp x
    micro-batch instead would change the training recipe with the GPU count: 8 GPUs would take 8
    sequences per step and 16 GPUs 16, and a pipeline would run one micro-batch per step, all bubble.
    An image model takes its architecture's published batch (``_IMAGE_BATCH``): a CNN has no tokens,
    and 2^19 of them would be half a million images a step.
    """
    if seq_len < 1 or step_multiple < 1:
        raise ValueError(f"seq_len and step_multiple must be >= 1, got {seq_len} and {step_multiple}")
    images = _IMAGE_BATCH.get(architecture)
    if images is not None:
        sequences = images
    else:
        tokens = min(max(2**20 * math.sqrt(params / 8e9), 2**19), 2**24)
        sequences = max(1, int(2 ** round(math.log2(tokens / seq_len))))
    return max(1, round(sequences / step_multiple)) * step_multiple


def default_micro_batch(architecture: str, dp: int, global_batch: int | None) -> int:
    """Sequences (images) per device per micro-step when none is given.

    A language model's is 1, as Megatron-LM's: activations grow with the sequence, and the global batch
    is reached by accumulation. An image model trains its whole share of the batch at once (NVIDIA's
    ResNet-50 recipe runs 256 images per GPU): a micro-batch of one image would leave the accelerator
    waiting for its host. The share is capped at ``_IMAGE_MICRO_BATCH``, and the micro-batch divides it.
    """
    images = _IMAGE_BATCH.get(architecture)
    if images is None:
        return 1
    per_rank = max(1, (global_batch or images) // max(dp, 1))
    micro = min(per_rank, _IMAGE_MICRO_BATCH)
    while per_rank % micro:
        micro -= 1
    return micro


def default_global_batch_note(global_batch: int, seq_len: int, architecture: str = "decoder") -> str:
    """How the output states the default, so a reader knows the recipe the time and cost assume."""
    from computewise.units import format_count

    if architecture in _IMAGE_BATCH:
        return (
            f"global batch {global_batch} images (default: {_IMAGE_BATCH[architecture]}, as the "
            f"{architecture} was published, rounded to whole micro-batches); set --global-batch to change it"
        )
    return (
        f"global batch {global_batch} sequences ({format_count(global_batch * seq_len)} tokens, default: "
        "about 1M tokens at 8B parameters, growing with the model); set --global-batch to change it"
    )


@dataclass(frozen=True)
class TrainLayout:
    """How the job is laid out, one entry per candidate; independent of the hardware it runs on."""

    tp: FloatArray
    pp: FloatArray
    dp: FloatArray
    zero: FloatArray
    micro_batch: FloatArray
    global_batch: FloatArray  # sequences per optimizer step
    seq_len: FloatArray
    recompute: FloatArray  # 0 none, 1 selective, 2 full
    sequence_parallel: FloatArray  # 0/1
    attention: FloatArray  # index in ATTENTION_KERNELS: 0 unfused, 1 FlashAttention-2, 2 Triton's
    weight_bytes: FloatArray
    optimizer_bytes: FloatArray
    cp: FloatArray  # context parallelism: each sequence split over cp ranks
    ep: FloatArray  # expert parallelism inside the dp*cp ranks (MoE); adds no GPUs
    virtual_stages: FloatArray  # model chunks per pipeline rank; > 1 is the interleaved schedule
    framework: FloatArray  # index in FRAMEWORKS: 0 Megatron, 1 PyTorch autocast, 2 Hugging Face transformers
    execution: FloatArray  # index in EXECUTIONS: 0 eager, 1 torch.compile, 2 CUDA graphs
    precision: FloatArray  # index in PRECISIONS: Megatron keeps fp16's gradients apart from bf16's
    loss: FloatArray  # index in LOSSES: 0 the framework's cross entropy, 1 a fused kernel on 16-bit logits
    grad_reduce: FloatArray  # index in GRAD_REDUCES: 0 the framework's default, 1 fp32, 2 16-bit
    zero_group: FloatArray  # ranks one ZeRO shard group spans (hybrid sharding); 0: all dp x cp ranks
    tp_overlap: FloatArray  # 0/1: TP collectives hidden behind the GEMMs they feed (Transformer Engine's userbuffers)

    @property
    def gpus(self) -> FloatArray:
        return self.tp * self.pp * self.cp * self.dp

    @property
    def zero_ranks(self) -> FloatArray:
        """The ranks over which ZeRO shards and gradients are reduce-scattered: the dp x cp ranks that hold
        the same weights (Megatron's distributed optimizer shards over its data-parallel group with context
        parallelism, torchtitan's FSDP over its ``dp_shard_cp`` mesh), or one group of them under hybrid
        sharding (``zero_group``)."""
        return np.where(self.zero_group > 0, self.zero_group, self.dp * self.cp)

    @property
    def zero_replicas(self) -> FloatArray:
        """Copies of each ZeRO shard, one per shard group, whose gradients are all-reduced: 1 unless hybrid."""
        return self.dp * self.cp / self.zero_ranks

    @property
    def microbatches(self) -> FloatArray:
        """Micro-batches per data-parallel rank per optimizer step (gradient accumulation steps)."""
        return self.global_batch / (self.dp * self.micro_batch)

    def take(self, index: npt.NDArray[np.int64]) -> TrainLayout:
        return TrainLayout(**{f.name: getattr(self, f.name)[index] for f in fields(self)})

    @classmethod
    def for_job(cls, parallelism: Parallelism, job: TrainJob) -> TrainLayout:
        """One row: the layout of one job, as ``estimate train`` evaluates it."""
        p = parallelism
        return cls(
            tp=col(p.tp),
            pp=col(p.pp),
            dp=col(p.dp),
            zero=col(p.zero),
            micro_batch=col(job.micro_batch),
            global_batch=col(job.global_batch),
            seq_len=col(job.seq_len),
            recompute=col(RECOMPUTE_CODES[job.recompute]),
            sequence_parallel=col(p.sequence_parallel),
            attention=col(ATTENTION_KERNELS.index(job.attention)),
            weight_bytes=col(bytes_per_value(job.precision)),
            optimizer_bytes=col(optimizer_bytes_per_param(job.optimizer, job.precision)),
            cp=col(p.cp),
            ep=col(p.ep),
            virtual_stages=col(p.virtual_stages),
            framework=col(FRAMEWORKS.index(job.framework)),
            execution=col(EXECUTIONS.index(job.execution)),
            precision=col(PRECISIONS.index(job.precision)),
            loss=col(LOSSES.index(job.loss)),
            grad_reduce=col(GRAD_REDUCES.index(job.grad_reduce)),
            zero_group=col(p.zero_group),
            tp_overlap=col(p.tp_overlap),
        )


@dataclass(frozen=True)
class TrainHardware:
    """Where each candidate runs. Bandwidths are one direction."""

    peak_flops: FloatArray  # of one device at the training precision
    memory_bandwidth_bytes_per_s: FloatArray  # of one device
    fabric: Fabric  # links inside a node, NICs between nodes, with their efficiencies and latencies
    tdp_w: FloatArray  # W per device at full load, its share of the host included (cost.server_w_per_device)
    rental_usd_per_h: FloatArray  # for all instances the job rents together
    spot: FloatArray  # 0/1: preemptions add to the devices' failures (restarts and lost work)
    g_co2_per_kwh: FloatArray
    pue: FloatArray
    utilization: FloatArray | None = None  # achieved fraction of peak; None (or NaN in a row): the calibrated model
    matmul_fraction: FloatArray | None = None  # a large GEMM's share of ``peak_flops``; None: the assumption
    stream_fraction: FloatArray | None = None  # an elementwise kernel's share of the bandwidth; None: the assumption
    # Attention's and the LM head's peak over ``peak_flops`` (``kernels.attention_peak_ratio``); None: 1.
    attention_peak_ratio: FloatArray | None = None
    # What a step over several devices sustains of a GEMM's burst (``kernels.sustained_share``); None: a GPU's.
    sustained_fraction: FloatArray | None = None


@dataclass(frozen=True)
class TrainColumns:
    memory: MemoryBreakdown
    model_flops: FloatArray  # whole job
    hardware_flops: FloatArray  # whole job, recomputation included
    microbatches: FloatArray  # per data-parallel rank per step
    steps: FloatArray
    step: StepTime  # where one step's time goes
    step_s: FloatArray
    time_s: FloatArray  # whole job, interruptions included (failures, and preemptions on spot)
    failure_slowdown: FloatArray  # what device failures add on reserved or on-demand capacity
    failures_per_h: FloatArray  # device failures the job meets
    preemptions_per_h: FloatArray  # spot preemptions time_s pays for (0 off spot)
    checkpoint_interval_s: FloatArray
    checkpoint_bytes: FloatArray
    tokens_per_s: FloatArray
    read_bytes_per_s: FloatArray
    cost_usd: FloatArray
    energy_kwh: FloatArray
    co2_kg: FloatArray
    mfu: FloatArray  # model FLOP/s over the peak of all devices (PaLM's definition), interruptions excluded
    compute_fraction: FloatArray  # achieved fraction of peak while computing (bubble and communication excluded)

    @property
    def compute_s(self) -> FloatArray:
        return self.step.compute_s

    @property
    def comm_exposed_s(self) -> FloatArray:
        return self.step.comm_exposed_s

    @property
    def bubble_fraction(self) -> FloatArray:
        return self.step.bubble_fraction

    @property
    def interruption_slowdown(self) -> FloatArray:
        """The multiplier ``time_s`` includes over its steps: failures, and preemptions on spot."""
        return self.time_s / (self.steps * self.step_s)


_GATHERED_LAYERS = 2.0  # FSDP's current unit and the one prefetched (forward_prefetch / backward prefetch)


def token_bytes(model: ModelSpec) -> float:
    """Bytes a tokenised sample stores per token: uint16 ids while the vocabulary fits, else int32."""
    return 2.0 if 0 < model.vocab_size <= 65536 else 4.0


def _adapter_states(model: ModelSpec, layout: TrainLayout, adapters: Adapters) -> tuple[FloatArray, ...]:
    """(weights, gradients, optimizer states, autocast and dequantization copies, gradient bytes per
    embedding parameter, step-only optimizer bytes: none) per device of a LoRA/QLoRA job, split by the
    layout as full training's are.

    ``model_state_bytes`` is linear in the parameter count, so it is handed whole-model byte totals
    as one "parameter": the frozen base is sharded with the weights (ZeRO-3), the trained part's
    gradients and states at their own stages.
    """
    act = layout.weight_bytes
    trained = adapters.trainable_bytes(act)
    weights, gradients, optimizer = model_state_bytes(
        1.0,
        adapters.frozen_bytes(model, act) + trained,
        adapters.optimizer_bytes(act),
        layout.tp,
        layout.pp,
        layout.zero_ranks,
        layout.zero,
        grad_bytes=trained,
    )
    cast, _, _ = model_state_bytes(
        1.0, adapters.cast_bytes(model, act), col(0.0), layout.tp, layout.pp, layout.dp, np.zeros_like(layout.zero)
    )
    embedding_trained = adapters.finetune.train_embeddings or adapters.finetune.train_head
    embedding_grad = adapters.residual_bytes(act) * (1.0 if embedding_trained else 0.0)
    return weights, gradients, optimizer, cast, embedding_grad, np.zeros_like(optimizer)


def train_memory(
    model: ModelSpec, layout: TrainLayout, assumptions: Assumptions, adapters: Adapters | None = None
) -> MemoryBreakdown:
    """Bytes per device; the planner computes it once per layout, before pairing layouts with hardware.

    The parts are each at their largest (weights include autocast's 16-bit copies in the PyTorch
    layout); the allocated peak times them (``training_peak_bytes``). ``adapters``: a LoRA/QLoRA
    job's frozen base and trained adapters (``estimate.adapters``) instead of full training's states.
    """
    states = _full_states(model, layout) if adapters is None else _adapter_states(model, layout, adapters)
    weights, gradients, optimizer, cast, grad_per_param, step_gradients = states
    parts = activation_parts(
        model,
        layout.seq_len,
        layout.micro_batch,
        layout.tp,
        layout.pp,
        layout.sequence_parallel,
        layout.recompute,
        layout.attention,
        layout.weight_bytes,
        layout.microbatches,
        framework=layout.framework,
        cp=layout.cp,
        virtual_stages=layout.virtual_stages,
        adapters=adapters,
        precision=layout.precision,
        loss=layout.loss,
    )
    activations = peak_activations(parts) + TRAINING_WORKSPACE_BYTES  # cuBLAS's workspaces, live beside them
    peak = training_peak_bytes(
        model,
        weights,
        gradients,
        optimizer,
        cast,
        parts,
        layout.recompute,
        layout.microbatches,
        grad_per_param,
        layout.tp,
        layout.pp,
        # Adapters' states are too small to be what displaces the loss's buffers, yet replayed LoRA steps
        # (benchmarks/replay_lora.py) keep 0.7-1.2 loss buffers cached beyond the peak, as full training
        # keeps 0.2-2.1: the rule's one buffer, uncapped.
        displacing=None if adapters is None else np.full_like(optimizer, np.inf),
        step_gradients=step_gradients,
    )
    return with_overhead(
        weights + cast,
        gradients,
        optimizer,
        activations,
        np.zeros_like(activations),
        peak.fragmentation,
        assumptions.runtime_overhead_bytes,
        peak=peak.allocated,
    )


def _full_states(model: ModelSpec, layout: TrainLayout) -> tuple[FloatArray, ...]:
    """(weights, gradients, optimizer states, autocast copies, gradient bytes per parameter, the part of the
    optimizer states that lives during the step only) per device of full training, in the chosen
    framework's layout; ZeRO shards over ``layout.zero_ranks``."""
    per_param = framework_state_bytes(
        layout.framework, layout.precision, layout.weight_bytes, layout.optimizer_bytes, layout.grad_reduce
    )
    experts = expert_params(model)

    def sharded(weight_bytes: FloatArray, optimizer_bytes: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
        return model_state_bytes(
            model.params,
            weight_bytes,
            optimizer_bytes,
            layout.tp,
            layout.pp,
            layout.zero_ranks,
            layout.zero,
            grad_bytes=per_param.gradients,
            experts=experts,
            ep=layout.ep,
        )

    weights, gradients, optimizer = sharded(per_param.weights, per_param.optimizer)
    _, _, step_only = sharded(per_param.weights, per_param.step_gradients)
    # Input embeddings are looked up, never cast; a tied one is cast as the LM head.
    cast_params = model.params - (0 if model.tied_embeddings else model.vocab_size * model.hidden_size)
    cast, _, _ = model_state_bytes(
        float(cast_params),
        per_param.cast,
        per_param.cast,
        layout.tp,
        layout.pp,
        layout.dp,
        np.zeros_like(layout.zero),
        experts=experts,
        ep=layout.ep,
    )
    # FSDP / ZeRO-3 gathers one unit (a layer) at a time and casts it; the next is prefetched, so two
    # layers' 16-bit copies are live, never the whole model (the ZeRO paper's 16 bytes per parameter).
    layer_cast = _GATHERED_LAYERS * cast / max(model.total_layers, 1) * layout.pp
    cast = np.where(layout.zero >= 3, np.minimum(layer_cast, cast), cast)
    return weights, gradients, optimizer, cast, per_param.gradients, step_only


def evaluate_train(
    model: ModelSpec,
    tokens: float,
    rows: TrainLayout,
    hw: TrainHardware,
    assumptions: Assumptions,
    memory: MemoryBreakdown | None = None,
    adapters: Adapters | None = None,
) -> TrainColumns:
    """Evaluate every row. ``tokens`` is the job's total (samples for models without a sequence).

    ``adapters``: a LoRA/QLoRA job (``Adapters.of``); None trains every parameter.
    """
    gpus = rows.gpus
    memory = memory if memory is not None else train_memory(model, rows, assumptions, adapters)

    tokens_per_step = rows.global_batch * rows.seq_len
    steps = np.ceil(tokens / tokens_per_step)
    model_per_token, hardware_per_token = training_flops_per_token(model, rows.seq_len, rows.recompute, adapters)
    step = step_time(model, rows, hw, assumptions, adapters)
    step_s = step.total_s

    if adapters is None:
        checkpoint_bytes = model.params * (rows.weight_bytes + rows.optimizer_bytes)
    else:  # the frozen base is already on disk: a checkpoint holds the trained part and its optimizer
        checkpoint_bytes = adapters.trainable_bytes(rows.weight_bytes) + adapters.optimizer_bytes(rows.weight_bytes)
    # Each data-parallel group writes its own shards in parallel; the slowest writer bounds it.
    writers = np.where(rows.zero >= 1, gpus, rows.tp * rows.pp)
    checkpoint_write_s = checkpoint_bytes / (writers * assumptions.checkpoint_write_bytes_per_s)
    failures_per_h = gpus * assumptions.device_interruptions_per_h
    instances = np.ceil(gpus / hw.fabric.devices_per_node)
    preemptions_per_h = instances * assumptions.spot_preemptions_per_h
    restart_s = assumptions.restart_overhead_s
    failure_slowdown, reserved_interval_s = interruption_slowdown(checkpoint_write_s, failures_per_h, restart_s)
    spot_slowdown, spot_interval_s = interruption_slowdown(
        checkpoint_write_s, failures_per_h + preemptions_per_h, restart_s
    )
    on_spot = hw.spot > 0
    time_s = steps * step_s * np.where(on_spot, spot_slowdown, failure_slowdown)

    kwh = energy_kwh(gpus, hw.tdp_w, assumptions.gpu_power_fraction_of_tdp, time_s, hw.pue)
    tokens_per_s = tokens_per_step / step_s
    return TrainColumns(
        memory=memory,
        model_flops=model_per_token * steps * tokens_per_step,
        hardware_flops=hardware_per_token * steps * tokens_per_step,
        microbatches=rows.microbatches,
        steps=steps,
        step=step,
        step_s=step_s,
        time_s=time_s,
        failure_slowdown=failure_slowdown,
        failures_per_h=failures_per_h,
        preemptions_per_h=np.where(on_spot, preemptions_per_h, 0.0),
        checkpoint_interval_s=np.where(on_spot, spot_interval_s, reserved_interval_s),
        checkpoint_bytes=checkpoint_bytes,
        tokens_per_s=tokens_per_s,
        read_bytes_per_s=tokens_per_s * token_bytes(model),
        cost_usd=hw.rental_usd_per_h * time_s / 3600.0,
        energy_kwh=kwh,
        co2_kg=co2_kg(kwh, hw.g_co2_per_kwh),
        mfu=model_per_token * tokens_per_step / (step_s * gpus * hw.peak_flops),
        compute_fraction=hardware_per_token * tokens_per_step / (step.compute_s * gpus * hw.peak_flops),
    )
