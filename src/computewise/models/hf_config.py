"""Read a Hugging Face ``config.json`` offline into a ModelSpec.

Only the json module: importing transformers takes seconds and may want the network, and a
config.json holds everything the estimators need. Each supported ``model_type`` names its
fields its own way (GPT-2's ``n_embd``, T5's ``d_model``) and has its own defaults (whether the
LM head is tied, the context length), which are the defaults of the matching transformers
config class. Any other model_type is read as a Llama-style decoder, with a note, unless it has
parts that reading would miscount (an MoE's shared experts, DeepSeek's latent attention): those are
refused, naming the part, since the file is not at fault.

A malformed file is a ``ModelConfigError`` that names the file and the field: the user can
open it and fix that line.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from computewise.errors import ModelConfigError
from computewise.models.shape import FAMILIES, Family, count_params
from computewise.specs.model import ModelSpec

__all__ = ["MODEL_TYPES", "from_hf_config", "load_hf_config"]

# Where the families' configs name the MLP's activation (GPT-2's reader takes its own field and default).
_ACTIVATION_FIELDS = ("hidden_act", "hidden_activation", "activation_function")
_HINT = "use the model's config.json as published on the Hugging Face Hub, or give a preset name"
_UNKNOWN_TYPE = "unknown"  # a config without model_type: errors name no family for it
# For a published config.json that computewise cannot read: the count and a trace need no config.
# A count is read as a dense model, so the hint says what that costs an MoE.
_UNREAD_HINT = (
    "pass the total parameter count instead (e.g. --model 14.3B, from the model card; every parameter then "
    "counts as active, an upper bound on compute), or trace the module: "
    "computewise.models.trace_module(model, example_inputs)"
)
# Where configs give an MoE's expert count (Mixtral, Qwen-MoE and OLMoE, DeepSeek, ERNIE), and the
# experts one token passes through. ``ffn_config`` is DBRX's nesting.
_EXPERT_FIELDS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts", "num_experts_per_tok")
# Parts of an MoE or attention layer that a Llama-style reading would miss, by the field that sizes them.
_UNMODELLED_PARTS = (
    ("shared_expert_intermediate_size", "shared experts"),
    ("n_shared_experts", "shared experts"),
    ("kv_lora_rank", "multi-head latent attention"),
    ("first_k_dense_replace", "dense MLP layers before its MoE layers"),
)


def from_hf_config(config: str | os.PathLike[str] | Mapping[str, Any]) -> ModelSpec:
    """A ModelSpec from a config.json path, a directory holding one, or its parsed dict.

    ``params`` is computed from the shape with the family's conventions (biases, norms,
    positions), exact for the supported families.
    """
    if isinstance(config, Mapping):
        label, data, default_name = "config.json", dict(config), "config"
    else:
        path = _config_path(os.fspath(config))
        # A hub folder's config.json is named after its folder (Llama-2-7b-hf/config.json); any other file after itself.
        stem, _ = os.path.splitext(os.path.basename(path))
        directory = os.path.basename(os.path.dirname(os.path.abspath(path)))
        label, data = path, load_hf_config(path)
        default_name = (directory or "config") if stem == "config" else stem
    spec, fam = _parse(label, data)
    name = data.get("_name_or_path")
    activation = next((data[k] for k in _ACTIVATION_FIELDS if isinstance(data.get(k), str)), "")
    return replace(
        spec,
        activation=spec.activation or activation,
        name=name if isinstance(name, str) and name else default_name,
        params=count_params(spec, fam),
        source=f"config.json: {label}" if label != "config.json" else "config.json",
        model_type=data.get("model_type", ""),
    )


def load_hf_config(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The JSON object in ``path``; a missing file or invalid JSON names the file and position."""
    try:
        with open(path, encoding="utf-8") as file:
            text = file.read()
    except FileNotFoundError as error:
        raise ModelConfigError(f"{path}: no such file", _HINT) from error
    except (OSError, UnicodeDecodeError) as error:
        raise ModelConfigError(f"{path}: cannot read the file ({error})", _HINT) from error
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ModelConfigError(
            f"{path}: invalid JSON at line {error.lineno}, column {error.colno}: {error.msg}", _HINT
        ) from error
    if not isinstance(data, dict):
        raise ModelConfigError(f"{path}: expected a JSON object, got {type(data).__name__}", _HINT)
    return data


def _config_path(path: str) -> str:
    if os.path.isdir(path):
        candidate = os.path.join(path, "config.json")
        if not os.path.isfile(candidate):
            raise ModelConfigError(f"{path}: directory has no config.json", _HINT)
        return candidate
    return path


class _Fields:
    """Typed access to one config's fields; every failure names the file, field and family."""

    def __init__(self, label: str, data: Mapping[str, Any], model_type: str) -> None:
        self.label = label
        self.data = data
        self.model_type = model_type

    def error(self, problem: str) -> ModelConfigError:
        family = f" ({self.model_type})" if self.model_type != _UNKNOWN_TYPE else ""
        return ModelConfigError(f"{self.label}: {problem}{family}", _HINT)

    def unmodelled(self, parts: str) -> ModelConfigError:
        """The file is fine but computewise cannot count ``parts`` of it: say so, and how to estimate anyway."""
        return ModelConfigError(
            f"{self.label}: model_type {self.model_type!r} has {parts}, which computewise does not model yet",
            _UNREAD_HINT,
        )

    def shown(self, name: str, value: int) -> str:
        """``name (value)``, saying when the value is the family's default rather than the file's."""
        return f"{name} ({value})" if self.data.get(name) is not None else f"{name} (absent: {value} by default)"

    def _first(self, names: tuple[str, ...]) -> tuple[str, Any]:
        for name in names:
            if self.data.get(name) is not None:
                return name, self.data[name]
        return names[0], None

    def integer(self, *names: str, default: int | None = None) -> int:
        """The first of ``names`` present; required when ``default`` is None."""
        value = self.optional_integer(*names)
        if value is not None:
            return value
        if default is None:
            raise self.error(f"missing field {names[0]!r}")
        return default

    def optional_integer(self, *names: str) -> int | None:
        name, value = self._first(names)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(f"field {name!r} must be an integer, got {value!r}")
        if value <= 0:
            raise self.error(f"field {name!r} must be positive, got {value}")
        return value

    def flag(self, name: str, default: bool) -> bool:
        value = self.data.get(name)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.error(f"field {name!r} must be true or false, got {value!r}")
        return value

    def string(self, name: str, default: str) -> str:
        value = self.data.get(name)
        if value is None:
            return default
        if not isinstance(value, str):
            raise self.error(f"field {name!r} must be a string, got {value!r}")
        return value


@dataclass(frozen=True)
class _Attention:
    heads: int
    kv_heads: int
    head_dim: int  # 0: hidden_size // heads


def _attention(f: _Fields, hidden: int, heads_names: tuple[str, ...], kv_names: tuple[str, ...] = ()) -> _Attention:
    heads = f.integer(*heads_names)
    kv_heads = f.optional_integer(*kv_names) if kv_names else None
    kv_heads = kv_heads or heads
    if heads % kv_heads:
        raise f.error(f"{heads_names[0]} ({heads}) is not a multiple of {kv_names[0]} ({kv_heads})")
    head_dim = f.optional_integer("head_dim")
    if head_dim is None:
        if hidden % heads:
            raise f.error(
                f"{heads_names[0]} ({heads}) does not divide the hidden size ({hidden}) and head_dim is absent"
            )
        head_dim = 0
    elif head_dim * heads == hidden:
        head_dim = 0
    return _Attention(heads, kv_heads, head_dim)


@dataclass(frozen=True)
class _Experts:
    """Where a family's config names its MoE fields, with its config class's defaults.

    ``active`` is num_experts_per_tok's default: None for Mixtral's (2 of several experts, else 1).
    ``ffn_field`` is one expert's inner size (Qwen3-MoE keeps intermediate_size for dense layers).
    """

    field: str = "num_local_experts"
    default: int = 1
    active: int | None = None
    ffn_field: str = "intermediate_size"


_MIXTRAL_FIELDS = _Experts()


def _experts(f: _Fields, moe: _Experts) -> tuple[int, int]:
    """(experts, experts per token); more per token than there are names both fields as read."""
    experts = f.integer(moe.field, default=moe.default)
    default_active = moe.active if moe.active is not None else (2 if experts > 1 else 1)
    active = f.integer("num_experts_per_tok", default=default_active)
    if active > experts:
        raise f.error(f"{f.shown('num_experts_per_tok', active)} exceeds {f.shown(moe.field, experts)}")
    return experts, active


def _decoder(
    f: _Fields,
    fam: Family,
    *,
    tied: bool,
    max_positions: int,
    sliding_window: int | None = None,
    gated: bool = True,
    moe: _Experts = _MIXTRAL_FIELDS,
    ffn_ratio: int | None = None,
) -> tuple[ModelSpec, Family]:
    """Llama-style decoders: hidden_size, num_hidden_layers, intermediate_size, GQA, MoE.

    ``moe`` says where the family keeps its expert fields (Mixtral's by default); ``ffn_ratio`` makes
    the FFN size optional (that multiple of the hidden size).
    """
    hidden = f.integer("hidden_size")
    attention = _attention(f, hidden, ("num_attention_heads",), ("num_key_value_heads",))
    experts, active = _experts(f, moe)
    spec = ModelSpec(
        name="",
        params=0,
        architecture="decoder",
        layers=f.integer("num_hidden_layers"),
        hidden_size=hidden,
        heads=attention.heads,
        kv_heads=attention.kv_heads,
        head_dim=attention.head_dim,
        ffn_size=f.integer(moe.ffn_field, default=ffn_ratio * hidden if ffn_ratio else None),
        vocab_size=f.integer("vocab_size"),
        tied_embeddings=f.flag("tie_word_embeddings", tied),
        gated_ffn=gated,
        experts=experts,
        active_experts=active,
        sliding_window=sliding_window,
        max_seq_len=f.integer("max_position_embeddings", default=max_positions),
    )
    return spec, fam


def _llama(f: _Fields) -> tuple[ModelSpec, Family]:
    biased = f.flag("attention_bias", False)
    fam = replace(FAMILIES["llama"], qkv_bias=biased, out_bias=biased, mlp_bias=f.flag("mlp_bias", False))
    return _decoder(f, fam, tied=False, max_positions=2048)


def _mistral(f: _Fields) -> tuple[ModelSpec, Family]:
    # MistralConfig defaults to a 4096-token window when the key is absent; null turns it off.
    window = f.optional_integer("sliding_window") if "sliding_window" in f.data else 4096
    return _decoder(f, FAMILIES["llama"], tied=False, max_positions=4096 * 32, sliding_window=window)


def _mixtral(f: _Fields) -> tuple[ModelSpec, Family]:
    window = f.optional_integer("sliding_window")
    moe = _Experts(default=8)
    return _decoder(f, FAMILIES["llama"], tied=False, max_positions=4096 * 32, sliding_window=window, moe=moe)


def _olmoe(f: _Fields) -> tuple[ModelSpec, Family]:
    """OLMoE: every layer an MoE without shared experts, q/k normalized over the whole projections."""
    biased = f.flag("attention_bias", False)
    fam = replace(FAMILIES["olmoe"], qkv_bias=biased, out_bias=biased)
    moe = _Experts("num_experts", default=64, active=8)
    return _decoder(f, fam, tied=False, max_positions=4096, moe=moe)


def _qwen3_moe(f: _Fields) -> tuple[ModelSpec, Family]:
    """Qwen3-MoE with every layer an MoE (its published models); dense layers among them are refused.

    Which layers are MoE follows transformers: not in mlp_only_layers and (index + 1) a multiple of
    decoder_sparse_step. A ModelSpec has one FFN per layer, so anything but all-MoE cannot be counted.
    """
    step = f.integer("decoder_sparse_step", default=1)
    dense = f.data.get("mlp_only_layers") or []
    if not isinstance(dense, list):
        raise f.error(f"field 'mlp_only_layers' must be a list of layer indices, got {dense!r}")
    if step != 1 or dense:
        layers = f"mlp_only_layers {dense}" if dense else f"decoder_sparse_step {step}"
        raise f.unmodelled(f"dense MLP layers among its MoE layers ({layers})")
    biased = f.flag("attention_bias", False)
    fam = replace(FAMILIES["qwen3-moe"], qkv_bias=biased, out_bias=biased)
    window = f.optional_integer("sliding_window") if f.flag("use_sliding_window", False) else None
    moe = _Experts("num_experts", default=128, active=8, ffn_field="moe_intermediate_size")
    return _decoder(f, fam, tied=False, max_positions=32768, sliding_window=window, moe=moe)


def _qwen2(f: _Fields) -> tuple[ModelSpec, Family]:
    # Qwen2 ships a sliding_window value but only uses it when use_sliding_window is true.
    window = f.optional_integer("sliding_window") if f.flag("use_sliding_window", False) else None
    return _decoder(f, FAMILIES["qwen2"], tied=False, max_positions=32768, sliding_window=window)


def _gemma(f: _Fields) -> tuple[ModelSpec, Family]:
    return _decoder(f, FAMILIES["llama"], tied=True, max_positions=8192)


def _gemma2(f: _Fields) -> tuple[ModelSpec, Family]:
    spec, fam = _decoder(f, FAMILIES["gemma2"], tied=True, max_positions=8192)
    window = f.optional_integer("sliding_window")
    if window is not None:
        note = f"sliding window {window} applies to every other layer only; full attention assumed (conservative)"
        spec = replace(spec, notes=(note,))
    return spec, fam


def _phi3(f: _Fields) -> tuple[ModelSpec, Family]:
    window = f.optional_integer("sliding_window")
    return _decoder(f, FAMILIES["llama"], tied=False, max_positions=4096, sliding_window=window)


def _gpt2(f: _Fields) -> tuple[ModelSpec, Family]:
    hidden = f.integer("n_embd")
    attention = _attention(f, hidden, ("n_head",))
    spec = ModelSpec(
        name="",
        params=0,
        architecture="decoder",
        layers=f.integer("n_layer"),
        hidden_size=hidden,
        heads=attention.heads,
        kv_heads=attention.heads,
        ffn_size=f.integer("n_inner", default=4 * hidden),
        vocab_size=f.integer("vocab_size"),
        tied_embeddings=f.flag("tie_word_embeddings", True),
        max_seq_len=f.integer("n_positions", "n_ctx", default=1024),
        activation=f.string("activation_function", "gelu_new"),  # GPT2Config's default
    )
    return spec, FAMILIES["gpt2"]


def _gpt_neox(f: _Fields) -> tuple[ModelSpec, Family]:
    biased = f.flag("attention_bias", True)
    fam = replace(FAMILIES["gpt-neox"], qkv_bias=biased, out_bias=biased)
    return _decoder(f, fam, tied=False, max_positions=2048, gated=False)


def _bert(f: _Fields) -> tuple[ModelSpec, Family]:
    roberta = f.model_type in ("roberta", "xlm-roberta")
    base = FAMILIES["roberta" if roberta else "bert"]
    fam = replace(base, token_types=f.integer("type_vocab_size", default=base.token_types))
    hidden = f.integer("hidden_size")
    attention = _attention(f, hidden, ("num_attention_heads",))
    positions = f.integer("max_position_embeddings", default=514 if roberta else 512)
    if positions <= fam.position_offset:
        raise f.error(f"max_position_embeddings ({positions}) leaves no positions after the padding offset")
    spec = ModelSpec(
        name="",
        params=0,
        architecture="encoder",
        layers=f.integer("num_hidden_layers"),
        hidden_size=hidden,
        heads=attention.heads,
        kv_heads=attention.heads,
        ffn_size=f.integer("intermediate_size"),
        vocab_size=f.integer("vocab_size"),
        tied_embeddings=True,  # the masked-LM head shares the input embedding
        max_seq_len=positions - fam.position_offset,
    )
    return spec, fam


def _t5(f: _Fields) -> tuple[ModelSpec, Family]:
    hidden = f.integer("d_model")
    heads = f.integer("num_heads")
    head_dim = f.integer("d_kv")
    layers = f.integer("num_layers")
    fam = replace(
        FAMILIES["t5"],
        relative_attention_buckets=f.integer("relative_attention_num_buckets", default=32),
    )
    spec = ModelSpec(
        name="",
        params=0,
        architecture="encoder-decoder",
        layers=layers,
        decoder_layers=f.integer("num_decoder_layers", default=layers),
        hidden_size=hidden,
        heads=heads,
        kv_heads=heads,
        head_dim=0 if heads * head_dim == hidden else head_dim,
        ffn_size=f.integer("d_ff"),
        vocab_size=f.integer("vocab_size"),
        tied_embeddings=f.flag("tie_word_embeddings", True),
        gated_ffn=f.string("feed_forward_proj", "relu").startswith("gated-"),
        max_seq_len=f.integer("n_positions", default=512),
    )
    return spec, fam


def _vit(f: _Fields) -> tuple[ModelSpec, Family]:
    hidden = f.integer("hidden_size")
    attention = _attention(f, hidden, ("num_attention_heads",))
    image_size = f.integer("image_size", default=224)
    patch_size = f.integer("patch_size", default=16)
    if patch_size > image_size:  # not one patch fits: the encoder would see no tokens
        raise f.error(f"{f.shown('patch_size', patch_size)} exceeds {f.shown('image_size', image_size)}")
    architectures = f.data.get("architectures") or []
    labels = f.data.get("id2label")
    classifier = "ViTForImageClassification" in architectures
    classes = len(labels) if classifier and isinstance(labels, dict) else 0
    biased = f.flag("qkv_bias", True)
    fam = replace(
        FAMILIES["vit" if classifier else "vit-backbone"],
        qkv_bias=biased,
        image_channels=f.integer("num_channels", default=3),
    )
    spec = ModelSpec(
        name="",
        params=0,
        architecture="vision-transformer",
        layers=f.integer("num_hidden_layers"),
        hidden_size=hidden,
        heads=attention.heads,
        kv_heads=attention.heads,
        ffn_size=f.integer("intermediate_size"),
        vocab_size=classes,
        image_size=image_size,
        patch_size=patch_size,
        max_seq_len=(image_size // patch_size) ** 2 + 1,
    )
    return spec, fam


def _falcon(f: _Fields) -> tuple[ModelSpec, Family]:
    hidden = f.integer("hidden_size", "n_embd")
    new_architecture = f.flag("new_decoder_architecture", f.model_type == "RefinedWeb")
    heads = f.integer("num_attention_heads", "n_head")
    if new_architecture:
        kv_heads = f.integer("num_kv_heads", "n_head_kv", default=heads)
    else:
        kv_heads = 1 if f.flag("multi_query", True) else heads
    if hidden % heads:
        raise f.error(f"num_attention_heads ({heads}) does not divide the hidden size ({hidden})")
    one_norm = f.flag("parallel_attn", True) and not new_architecture
    biased = f.flag("bias", False)
    fam = replace(
        FAMILIES["falcon"],
        norms_per_layer=1 if one_norm else 2,
        qkv_bias=biased,
        out_bias=biased,
        mlp_bias=biased,
    )
    spec = ModelSpec(
        name="",
        params=0,
        architecture="decoder",
        layers=f.integer("num_hidden_layers", "n_layer"),
        hidden_size=hidden,
        heads=heads,
        kv_heads=kv_heads,
        ffn_size=f.integer("ffn_hidden_size", default=4 * hidden),
        vocab_size=f.integer("vocab_size"),
        tied_embeddings=f.flag("tie_word_embeddings", True),
        max_seq_len=f.integer("max_position_embeddings", default=2048),
    )
    return spec, fam


def _unmodelled_parts(f: _Fields) -> str:
    """What in an unknown model_type a Llama-style reading would miscount ("" if nothing is seen).

    Its shared experts, latent attention or leading dense layers by name; else any MoE, whose layout
    (router, expert sizes, which layers) only a known family's reader can tell.
    """
    parts: dict[str, list[str]] = {}
    for name, part in _UNMODELLED_PARTS:
        value = f.data.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            parts.setdefault(part, []).append(f"{name} {value}")
    if parts:
        return _listed([f"{part} ({', '.join(names)})" for part, names in parts.items()])
    for name, value in _expert_fields(f.data):
        if isinstance(value, int) and not isinstance(value, bool) and value > 1:
            known = _listed(sorted(_MOE_MODEL_TYPES))
            return f"mixture-of-experts layers ({name} {value}) of a layout it does not know (it reads {known})"
    return ""


def _listed(items: list[str]) -> str:
    """``a, b and c``: one sentence however many parts a config has."""
    return " and ".join(filter(None, (", ".join(items[:-1]), items[-1])))


def _expert_fields(data: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """The expert fields at the top level and in DBRX's nested ffn_config, named with their path."""
    fields = [(name, data.get(name)) for name in _EXPERT_FIELDS]
    nested = data.get("ffn_config")
    if isinstance(nested, dict):
        fields += [(f"ffn_config.{name}", nested.get(name)) for name in _EXPERT_FIELDS]
    return fields


def _generic(f: _Fields) -> tuple[ModelSpec, Family]:
    parts = _unmodelled_parts(f)
    if parts:
        raise f.unmodelled(parts)
    if f.data.get("num_attention_heads") is None:
        # Mamba, RWKV and other models without attention: reading them as a Llama-style decoder would
        # fail on "missing field num_attention_heads", blaming the file for what computewise cannot read.
        raise ModelConfigError(
            f"{f.label}: model_type {f.model_type!r} is not supported yet (no attention heads: "
            "computewise reads transformer configs)",
            "pass a parameter count instead (e.g. --model 130M, from the model card), or trace the module: "
            "computewise.models.trace_module(model, example_inputs)",
        )
    gated = f.string("hidden_act", "silu") in ("silu", "swish", "swiglu")
    spec, fam = _decoder(f, FAMILIES["llama"], tied=False, max_positions=2048, gated=gated, ffn_ratio=4)
    if f.flag("is_encoder_decoder", False):
        spec = replace(
            spec,
            architecture="encoder-decoder",
            decoder_layers=f.integer("num_decoder_layers", default=spec.layers),
        )
    note = (
        f"model_type {f.model_type!r} is not one computewise knows; read as a Llama-style decoder "
        "(no biases, RMSNorm), so the parameter count may be off by the family's biases and norms"
    )
    return replace(spec, notes=(note,)), fam


_READERS: dict[str, Callable[[_Fields], tuple[ModelSpec, Family]]] = {
    "llama": _llama,
    "mistral": _mistral,
    "mixtral": _mixtral,
    "olmoe": _olmoe,
    "qwen3_moe": _qwen3_moe,
    "qwen2": _qwen2,
    "gemma": _gemma,
    "gemma2": _gemma2,
    "phi3": _phi3,
    "gpt2": _gpt2,
    "gpt_neox": _gpt_neox,
    "bert": _bert,
    "roberta": _bert,
    "xlm-roberta": _bert,
    "t5": _t5,
    "vit": _vit,
    "falcon": _falcon,
    "RefinedWeb": _falcon,
    "RefinedWebModel": _falcon,
}
# The model_types read with their own family's fields and defaults; any other is read as a Llama-style decoder.
MODEL_TYPES: frozenset[str] = frozenset(_READERS)
# The mixture-of-experts families among them: every layer MoE, no shared expert (what a ModelSpec holds).
_MOE_MODEL_TYPES: frozenset[str] = frozenset({"mixtral", "olmoe", "qwen3_moe"})


def _parse(label: str, data: Mapping[str, Any]) -> tuple[ModelSpec, Family]:
    model_type = data.get("model_type", _UNKNOWN_TYPE)
    if not isinstance(model_type, str):
        raise ModelConfigError(f"{label}: field 'model_type' must be a string, got {model_type!r}", _HINT)
    reader = _READERS.get(model_type, _generic)
    return reader(_Fields(label, data, model_type))
