"""Memory per device: weights, gradients, optimizer states, activations, KV cache, overhead.

Model states follow the ZeRO paper (Rajbhandari et al. 2020, arXiv:1910.02054, section 3.1):
mixed-precision Adam keeps 2 bytes of weights, 2 of gradients and K = 12 of optimizer state
(fp32 master copy, momentum, variance) per parameter; stage 1 shards the K part over the
data-parallel group, stage 2 the gradients too, stage 3 (FSDP full sharding) everything.

Activations follow "Reducing Activation Recomputation in Large Transformer Models"
(Korthikanti et al. 2022, arXiv:2205.05198, section 4), rebuilt term by term so that GQA,
gated MLPs (SwiGLU), dropout-free models and flash attention change exactly the terms they touch:
with dropout, MHA, a 4h GeLU MLP and 16-bit activations the per-layer total reduces to the
paper's sbh(34 + 5as/h), and with tensor + sequence parallelism to sbh/t (34 + 5as/h).

Three layouts (``framework``: 0 Megatron, 1 PyTorch, 2 Hugging Face transformers). Megatron keeps
16-bit weights, gradients and activations (the papers' accounting). PyTorch AMP (autocast over fp32
weights, what Lightning and plain loops run) keeps fp32 weights and gradients, 8 bytes of Adam
state, an fp32 residual stream (so norm inputs are saved at 4 bytes) and autocast's 16-bit copy of
every matmul weight from its first use in the forward to its layer's backward. Hugging Face
transformers (HF Trainer, PEFT) is that layout run through its own Llama-family modules, which keep
more per layer: eager RMSNorms and one autocast copy of the norm's output per projection
(``layer_terms``), and a model output that holds the final norm's fp32 output through the loss.

The peak is timed, not summed (``training_peak_bytes``): a step is a forward, a loss, a backward
that frees activations as gradients appear, and an optimizer step; without gradient accumulation the
gradients and the activations never coexist. Replayed against PyTorch's allocator accounting over
the 22-configuration ladder of ``benchmarks/validate_gpu.py`` (``benchmarks/replay_memory.py``,
docs/ACCURACY.md) and checked against real H100 runs of Hugging Face's ``LlamaForCausalLM``
(``benchmarks/data/measured/h100-2026-11-26/hf-llama``, ``tests/estimate/test_hf_memory.py``).

The reserved peak (``max_memory_reserved``, what an out-of-memory error is decided by) adds what the
caching allocator holds beyond the live blocks (``training_fragmentation_bytes``,
``prefill_memory``), from how PyTorch's ``CUDACachingAllocator`` places blocks: it
never returns a segment, carves each request from the smallest cached free block that fits (best
fit), and otherwise takes a fresh segment of the request's size (rounded to 2 MiB; requests of 1-10
MiB share 20 MiB segments, smaller ones 2 MiB segments).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from computewise.estimate.activations import composite_activation_bytes
from computewise.estimate.arrays import FloatArray, col
from computewise.estimate.flops import dots_saved_widths, op_selective_saved_widths
from computewise.specs import (
    FP32_VALUED,
    FRAMEWORKS,
    GRAD_REDUCES,
    LOSSES,
    PAGED_OPTIMIZERS,
    PRECISIONS,
    RECOMPUTES,
    Framework,
    ModelSpec,
    Optimizer,
    Precision,
    Recompute,
)

if TYPE_CHECKING:  # adapters builds on this module; only the type is needed here
    from computewise.estimate.adapters import Adapters

__all__ = [
    "FRAMEWORK_CODES",
    "RECOMPUTE_CODES",
    "TRAINING_WORKSPACE_BYTES",
    "ActivationParts",
    "MemoryBreakdown",
    "PrefillMemory",
    "StateBytes",
    "TrainingPeak",
    "activation_parts",
    "bytes_per_value",
    "expert_params",
    "framework_state_bytes",
    "gradient_bytes_per_param",
    "gradient_reduce_bytes_per_param",
    "kv_cache_bytes",
    "layer_terms",
    "model_state_bytes",
    "optimizer_bytes_per_param",
    "optimizer_state_bytes",
    "peak_activations",
    "prefill_memory",
    "training_fragmentation_bytes",
    "training_peak_bytes",
    "with_overhead",
]

RECOMPUTE_CODES: dict[Recompute, int] = {name: i for i, name in enumerate(RECOMPUTES)}
_FULL = float(RECOMPUTE_CODES["full"])
_OP_SELECTIVE = float(RECOMPUTE_CODES["op-selective"])
_DOTS = float(RECOMPUTE_CODES["dots"])
FRAMEWORK_CODES: dict[Framework, int] = {name: i for i, name in enumerate(FRAMEWORKS)}
_PYTORCH = float(FRAMEWORK_CODES["pytorch"])
_TRANSFORMERS = float(FRAMEWORK_CODES["transformers"])  # the autocast layout too: codes >= _PYTORCH
_FP16 = float(PRECISIONS.index("fp16"))
_FP8 = float(PRECISIONS.index("fp8"))
_AUTO_REDUCE = float(GRAD_REDUCES.index("auto"))
_SIXTEEN_BIT = float(GRAD_REDUCES.index("16-bit"))
_FUSED_LOSS = float(LOSSES.index("fused"))
_FP8_BYTES = 1.0

_MASK_BYTES = 1.0  # dropout masks are stored as uint8/bool
_SOFTMAX_STATS_BYTES = 4.0  # flash attention keeps one fp32 log-sum-exp per row and head
_LOSS_BYTES = 4.0  # cross entropy upcasts logits to fp32 and keeps its log-softmax
# At the loss backward the fp32 log-softmax and two fp32 gradient buffers of the logits coexist:
# 12 bytes per logit, whatever the training precision (PyTorch's cross_entropy on upcast logits).
_LOGITS_PEAK_BYTES = 12.0
_FP32_BYTES = 4.0
_CAST_BYTES = 2.0  # autocast's 16-bit copy of an fp32 weight
# PyTorch hands each (cuBLAS handle, stream) a workspace from the caching allocator, counted as allocated
# and never freed: 32 MiB for cuBLAS on Hopper (8.125 MiB on older GPUs) plus 1 MiB for cuBLASLt
# (aten/src/ATen/cuda/CublasHandlePool.cpp, parseChosenWorkspaceSize and getCUDABlasLtWorkspaceSize).
# Handles are per thread: a training step's forward runs in the caller's thread, its backward in
# autograd's device thread, so training holds two; a forward alone holds one.
_BLAS_WORKSPACE_BYTES = (32.0 + 1.0) * 2**20
TRAINING_WORKSPACE_BYTES = 2.0 * _BLAS_WORKSPACE_BYTES


def bytes_per_value(precision: Precision) -> float:
    """Bytes of the weights, gradients and activations a framework keeps for a training precision.

    fp8 training (Transformer Engine) keeps 16-bit activations and weights the size of bf16's: as
    NVIDIA's Megatron recipes run it (``fp8_param_gather``), each projection weight is stored in fp8
    with its fp8 transpose (1 + 1 bytes) and the optimizer keeps the fp32 master. What it saves for
    the backward is smaller under Megatron (``layer_terms``); PyTorch's float8 training keeps the
    16-bit inputs and re-casts them.
    """
    return 4.0 if precision in FP32_VALUED else 2.0


def optimizer_state_bytes(optimizer: Optimizer) -> float:
    """Bytes of optimizer state per parameter, wherever they live (a paged optimizer's are in host-pageable memory).

    Adam/AdamW: momentum + variance in fp32 (8). SGD: momentum (4). 8-bit Adam (Dettmers et al.
    2022, arXiv:2110.02861): two 1-byte states plus one fp32 absmax per 2048-value block.
    """
    eight_bit = 2.0 + 2 * 4.0 / 2048
    return {
        "adamw": 8.0,
        "adam": 8.0,
        "sgd": 4.0,
        "adam8bit": eight_bit,
        "paged-adamw": 8.0,
        "paged-adam8bit": eight_bit,
    }[optimizer]


def optimizer_bytes_per_param(optimizer: Optimizer, precision: Precision) -> float:
    """Optimizer state per parameter held on the device (ZeRO paper's K), including the fp32 master copy in
    mixed precision. A paged optimizer's states are in CUDA unified memory, which the caching allocator
    never sees and the driver evicts to host RAM under pressure, so they do not decide whether a step fits."""
    states = 0.0 if optimizer in PAGED_OPTIMIZERS else optimizer_state_bytes(optimizer)
    master_copy = 0.0 if precision in FP32_VALUED else 4.0
    return states + master_copy


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes per device, one entry per candidate row.

    The five tensor parts are each at their own largest; they need not be live at once (gradients
    and activations are not, without accumulation), so ``allocated_peak`` may be less than their sum.
    ``overhead`` is the allocator's fragmentation (cached segments beyond the live blocks) plus the
    fixed ``context`` (the CUDA context and what else the caching allocator never sees).
    """

    weights: FloatArray
    gradients: FloatArray
    optimizer_states: FloatArray
    activations: FloatArray
    kv_cache: FloatArray
    overhead: FloatArray
    peak: FloatArray | None = None  # live tensor bytes at the step's peak; None: every part at once
    context: FloatArray | None = None  # the fixed part of ``overhead``; None: all of it scales

    @property
    def tensors(self) -> FloatArray:
        """The parts' sum: what the step would need if everything peaked together."""
        return self.weights + self.gradients + self.optimizer_states + self.activations + self.kv_cache

    @property
    def allocated_peak(self) -> FloatArray:
        """What ``torch.cuda.max_memory_allocated`` reads: live tensors at the peak, rounded blocks."""
        return self.peak if self.peak is not None else self.tensors

    @property
    def reserved_peak(self) -> FloatArray:
        """What ``torch.cuda.max_memory_reserved`` reads: the allocated peak plus the allocator's fragmentation."""
        context = self.context if self.context is not None else 0.0
        return self.allocated_peak + self.overhead - context

    @property
    def total(self) -> FloatArray:
        """What must fit on the card (``nvidia-smi``'s figure): reserved plus the CUDA context."""
        return self.allocated_peak + self.overhead


def expert_params(model: ModelSpec) -> float:
    """Parameters of the routed experts' MLPs (0 for a dense model), as ``ModelSpec.active_params`` counts them."""
    if model.experts <= 1 or not model.is_transformer:
        return 0.0
    per_expert = (3 if model.gated_ffn else 2) * model.hidden_size * model.ffn_size
    return float(model.experts * per_expert * model.total_layers)


def _params_per_device(
    params: float | FloatArray,
    experts: float | FloatArray,
    tp: FloatArray,
    pp: FloatArray,
    dp: FloatArray,
    ep: FloatArray,
    sharded: npt.NDArray[np.bool_],
) -> FloatArray:
    """Parameters one device holds. Experts are split over ``ep`` ranks; where ``sharded`` (a ZeRO
    stage covers it) dense parameters are split over dp and experts over the dp / ep ranks that
    hold the same experts."""
    dense = (col(params) - col(experts)) / np.where(sharded, dp, 1.0)
    routed = col(experts) / ep / np.where(sharded, np.maximum(dp / ep, 1.0), 1.0)
    return (dense + routed) / (col(tp) * col(pp))


def model_state_bytes(
    params: float,
    weight_bytes: FloatArray,
    optimizer_bytes: FloatArray,
    tp: FloatArray,
    pp: FloatArray,
    dp: FloatArray,
    zero: FloatArray,
    *,
    grad_bytes: FloatArray | None = None,
    experts: float = 0.0,
    ep: FloatArray | None = None,
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """(weights, gradients, optimizer states) per device (ZeRO paper, section 3.1).

    Gradients are kept at the weight precision unless ``grad_bytes`` says otherwise (PyTorch AMP:
    fp32 gradients of fp32 weights). ``experts`` of the ``params`` are split over ``ep`` ranks.
    """
    dp, zero = col(dp), col(zero)
    ep = col(1.0) if ep is None else col(ep)
    grad_bytes = col(weight_bytes) if grad_bytes is None else col(grad_bytes)

    def held(stage: float) -> FloatArray:
        return _params_per_device(params, experts, col(tp), col(pp), dp, ep, zero >= stage)

    return held(3) * weight_bytes, held(2) * grad_bytes, held(1) * optimizer_bytes


@dataclass(frozen=True)
class StateBytes:
    """Bytes per parameter a layout keeps, and the autocast copy it adds during forward and backward."""

    weights: FloatArray
    gradients: FloatArray
    optimizer: FloatArray
    cast: FloatArray  # per matmul weight, from its first forward use to its layer's backward
    step_gradients: FloatArray  # of ``optimizer``: fp32 copies of a 16-bit gradient buffer, live at the step only


def framework_state_bytes(
    framework: FloatArray,
    precision: FloatArray,
    weight_bytes: FloatArray,
    optimizer_bytes: FloatArray,
    grad_reduce: FloatArray | None = None,
) -> StateBytes:
    """Per-parameter bytes of each layout, given the ZeRO split (``weight_bytes``, ``optimizer_bytes``);
    ``precision`` and ``grad_reduce`` are indexes in ``PRECISIONS`` and ``GRAD_REDUCES``.

    Megatron-LM: 16-bit weights, the fp32 master copy inside the optimizer's K, and gradients as its
    ``--bf16`` and ``--fp16`` keep them (docs/source/distrib_optimizer.md, bytes per parameter 18 and
    20 for Adam): under bf16 (and fp8, whose weights are bf16) they accumulate and all-reduce in an
    fp32 buffer (``accumulate_allreduce_grads_in_fp32``, on by default); under fp16, or when asked to
    reduce in 16 bits (NVIDIA's recipes' ``grad_reduce_in_fp32=False``), the buffer is 16-bit and the
    optimizer copies it to fp32 gradients beside its master weights (4 more bytes of K), which its
    ``zero_grad`` frees after each step (``step_gradients``: they never meet the activations).
    PyTorch AMP (16-bit precision under autocast): the fp32 master *is* the model (4 B), its gradients
    are fp32 (4 B), the optimizer keeps only its states (K - 4), and autocast caches a 16-bit copy of
    each matmul weight (2 B). fp32 training is 16 bytes for Adam in either layout.
    """
    sixteen_bit = col(weight_bytes) < _FP32_BYTES
    amp = (col(framework) >= _PYTORCH) & sixteen_bit
    gradients = gradient_bytes_per_param(framework, precision, weight_bytes, grad_reduce)
    sixteen_bit_buffer = ~amp & sixteen_bit & (gradients < _FP32_BYTES)
    return StateBytes(
        weights=np.where(amp, _FP32_BYTES, weight_bytes),
        gradients=gradients,
        optimizer=col(optimizer_bytes) + np.where(amp, -_FP32_BYTES, np.where(sixteen_bit_buffer, _FP32_BYTES, 0.0)),
        cast=np.where(amp, _CAST_BYTES, 0.0),
        step_gradients=np.where(sixteen_bit_buffer, _FP32_BYTES, 0.0),
    )


def _reduce_code(grad_reduce: FloatArray | None) -> FloatArray:
    return col(_AUTO_REDUCE) if grad_reduce is None else col(grad_reduce)


def gradient_bytes_per_param(
    framework: FloatArray, precision: FloatArray, weight_bytes: FloatArray, grad_reduce: FloatArray | None = None
) -> FloatArray:
    """Bytes of each parameter's gradient as it accumulates (``framework_state_bytes``): fp32 under 16-bit
    weights, but Megatron's 16-bit buffer under fp16 or a 16-bit reduce; autocast's are its fp32 weights'."""
    code = _reduce_code(grad_reduce)
    sixteen_bit = col(weight_bytes) < _FP32_BYTES
    asked = (code == _SIXTEEN_BIT) | ((code == _AUTO_REDUCE) & (col(precision) == _FP16))
    megatron_buffer = (col(framework) < _PYTORCH) & asked
    return np.where(sixteen_bit & ~megatron_buffer, _FP32_BYTES, weight_bytes)


def gradient_reduce_bytes_per_param(
    framework: FloatArray, precision: FloatArray, weight_bytes: FloatArray, grad_reduce: FloatArray | None = None
) -> FloatArray:
    """Bytes of each parameter's gradient on the data-parallel wire: the buffer's width, except that FSDP
    with ``reduce_dtype=bfloat16`` casts autocast's fp32 gradients to 16 bits for the reduce."""
    buffer = gradient_bytes_per_param(framework, precision, weight_bytes, grad_reduce)
    asked = (_reduce_code(grad_reduce) == _SIXTEEN_BIT) & (col(weight_bytes) < _FP32_BYTES)
    return np.where(asked, weight_bytes, buffer)


def _uses_dropout(model: ModelSpec) -> bool:
    """GPT-2, BERT, T5 and ViT train with dropout; Llama-style (gated MLP) models do not."""
    return not model.gated_ffn


def layer_terms(
    model: ModelSpec,
    act_bytes: FloatArray,
    norm_bytes: FloatArray | None = None,
    expand_kv: FloatArray | float = 0.0,
    hf_modules: FloatArray | float = 0.0,
    hf_activation: FloatArray | float = 0.0,
    fused_glu: FloatArray | float = 0.0,
    linear_input_bytes: FloatArray | None = None,
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Per-token bytes of one transformer layer: (kept whole under TP, split by TP, attention scores / s).

    The third term is multiplied by the sequence length: it is the a*s^2*b softmax storage.
    ``norm_bytes`` is the residual stream's width (the norms' saved inputs): the activation
    precision in Megatron, fp32 under PyTorch autocast. ``expand_kv`` (0/1): K and V repeated to
    every query head, as PyTorch does for grouped-query attention when no flash kernel takes it.

    ``hf_modules`` (0/1): Hugging Face transformers' Llama-family modules (``LlamaRMSNorm``,
    ``LlamaAttention``, ``LlamaMLP`` in transformers 5). Their eager RMSNorm keeps three tensors
    where a fused kernel keeps the input and one fp32 rstd per row: ``pow`` and the ``* rsqrt``
    save its fp32 input, ``rsqrt`` its output (4 bytes a row), ``weight *`` the fp32 normalised
    input. And q, k, v (and gate, up) are separate ``nn.Linear`` calls: autocast casts the norm's
    fp32 output to 16 bits for each of them, and caches only weights (leaves), so each keeps its
    own copy. Without autocast (fp32) the norm's output is one tensor they all keep. Rotary
    keeps nothing per layer: ``q * cos`` saves only ``cos`` (autograd saves an operand only for
    another operand's gradient, and cos/sin need none); the fp32 rotated q and k are cast to 16
    bits by autocast for ``scaled_dot_product_attention``, which keeps those copies in place of the
    views of a fused QKV output, so attention keeps the same bytes as the fused layout. Grouped KV
    heads are not repeated: without a mask (nothing padded) transformers 5 passes ``enable_gqa`` to
    SDPA instead of calling ``repeat_kv`` (integrations/sdpa_attention.py, ``use_gqa_in_sdpa``).

    ``hf_activation`` (0/1): the MLP's activation is transformers' module of ``model.activation``, which
    for some names is several ops, each keeping a tensor (``composite_activation_bytes``).

    ``fused_glu`` (0/1): a gated MLP's activation is one fused function that saves only its input, the
    up-projection's output (Megatron-core's ``bias_swiglu_impl``, megatron/core/fusions/
    fused_bias_swiglu.py, on by default), instead of ``silu(gate) * up``, whose product also keeps
    ``silu(gate)``. ``linear_input_bytes``: bytes per value a projection saves of its input for the
    weight gradient, ``act_bytes`` unless fp8 under Transformer Engine, whose ``Linear`` and
    ``LayerNormLinear`` save the fp8 cast they multiplied (1 byte; ``saved_inputmat`` or its
    transpose in module/linear.py). The norms' inputs and the activation's input stay 16-bit, and
    attention keeps its 16-bit output for its own backward beside the output projection's fp8 copy.
    """
    norm_bytes = act_bytes if norm_bytes is None else norm_bytes
    h = float(model.hidden_size)
    d_attn = float(model.heads * model.attention_head_dim)
    d_kv = float(model.kv_heads * model.attention_head_dim)
    ffn = float(model.ffn_size * model.active_experts)  # each token is routed to active_experts MLPs
    drop = 1.0 if _uses_dropout(model) else 0.0
    # What the two norms keep, the projections' inputs and two dropout masks stay whole under plain TP.
    linear_in = col(act_bytes) if linear_input_bytes is None else col(linear_input_bytes)
    own_casts = hf_modules * (col(act_bytes) < col(norm_bytes))  # one 16-bit input copy per projection
    extra_inputs = own_casts * (2.0 + (1.0 if model.gated_ffn else 0.0))  # q, k, v; gate, up
    norms = 2.0 * ((1.0 + hf_modules) * norm_bytes * h + hf_modules * _FP32_BYTES)
    # The QKV and up-projections' inputs (the norms' outputs), then HF's extra per-projection copies.
    replicated = norms + (2.0 * linear_in + extra_inputs * act_bytes) * h + 2 * drop * _MASK_BYTES * h
    # The activation's inputs (gate and up; silu(gate) too when unfused), then the down-projection's input.
    activation_inputs = (3.0 - col(fused_glu)) if model.gated_ffn else 1.0
    mlp = activation_inputs * act_bytes * ffn + linear_in * ffn
    mlp = mlp + hf_activation * composite_activation_bytes(model, act_bytes) * ffn
    output_projection_copy = np.where(linear_in < act_bytes, linear_in * d_attn, 0.0)
    split = act_bytes * (2 * d_attn + 2 * d_kv) + output_projection_copy + mlp  # q, attention output, k, v
    split = split + expand_kv * act_bytes * 2 * d_attn * (d_kv < d_attn)
    scores_per_s = model.heads * (act_bytes + drop * (_MASK_BYTES + act_bytes))  # softmax, mask, dropped
    return replicated, split, col(scores_per_s)


@dataclass(frozen=True)
class ActivationParts:
    """Activation bytes per device, by when they are live (see ``training_peak_bytes``).

    ``first`` is the first pipeline stage (the only one when pp = 1), ``last`` the last stage.
    ``kept_*``: saved for backward by the stage's in-flight micro-batches (with the LM head's inputs
    where the head is). ``transient``: one layer rebuilt during backward (full recompute) and ring
    attention's K/V buffers. ``logits_*``: logits of one micro-batch the stage computes (0 or all).
    ``logit_forward_bytes``: bytes per logit at the loss's forward (head output, fp32 copy, log-softmax);
    ``logit_backward_bytes``: at the loss's backward.
    ``model_output``: what the stage with the LM head also holds at the loss's forward and frees when
    the forward returns (HF: the final norm's fp32 output, held as the model output's
    ``last_hidden_state``; PyTorch frees it once the head has cast it), 0 on other stages.
    """

    kept_first: FloatArray
    kept_last: FloatArray
    transient: FloatArray
    logits_first: FloatArray
    logits_last: FloatArray
    logit_forward_bytes: FloatArray
    logit_backward_bytes: FloatArray
    model_output: FloatArray


def _in_flight_layers(
    layers: float, pp: FloatArray, virtual_stages: FloatArray, microbatches: FloatArray
) -> FloatArray:
    """Layers' worth of one micro-batch's activations the first pipeline stage holds at its peak.

    1F1B: min(p, m) micro-batches of L/p layers (Narayanan et al. 2021). Interleaved 1F1B with v
    chunks per rank: Megatron's warm-up runs (p - 1) * 2 + (v - 1) * p chunk-micro-batches, plus
    one in the steady state, each of L/(p v) layers: L (1 + (p - 1)/(p v)) once m >= p
    (Korthikanti et al. 2022, section 4.2.3).
    """
    m = np.maximum(microbatches, 1.0)
    v = np.maximum(virtual_stages, 1.0)
    plain = np.minimum(pp, m) * layers / pp
    interleaved = np.minimum((pp - 1.0) * 2.0 + (v - 1.0) * pp + 1.0, m * v) * layers / (pp * v)
    return np.where(v > 1, interleaved, plain)


def activation_parts(
    model: ModelSpec,
    seq_len: FloatArray,
    micro_batch: FloatArray,
    tp: FloatArray,
    pp: FloatArray,
    sequence_parallel: FloatArray,
    recompute: FloatArray,
    flash_attention: FloatArray,
    act_bytes: FloatArray,
    microbatches_per_step: FloatArray,
    *,
    framework: FloatArray | None = None,
    cp: FloatArray | None = None,
    virtual_stages: FloatArray | None = None,
    adapters: Adapters | None = None,
    precision: FloatArray | None = None,
    loss: FloatArray | None = None,
) -> ActivationParts:
    """Activations of one training step per device, by stage and by when they are live.

    ``recompute`` is 0 none, 1 selective (attention core recomputed), 2 full, 3 op-selective, 4 dots
    (every weight matmul's output kept with the layer's input). ``framework`` 0 is
    Megatron's layout (the default: the papers'), 1 PyTorch autocast's, 2 Hugging Face transformers':
    autocast's layout with the Llama-family modules (``layer_terms``) where the model has their
    gated MLP (Llama, Mistral, Qwen, Gemma), PyTorch's otherwise. ``cp`` ranks split each
    sequence (ring attention): every per-token term divides by cp, the a*s^2 scores keep all keys.
    ``adapters``: a LoRA/QLoRA job's frozen layers (``Adapters.layer_terms``); the LM head saves its
    input only when it is trained. ``precision`` (an index in ``PRECISIONS``): fp8 under Megatron is
    Transformer Engine's, whose projections save fp8 inputs (``layer_terms``).

    The loss: PyTorch's ``cross_entropy`` (and transformers', on upcast logits) keeps an fp32
    log-softmax and meets two fp32 gradient buffers in its backward (``_LOGITS_PEAK_BYTES``).
    Megatron's ``vocab_parallel_cross_entropy`` upcasts the head's output once and works in place:
    the fp32 copy becomes the softmax it saves, and then the gradient
    (megatron/core/tensor_parallel/cross_entropy.py), so the forward holds the 16-bit output and
    the fp32 copy, and the backward the fp32 gradient and its 16-bit cast. ``loss`` (an index in
    ``LOSSES``): a fused kernel instead (flash-attn's ``CrossEntropyLoss``) saves the 16-bit logits and one
    fp32 log-sum-exp per row, and its backward writes the logits' gradient beside them, at their width.
    """
    s, b, tp, pp = col(seq_len), col(micro_batch), col(tp), col(pp)
    act = col(act_bytes)
    framework = col(0.0) if framework is None else col(framework)
    cp = col(1.0) if cp is None else col(cp)
    virtual_stages = col(1.0) if virtual_stages is None else col(virtual_stages)
    zero = 0.0 * (s + b + tp + pp + framework + cp)
    if model.traced is not None and not model.is_transformer:
        kept = model.traced.activation_bytes_per_sample * b * act / model.traced.traced_dtype_bytes + zero
        return ActivationParts(kept, kept, zero, zero, zero, zero, zero, zero)
    pytorch = framework >= _PYTORCH
    fp8 = np.zeros_like(pytorch) if precision is None else col(precision) == _FP8
    transformer_engine_fp8 = ~pytorch & fp8
    hf = ((framework == _TRANSFORMERS) & model.gated_ffn).astype(float)  # HF's Llama-family modules
    flash = col(flash_attention) > 0
    head_input = act * model.hidden_size
    if adapters is None:
        norm_bytes = np.where(pytorch, np.maximum(act, _FP32_BYTES), act)
        native_gqa = flash & (act < _FP32_BYTES)  # FlashAttention takes fewer KV heads; fp32 runs other kernels
        replicated, split, scores_per_s = layer_terms(
            model,
            act,
            norm_bytes,
            (pytorch & ~native_gqa).astype(float),
            hf_modules=hf,
            hf_activation=(framework == _TRANSFORMERS).astype(float),
            fused_glu=(~pytorch).astype(float),
            linear_input_bytes=np.where(transformer_engine_fp8, _FP8_BYTES, act),
        )
    else:
        norm_bytes = adapters.residual_bytes(act)
        replicated, split, scores_per_s = adapters.layer_terms(model, act)
        hf = np.where(model.gated_ffn, 1.0, 0.0) + 0.0 * framework  # PEFT runs Hugging Face's modules
        head_input = head_input * (1.0 if adapters.finetune.train_head else 0.0)
    sp_divisor = np.where(col(sequence_parallel) > 0, tp, 1.0)
    recompute = col(recompute)
    stats = _SOFTMAX_STATS_BYTES * model.heads
    kept_core = np.where(flash | (recompute == 1), stats, scores_per_s * s)
    rebuilt_core = np.where(flash, stats, scores_per_s * s)  # a recomputed layer materialises its scores again
    tokens = s * b / cp
    per_layer_kept = tokens * (replicated / sp_divisor + (split + kept_core) / tp)
    layer_input = tokens * norm_bytes * model.hidden_size / sp_divisor
    # Full recompute keeps each layer's input, plus one layer rebuilt at a time during backward.
    # Op-level selective keeps the input too, every other matmul's output and attention's output and
    # statistics; the backward rebuilds the rest of one layer at a time, as full recompute does.
    d_attn = model.heads * model.attention_head_dim
    op_kept = layer_input + tokens * (act * (op_selective_saved_widths(model) + d_attn) + stats) / tp
    # JAX's dots policy keeps the input and every weight matmul's output (attention's statistics with
    # them); a row-parallel projection's output is the residual's width, split over tp like the input.
    split_outputs, residual_outputs = dots_saved_widths(model)
    dots_kept = layer_input + tokens * act * residual_outputs / sp_divisor + tokens * (act * split_outputs + stats) / tp
    rebuilds = (recompute == _FULL) | (recompute == _OP_SELECTIVE) | (recompute == _DOTS)
    per_layer = np.select(
        [recompute == _FULL, recompute == _OP_SELECTIVE, recompute == _DOTS],
        [layer_input, op_kept, dots_kept],
        per_layer_kept,
    )
    rebuilt = tokens * (replicated / sp_divisor + (split + rebuilt_core) / tp)
    d_kv = model.kv_heads * model.attention_head_dim
    ring = np.where(cp > 1, 2.0 * tokens * act * 2 * d_kv / tp, 0.0)  # K, V chunk received and sent
    transient = np.where(rebuilds, rebuilt, 0.0) + ring

    layers = float(model.total_layers)
    drop = 1.0 if _uses_dropout(model) else 0.0
    embedding = tokens * drop * _MASK_BYTES * model.hidden_size / sp_divisor
    # HF computes rotary's cos and sin once per forward, at the residual stream's dtype, for positions
    # (1, s) shared by the batch, and every layer's rotary multiplication keeps them until its backward.
    rotary = hf * s / cp * 2.0 * norm_bytes * model.attention_head_dim
    has_head = 1.0 if model.vocab_size > 0 else 0.0
    final_norm = (1.0 + hf) * norm_bytes * model.hidden_size + hf * _FP32_BYTES  # as a layer's norm keeps
    if adapters is not None:  # a frozen norm weight's product saves nothing (``Adapters.layer_terms``)
        final_norm = np.maximum(norm_bytes, _FP32_BYTES) * model.hidden_size + _FP32_BYTES
    head_inputs = has_head * tokens * (final_norm + head_input) / sp_divisor  # final norm, LM head
    logits = tokens * model.vocab_size / tp
    single = pp <= 1
    in_flight = _in_flight_layers(layers, pp, virtual_stages, col(microbatches_per_step))
    kept_first = in_flight * per_layer + embedding + rotary + np.where(single, head_inputs, 0.0)
    kept_last = np.where(single, kept_first, layers / pp * per_layer + rotary + head_inputs)
    # Forward: the head's output, its fp32 copy (none when it already is fp32) and the log-softmax,
    # which Megatron computes in place of the copy; its backward's gradient is in place too.
    upcast = np.where(act < _FP32_BYTES, _FP32_BYTES, 0.0)
    logit_forward = act + upcast + np.where(pytorch, _LOSS_BYTES, 0.0)
    logit_backward = np.where(pytorch, _LOGITS_PEAK_BYTES, _FP32_BYTES + np.where(upcast > 0, act, 0.0))
    fused_loss = np.zeros_like(pytorch) if loss is None else col(loss) == _FUSED_LOSS
    logit_forward = np.where(fused_loss, act, logit_forward)
    logit_backward = np.where(fused_loss, 2.0 * act, logit_backward)
    # Under autocast the final norm's fp32 output is a tensor of its own beside the head's 16-bit input.
    model_output = has_head * hf * (act < norm_bytes) * tokens * norm_bytes * model.hidden_size / sp_divisor
    return ActivationParts(
        kept_first=kept_first,
        kept_last=kept_last,
        transient=transient + zero,
        logits_first=np.where(single, logits, 0.0),
        logits_last=logits + zero,
        logit_forward_bytes=logit_forward + zero,
        logit_backward_bytes=logit_backward + zero,
        model_output=model_output + zero,
    )


def _loss_forward(parts: ActivationParts, logits: FloatArray) -> FloatArray:
    """Bytes a stage computing ``logits`` holds at its loss's forward beyond the saved activations."""
    return parts.logit_forward_bytes * logits + np.where(logits > 0, parts.model_output, 0.0)


def peak_activations(parts: ActivationParts) -> FloatArray:
    """The larger stage's saved activations plus its larger transient, from already computed parts."""

    def loss(logits: FloatArray) -> FloatArray:  # the loss ends before any rebuild
        return np.maximum(_loss_forward(parts, logits), parts.logit_backward_bytes * logits)

    first = parts.kept_first + np.maximum(parts.transient, loss(parts.logits_first))
    last = parts.kept_last + np.maximum(parts.transient, loss(parts.logits_last))
    return np.maximum(first, last)


def _stage_peak(
    state: FloatArray,
    gradients: FloatArray,
    cast: FloatArray,
    cast_in_backward: FloatArray,
    accumulating: FloatArray,
    kept: FloatArray,
    transient: FloatArray,
    loss_backward: FloatArray,
    loss_forward: FloatArray,
    rebuilt_gradients: FloatArray,
    at_step: FloatArray,
) -> FloatArray:
    """The largest live bytes of one pipeline stage over the phases of a step.

    ``state`` (weights and optimizer states) is always live; gradients of earlier micro-batches are
    live through later ones (``accumulating``), and all of them from the end of the backward to the
    optimizer step. Forward ends at the loss (``loss_forward``: the logits in fp32 and what the
    model's output holds); the loss's backward (``loss_backward``: 12 bytes per logit under
    PyTorch's cross entropy) holds while every activation is still saved; a rebuilt layer (full
    recompute) lives while the backward walks the layers, between its first layer (all inputs kept,
    few gradients) and its last (``rebuilt_gradients``: all but those of the layers still ahead, the
    untied input embedding). ``at_step`` is what the end adds: a tied embedding's gradient, summed into
    the head's, and the optimizer's step-only fp32 gradients.
    """
    carried = gradients * accumulating
    forward = state + carried + cast + kept + loss_forward
    at_loss_backward = state + carried + cast_in_backward + kept + loss_backward
    rebuild = state + np.maximum(carried + kept, rebuilt_gradients) + transient
    end = state + gradients + at_step
    return np.maximum(np.maximum(forward, at_loss_backward), np.maximum(rebuild, end))


@dataclass(frozen=True)
class TrainingPeak:
    """A step's peak per device: live bytes, and what the caching allocator holds beyond them then."""

    allocated: FloatArray  # torch.cuda.max_memory_allocated
    fragmentation: FloatArray  # max_memory_reserved less max_memory_allocated


def training_fragmentation_bytes(logits: FloatArray, optimizer: FloatArray) -> FloatArray:
    """Cached bytes a training step's allocator holds beyond its allocated peak: min(L, S).

    ``logits``: the stage's logits per micro-batch (0 without the LM head); L = 4 bytes each, the
    fp32 buffer the loss allocates three of, the step's largest requests. ``optimizer``: S, the
    optimizer's state bytes on the device. Why: ``torch.optim`` creates its states at the end of the
    first step, when the activations and the loss's buffers lie freed in the cache; best fit carves
    the states out of those blocks, so the next step's loss no longer finds a free block as large as
    its buffers and takes fresh segments for them (the allocator never splits a request over blocks).
    The blocks the states broke up keep serving smaller activations, so what stays cached beyond the
    peak is about one buffer, and no more than the states that displaced it.

    No fitted constant. Replaying every allocation of the measured steps through a model of the
    caching allocator (``benchmarks/replay_allocator.py``) reproduces ``max_memory_reserved`` of all
    32 training rows of ``benchmarks/data/measured/h100-2026-11-26`` (validate.json,
    hf-llama/truth.jsonl) to within 4.1 % and shows the segments the later steps add to be these
    buffers. Measured, the excess is 0.2-2.1 L (median 0.9 L); min(L, S) puts the reserved peak
    within 7.0 % of every one of those rows (median 2.3 %).
    """
    return np.minimum(_LOSS_BYTES * col(logits), col(optimizer))


def training_peak_bytes(
    model: ModelSpec,
    weights: FloatArray,
    gradients: FloatArray,
    optimizer: FloatArray,
    cast: FloatArray,
    parts: ActivationParts,
    recompute: FloatArray,
    microbatches: FloatArray,
    grad_bytes_per_param: FloatArray,
    tp: FloatArray,
    pp: FloatArray,
    displacing: FloatArray | None = None,
    step_gradients: FloatArray | None = None,
) -> TrainingPeak:
    """Peak bytes per device of one step, the larger of the first and last pipeline stages.

    ``weights`` excludes ``cast`` (autocast's copies). Under full recompute the copies of the
    checkpointed layers die when autocast exits (each is re-cast in its layer's backward); only the
    LM head's stays, saved by its matmul. An untied input embedding is the last thing the backward
    reaches: its gradient does not exist yet while the first layer is rebuilt. Both threads' cuBLAS
    workspaces are live throughout. The reserved peak is each stage's peak plus its fragmentation
    (``training_fragmentation_bytes``), the larger of the two stages; ``displacing`` caps it (default:
    the optimizer's states, which displace the loss's buffers in full training). ``step_gradients``: the
    part of ``optimizer`` that exists during the optimizer step only (``StateBytes.step_gradients``).
    """
    step_only = np.zeros_like(optimizer) if step_gradients is None else step_gradients
    state = weights + optimizer - step_only
    accumulating = (col(microbatches) > 1).astype(float)
    embedding_params = float(model.vocab_size * model.hidden_size)
    head_cast = np.where(cast > 0, _CAST_BYTES * embedding_params / col(tp), 0.0)
    rebuilds = (col(recompute) == _FULL) | (col(recompute) == _OP_SELECTIVE)  # autocast's copies are re-cast too
    cast_in_backward = np.where(rebuilds, np.minimum(head_cast, cast), cast)
    tied = 1.0 if model.tied_embeddings else 0.0
    embedding_grad = tied * grad_bytes_per_param * embedding_params / col(tp)
    # The first stage's share of gradients that belongs to an untied input embedding (stages split evenly).
    input_embedding_share = np.minimum((1.0 - tied) * embedding_params * col(pp) / max(model.params, 1), 1.0)
    first = _stage_peak(
        state,
        gradients,
        cast,
        cast_in_backward,
        accumulating,
        parts.kept_first,
        parts.transient,
        parts.logit_backward_bytes * parts.logits_first,
        _loss_forward(parts, parts.logits_first),
        gradients * (1.0 - input_embedding_share),
        embedding_grad + step_only,
    )
    last = _stage_peak(
        state,
        gradients,
        cast,
        cast_in_backward,
        accumulating,
        parts.kept_last,
        parts.transient,
        parts.logit_backward_bytes * parts.logits_last,
        _loss_forward(parts, parts.logits_last),
        np.where(col(pp) > 1, gradients, gradients * (1.0 - input_embedding_share)),
        step_only + np.zeros_like(embedding_grad),
    )
    first, last = first + TRAINING_WORKSPACE_BYTES, last + TRAINING_WORKSPACE_BYTES
    allocated = np.maximum(first, last)
    cap = optimizer if displacing is None else displacing
    reserved = np.maximum(
        first + training_fragmentation_bytes(parts.logits_first, cap),
        last + training_fragmentation_bytes(parts.logits_last, cap),
    )
    return TrainingPeak(allocated=allocated, fragmentation=reserved - allocated)


def kv_cache_bytes(
    model: ModelSpec, batch: FloatArray, tokens: FloatArray, kv_bytes: FloatArray, tp: FloatArray
) -> FloatArray:
    """K and V for every decoder layer and cached token: 2 * layers * kv_heads * head_dim * bytes.

    GQA shrinks it through kv_heads, a sliding window caps the tokens kept, and TP splits the
    KV heads (a head is never split, so fewer KV heads than TP ranks are replicated).
    """
    if not model.is_transformer or model.architecture in ("encoder", "vision-transformer"):
        return col(0.0) * col(batch)
    decoder_layers = model.decoder_layers or model.layers
    kept = col(tokens)
    if model.sliding_window:
        kept = np.minimum(kept, float(model.sliding_window))
    kv_heads_per_device = np.ceil(model.kv_heads / col(tp))
    return 2.0 * decoder_layers * kv_heads_per_device * model.attention_head_dim * col(kv_bytes) * kept * col(batch)


@dataclass(frozen=True)
class PrefillMemory:
    """A prefill's transient bytes: what it allocates beyond the weights and the KV cache, and what the caching
    allocator holds beyond that; one call gives both, since both come from the same layer and head terms."""

    workspace: FloatArray
    fragmentation: FloatArray


def prefill_memory(
    model: ModelSpec,
    batch: FloatArray,
    prompt_len: FloatArray,
    act_bytes: FloatArray,
    tp: FloatArray,
    all_logits: FloatArray | None = None,
) -> PrefillMemory:
    """Transient bytes of a prefill (``workspace``: its widest layer's intermediates, the logits it keeps,
    cuBLAS's workspace) and the cached bytes its allocator holds beyond that allocated peak (``fragmentation``).

    Without autograd nothing is kept between layers, so a layer's peak is the widest single layer.
    ``all_logits`` (0/1, default 0) says which logits the forward returns. 0: the last position's
    only, upcast to fp32 (what ``generate()`` and serving engines keep, a few MB), counted on top of
    the widest layer. 1: every position's, at the model's dtype (a plain Hugging Face forward:
    ``logits_to_keep=0`` and, without labels, no fp32 upcast in transformers 5); the forward then
    peaks at the LM head, whose input (the final norm's output) and output are live while the layers'
    transients are already freed.

    Fragmentation: every position's logits are one request larger than any block the layers freed,
    so the head takes a fresh segment while the layers' segments stay cached: the allocator holds
    the widest layer and the head together, where the live peak is the larger of the two. With the
    last position's logits only, the allocated figure already counts both. No fitted constant.
    Against the measured HF prefills (hf-llama/truth.jsonl) this reads 9-35 % low, because
    ``measure.py`` built each model in fp32 on the GPU before casting it to bf16 and the fp32
    segments stayed cached (``benchmarks/replay_allocator.py`` reproduces those rows to within 4.1 %
    that way); replayed with the weights created in bf16, as a 16-bit checkpoint loads, the same
    prefills reserve 3-12 % more than this (``replay_allocator.py --bf16-weights``).
    """
    if model.traced is not None and not model.is_transformer:
        # A traced network holds at most what its trace saw live at once in an inference forward (the input,
        # a residual and the tensors of the op under way); without that count, all a training step would save.
        traced = model.traced
        held = (
            traced.activation_bytes_per_sample if traced.kernels is None else traced.kernels.eval_peak_bytes_per_sample
        )
        workspace = held * col(batch) * col(act_bytes) / traced.traced_dtype_bytes
        return PrefillMemory(workspace, col(0.0) * col(batch))
    tokens = col(batch) * col(prompt_len)
    width = 4 * model.hidden_size + (3 if model.gated_ffn else 2) * model.ffn_size * model.active_experts / col(tp)
    layer = tokens * col(act_bytes) * width
    head = tokens * col(act_bytes) * (model.hidden_size + model.vocab_size / col(tp))
    last_logits = col(batch) * model.vocab_size * _LOSS_BYTES / col(tp)
    every = col(0.0) if all_logits is None else col(all_logits)
    return PrefillMemory(
        workspace=np.where(every > 0, np.maximum(layer, head), layer + last_logits) + _BLAS_WORKSPACE_BYTES,
        fragmentation=np.where(every > 0, np.minimum(layer, head), 0.0),
    )


def with_overhead(
    weights: FloatArray,
    gradients: FloatArray,
    optimizer_states: FloatArray,
    activations: FloatArray,
    kv_cache: FloatArray,
    fragmentation: FloatArray,
    overhead_bytes: float,
    peak: FloatArray | None = None,
) -> MemoryBreakdown:
    """Add runtime overhead: the caching allocator's ``fragmentation`` (cached segments beyond the
    live blocks at the peak: ``training_fragmentation_bytes``, ``prefill_memory``),
    plus a fixed CUDA context that the allocator never sees.

    ``peak``: live tensor bytes at the step's peak when the parts do not all peak together.
    """
    allocated = weights + gradients + optimizer_states + activations + kv_cache if peak is None else peak
    context = np.full_like(col(allocated), overhead_bytes)
    return MemoryBreakdown(
        weights=weights,
        gradients=gradients,
        optimizer_states=optimizer_states,
        activations=activations,
        kv_cache=kv_cache,
        overhead=fragmentation + context,
        peak=peak,
        context=context,
    )
