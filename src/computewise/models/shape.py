"""Exact parameter counts from a transformer's shape.

A shape (layers, hidden size, heads, FFN size, vocabulary) fixes the big matrices but not the
small tensors that differ between families: biases, LayerNorm (weight and bias) versus RMSNorm
(weight only), learned position tables, BERT's pooler, T5's relative-position buckets. Those
are a few tenths of a percent of a large model but decide whether we reproduce a published
count exactly (GPT-2 124,439,808; BERT-base 109,482,240; OLMoE-1B-7B 6,919,161,856, whose
q/k norms are what a Llama layout misses), so each family names them in a ``Family``. Pure
Python: presets, config.json and parameter-count inference all share it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypedDict

from computewise.specs.model import ModelSpec

__all__ = ["FAMILIES", "Family", "NormKind", "QkNorm", "count_params"]

NormKind = Literal["layernorm", "rmsnorm"]
# Norms on the attention's queries and keys before RoPE: "full" normalizes the whole q and k projections
# (OLMoE: weights as wide as q and k), "per-head" each head alike (Qwen3: one head_dim-wide weight each).
QkNorm = Literal["", "full", "per-head"]


@dataclass(frozen=True)
class Family:
    """Where a model family keeps the parameters that a bare shape does not show.

    ``learned_positions`` is a table of ``max_seq_len + position_offset`` rows (RoBERTa keeps
    two rows for its padding offset). ``position_projection`` is Transformer-XL's relative
    attention matrix W_R (hidden x hidden per layer) used by Gopher and Chinchilla.
    ``vision_stem`` is ViT's patch convolution, class token, patch positions and classifier
    (``vocab_size`` classes; 0 for a bare backbone). ``qk_norm``: see ``QkNorm``.
    """

    name: str
    norm: NormKind = "rmsnorm"
    norms_per_layer: int = 2
    final_norm: bool = True
    qkv_bias: bool = False
    out_bias: bool = False
    mlp_bias: bool = False
    learned_positions: bool = False
    position_offset: int = 0
    token_types: int = 0
    embedding_norm: bool = False
    pooler: bool = False
    relative_attention_buckets: int = 0
    position_projection: bool = False
    vision_stem: bool = False
    image_channels: int = 3
    qk_norm: QkNorm = ""


class _Biases(TypedDict):
    qkv_bias: bool
    out_bias: bool
    mlp_bias: bool


_BIASED: _Biases = {"qkv_bias": True, "out_bias": True, "mlp_bias": True}

FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family("llama"),
        Family("qwen2", qkv_bias=True),
        Family("gemma2", norms_per_layer=4),
        Family("olmoe", qk_norm="full"),
        Family("qwen3-moe", qk_norm="per-head"),
        Family("gpt2", norm="layernorm", learned_positions=True, **_BIASED),
        Family("gpt-neox", norm="layernorm", **_BIASED),
        Family("falcon", norm="layernorm", norms_per_layer=1),
        Family(
            "bert",
            norm="layernorm",
            final_norm=False,
            learned_positions=True,
            token_types=2,
            embedding_norm=True,
            pooler=True,
            **_BIASED,
        ),
        Family(
            "roberta",
            norm="layernorm",
            final_norm=False,
            learned_positions=True,
            position_offset=2,
            token_types=1,
            embedding_norm=True,
            pooler=True,
            **_BIASED,
        ),
        Family("t5", relative_attention_buckets=32),
        Family("vit", norm="layernorm", vision_stem=True, **_BIASED),
        Family("vit-backbone", norm="layernorm", vision_stem=True, pooler=True, **_BIASED),
        Family("gopher", position_projection=True),
    )
}


def count_params(spec: ModelSpec, fam: Family) -> int:
    """Total parameters of a transformer with ``spec``'s shape, laid out the way ``fam`` does.

    ``spec.params`` is ignored: this is what it should be. Tied embeddings are counted once,
    as ``sum(p.numel() for p in model.parameters())`` does.
    """
    h = spec.hidden_size
    head_dim = spec.attention_head_dim
    q_dim = spec.heads * head_dim
    kv_dim = (spec.kv_heads or spec.heads) * head_dim
    per_channel = 2 if fam.norm == "layernorm" else 1  # weight (and bias) per normalized channel
    norm = per_channel * h

    attention = 2 * h * q_dim + 2 * h * kv_dim + per_channel * _qk_norm_width(fam.qk_norm, q_dim, kv_dim, head_dim)
    if fam.qkv_bias:
        attention += q_dim + 2 * kv_dim
    if fam.out_bias:
        attention += h

    matrices = 3 if spec.gated_ffn else 2
    one_mlp = matrices * h * spec.ffn_size
    if fam.mlp_bias:
        one_mlp += (matrices - 1) * spec.ffn_size + h
    mlp = spec.experts * one_mlp + (h * spec.experts if spec.experts > 1 else 0)

    layer = attention + mlp + fam.norms_per_layer * norm
    if fam.position_projection:
        layer += h * h
    # A decoder layer of an encoder-decoder adds cross-attention and its norm.
    cross_layer = layer + attention + norm

    stacks = 2 if spec.decoder_layers else 1
    total = spec.layers * layer + spec.decoder_layers * cross_layer
    total += stacks * (norm if fam.final_norm else 0)
    total += stacks * fam.relative_attention_buckets * spec.heads

    if fam.vision_stem:
        patches = (spec.image_size // spec.patch_size) ** 2 if spec.patch_size else 0
        total += fam.image_channels * spec.patch_size**2 * h + h  # patch convolution
        total += h + (patches + 1) * h  # class token and patch positions
        total += spec.vocab_size * h + spec.vocab_size  # classifier
    else:
        total += spec.vocab_size * h
        has_head = spec.architecture in ("decoder", "encoder-decoder")
        if has_head and not spec.tied_embeddings:
            total += spec.vocab_size * h
        if fam.learned_positions:
            total += (spec.max_seq_len + fam.position_offset) * h
    total += fam.token_types * h
    if fam.embedding_norm:
        total += norm
    if fam.pooler:
        total += h * h + h
    return total


def _qk_norm_width(qk_norm: QkNorm, q_dim: int, kv_dim: int, head_dim: int) -> int:
    """Channels the q and k norms of one layer normalize: whole projections, or one head shared by all."""
    if qk_norm == "full":
        return q_dim + kv_dim
    if qk_norm == "per-head":
        return 2 * head_dim
    return 0
