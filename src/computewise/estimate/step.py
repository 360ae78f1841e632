"""Where one optimizer step's time goes: compute, pipeline bubble, and the communication left exposed.

Ranks are placed the Megatron-core way (tensor-parallel ranks adjacent, then context, then data,
pipeline outermost), which fixes how many ranks of each group share a node and so which fabric
each collective crosses (``estimate.collectives``). What overlaps and what does not:

- **TP** (Shoeybi et al. 2019): two all-reduces of a layer's output forward and two backward per
  layer and micro-batch, two more when a full recompute repeats the forward; with sequence
  parallelism each becomes a reduce-scatter plus an all-gather of the same total time. Exposed:
  the next matmul needs the result.
- **CP** (ring attention, Liu et al. 2023; Llama 3 section 3.3.2): K and V of the other chunks are
  gathered forward, again backward, and their gradients reduce-scattered: hidden behind the
  attention computation where it is long enough.
- **EP** (GShard, Lepikhin et al. 2020): dispatch and combine all-to-alls around every MoE layer,
  forward and backward. Exposed.
- **PP**: each micro-batch's activations cross every stage boundary forward and their gradients
  backward, ``virtual_stages`` times with the interleaved schedule.
- **DP**: gradients are reduced once per step in buckets while the last micro-batch's backward
  runs (PyTorch DDP, Megatron's overlapped grad reduce); only what outlasts that backward is
  exposed, and never less than the last bucket (the first layer's gradients, ready last).
  ZeRO-1/2 reduce-scatter the same way and all-gather the updated weights under the next
  forward; ZeRO-3/FSDP gathers weights forward and backward for every micro-batch, prefetched
  under the whole step's compute.
- **Bubble**: (p - 1) / (v m) of the busy time for 1F1B with v model chunks per rank
  (Narayanan et al. 2021, section 2.2).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from computewise.estimate.arrays import FloatArray, col
from computewise.estimate.collectives import Collective, Fabric, collective_s
from computewise.estimate.flops import attention_flops_per_token, layer_matmuls, training_flops_per_token
from computewise.estimate.kernels import (
    HostCosts,
    KernelRates,
    MicrobatchKernels,
    MicrobatchShape,
    distinct_training_kernels,
    gemm_s,
    optimizer_kernels,
)
from computewise.estimate.memory import gradient_reduce_bytes_per_param
from computewise.estimate.traced import TracedDevice, tensor_core_flag, traced_training_kernels
from computewise.specs import PRECISIONS

if TYPE_CHECKING:
    from computewise.estimate.adapters import Adapters
    from computewise.estimate.assumptions import Assumptions
    from computewise.estimate.train import TrainHardware, TrainLayout
    from computewise.specs import ModelSpec

__all__ = ["StepTime", "step_time"]

_TENSOR_CORES = np.array([tensor_core_flag(p) for p in PRECISIONS])  # by index in PRECISIONS
_FP8 = float(PRECISIONS.index("fp8"))  # the training precision whose GEMM inputs are quantised


@dataclass(frozen=True)
class StepTime:
    """Seconds per optimizer step on one device, by cause; communication figures are the exposed part."""

    compute_s: FloatArray  # arithmetic and HBM traffic of the step's micro-batches
    bubble_s: FloatArray  # pipeline fill and drain
    tp_s: FloatArray
    cp_s: FloatArray
    ep_s: FloatArray
    pp_s: FloatArray
    dp_s: FloatArray
    bubble_fraction: FloatArray

    @property
    def comm_exposed_s(self) -> FloatArray:
        return self.tp_s + self.cp_s + self.ep_s + self.pp_s + self.dp_s

    @property
    def total_s(self) -> FloatArray:
        return self.compute_s + self.bubble_s + self.comm_exposed_s

    def breakdown_s(self, row: int = 0) -> dict[str, float]:
        """Seconds of row ``row``'s step by cause, keyed as ``estimate.bottleneck`` names them."""
        parts = {
            "compute": self.compute_s,
            "pipeline_bubble": self.bubble_s,
            "tensor_parallel": self.tp_s,
            "context_parallel": self.cp_s,
            "expert_parallel": self.ep_s,
            "pipeline_parallel": self.pp_s,
            "data_parallel": self.dp_s,
        }
        return {name: float(col(values).reshape(-1)[row]) for name, values in parts.items()}


@dataclass(frozen=True)
class _Groups:
    """Ranks of each parallel group that share one node."""

    tp: FloatArray
    cp: FloatArray
    ep: FloatArray
    dp_cp: FloatArray
    pp: FloatArray


def _groups(rows: TrainLayout, devices_per_node: FloatArray) -> _Groups:
    d = col(devices_per_node)

    def on_node(inner: FloatArray, size: FloatArray) -> FloatArray:
        return np.clip(d / inner, 1.0, size)

    return _Groups(
        tp=np.minimum(rows.tp, d),
        cp=on_node(rows.tp, rows.cp),
        ep=on_node(rows.tp * rows.cp, rows.ep),
        dp_cp=on_node(rows.tp, rows.dp * rows.cp),
        pp=on_node(rows.tp * rows.cp * rows.dp, rows.pp),
    )


def _times(
    op: Collective, count: FloatArray, message_bytes: FloatArray, ranks: FloatArray, per_node: FloatArray, f: Fabric
) -> FloatArray:
    return col(count) * np.where(ranks > 1, collective_s(op, message_bytes, ranks, per_node, f), 0.0)


def step_time(
    model: ModelSpec, rows: TrainLayout, hw: TrainHardware, assumptions: Assumptions, adapters: Adapters | None = None
) -> StepTime:
    """Time of one optimizer step for every row; ``adapters``: a LoRA/QLoRA job (``estimate.adapters``)."""
    fabric = hw.fabric
    gpus = rows.gpus
    m = rows.microbatches
    v = rows.virtual_stages
    act = rows.weight_bytes
    layers = max(model.total_layers, 1) / rows.pp  # per device
    tokens_per_step = rows.global_batch * rows.seq_len
    tokens_mb = rows.micro_batch * rows.seq_len / rows.cp  # per device and micro-batch
    model_per_token, hardware_per_token = training_flops_per_token(model, rows.seq_len, rows.recompute, adapters)
    # Without recomputation a third of a micro-batch is its forward (half with frozen weights, whose
    # backward computes input gradients only), which no gradient sync can hide.
    compute_s, plain_s = _compute_s(model, rows, hw, assumptions, hardware_per_token, model_per_token, adapters)
    forward_s = plain_s / ((3.0 if adapters is None else 2.0) * m)
    per_microbatch_s = compute_s / m
    groups = _groups(rows, fabric.devices_per_node)
    hidden = float(model.hidden_size)

    tp_count = (4.0 + np.where(rows.recompute == 2, 2.0, 0.0)) * layers * m
    tp_one_s = _times("all-reduce", col(1.0), tokens_mb * hidden * act, rows.tp, groups.tp, fabric)
    tp_s = tp_count * tp_one_s
    if np.any(rows.tp_overlap > 0):
        overlapped_s = _overlapped_tp_s(model, rows, tp_one_s, tokens_mb, _kernel_rates(rows, hw, assumptions))
        tp_s = np.where(rows.tp_overlap > 0, overlapped_s * layers * m, tp_s)

    # Each TP rank holds its own KV heads (a head is never split, so fewer heads than ranks repeat).
    kv_width = 2.0 * np.ceil(model.kv_heads / rows.tp) * model.attention_head_dim
    kv_message = rows.micro_batch * rows.seq_len * kv_width * act
    cp_comm = _times("all-gather", 3.0 * layers * m, kv_message, rows.cp, groups.cp, fabric)
    causal = model.architecture == "decoder"
    attention_s = 3.0 * attention_flops_per_token(model, rows.seq_len, causal) / max(model.total_layers, 1)
    attention_s = attention_s * layers * tokens_per_step / gpus / (hw.peak_flops * assumptions.matmul_peak_fraction)
    cp_s = np.maximum(cp_comm - attention_s, 0.0)

    moe = model.experts > 1
    ep_message = tokens_mb * hidden * act * model.active_experts
    ep_s = _times("all-to-all", 4.0 * layers * m, ep_message, rows.ep, groups.ep, fabric) if moe else np.zeros_like(m)

    pp_message = tokens_mb * hidden * act / np.where(rows.sequence_parallel > 0, rows.tp, 1.0)
    pp_s = _times("send-recv", 2.0 * v * m, pp_message, rows.pp, groups.pp, fabric)

    if adapters is None:
        # Gradients are reduced in the buffer they accumulate in (fp32 under Megatron's bf16 and fp8 and under
        # PyTorch autocast, 16 bits under Megatron's fp16), or in the 16 bits asked for.
        weight_bytes = model.params * rows.weight_bytes
        gradient_bytes = model.params * gradient_reduce_bytes_per_param(
            rows.framework, rows.precision, rows.weight_bytes, rows.grad_reduce
        )
    else:
        gradient_bytes = adapters.trainable_bytes(rows.weight_bytes)
        weight_bytes = adapters.frozen_bytes(model, rows.weight_bytes) + gradient_bytes
    dp_s = _dp_exposed_s(
        weight_bytes, gradient_bytes, rows, fabric, groups, compute_s, per_microbatch_s, forward_s, layers
    )

    bubble_fraction = (rows.pp - 1.0) / (v * m)
    busy_s = compute_s + tp_s + cp_s + ep_s
    return StepTime(
        compute_s=compute_s,
        bubble_s=busy_s * bubble_fraction,
        tp_s=tp_s,
        cp_s=cp_s,
        ep_s=ep_s,
        pp_s=pp_s,
        dp_s=dp_s,
        bubble_fraction=bubble_fraction,
    )


def _overlapped_tp_s(
    model: ModelSpec,
    rows: TrainLayout,
    collective_s: FloatArray,
    tokens: FloatArray,
    rates: KernelRates,
) -> FloatArray:
    """Tensor-parallel seconds per layer and micro-batch when the collectives overlap the GEMMs.

    Transformer Engine's userbuffers split each block's all-gather and reduce-scatter into tp chunks,
    exchanged while the block's own GEMMs compute the chunk before: the attention block's behind its q,
    k, v and output projections, the MLP's behind its own. A collective longer than its GEMMs shows its
    excess, a shorter one its first chunk; and the GEMMs, run as tp chunks of tokens / tp rows, take longer
    than whole (``kernels.gemm_s``), which the overlap costs too. The backward's GEMMs (input and weight
    gradients) take twice the forward's; full recompute runs the forward's collectives again.
    """
    tp, act = rows.tp, rows.weight_bytes
    matmuls = layer_matmuls(model)  # q, k, v, o, then the MLP's
    # Column-parallel projections split their outputs over tp (q, k, v, gate, up), row-parallel ones their inputs.
    row_parallel = {3, len(matmuls) - 1}
    forwards = 1.0 + np.where(rows.recompute == 2, 1.0, 0.0)
    total = np.zeros_like(collective_s)
    for block in (range(4), range(4, len(matmuls))):
        whole = chunked = np.zeros_like(collective_s)
        for index in block:
            out, into = matmuls[index]
            n, k = (out, into / tp) if index in row_parallel else (out / tp, into)
            whole = whole + gemm_s(tokens, n, k, act, rates)
            chunked = chunked + tp * gemm_s(tokens / tp, n, k, act, rates)
        lost = chunked - whole  # what the GEMMs lose in chunks, per pass over them
        forward = np.maximum(collective_s - chunked, collective_s / tp) + lost
        backward = np.maximum(collective_s - 2.0 * chunked, collective_s / tp) + 2.0 * lost
        total = total + forwards * forward + backward
    return total


def _kernel_rates(rows: TrainLayout, hw: TrainHardware, assumptions: Assumptions) -> KernelRates:
    """What each device's kernels sustain, synchronised over the job's devices."""
    return KernelRates.of(
        hw.peak_flops,
        hw.memory_bandwidth_bytes_per_s,
        assumptions,
        hw.matmul_fraction,
        hw.stream_fraction,
        rows.gpus,
        hw.attention_peak_ratio,
        hw.sustained_fraction,
    )


def _compute_s(
    model: ModelSpec,
    rows: TrainLayout,
    hw: TrainHardware,
    assumptions: Assumptions,
    hardware_per_token: FloatArray,
    model_per_token: FloatArray,
    adapters: Adapters | None,
) -> tuple[FloatArray, FloatArray]:
    """Seconds of one device's kernels for a whole step (``estimate.kernels``), with the recomputation
    and without it; or the FLOPs of each at a given share of peak.

    Every micro-batch's host and device overlap, and so do the optimizer step's; the pipeline
    stage's share of the LM head is spread over the stages, as its layers are.
    """
    per_device_tokens = rows.global_batch * rows.seq_len / rows.gpus
    given = hw.utilization
    if given is not None and not np.isnan(given).any():
        at_share = hw.peak_flops * given
        return hardware_per_token * per_device_tokens / at_share, model_per_token * per_device_tokens / at_share
    rates = _kernel_rates(rows, hw, assumptions)
    costs = HostCosts.of(assumptions)
    host = costs.per_kernel_s(rows.framework, rows.execution, training=True)
    if not model.is_transformer:
        # A traced network: the kernels its trace counted (``estimate.traced``); recomputing activations
        # repeats forward work, which lengthens the device's part by the FLOPs it adds.
        weights = model.params * rows.weight_bytes / (rows.tp * rows.pp)
        convolution_s = costs.per_convolution_s(rows.execution)
        device = TracedDevice(rates, convolution_s, _TENSOR_CORES[rows.precision.astype(np.int64)])
        eager = traced_training_kernels(model, rows.micro_batch, rows.weight_bytes, weights, device)
        recomputed = replace(eager, device_s=eager.device_s * hardware_per_token / model_per_token)
        micro = MicrobatchKernels(plain=eager, recomputed=recomputed)
    else:
        shape = MicrobatchShape(
            tokens=rows.micro_batch * rows.seq_len / rows.cp,
            seq_len=rows.seq_len,
            layers=max(model.total_layers, 1) / rows.pp,
            act=rows.weight_bytes,
            tp=rows.tp,
            sp=rows.sequence_parallel,
            attention=rows.attention,
            recompute=rows.recompute,
            framework=rows.framework,
            execution=rows.execution,
            has_head=1.0 / rows.pp,
            ep=rows.ep,
            loss=rows.loss,
            quantised=np.where(rows.precision == _FP8, 1.0, 0.0),
        )
        micro = distinct_training_kernels(model, shape, rates, adapters)
    trained = model.params if adapters is None else adapters.trainable_params
    per_device = trained / (rows.tp * rows.pp)
    sharded = per_device / np.where(rows.zero >= 1, rows.zero_ranks, 1.0)
    block_tensors = 7.0 if adapters is None else adapters.adapter_tensors()
    tensors = block_tensors * max(model.total_layers, 1) / rows.pp + 2.0  # trained weight matrices per device
    update = optimizer_kernels(per_device, sharded, rows.microbatches, rows.framework, tensors, rates).wall_s(host)
    modelled = rows.microbatches * micro.recomputed.wall_s(host) + update
    plain = rows.microbatches * micro.plain.wall_s(host) + update
    if given is None:
        return modelled, plain
    # Rows with a measured whole-step share use it; the others the model.
    at_share = hw.peak_flops * given
    return (
        np.where(np.isnan(given), modelled, hardware_per_token * per_device_tokens / at_share),
        np.where(np.isnan(given), plain, model_per_token * per_device_tokens / at_share),
    )


def _dp_exposed_s(
    weight_bytes: FloatArray,
    gradient_bytes: FloatArray,
    rows: TrainLayout,
    fabric: Fabric,
    groups: _Groups,
    compute_s: FloatArray,
    per_microbatch_s: FloatArray,
    forward_s: FloatArray,
    layers: FloatArray,
) -> FloatArray:
    """Exposed data-parallel time: what outlasts the compute it is overlapped with (module docstring).

    The backward of the last micro-batch, recomputation included, hides the gradient sync; so a
    recompute never makes a step faster, which the planner's pruning relies on. ``weight_bytes`` and
    ``gradient_bytes`` are the whole model's (equal in full training; a LoRA job reduces only its
    trained part's gradients, and ZeRO-3 still gathers its frozen base). Under hybrid sharding ZeRO's
    gathers and reduce-scatters stay inside a shard group (one node's or slice's ranks when it spans
    one), and each rank's gradient shard is all-reduced with its copies in the other groups once a
    step, after the accumulation, as MaxText's data parallelism across slices does.
    """
    ranks, replicas = rows.zero_ranks, rows.zero_replicas
    on_node = np.minimum(groups.dp_cp, ranks)  # a shard group's ranks on one node
    copies_on_node = np.clip(groups.dp_cp / ranks, 1.0, replicas)  # a shard's copies on one node
    split = rows.tp * rows.pp
    weight_shard, gradient_shard = weight_bytes / split, gradient_bytes / split
    backward_s = per_microbatch_s - forward_s

    def exposed(comm_s: FloatArray, window_s: FloatArray) -> FloatArray:
        return np.maximum(comm_s - window_s, comm_s / layers)

    one = col(1.0)
    reduce_all = _times("all-reduce", one, gradient_shard, ranks, on_node, fabric)
    reduce_scatter = _times("reduce-scatter", one, gradient_shard, ranks, on_node, fabric)
    gather = _times("all-gather", one, weight_shard, ranks, on_node, fabric)
    replicate = _times("all-reduce", one, gradient_shard / ranks, replicas, copies_on_node, fabric)
    ddp = exposed(reduce_all, backward_s)
    zero12 = exposed(reduce_scatter + replicate, backward_s) + exposed(gather, forward_s)
    zero3 = exposed(rows.microbatches * (2.0 * gather + reduce_scatter) + replicate, compute_s)
    return np.select([rows.zero >= 3, rows.zero >= 1], [zero3, zero12], ddp)
