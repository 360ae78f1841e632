"""LoRA's trainable parameters: ``models.lora``'s arithmetic against PEFT building the real model.

Every count is checked against something the arithmetic does not share: PEFT's own
``get_nb_trainable_parameters`` on the model transformers builds from the config (on the meta device:
shapes without memory), with a ``LoraConfig`` written out here by hand; the bytes bitsandbytes would
quantize against transformers' own ``replace_with_bnb_linear``; and the line PEFT's documentation
prints for Llama-2-7B.
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from computewise.errors import InputError, MissingExtraError, UnknownNameError
from computewise.models import from_hf_config, preset
from computewise.models.lora import (
    block_linears,
    check_rank,
    lora_config,
    lora_params,
    peft_trainable_params,
    resolve_targets,
)
from computewise.specs.finetune import FineTune

FIXTURES = Path(__file__).parent / "fixtures"

# Small configs with real structure: GQA, biases, tied and untied heads, fused q/k/v, an MoE.
CONFIGS: dict[str, dict[str, Any]] = {
    "llama-gqa-untied": {
        "model_type": "llama",
        "hidden_size": 256,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "intermediate_size": 688,
        "num_hidden_layers": 2,
        "vocab_size": 512,
        "tie_word_embeddings": False,
    },
    "llama-biased-tied": {
        "model_type": "llama",
        "hidden_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "intermediate_size": 344,
        "num_hidden_layers": 3,
        "vocab_size": 300,
        "attention_bias": True,
        "mlp_bias": True,
        "tie_word_embeddings": True,
    },
    "qwen2-tied": {
        "model_type": "qwen2",
        "hidden_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 320,
        "num_hidden_layers": 2,
        "vocab_size": 300,
        "tie_word_embeddings": True,
    },
    "gemma-wide-heads": {
        "model_type": "gemma",
        "hidden_size": 192,
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "head_dim": 64,
        "intermediate_size": 384,
        "num_hidden_layers": 2,
        "vocab_size": 300,
    },
    "phi3-fused": {
        "model_type": "phi3",
        "hidden_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "vocab_size": 300,
        "pad_token_id": 0,
    },
    "gpt2": {
        "model_type": "gpt2",
        "n_embd": 128,
        "n_head": 4,
        "n_layer": 2,
        "n_positions": 64,
        "vocab_size": 300,
        "bos_token_id": 0,
        "eos_token_id": 0,
    },
    "gpt-neox": {
        "model_type": "gpt_neox",
        "hidden_size": 128,
        "num_attention_heads": 4,
        "intermediate_size": 512,
        "num_hidden_layers": 2,
        "vocab_size": 300,
        "bos_token_id": 0,
        "eos_token_id": 0,
    },
    "falcon-gqa": {
        "model_type": "falcon",
        "hidden_size": 128,
        "num_attention_heads": 4,
        "num_kv_heads": 2,
        "new_decoder_architecture": True,
        "num_hidden_layers": 2,
        "vocab_size": 300,
        "bos_token_id": 0,
        "eos_token_id": 0,
    },
    "bert": {
        "model_type": "bert",
        "hidden_size": 128,
        "num_attention_heads": 4,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "vocab_size": 300,
        "max_position_embeddings": 64,
    },
    "mixtral": {
        "model_type": "mixtral",
        "hidden_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 192,
        "num_hidden_layers": 2,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "vocab_size": 300,
    },
}

# What a user would write in PEFT for each family, independently of models.lora: the attention
# projections, one explicit list, and the embedding and head module names.
ATTENTION: dict[str, list[str]] = {
    "llama": ["q_proj", "k_proj", "v_proj", "o_proj"],
    "qwen2": ["q_proj", "k_proj", "v_proj", "o_proj"],
    "gemma": ["q_proj", "k_proj", "v_proj", "o_proj"],
    "mixtral": ["q_proj", "k_proj", "v_proj", "o_proj"],
    "phi3": ["qkv_proj", "o_proj"],
    "gpt2": ["c_attn", "attn.c_proj"],
    "gpt_neox": ["query_key_value", "attention.dense"],
    "falcon": ["query_key_value", "self_attention.dense"],
    "bert": ["query", "key", "value", "attention.output.dense"],
}
EXPLICIT: dict[str, tuple[str, ...]] = {
    "llama": ("q_proj", "v_proj", "down_proj"),
    "qwen2": ("k_proj", "up_proj"),
    "gemma": ("v_proj", "gate_proj"),
    "mixtral": ("gate", "w1", "w3", "w2"),
    "phi3": ("qkv_proj", "gate_up_proj"),
    "gpt2": ("c_proj",),  # the attention's and the MLP's output alike
    "gpt_neox": ("dense", "dense_h_to_4h"),
    "falcon": ("dense",),  # self_attention.dense only: dense_h_to_4h does not end in ".dense"
    "bert": ("dense",),  # both outputs, the intermediate layer and the pooler
}
EMBEDDING = {"gpt2": "wte", "gpt_neox": "embed_in", "falcon": "word_embeddings", "bert": "word_embeddings"}
HEAD = {"bert": ""}
# (rank, train_embeddings, train_head); no rank above the smallest layer named (Mixtral's 4-way router).
SETTINGS = ((1, False, False), (4, True, False), (2, False, True), (3, True, True))


def _meta_model(config: Mapping[str, Any]) -> Any:
    """The model transformers builds from ``config``, on the meta device: every shape, no memory."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    fields = {key: value for key, value in config.items() if key != "model_type"}
    hf = transformers.AutoConfig.for_model(config["model_type"], **fields)
    auto = transformers.AutoModel if config["model_type"] == "bert" else transformers.AutoModelForCausalLM
    with torch.device("meta"):
        return auto.from_config(hf)


def _peft_count(
    config: Mapping[str, Any], targets: tuple[str, ...], rank: int, embed: bool, head: bool
) -> tuple[int, int]:
    """(trainable, all) as PEFT reports them, for a LoraConfig written the way a user writes it."""
    peft = pytest.importorskip("peft")
    kind = config["model_type"]
    model = _meta_model(config)
    saved = [EMBEDDING.get(kind, "embed_tokens")] if embed else []
    saved += [HEAD.get(kind, "lm_head")] if head else []
    target_modules: str | list[str] = (
        "all-linear" if targets == ("all-linear",) else ATTENTION[kind] if targets == ("attention",) else list(targets)
    )
    tied = bool(getattr(model.config, "tie_word_embeddings", False)) and kind != "bert"
    lora = peft.LoraConfig(
        r=rank,
        lora_alpha=2 * rank,
        target_modules=target_modules,
        modules_to_save=saved or None,
        # Trained tied embeddings stay one matrix, so PEFT counts them once.
        ensure_weight_tying=tied and bool(saved),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Conv1D's fan_in_fan_out, MoE rank patterns: PEFT's notes, not errors
        trainable, total = peft.get_peft_model(model, lora).get_nb_trainable_parameters()
    return int(trainable), int(total)


def _target_sets(name: str) -> list[tuple[str, tuple[str, ...]]]:
    kind = CONFIGS[name]["model_type"]
    return [(name, ("attention",)), (name, ("all-linear",)), (name, EXPLICIT[kind])]


@pytest.mark.parametrize(("name", "targets"), [case for name in CONFIGS for case in _target_sets(name)])
def test_counts_match_peft(name: str, targets: tuple[str, ...]) -> None:
    config = CONFIGS[name]
    spec = from_hf_config(config)
    for rank, embed, head in SETTINGS:
        if head and spec.architecture == "encoder":
            continue
        finetune = FineTune(
            method="lora", rank=rank, alpha=2.0 * rank, targets=targets, train_embeddings=embed, train_head=head
        )
        counted = lora_params(spec, finetune)
        trainable, total = _peft_count(config, targets, rank, embed, head)
        assert (counted.trainable, counted.frozen) == (trainable, total - trainable), (rank, embed, head)
        assert counted.trainable == counted.adapter + counted.saved


@pytest.mark.parametrize("name", list(CONFIGS))
def test_peft_trainable_params_is_peft_s_count(name: str) -> None:
    config = CONFIGS[name]
    encoder = config["model_type"] == "bert"
    finetune = FineTune(method="qlora", rank=4, targets=("all-linear",), train_embeddings=True, train_head=not encoder)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        counted = peft_trainable_params(config, finetune)
    assert counted == _peft_count(config, ("all-linear",), 4, True, not encoder)[0]
    assert counted == lora_params(from_hf_config(config), finetune).trainable


def test_llama_2_7b_matches_the_line_peft_prints() -> None:
    # PEFT's LoRA guides: Llama-2-7b, r=8, q_proj and v_proj:
    # "trainable params: 4,194,304 || all params: 6,742,609,920 || trainable%: 0.0622"
    counted = lora_params(preset("llama-2-7b"), FineTune(method="lora", rank=8, targets=("q_proj", "v_proj")))
    assert (counted.trainable, counted.frozen + counted.trainable) == (4_194_304, 6_742_609_920)


@pytest.mark.parametrize("fixture", ["llama-3-8b", "mixtral-8x7b"])
def test_real_shapes_on_the_meta_device(fixture: str) -> None:
    config = json.loads((FIXTURES / fixture / "config.json").read_text())
    # Every layer as published (the 128k vocabulary, 8 KV heads, 8 experts), two of them: 32 take
    # transformers tens of seconds to build even on the meta device, and depth only multiplies.
    config["num_hidden_layers"] = 2
    finetune = FineTune(method="qlora", rank=64, targets=("all-linear",), train_head=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert peft_trainable_params(config, finetune) == lora_params(from_hf_config(config), finetune).trainable


@pytest.mark.parametrize("name", ["llama-gqa-untied", "phi3-fused", "gpt2", "falcon-gqa", "bert", "mixtral"])
def test_quantizable_is_what_bitsandbytes_replaces(name: str) -> None:
    pytest.importorskip("bitsandbytes")
    transformers = pytest.importorskip("transformers")
    from transformers.integrations.bitsandbytes import replace_with_bnb_linear
    from transformers.quantizers.base import get_keys_to_not_convert

    config = CONFIGS[name]
    model = _meta_model(config)
    quantization = transformers.BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4")
    model = replace_with_bnb_linear(model, get_keys_to_not_convert(model), quantization)
    four_bit = sum(
        module.in_features * module.out_features for module in model.modules() if type(module).__name__ == "Linear4bit"
    )
    # bitsandbytes also quantizes BERT's pooler, one layer outside the blocks, which ``quantizable`` leaves out.
    pooler = 128 * 128 if name == "bert" else 0
    assert lora_params(from_hf_config(config), FineTune(method="qlora")).quantizable + pooler == four_bit
    if name == "falcon-gqa":  # transformers 5 replaces exactly nn.Linear, and FalconLinear is a subclass
        assert four_bit == 0


def test_block_linears_name_and_shape_llama_3_8b() -> None:
    layers = {
        layer.name: (layer.in_features, layer.out_features, layer.kind) for layer in block_linears(preset("llama-3-8b"))
    }
    assert layers == {
        "q_proj": (4096, 4096, "attention"),
        "k_proj": (4096, 1024, "attention"),  # 8 KV heads of 128
        "v_proj": (4096, 1024, "attention"),
        "o_proj": (4096, 4096, "attention"),
        "gate_proj": (4096, 14336, "mlp"),
        "up_proj": (4096, 14336, "mlp"),
        "down_proj": (14336, 4096, "mlp"),
    }


def test_gpt2_c_proj_is_two_layers() -> None:
    gpt2 = preset("gpt2")
    assert [layer.module for layer in resolve_targets(gpt2, ("c_proj",))] == ["attn.c_proj", "mlp.c_proj"]
    assert [layer.module for layer in resolve_targets(gpt2, ("mlp.c_proj",))] == ["mlp.c_proj"]
    assert [layer.name for layer in resolve_targets(gpt2, ("attention",))] == ["c_attn", "c_proj"]


def test_full_fine_tuning_trains_everything() -> None:
    model = preset("llama-3-8b")
    assert lora_params(model, FineTune()).trainable == model.params == 8_030_261_248


def test_a_rank_above_a_targeted_layer_is_refused_with_the_limit() -> None:
    model = from_hf_config(CONFIGS["llama-gqa-untied"])  # k_proj and v_proj: 256 -> 64
    check_rank(model, FineTune(method="lora", rank=64, targets=("attention",)))
    with pytest.raises(InputError, match=r"exceeds self_attn\.k_proj") as caught:
        lora_params(model, FineTune(method="lora", rank=65, targets=("attention",)))
    assert caught.value.hint is not None and "a rank of at most 64" in caught.value.hint
    check_rank(model, FineTune(method="lora", rank=65, targets=("q_proj", "o_proj")))


def test_an_unknown_module_is_refused_with_the_model_s_names() -> None:
    with pytest.raises(UnknownNameError, match="did you mean 'q_proj'") as caught:
        resolve_targets(preset("llama-3-8b"), ("q_prj",))
    hint = caught.value.hint or ""
    assert "q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj" in hint
    with pytest.raises(UnknownNameError) as caught:
        resolve_targets(preset("gpt2"), ("lm_head",))
    assert "attn.c_proj, mlp.c_proj" in (caught.value.hint or "")
    assert "train_head" in (caught.value.hint or "")


def test_an_moe_router_takes_any_rank_through_all_linear_but_not_by_name() -> None:
    mixtral = preset("mixtral-8x7b")  # the router maps 4096 -> 8 experts
    check_rank(mixtral, FineTune(method="qlora", rank=64, targets=("all-linear",)))
    with pytest.raises(InputError, match=r"exceeds mlp\.gate"):
        check_rank(mixtral, FineTune(method="qlora", rank=64, targets=("gate", "q_proj")))


def test_half_of_a_fused_moe_parameter_is_refused() -> None:
    with pytest.raises(InputError, match="w1 and w3 of mixtral-8x7b are one parameter"):
        lora_params(preset("mixtral-8x7b"), FineTune(method="lora", rank=8, targets=("w1", "w2")))


def test_what_is_not_laid_out_is_refused() -> None:
    with pytest.raises(InputError, match="T5's encoder-decoder"):
        lora_params(preset("t5-base"), FineTune(method="lora"))
    with pytest.raises(InputError, match="no head to train"):
        lora_params(preset("bert-base"), FineTune(method="lora", rank=8, train_head=True))


def test_peft_missing_is_a_missing_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "peft", None)  # makes `import peft` fail
    with pytest.raises(MissingExtraError, match=r"finetune"):
        lora_config(preset("gpt2"), FineTune(method="lora", rank=8))
    with pytest.raises(MissingExtraError, match=r"finetune"):
        peft_trainable_params(CONFIGS["gpt2"], FineTune(method="lora", rank=8))


def test_import_is_light() -> None:
    script = "import sys\nimport computewise.models.lora\nprint('torch' in sys.modules, 'peft' in sys.modules)\n"
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert run.stdout.split() == ["False", "False"]
