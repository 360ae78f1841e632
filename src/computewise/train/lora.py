"""LoRA and QLoRA fine-tuning through PEFT: a setup's model given the adapters its ``FineTune`` asks for.

``StepEngine.prepare`` calls ``adapt`` before anything else touches the model, so the optimizer, the
checkpoints and the precision policy all see the adapted model: its base frozen, only the adapters
(and any ``modules_to_save``) trainable. PEFT injects the adapters into the user's model in place
and wraps it in a ``PeftModel``, which is what the engine then trains, evaluates and checkpoints.

The target names are the ones ``FineTune`` documents: ``attention`` means the attention projections
as the model's family names them (Llama's q, k, v and o for a module without a Hugging Face config),
``all-linear`` is PEFT's own
``"all-linear"`` (every linear layer of the blocks, not the LM head), anything else is a module name
as PEFT's ``target_modules`` takes it. QLoRA's 4-bit base is made when the model is loaded
(transformers' ``BitsAndBytesConfig``), so here it is checked, not made.

peft is imported inside the functions: it is the ``finetune`` extra, needed only for adapted runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from computewise.errors import ConfigError, SetupError
from computewise.specs.finetune import FineTune

if TYPE_CHECKING:
    from torch import nn

__all__ = ["ATTENTION_PROJECTIONS", "adapt", "peft_target_modules"]

# The attention projections of Llama-like Hugging Face models, the LoRA paper's targets.
ATTENTION_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj")


def peft_target_modules(finetune: FineTune, model: nn.Module | None = None) -> list[str] | str:
    """``FineTune.targets`` as PEFT's ``target_modules``: ``"all-linear"``, or names with ``attention`` expanded
    to the model family's own projections (``_attention_names``)."""
    if "all-linear" in finetune.targets:
        if len(finetune.targets) > 1:
            raise ConfigError(
                f"LoRA targets {', '.join(finetune.targets)} mix all-linear with other targets",
                "give all-linear alone: it already covers every linear layer of the blocks",
            )
        return "all-linear"
    names: list[str] = []
    for target in finetune.targets:
        for name in _attention_names(model) if target == "attention" else (target,):
            if name not in names:
                names.append(name)
    return names


def _attention_names(model: nn.Module | None) -> tuple[str, ...]:
    """The attention projections as the Hugging Face family names them (``models.lora``: GPT-2's ``c_attn``
    and ``attn.c_proj``, Phi-3's ``qkv_proj``, BERT's ``query``...), the names the estimate counts; Llama's
    for a module without a Hugging Face config or with one the estimator cannot read."""
    config: Any = getattr(model, "config", None)
    if not hasattr(config, "to_dict"):
        return ATTENTION_PROJECTIONS
    from computewise.errors import ComputewiseError
    from computewise.models.hf_config import from_hf_config
    from computewise.models.lora import peft_target_modules as family_targets

    try:
        names = family_targets(from_hf_config(config.to_dict()), ("attention",))
    except ComputewiseError:
        return ATTENTION_PROJECTIONS
    return tuple(names) if isinstance(names, list) else ATTENTION_PROJECTIONS


def adapt(model: nn.Module, finetune: FineTune) -> nn.Module:
    """``model`` itself for full training, else the PEFT model with LoRA adapters on the targets.

    Refused with the fix: peft not installed, QLoRA on a model not loaded in 4 bits, bf16 adapters on
    a base that is not 16-bit, a target the model does not have (the model's linear layers are listed),
    a rank larger than a targeted layer.
    """
    if not finetune.adapted:
        return model
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError as missing:
        raise SetupError(
            f"{finetune.method} fine-tuning needs the peft package ({missing})",
            "pip install 'computewise[finetune]'",
        ) from missing
    _check_base(model, finetune)
    saved = _full_modules(model, finetune)
    tied = bool(getattr(getattr(model, "config", None), "tie_word_embeddings", False))
    config = LoraConfig(
        r=finetune.rank,
        lora_alpha=cast("int", finetune.alpha),  # typed int by PEFT, used as alpha / r: a float scales alike
        target_modules=peft_target_modules(finetune, model),
        modules_to_save=saved or None,
        # A tied embedding trained in full stays one tensor, as the estimate counts it (models.lora).
        ensure_weight_tying=tied and bool(saved),
    )
    try:
        # fp32 adapters beside a 16-bit base (PEFT's default), or adapters in the base's own dtype.
        adapted: nn.Module = get_peft_model(model, config, autocast_adapter_dtype=finetune.adapter_bytes == 4)
    except ValueError as failure:  # PEFT's "Target modules {...} not found in the base model"
        raise ConfigError(
            f"LoRA cannot adapt this model: {failure}",
            f"choose targets among the model's linear layers: {', '.join(_linear_names(model))}",
        ) from failure
    _check_rank(adapted, finetune.rank)
    return adapted


def _check_base(model: nn.Module, finetune: FineTune) -> None:
    """QLoRA needs the base already in 4 bits; bf16 adapters need a 16-bit base to take the dtype from."""
    import torch

    if finetune.quantized and not getattr(model, "is_loaded_in_4bit", False):
        raise ConfigError(
            "qlora fine-tuning needs the base model loaded in 4 bits, and this one is not",
            "load it with from_pretrained(..., quantization_config=BitsAndBytesConfig(load_in_4bit=True, "
            "bnb_4bit_quant_type='nf4', bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=torch.bfloat16)), "
            "or use method lora",
        )
    dtypes = {p.dtype for p in model.parameters() if p.is_floating_point()}
    if finetune.adapter_bytes == 2 and not dtypes <= {torch.bfloat16, torch.float16}:
        raise ConfigError(
            "16-bit LoRA adapters take the base weights' dtype, and this base is not 16-bit "
            f"({', '.join(sorted(str(d).removeprefix('torch.') for d in dtypes))})",
            "load the model with torch_dtype=torch.bfloat16, or keep adapter_bytes=4 (fp32 adapters)",
        )


def _full_modules(model: nn.Module, finetune: FineTune) -> list[str]:
    """The input embedding and the LM head, when the fine-tune trains them in full (PEFT's ``modules_to_save``)."""
    wanted = []
    for flag, getter in (
        (finetune.train_embeddings, "get_input_embeddings"),
        (finetune.train_head, "get_output_embeddings"),
    ):
        if not flag:
            continue
        module = getattr(model, getter, lambda: None)()
        names = [name for name, candidate in model.named_modules() if candidate is module and name]
        if not names:
            raise ConfigError(
                f"the model has no {'input embedding' if getter == 'get_input_embeddings' else 'LM head'} to train",
                "turn train_embeddings / train_head off for this model",
            )
        wanted.append(names[0])
    return wanted


def _linear_names(model: nn.Module) -> list[str]:
    """The distinct last names of the model's linear layers: what ``target_modules`` can name."""
    from torch import nn

    return sorted({name.rsplit(".", 1)[-1] for name, module in model.named_modules() if isinstance(module, nn.Linear)})


def _check_rank(adapted: nn.Module, rank: int) -> None:
    """A rank above a layer's smaller side adds parameters and no expressiveness: refused, naming the layer."""
    for name, module in adapted.named_modules():
        sides: Any = (getattr(module, "in_features", None), getattr(module, "out_features", None))
        if getattr(module, "lora_A", None) is None or None in sides:
            continue
        if rank > min(sides):
            raise ConfigError(
                f"LoRA rank {rank} is larger than layer {name} ({sides[0]} -> {sides[1]})",
                f"give a rank of at most {min(sides)}",
            )
