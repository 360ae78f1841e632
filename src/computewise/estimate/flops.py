"""FLOPs of training and inference.

Forward FLOPs per token are 2 per matmul parameter (Kaplan et al. 2020, arXiv:2001.08361,
Table 1) plus attention's two batched matmuls, QK^T and PV, at 2 * s * d_attn each per layer
(halved for causal attention, which a flash kernel skips). Backward costs twice the forward,
so training is 3x forward = the familiar 6ND plus attention.

Model FLOPs (MFU) count only that useful work; hardware FLOPs (HFU) add what recomputation
repeats: one extra forward for full recompute, the attention core for selective recompute
(Korthikanti et al. 2022, section 5; Chowdhery et al. 2022 (PaLM), appendix B).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from computewise.estimate.arrays import FloatArray, col
from computewise.specs import ModelSpec

if TYPE_CHECKING:  # adapters imports nothing from here; only the type is needed
    from computewise.estimate.adapters import Adapters

__all__ = [
    "DOTS",
    "OP_SELECTIVE",
    "attention_flops_per_token",
    "dots_saved_widths",
    "forward_flops_per_token",
    "layer_matmuls",
    "matmul_params",
    "training_flops_per_token",
]


OP_SELECTIVE = 3.0  # the code of "op-selective" in ``specs.RECOMPUTES``
DOTS = 4.0  # the code of "dots" in ``specs.RECOMPUTES``


def layer_matmuls(model: ModelSpec) -> tuple[tuple[float, float], ...]:
    """(output width, input width) of a layer's projections in the order a forward runs them, as
    torchtitan's (and Hugging Face's) modules do: q, k, v, o, then gate and up (or up) and down."""
    h = float(model.hidden_size)
    d_attn = float(model.heads * model.attention_head_dim)
    d_kv = float(model.kv_heads * model.attention_head_dim)
    f = float(model.ffn_size * model.active_experts)
    mlp = ((f, h), (f, h), (h, f)) if model.gated_ffn else ((f, h), (h, f))
    return ((d_attn, h), (d_kv, h), (d_kv, h), (h, d_attn), *mlp)


def op_selective_saved_widths(model: ModelSpec) -> float:
    """Output widths op-level selective checkpointing keeps per token: every other matmul's, from the first
    (torchtitan's policy saves alternate ``aten.mm`` outputs so half of them need no recompute)."""
    return sum(out for out, _ in layer_matmuls(model)[::2])


def dots_saved_widths(model: ModelSpec) -> tuple[float, float]:
    """Output widths JAX's dots policy keeps per token: (the column-parallel projections', which tensor
    parallelism splits; the row-parallel ones' (o, down), the residual stream's width)."""
    matmuls = layer_matmuls(model)
    row_parallel = {3, len(matmuls) - 1}
    split = sum(out for i, (out, _) in enumerate(matmuls) if i not in row_parallel)
    residual = sum(out for i, (out, _) in enumerate(matmuls) if i in row_parallel)
    return split, residual


def matmul_params(model: ModelSpec) -> float:
    """Active parameters that take part in a matmul per token.

    The input embedding is a lookup, not a matmul; an LM head is a matmul even when tied to it.
    """
    embedding_lookup = float(model.vocab_size * model.hidden_size)
    head_matmul = embedding_lookup if model.tied_embeddings else 0.0
    return model.active_params - embedding_lookup + head_matmul


def attention_flops_per_token(model: ModelSpec, context_len: FloatArray, causal: bool) -> FloatArray:
    """QK^T and PV per token, forward: 2 matmuls * 2 FLOPs * layers * attended tokens * d_attn."""
    attended = col(context_len)
    if model.sliding_window:
        attended = np.minimum(attended, float(model.sliding_window))
    d_attn = float(model.heads * model.attention_head_dim)
    causal_factor = 0.5 if causal else 1.0
    return 4.0 * model.total_layers * attended * d_attn * causal_factor


def forward_flops_per_token(model: ModelSpec, seq_len: FloatArray) -> FloatArray:
    """Forward FLOPs per token of a training sequence of ``seq_len`` tokens (or per sample for CNNs)."""
    if model.traced is not None and not model.is_transformer:
        return col(model.traced.forward_flops_per_sample) + 0.0 * col(seq_len)
    causal = model.architecture == "decoder"
    return 2.0 * matmul_params(model) + attention_flops_per_token(model, seq_len, causal)


def training_flops_per_token(
    model: ModelSpec, seq_len: FloatArray, recompute: FloatArray, adapters: Adapters | None = None
) -> tuple[FloatArray, FloatArray]:
    """(model FLOPs, hardware FLOPs) per trained token; ``recompute`` is 0 none, 1 selective, 2 full,
    3 op-selective (the matmuls whose outputs were not kept run again; attention's output was), 4 dots
    (every weight matmul's output kept: attention's core runs again, as under selective).
    ``adapters``: a LoRA/QLoRA job, whose frozen weights need no weight gradient."""
    forward = forward_flops_per_token(model, seq_len)
    model_flops = 3.0 * forward
    code = col(recompute)
    if model.traced is not None and not model.is_transformer:
        return model_flops, model_flops + np.where(code == 2, forward, 0.0)
    attention = attention_flops_per_token(model, seq_len, model.architecture == "decoder")
    if adapters is not None:
        model_flops = adapters.model_flops_per_token(model, matmul_params(model), attention)
    matmuls = layer_matmuls(model)
    unsaved = sum(2.0 * out * inp for out, inp in matmuls[1::2]) * model.total_layers
    attention_again = (code == 1) | (code == DOTS)
    extra = np.select(
        [code == OP_SELECTIVE, code == 2, attention_again], [unsaved + 0.0 * forward, forward, attention], 0.0
    )
    return model_flops, model_flops + extra
