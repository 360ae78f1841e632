"""Which linear layers LoRA adapts and how many parameters it trains, counted as PEFT counts them.

LoRA (Hu et al. 2021, arXiv:2106.09685) puts two matrices beside each targeted linear layer,
A (rank x in) and B (out x rank), so a layer adds ``rank * (in + out)`` trained parameters whatever
its bias. What a target set reaches depends on how the family names and fuses its layers: Llama's
``q_proj``, ``k_proj`` and ``v_proj`` are three layers, GPT-2's ``c_attn`` one fused layer three times
as wide, Phi-3 fuses q, k, v and also gate and up. A shape does not say which, so the layout comes from
the Hugging Face ``model_type`` a ModelSpec was read as; a shape with none (a parameter count, GPT-3,
Chinchilla) takes GPT-2's names with a two-matrix MLP and Llama's with a gated one.

PEFT's rules, reproduced here and checked against PEFT itself in ``tests/models/test_lora.py``:

- A target name matches a module whose full name equals it or ends with ``"." + name``, so GPT-2's
  ``c_proj`` is both the attention's and the MLP's output, and BERT's ``dense`` includes the pooler.
- ``all-linear`` is every ``nn.Linear`` and ``Conv1D`` except the output embedding (the LM head).
  In transformers 5 an MoE's experts and router are parameters, not linear layers: ``all-linear``
  reaches only an MoE model's attention, and bitsandbytes leaves its experts unquantized.
- ``modules_to_save`` (the embeddings or the LM head trained in full) trains a copy beside the
  frozen original. A tied embedding trains once: the LoRA config asks for ``ensure_weight_tying``, so
  the trained embedding and head stay one matrix, as they were.

``lora_params`` is arithmetic on the ModelSpec; ``peft_trainable_params`` builds the model with
transformers on the meta device (no memory, no weights) and asks PEFT, which is how the tests hold the
arithmetic to PEFT's count. torch, transformers and peft are imported only there (the ``finetune`` extra).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from computewise.errors import InputError, MissingExtraError, UnknownNameError
from computewise.models.hf_config import from_hf_config
from computewise.specs.finetune import LORA_TARGET_SETS, FineTune
from computewise.specs.model import ModelSpec

if TYPE_CHECKING:
    from peft import LoraConfig

__all__ = [
    "LinearKind",
    "LinearLayer",
    "LoraParams",
    "block_linears",
    "check_rank",
    "lora_config",
    "lora_params",
    "peft_target_modules",
    "peft_trainable_params",
    "quantizable_linears",
    "resolve_targets",
]

LinearKind = Literal["attention", "mlp", "router"]


@dataclass(frozen=True)
class LinearLayer:
    """One linear layer of a transformer block (or, for BERT's pooler, of the model once).

    ``name`` is the last part of the module's name, as ``target_modules`` usually gives it; ``path``
    is its name inside the block (``self_attn.q_proj``), which tells apart two layers of one name
    (GPT-2's ``attn.c_proj`` and ``mlp.c_proj``). ``per_block`` is how many the block holds (an MoE
    block's experts). ``peft_names`` marks a parameter that is no ``nn.Linear`` in transformers 5 (an
    MoE's stacked experts and router) but that PEFT adapts under the old module names it lists
    (Mixtral's ``w1`` and ``w3``, fused into ``gate_up_proj``, must be targeted together);
    ``rank_scale`` is the rank PEFT gives such a fused parameter, per rank asked (its ``rank_pattern``).
    ``quantizable``: bitsandbytes stores it in 4 bits. transformers 5 replaces exactly ``nn.Linear``
    and ``Conv1D``: not a parameter (an MoE's experts and router) nor a subclass (Falcon's ``FalconLinear``).
    """

    name: str
    in_features: int
    out_features: int
    per_block: int
    kind: LinearKind
    path: str = ""
    peft_names: tuple[str, ...] = ()
    rank_scale: int = 1
    quantizable: bool = True

    @property
    def module(self) -> str:
        """The name PEFT's matching sees the end of: ``path``, or ``name`` where no path is given."""
        return self.path or self.name

    def matches(self, target: str) -> bool:
        """PEFT's rules: a module matches a target that is its name or the end of it; an old MoE name
        matches a target that is the name or ends with it (PEFT's conversion for transformers 5)."""
        if self.peft_names:
            return any(target == name or target.endswith("." + name) for name in self.peft_names)
        return self.module == target or self.module.endswith("." + target)

    def adapter_params(self, rank: int) -> int:
        """A (rank x in) and B (out x rank) of each such layer; LoRA adds no bias by default."""
        return self.per_block * rank * self.rank_scale * (self.in_features + self.out_features)


@dataclass(frozen=True)
class LoraParams:
    """Parameter counts of a fine-tuning job, as PEFT's ``get_nb_trainable_parameters`` reports them.

    ``adapter``: LoRA's A and B over every adapted layer. ``saved``: embeddings or LM head trained in
    full (PEFT's ``modules_to_save`` copies; a tied matrix once). ``trainable = adapter + saved``.
    ``frozen``: the base model's parameters, all kept (a saved module's original stays beside its
    copy), so PEFT's "all params" is ``frozen + trainable``. ``quantizable``: the weights of the
    blocks' linear layers, what bitsandbytes stores in 4 bits (biases, norms, embeddings and the LM
    head stay at 16 or 32 bits). Full fine-tuning trains all ``params`` and freezes and quantizes none.
    """

    adapter: int
    trainable: int
    frozen: int
    quantizable: int
    saved: int = 0


@dataclass(frozen=True)
class _Layout:
    """How one family names its modules. ``blocks`` builds one block's linear layers; ``outside`` the
    linear layers outside the blocks that ``all-linear`` still reaches (BERT's pooler)."""

    blocks: Callable[[ModelSpec], tuple[LinearLayer, ...]]
    embedding: str
    head: str  # "" where the model class has no LM head (an encoder read as a backbone)
    outside: Callable[[ModelSpec], tuple[LinearLayer, ...]] = lambda model: ()


def _dims(model: ModelSpec) -> tuple[int, int, int]:
    head_dim = model.attention_head_dim
    return model.hidden_size, model.heads * head_dim, (model.kv_heads or model.heads) * head_dim


def _llama(model: ModelSpec) -> tuple[LinearLayer, ...]:
    h, q, kv = _dims(model)
    ffn = model.ffn_size
    attention = (
        LinearLayer("q_proj", h, q, 1, "attention", "self_attn.q_proj"),
        LinearLayer("k_proj", h, kv, 1, "attention", "self_attn.k_proj"),
        LinearLayer("v_proj", h, kv, 1, "attention", "self_attn.v_proj"),
        LinearLayer("o_proj", q, h, 1, "attention", "self_attn.o_proj"),
    )
    if model.experts > 1:
        # transformers 5 stacks the experts into 3-D parameters and makes the router a parameter; PEFT
        # adapts them under their transformers-4 names, the fused gate and up at twice the rank.
        experts = model.experts
        return (
            *attention,
            LinearLayer("gate", h, experts, 1, "router", "mlp.gate", ("gate",), quantizable=False),
            LinearLayer(
                "gate_up_proj",
                h,
                2 * ffn,
                experts,
                "mlp",
                "mlp.experts.gate_up_proj",
                ("w1", "w3"),
                rank_scale=2,
                quantizable=False,
            ),
            LinearLayer("down_proj", ffn, h, experts, "mlp", "mlp.experts.down_proj", ("w2",), quantizable=False),
        )
    gate = (LinearLayer("gate_proj", h, ffn, 1, "mlp", "mlp.gate_proj"),) if model.gated_ffn else ()
    return (
        *attention,
        *gate,
        LinearLayer("up_proj", h, ffn, 1, "mlp", "mlp.up_proj"),
        LinearLayer("down_proj", ffn, h, 1, "mlp", "mlp.down_proj"),
    )


def _phi3(model: ModelSpec) -> tuple[LinearLayer, ...]:
    h, q, kv = _dims(model)
    return (
        LinearLayer("qkv_proj", h, q + 2 * kv, 1, "attention", "self_attn.qkv_proj"),
        LinearLayer("o_proj", q, h, 1, "attention", "self_attn.o_proj"),
        LinearLayer("gate_up_proj", h, 2 * model.ffn_size, 1, "mlp", "mlp.gate_up_proj"),
        LinearLayer("down_proj", model.ffn_size, h, 1, "mlp", "mlp.down_proj"),
    )


def _gpt2(model: ModelSpec) -> tuple[LinearLayer, ...]:
    h, q, kv = _dims(model)
    return (
        LinearLayer("c_attn", h, q + 2 * kv, 1, "attention", "attn.c_attn"),
        LinearLayer("c_proj", q, h, 1, "attention", "attn.c_proj"),
        LinearLayer("c_fc", h, model.ffn_size, 1, "mlp", "mlp.c_fc"),
        LinearLayer("c_proj", model.ffn_size, h, 1, "mlp", "mlp.c_proj"),
    )


def _fused_qkv(attention: str, *, quantizable: bool) -> Callable[[ModelSpec], tuple[LinearLayer, ...]]:
    """GPT-NeoX (``attention.*``) and Falcon (``self_attention.*``): one query_key_value layer."""

    def layers(model: ModelSpec) -> tuple[LinearLayer, ...]:
        h, q, kv = _dims(model)
        ffn = model.ffn_size
        return (
            LinearLayer(
                "query_key_value", h, q + 2 * kv, 1, "attention", f"{attention}.query_key_value", (), 1, quantizable
            ),
            LinearLayer("dense", q, h, 1, "attention", f"{attention}.dense", (), 1, quantizable),
            LinearLayer("dense_h_to_4h", h, ffn, 1, "mlp", "mlp.dense_h_to_4h", (), 1, quantizable),
            LinearLayer("dense_4h_to_h", ffn, h, 1, "mlp", "mlp.dense_4h_to_h", (), 1, quantizable),
        )

    return layers


def _bert(model: ModelSpec) -> tuple[LinearLayer, ...]:
    h, q, kv = _dims(model)
    ffn = model.ffn_size
    return (
        LinearLayer("query", h, q, 1, "attention", "attention.self.query"),
        LinearLayer("key", h, kv, 1, "attention", "attention.self.key"),
        LinearLayer("value", h, kv, 1, "attention", "attention.self.value"),
        LinearLayer("dense", q, h, 1, "attention", "attention.output.dense"),
        LinearLayer("dense", h, ffn, 1, "mlp", "intermediate.dense"),
        LinearLayer("dense", ffn, h, 1, "mlp", "output.dense"),
    )


def _bert_pooler(model: ModelSpec) -> tuple[LinearLayer, ...]:
    return (LinearLayer("dense", model.hidden_size, model.hidden_size, 1, "mlp", "pooler.dense"),)


_LLAMA = _Layout(_llama, "embed_tokens", "lm_head")
_GPT2 = _Layout(_gpt2, "wte", "lm_head")
_FALCON = _Layout(_fused_qkv("self_attention", quantizable=False), "word_embeddings", "lm_head")
_BERT = _Layout(_bert, "word_embeddings", "", _bert_pooler)
_LAYOUTS: dict[str, _Layout] = {
    "llama": _LLAMA,
    "mistral": _LLAMA,
    "mixtral": _LLAMA,
    "qwen2": _LLAMA,
    "gemma": _LLAMA,
    "gemma2": _LLAMA,
    "phi3": _Layout(_phi3, "embed_tokens", "lm_head"),
    "gpt2": _GPT2,
    "gpt_neox": _Layout(_fused_qkv("attention", quantizable=True), "embed_in", "lm_head"),
    "falcon": _FALCON,
    "RefinedWeb": _FALCON,
    "RefinedWebModel": _FALCON,
    "bert": _BERT,
    "roberta": _BERT,
    "xlm-roberta": _BERT,
}
# Read by hf_config with their own fields, but with layers this module does not lay out yet.
_UNSUPPORTED = {"t5": "T5's encoder-decoder", "vit": "ViT"}


def _layout(model: ModelSpec) -> _Layout:
    """The family's layout; a shape without a known model_type is laid out as its MLP suggests."""
    what = _UNSUPPORTED.get(model.model_type) or (
        f"a {model.architecture} model" if model.architecture not in ("decoder", "encoder") else ""
    )
    if not model.is_transformer:
        what = what or "a model without a transformer's shape"
    if what:
        raise InputError(
            f"LoRA needs the linear layers of {model.name}, and those of {what} are not laid out yet",
            hint="fine-tune it in full, or give a decoder's config.json (Llama, Mistral, Qwen2, Gemma, Phi-3, "
            "GPT-2, GPT-NeoX, Falcon) or a BERT/RoBERTa encoder's",
        )
    layout = _LAYOUTS.get(model.model_type)
    if layout is not None:
        return layout
    if model.architecture == "encoder":
        return _BERT
    return _LLAMA if model.gated_ffn or model.model_type else _GPT2


def block_linears(model: ModelSpec) -> tuple[LinearLayer, ...]:
    """The linear layers of one transformer block, named as Hugging Face names them for the family."""
    return _layout(model).blocks(model)


def quantizable_linears(model: ModelSpec) -> tuple[LinearLayer, ...]:
    """The linear layers of one block that bitsandbytes stores in 4 bits under QLoRA (``LinearLayer.quantizable``)."""
    return tuple(layer for layer in block_linears(model) if layer.quantizable)


def _model_linears(model: ModelSpec) -> tuple[LinearLayer, ...]:
    layout = _layout(model)
    return layout.blocks(model) + layout.outside(model)


def _resolve(model: ModelSpec, targets: tuple[str, ...]) -> tuple[LinearLayer, ...]:
    """Every linear layer a target reaches, blocks and the pooler alike, in the model's order."""
    linears = _model_linears(model)
    by_set = {layer for target in targets if target in LORA_TARGET_SETS for layer in _named_set(linears, target)}
    chosen = set(by_set)
    for target in (target for target in targets if target not in LORA_TARGET_SETS):
        hits = [layer for layer in linears if layer.matches(target)]
        if not hits:
            raise UnknownNameError(
                "LoRA target module",
                target,
                _known_targets(linears),
                hint=f"give {', '.join(LORA_TARGET_SETS)} or module names of {model.name}: "
                f"{', '.join(_known_targets(linears, with_sets=False))}; the embeddings and the LM head are "
                "not LoRA targets, they train in full with train_embeddings/train_head",
            )
        chosen.update(hits)
    for layer in chosen - by_set:
        if not all(any(t == name or t.endswith("." + name) for t in targets) for name in layer.peft_names):
            raise InputError(
                f"{' and '.join(layer.peft_names)} of {model.name} are one parameter ({layer.module}) in "
                "transformers 5: LoRA cannot adapt a part of it",
                hint=f"target {', '.join(layer.peft_names)} together",
            )
    return tuple(layer for layer in linears if layer in chosen)


def _named_set(linears: tuple[LinearLayer, ...], target: str) -> tuple[LinearLayer, ...]:
    """``all-linear``: every layer; ``attention``: the attention projections."""
    return linears if target == "all-linear" else tuple(layer for layer in linears if layer.kind == "attention")


def _known_targets(linears: tuple[LinearLayer, ...], *, with_sets: bool = True) -> list[str]:
    """Names a user can give: each module name, and the paths that tell apart layers sharing one."""
    names = list(dict.fromkeys(name for layer in linears for name in layer.peft_names or (layer.name,)))
    shared = [layer.module for layer in linears if sum(other.name == layer.name for other in linears) > 1]
    return [*(LORA_TARGET_SETS if with_sets else ()), *names, *shared]


def resolve_targets(model: ModelSpec, targets: tuple[str, ...]) -> tuple[LinearLayer, ...]:
    """The layers of one block that ``targets`` adapts: a named set or PEFT module names.

    ``attention`` is the attention projections, ``all-linear`` every linear layer of the block (never
    the LM head). A name matches as PEFT matches it; one that matches nothing raises UnknownNameError
    with the model's module names. Layers outside the blocks (BERT's pooler) are not returned: they
    are one per model, and ``lora_params`` counts them.
    """
    blocks = block_linears(model)
    return tuple(layer for layer in _resolve(model, targets) if layer in blocks)


def check_rank(model: ModelSpec, finetune: FineTune) -> None:
    """Refuse a rank above the smaller side of a targeted layer: the product B A could not reach it.

    An MoE router reached through ``all-linear`` is let be: its side is the number of experts (8 in
    Mixtral), below the ranks every QLoRA recipe uses, and PEFT adapts it at any rank, the excess unused.
    Named, it is held to the rule like any layer.
    """
    if not finetune.adapted:
        return
    named = tuple(target for target in finetune.targets if target not in LORA_TARGET_SETS)
    layers = [
        layer for layer in _resolve(model, finetune.targets) if layer.kind != "router" or any(map(layer.matches, named))
    ]
    smallest = min(layers, key=lambda layer: min(layer.in_features, layer.out_features))
    limit = min(smallest.in_features, smallest.out_features)
    if finetune.rank > limit:
        raise InputError(
            f"LoRA rank {finetune.rank} exceeds {smallest.module} of {model.name} "
            f"({smallest.in_features} -> {smallest.out_features})",
            hint=f"give a rank of at most {limit} for {', '.join(finetune.targets)}, "
            f"or leave {smallest.name} out of the targets",
        )


def _saved_modules(model: ModelSpec, finetune: FineTune) -> list[str]:
    """``modules_to_save``: the embedding and the LM head asked to train in full."""
    layout = _layout(model)
    if finetune.train_head and not layout.head:
        raise InputError(
            f"{model.name} is read as an encoder without an LM head, so there is no head to train",
            hint="drop train_head (a task head is the caller's own module), or train the embeddings",
        )
    return [
        name for name, on in ((layout.embedding, finetune.train_embeddings), (layout.head, finetune.train_head)) if on
    ]


def _tied(model: ModelSpec) -> bool:
    return model.tied_embeddings and bool(_layout(model).head)


def lora_params(model: ModelSpec, finetune: FineTune) -> LoraParams:
    """Adapter, trainable, frozen and quantizable parameter counts of ``finetune`` on ``model``.

    Exact as PEFT counts them for the families laid out here (the tests build each with transformers
    and PEFT); the rank is checked against the targeted layers first.
    """
    if not finetune.adapted:
        return LoraParams(adapter=0, trainable=model.params, frozen=0, quantizable=0)
    check_rank(model, finetune)
    layers = model.total_layers
    blocks = block_linears(model)
    adapter = sum(
        layer.adapter_params(finetune.rank) * (layers if layer in blocks else 1)
        for layer in _resolve(model, finetune.targets)
    )
    matrices = len(_saved_modules(model, finetune))
    saved = (min(matrices, 1) if _tied(model) else matrices) * model.vocab_size * model.hidden_size
    quantizable = layers * sum(
        layer.in_features * layer.out_features * layer.per_block for layer in quantizable_linears(model)
    )
    return LoraParams(
        adapter=adapter, trainable=adapter + saved, frozen=model.params, quantizable=quantizable, saved=saved
    )


def peft_target_modules(model: ModelSpec, targets: tuple[str, ...]) -> str | list[str]:
    """``targets`` as PEFT's ``target_modules`` takes them: ``all-linear`` as is, ``attention`` as the
    paths of the attention projections, module names as given (checked against the model first)."""
    if targets == ("all-linear",):
        return "all-linear"
    _resolve(model, targets)
    named: list[str] = []
    for target in targets:
        if target in LORA_TARGET_SETS:
            named.extend(name for layer in _named_set(_model_linears(model), target) for name in _peft_names(layer))
        else:
            named.append(target)
    return list(dict.fromkeys(named))


def _peft_names(layer: LinearLayer) -> tuple[str, ...]:
    return layer.peft_names or (layer.module,)


def lora_config(model: ModelSpec, finetune: FineTune) -> LoraConfig:
    """PEFT's ``LoraConfig`` for ``finetune`` on ``model``: what a real run and the count both use."""
    try:
        from peft import LoraConfig
    except ImportError as error:
        raise MissingExtraError("peft", "finetune", "a LoRA model") from error
    check_rank(model, finetune)
    saved = _saved_modules(model, finetune)
    return LoraConfig(
        r=finetune.rank,
        # PEFT annotates an int but scales by lora_alpha / r, so a fractional alpha works as given.
        lora_alpha=finetune.alpha,  # type: ignore[arg-type]
        target_modules=peft_target_modules(model, finetune.targets),
        modules_to_save=saved or None,
        ensure_weight_tying=_tied(model) and bool(saved),
        task_type="CAUSAL_LM" if _layout(model).head else "FEATURE_EXTRACTION",
    )


def peft_trainable_params(hf_config: Mapping[str, Any], finetune: FineTune) -> int:
    """The trainable parameters PEFT reports for ``finetune`` on the model of a config.json.

    The model is built by transformers on the meta device (shapes only, no memory) and wrapped by
    ``peft.get_peft_model``; the count is ``print_trainable_parameters``'s. Full fine-tuning counts
    every parameter of the model.
    """
    model = from_hf_config(hf_config)
    config = lora_config(model, finetune) if finetune.adapted else None
    try:
        import torch
        from peft import get_peft_model
        from transformers import AutoConfig, AutoModel, AutoModelForCausalLM
    except ImportError as error:
        raise MissingExtraError("peft", "finetune", "counting LoRA parameters with PEFT") from error
    fields = {key: value for key, value in hf_config.items() if key != "model_type"}
    hf = AutoConfig.for_model(model.model_type, **fields)
    auto = AutoModel if model.architecture == "encoder" else AutoModelForCausalLM
    with torch.device("meta"):
        base = auto.from_config(hf)  # type: ignore[no-untyped-call]
    if config is None:
        return sum(param.numel() for param in base.parameters() if param.requires_grad)
    trainable, _ = get_peft_model(base, config).get_nb_trainable_parameters()
    return int(trainable)
