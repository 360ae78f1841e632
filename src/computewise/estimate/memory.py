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
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from computewise.estimate.arrays import FloatArray, col
from computewise.specs import ModelSpec, Optimizer, Precision, Recompute

__all__ = [
    "RECOMPUTE_CODES",
    "MemoryBreakdown",
    "activation_bytes",
    "bytes_per_value",
    "inference_workspace_bytes",
    "kv_cache_bytes",
    "model_state_bytes",
    "optimizer_bytes_per_param",
    "with_overhead",
]

RECOMPUTE_CODES: dict[Recompute, int] = {"none": 0, "selective": 1, "full": 2}

_MASK_BYTES = 1.0  # dropout masks are stored as uint8/bool
_SOFTMAX_STATS_BYTES = 4.0  # flash attention keeps one fp32 log-sum-exp per row and head
_LOSS_BYTES = 4.0  # cross entropy upcasts logits to fp32 and keeps its log-softmax
# At the loss backward the fp32 log-softmax and two fp32 gradient buffers of the logits coexist:
# 12 bytes per logit, whatever the training precision (PyTorch's cross_entropy on upcast logits).
_LOGITS_PEAK_BYTES = 12.0


def bytes_per_value(precision: Precision) -> float:
    """Bytes of the weights, gradients and activations a framework keeps for a training precision.

    fp8 training (Transformer Engine) keeps 16-bit weights and activations and casts to fp8 inside
    the matmuls, so its memory is that of bf16; only its speed differs.
    """
    return 4.0 if precision == "fp32" else 2.0


def optimizer_bytes_per_param(optimizer: Optimizer, precision: Precision) -> float:
    """Optimizer state per parameter (ZeRO paper's K), including the fp32 master copy in mixed precision.

    Adam/AdamW: momentum + variance in fp32 (8). SGD: momentum (4). 8-bit Adam (Dettmers et al.
    2022, arXiv:2110.02861): two 1-byte states plus one fp32 absmax per 2048-value block.
    """
    states = {"adamw": 8.0, "adam": 8.0, "sgd": 4.0, "adam8bit": 2.0 + 2 * 4.0 / 2048}[optimizer]
    master_copy = 0.0 if precision == "fp32" else 4.0
    return states + master_copy


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes per device, one entry per candidate row."""

    weights: FloatArray
    gradients: FloatArray
    optimizer_states: FloatArray
    activations: FloatArray
    kv_cache: FloatArray
    overhead: FloatArray

    @property
    def total(self) -> FloatArray:
        return self.weights + self.gradients + self.optimizer_states + self.activations + self.kv_cache + self.overhead


def model_state_bytes(
    params: float,
    weight_bytes: FloatArray,
    optimizer_bytes: FloatArray,
    tp: FloatArray,
    pp: FloatArray,
    dp: FloatArray,
    zero: FloatArray,
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """(weights, gradients, optimizer states) per device; gradients are kept at the weight precision."""
    shard = params / (col(tp) * col(pp))
    dp = col(dp)
    zero = col(zero)
    weights = shard * weight_bytes / np.where(zero >= 3, dp, 1.0)
    gradients = shard * weight_bytes / np.where(zero >= 2, dp, 1.0)
    optimizer = shard * optimizer_bytes / np.where(zero >= 1, dp, 1.0)
    return weights, gradients, optimizer


def _uses_dropout(model: ModelSpec) -> bool:
    """GPT-2, BERT, T5 and ViT train with dropout; Llama-style (gated MLP) models do not."""
    return not model.gated_ffn


def _layer_terms(model: ModelSpec, act_bytes: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Per-token bytes of one transformer layer: (kept whole under TP, split by TP, attention scores / s).

    The third term is multiplied by the sequence length: it is the a*s^2*b softmax storage.
    """
    h = float(model.hidden_size)
    d_attn = float(model.heads * model.attention_head_dim)
    d_kv = float(model.kv_heads * model.attention_head_dim)
    ffn = float(model.ffn_size * model.active_experts)  # each token is routed to active_experts MLPs
    drop = 1.0 if _uses_dropout(model) else 0.0
    # Layer-norm inputs (2), QKV input, MLP input, and two dropout masks stay whole under plain TP.
    replicated = 4 * act_bytes * h + 2 * drop * _MASK_BYTES * h
    mlp = (4.0 if model.gated_ffn else 2.0) * act_bytes * ffn  # activation inputs and down-projection input
    split = act_bytes * (2 * d_attn + 2 * d_kv) + mlp  # q, attention output, k, v
    scores_per_s = model.heads * (act_bytes + drop * (_MASK_BYTES + act_bytes))  # softmax, mask, dropped
    return replicated, split, col(scores_per_s)


def activation_bytes(
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
) -> FloatArray:
    """Peak activation bytes per device for one optimizer step under a 1F1B pipeline schedule.

    The first pipeline stage holds min(pp, micro-batches) micro-batches of its L/pp layers, so its
    peak equals L layers of one micro-batch (Korthikanti et al. section 4.2.3); the last stage
    holds the logits. ``recompute`` is 0 none, 1 selective (attention core recomputed), 2 full.
    """
    s, b, tp, pp = col(seq_len), col(micro_batch), col(tp), col(pp)
    if model.traced is not None and not model.is_transformer:
        scale = col(act_bytes) / model.traced.traced_dtype_bytes
        return model.traced.activation_bytes_per_sample * b * scale
    replicated, split, scores_per_s = _layer_terms(model, col(act_bytes))
    sp_divisor = np.where(col(sequence_parallel) > 0, tp, 1.0)
    recompute = col(recompute)
    flash = col(flash_attention) > 0
    stats = _SOFTMAX_STATS_BYTES * model.heads
    kept_core = np.where(flash | (recompute == 1), stats, scores_per_s * s)
    rebuilt_core = np.where(flash, stats, scores_per_s * s)  # a recomputed layer materialises its scores again
    per_layer_kept = s * b * (replicated / sp_divisor + (split + kept_core) / tp)
    layer_input = s * b * col(act_bytes) * model.hidden_size / sp_divisor
    # Full recompute keeps each layer's input, plus one layer rebuilt at a time during backward.
    per_layer = np.where(recompute >= 2, layer_input, per_layer_kept)
    transient = np.where(recompute >= 2, s * b * (replicated / sp_divisor + (split + rebuilt_core) / tp), 0.0)

    layers_per_stage = model.total_layers / pp
    in_flight = np.minimum(pp, np.maximum(col(microbatches_per_step), 1.0))
    drop = 1.0 if _uses_dropout(model) else 0.0
    embedding = s * b * drop * _MASK_BYTES * model.hidden_size / sp_divisor
    logits = s * b * model.vocab_size * _LOGITS_PEAK_BYTES / tp
    first = layers_per_stage * in_flight * per_layer + transient + embedding
    last = layers_per_stage * per_layer + transient + logits
    return np.where(pp <= 1, first + logits, np.maximum(first, last))


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


def inference_workspace_bytes(
    model: ModelSpec, batch: FloatArray, prompt_len: FloatArray, act_bytes: FloatArray, tp: FloatArray
) -> FloatArray:
    """Transient activations of inference: one layer's intermediates during prefill, plus last-token logits.

    Without autograd nothing is kept between layers, so the peak is the widest single layer.
    """
    if model.traced is not None and not model.is_transformer:
        return model.traced.activation_bytes_per_sample * col(batch) * col(act_bytes) / model.traced.traced_dtype_bytes
    tokens = col(batch) * col(prompt_len)
    width = 4 * model.hidden_size + (3 if model.gated_ffn else 2) * model.ffn_size * model.active_experts / col(tp)
    return tokens * col(act_bytes) * width + col(batch) * model.vocab_size * _LOSS_BYTES / col(tp)


def with_overhead(
    weights: FloatArray,
    gradients: FloatArray,
    optimizer_states: FloatArray,
    activations: FloatArray,
    kv_cache: FloatArray,
    overhead_fraction: float,
    overhead_bytes: float,
) -> MemoryBreakdown:
    """Add runtime overhead: allocator fragmentation as a fraction, plus a fixed CUDA context and workspaces."""
    subtotal = weights + gradients + optimizer_states + activations + kv_cache
    return MemoryBreakdown(
        weights=weights,
        gradients=gradients,
        optimizer_states=optimizer_states,
        activations=activations,
        kv_cache=kv_cache,
        overhead=subtotal * overhead_fraction + overhead_bytes,
    )
