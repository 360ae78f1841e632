"""from_hf_config on real published config.json files, other families, and malformed input.

The fixtures under fixtures/<preset>/config.json are copies of the files published on the
Hugging Face Hub for the repository each preset's ``source`` names.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from computewise.cli.app import main  # noqa: TID251 (the real entry point, in-process)
from computewise.errors import ModelConfigError
from computewise.models import from_hf_config, preset

FIXTURES = Path(__file__).parent / "fixtures"
FIXTURE_NAMES = sorted(p.name for p in FIXTURES.iterdir() if (p / "config.json").is_file())
SHAPE_FIELDS = [f.name for f in fields(preset("gpt2")) if f.name not in ("name", "params", "source", "notes", "traced")]


def test_the_required_fixtures_exist() -> None:
    assert {"llama-2-7b", "llama-3-8b", "mixtral-8x7b", "gpt2", "bert-base"} <= set(FIXTURE_NAMES)


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_published_config_gives_the_preset(name: str) -> None:
    spec = from_hf_config(FIXTURES / name / "config.json")
    expected = preset(name)

    assert spec.params == pytest.approx(expected.params, rel=0.005)
    assert spec.params == expected.params  # the same formula and shape: exactly equal
    for field in SHAPE_FIELDS:
        assert getattr(spec, field) == getattr(expected, field), field


def test_directory_file_and_dict_agree() -> None:
    directory = FIXTURES / "llama-3-8b"
    by_dir = from_hf_config(directory)
    by_file = from_hf_config(str(directory / "config.json"))
    by_dict = from_hf_config(json.loads((directory / "config.json").read_text()))

    assert by_dir.params == by_file.params == by_dict.params == 8_030_261_248
    assert by_dir.name == "llama-3-8b"  # the directory, as a Hub snapshot is named
    assert by_dict.name == "config"
    assert by_file.source.startswith("config.json: ")


def test_name_or_path_names_the_model() -> None:
    assert from_hf_config(FIXTURES / "phi-3-mini").name == "Phi-3-mini-4k-instruct"


# Published configs of models outside the presets, one per remaining family.
PYTHIA_160M = {  # EleutherAI/pythia-160m: 162,322,944 parameters
    "architectures": ["GPTNeoXForCausalLM"],
    "hidden_act": "gelu",
    "hidden_size": 768,
    "intermediate_size": 3072,
    "max_position_embeddings": 2048,
    "model_type": "gpt_neox",
    "num_attention_heads": 12,
    "num_hidden_layers": 12,
    "rotary_pct": 0.25,
    "tie_word_embeddings": False,
    "use_parallel_residual": True,
    "vocab_size": 50304,
}
FALCON_7B = {  # tiiuae/falcon-7b: 6,921,720,704 parameters (multi-query, parallel attention)
    "alibi": False,
    "architectures": ["FalconForCausalLM"],
    "bias": False,
    "hidden_size": 4544,
    "model_type": "falcon",
    "multi_query": True,
    "new_decoder_architecture": False,
    "num_attention_heads": 71,
    "num_hidden_layers": 32,
    "parallel_attn": True,
    "vocab_size": 65024,
}
ROBERTA_BASE = {  # FacebookAI/roberta-base (RobertaModel with pooler): 124,645,632 parameters
    "architectures": ["RobertaForMaskedLM"],
    "hidden_size": 768,
    "intermediate_size": 3072,
    "max_position_embeddings": 514,
    "model_type": "roberta",
    "num_attention_heads": 12,
    "num_hidden_layers": 12,
    "type_vocab_size": 1,
    "vocab_size": 50265,
}
VIT_BASE = {  # google/vit-base-patch16-224 (id2label abridged to placeholders): 86,567,656
    "architectures": ["ViTForImageClassification"],
    "hidden_size": 768,
    "id2label": {str(i): f"class {i}" for i in range(1000)},
    "image_size": 224,
    "intermediate_size": 3072,
    "model_type": "vit",
    "num_attention_heads": 12,
    "num_channels": 3,
    "num_hidden_layers": 12,
    "patch_size": 16,
    "qkv_bias": True,
}
VIT_IN21K = {  # google/vit-base-patch16-224-in21k (ViTModel with pooler): 86,389,248
    **{k: v for k, v in VIT_BASE.items() if k != "id2label"},
    "architectures": ["ViTModel"],
}


@pytest.mark.parametrize(
    ("config", "params", "architecture"),
    [
        (PYTHIA_160M, 162_322_944, "decoder"),
        (FALCON_7B, 6_921_720_704, "decoder"),
        (ROBERTA_BASE, 124_645_632, "encoder"),
        (VIT_BASE, 86_567_656, "vision-transformer"),
        (VIT_IN21K, 86_389_248, "vision-transformer"),
    ],
    ids=["gpt_neox", "falcon", "roberta", "vit", "vit-backbone"],
)
def test_other_families(config: dict[str, Any], params: int, architecture: str) -> None:
    spec = from_hf_config(config)
    assert spec.params == params
    assert spec.architecture == architecture


def test_family_specific_fields() -> None:
    assert from_hf_config(FALCON_7B).kv_heads == 1
    assert from_hf_config(ROBERTA_BASE).max_seq_len == 512
    assert from_hf_config(VIT_BASE).max_seq_len == 197
    gemma = from_hf_config(FIXTURES / "gemma-2-9b")
    assert gemma.sliding_window is None
    assert any("every other layer" in note for note in gemma.notes)
    assert from_hf_config(FIXTURES / "qwen2.5-7b").sliding_window is None
    mistral = json.loads((FIXTURES / "mistral-7b" / "config.json").read_text())
    del mistral["sliding_window"]
    assert from_hf_config(mistral).sliding_window == 4096  # MistralConfig's default


def test_defaults_fill_optional_fields() -> None:
    llama = json.loads((FIXTURES / "llama-2-7b" / "config.json").read_text())
    for key in ("num_key_value_heads", "tie_word_embeddings", "max_position_embeddings"):
        del llama[key]
    spec = from_hf_config(llama)
    assert (spec.kv_heads, spec.tied_embeddings, spec.max_seq_len) == (32, False, 2048)
    gpt2 = json.loads((FIXTURES / "gpt2" / "config.json").read_text())
    assert from_hf_config({**gpt2, "n_inner": None}).ffn_size == 3072


def test_llama_with_biases_counts_them() -> None:
    llama = json.loads((FIXTURES / "llama-2-7b" / "config.json").read_text())
    biased = from_hf_config({**llama, "attention_bias": True, "mlp_bias": True})
    per_layer = 4 * 4096 + 2 * 11008 + 4096
    assert biased.params - from_hf_config(llama).params == 32 * per_layer


def test_unknown_model_type_is_read_as_a_llama_style_decoder_with_a_note() -> None:
    llama = json.loads((FIXTURES / "llama-2-7b" / "config.json").read_text())
    spec = from_hf_config({**llama, "model_type": "my-new-arch"})
    assert spec.params == 6_738_415_616
    assert any("'my-new-arch'" in note for note in spec.notes)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.json"
    path.write_text(text)
    return path


def test_invalid_json_names_file_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, '{\n  "model_type": "llama",\n  "hidden_size": 4096,,\n}')
    with pytest.raises(
        ModelConfigError, match=r"config\.json: invalid JSON at line 3, column 23: Expecting property name"
    ):
        from_hf_config(path)


def test_missing_field_names_the_field_and_family() -> None:
    llama = json.loads((FIXTURES / "llama-2-7b" / "config.json").read_text())
    del llama["num_hidden_layers"]
    with pytest.raises(ModelConfigError) as caught:
        from_hf_config(llama)
    assert caught.value.message == "config.json: missing field 'num_hidden_layers' (llama)"


def test_errors_from_a_file_name_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, json.dumps({"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "vocab_size": 5}))
    with pytest.raises(ModelConfigError, match=rf"^{str(path)!s}: missing field 'n_head' \(gpt2\)"):
        from_hf_config(path)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"hidden_size": "4096"}, "field 'hidden_size' must be an integer, got '4096'"),
        ({"hidden_size": True}, "field 'hidden_size' must be an integer"),
        ({"num_hidden_layers": 0}, "field 'num_hidden_layers' must be positive, got 0"),
        (
            {"num_attention_heads": 30, "num_key_value_heads": 30},
            "num_attention_heads (30) does not divide the hidden size (4096) and head_dim is absent",
        ),
        ({"num_key_value_heads": 5}, "num_attention_heads (32) is not a multiple of num_key_value_heads (5)"),
        ({"tie_word_embeddings": "no"}, "field 'tie_word_embeddings' must be true or false"),
        ({"model_type": 7}, "field 'model_type' must be a string"),
    ],
)
def test_wrong_values_are_named(change: dict[str, Any], message: str) -> None:
    llama = json.loads((FIXTURES / "llama-2-7b" / "config.json").read_text())
    with pytest.raises(ModelConfigError) as caught:
        from_hf_config({**llama, **change})
    assert message in caught.value.message
    assert caught.value.hint


def test_a_config_without_model_type_names_no_family_and_a_file_is_named_after_itself(tmp_path: Path) -> None:
    """Errors end with the family only where the config names one ("(unknown)" said nothing), and a config
    saved under its own name (not a Hub folder's config.json) is the model's name."""
    llama = json.loads((FIXTURES / "llama-2-7b" / "config.json").read_text())
    del llama["model_type"], llama["num_hidden_layers"]
    with pytest.raises(ModelConfigError) as caught:
        from_hf_config(llama)
    assert caught.value.message == "config.json: missing field 'num_hidden_layers'"
    path = tmp_path / "my-llama.json"
    path.write_text(json.dumps(json.loads((FIXTURES / "llama-2-7b" / "config.json").read_text())))
    assert from_hf_config(str(path)).name == "my-llama"


def test_a_vit_patch_larger_than_its_image_is_refused() -> None:
    vit = {"model_type": "vit", "hidden_size": 768, "num_attention_heads": 12, "num_hidden_layers": 12}
    with pytest.raises(ModelConfigError, match=r"patch_size \(500\) exceeds image_size \(absent: 224 by default\)"):
        from_hf_config({**vit, "intermediate_size": 3072, "patch_size": 500})


def test_explicit_head_dim_allows_heads_that_do_not_divide_hidden() -> None:
    llama = json.loads((FIXTURES / "llama-2-7b" / "config.json").read_text())
    spec = from_hf_config({**llama, "num_attention_heads": 30, "num_key_value_heads": 30, "head_dim": 128})
    assert spec.attention_head_dim == 128
    assert spec.head_dim == 128
    assert from_hf_config({**llama, "head_dim": 128}).head_dim == 0  # hidden // heads already


def test_file_problems(tmp_path: Path) -> None:
    with pytest.raises(ModelConfigError, match="no such file"):
        from_hf_config(tmp_path / "absent.json")
    with pytest.raises(ModelConfigError, match=r"directory has no config\.json"):
        from_hf_config(tmp_path)
    with pytest.raises(ModelConfigError, match="expected a JSON object, got list"):
        from_hf_config(write(tmp_path, "[1, 2]"))


def test_too_many_active_experts() -> None:
    mixtral = json.loads((FIXTURES / "mixtral-8x7b" / "config.json").read_text())
    with pytest.raises(ModelConfigError, match=r"num_experts_per_tok \(9\) exceeds num_local_experts \(8\)"):
        from_hf_config({**mixtral, "num_experts_per_tok": 9})
    olmoe = {k: v for k, v in OLMOE_1B_7B.items() if k != "num_experts"}
    with pytest.raises(ModelConfigError) as caught:
        from_hf_config({**olmoe, "num_experts_per_tok": 65})
    # The field OLMoE reads, and that the 64 is OLMoeConfig's default rather than the file's.
    assert "num_experts_per_tok (65) exceeds num_experts (absent: 64 by default) (olmoe)" in caught.value.message


def test_pathlike_and_str_paths() -> None:
    path = FIXTURES / "bert-base" / "config.json"
    assert from_hf_config(os.fspath(path)).params == from_hf_config(path).params == 109_482_240


# Mixture-of-experts configs outside the presets, their shape fields as published on the Hub. Fixture
# folders must each be a preset (test_presets), so these live here, like the families above.
OLMOE_1B_7B = {  # allenai/OLMoE-1B-7B-0924
    "architectures": ["OlmoeForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "clip_qkv": None,
    "eos_token_id": 50279,
    "hidden_act": "silu",
    "hidden_size": 2048,
    "initializer_range": 0.02,
    "intermediate_size": 1024,
    "max_position_embeddings": 4096,
    "model_type": "olmoe",
    "norm_topk_prob": False,
    "num_attention_heads": 16,
    "num_experts": 64,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 16,
    "num_key_value_heads": 16,
    "output_router_logits": False,
    "pad_token_id": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": None,
    "rope_theta": 10000.0,
    "router_aux_loss_coef": 0.01,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "vocab_size": 50304,
}
QWEN3_30B_A3B = {  # Qwen/Qwen3-30B-A3B
    "architectures": ["Qwen3MoeForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "decoder_sparse_step": 1,
    "eos_token_id": 151645,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 2048,
    "initializer_range": 0.02,
    "intermediate_size": 6144,
    "max_position_embeddings": 40960,
    "max_window_layers": 48,
    "mlp_only_layers": [],
    "model_type": "qwen3_moe",
    "moe_intermediate_size": 768,
    "norm_topk_prob": True,
    "num_attention_heads": 32,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 48,
    "num_key_value_heads": 4,
    "output_router_logits": False,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 1000000.0,
    "router_aux_loss_coef": 0.001,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}
QWEN1_5_MOE_A2_7B = {  # Qwen/Qwen1.5-MoE-A2.7B: 14.3B parameters, a shared expert beside 60 routed ones
    "architectures": ["Qwen2MoeForCausalLM"],
    "decoder_sparse_step": 1,
    "hidden_act": "silu",
    "hidden_size": 2048,
    "intermediate_size": 5632,
    "max_position_embeddings": 8192,
    "max_window_layers": 21,
    "model_type": "qwen2_moe",
    "moe_intermediate_size": 1408,
    "norm_topk_prob": False,
    "num_attention_heads": 16,
    "num_experts": 60,
    "num_experts_per_tok": 4,
    "num_hidden_layers": 24,
    "num_key_value_heads": 16,
    "rms_norm_eps": 1e-06,
    "shared_expert_intermediate_size": 5632,
    "sliding_window": 32768,
    "tie_word_embeddings": False,
    "use_sliding_window": False,
    "vocab_size": 151936,
}
DEEPSEEK_V3 = {  # deepseek-ai/DeepSeek-V3 (quantization_config and rope_scaling left out)
    "architectures": ["DeepseekV3ForCausalLM"],
    "attention_bias": False,
    "first_k_dense_replace": 3,
    "hidden_act": "silu",
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "kv_lora_rank": 512,
    "max_position_embeddings": 163840,
    "model_type": "deepseek_v3",
    "moe_intermediate_size": 2048,
    "moe_layer_freq": 1,
    "n_group": 8,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "num_attention_heads": 128,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 61,
    "num_key_value_heads": 128,
    "q_lora_rank": 1536,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "tie_word_embeddings": False,
    "topk_group": 4,
    "v_head_dim": 128,
    "vocab_size": 129280,
}


def olmoe_params_by_hand(c: dict[str, Any]) -> int:
    """OlmoeForCausalLM's tensors one by one: q/k RMSNorms as wide as the q and k projections."""
    h, heads, kv_heads = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
    head_dim = h // heads
    q_proj, kv_proj, o_proj = h * heads * head_dim, 2 * h * kv_heads * head_dim, heads * head_dim * h
    q_norm, k_norm = h, kv_heads * head_dim
    experts = c["num_experts"] * 3 * h * c["intermediate_size"]  # gate, up and down of each expert
    router = h * c["num_experts"]
    layer = q_proj + kv_proj + o_proj + q_norm + k_norm + experts + router + 2 * h  # input and post-attention norms
    embed, lm_head, final_norm = c["vocab_size"] * h, c["vocab_size"] * h, h
    total: int = c["num_hidden_layers"] * layer + embed + lm_head + final_norm
    return total


def qwen3_moe_params_by_hand(c: dict[str, Any]) -> int:
    """Qwen3MoeForCausalLM's tensors one by one: q/k RMSNorms one head_dim wide, shared by all heads."""
    h, heads, kv_heads, head_dim = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    q_proj, kv_proj, o_proj = h * heads * head_dim, 2 * h * kv_heads * head_dim, heads * head_dim * h
    q_norm, k_norm = head_dim, head_dim
    experts = c["num_experts"] * 3 * h * c["moe_intermediate_size"]
    router = h * c["num_experts"]
    layer = q_proj + kv_proj + o_proj + q_norm + k_norm + experts + router + 2 * h
    embed, lm_head, final_norm = c["vocab_size"] * h, c["vocab_size"] * h, h
    total: int = c["num_hidden_layers"] * layer + embed + lm_head + final_norm
    return total


def idle_experts_by_hand(c: dict[str, Any], ffn_field: str) -> int:
    """The expert weights a token does not touch: all but num_experts_per_tok of each layer's experts."""
    idle = c["num_experts"] - c["num_experts_per_tok"]
    weights: int = c["num_hidden_layers"] * idle * 3 * c["hidden_size"] * c[ffn_field]
    return weights


@pytest.mark.parametrize(
    ("config", "by_hand", "ffn_field", "total", "active", "card_active"),
    [
        # OLMoE paper (Muennighoff et al. 2024) and model card: 6.9B total, 1.3B active.
        (OLMOE_1B_7B, olmoe_params_by_hand, "intermediate_size", 6_919_161_856, 1_282_017_280, 1.3e9),
        # Qwen3-30B-A3B model card: 30.5B total, 3.3B activated.
        (QWEN3_30B_A3B, qwen3_moe_params_by_hand, "moe_intermediate_size", 30_532_122_624, 3_353_032_704, 3.3e9),
    ],
    ids=["olmoe", "qwen3_moe"],
)
def test_moe_families_give_the_published_totals(
    config: dict[str, Any],
    by_hand: Callable[[dict[str, Any]], int],
    ffn_field: str,
    total: int,
    active: int,
    card_active: float,
) -> None:
    spec = from_hf_config(config)
    assert by_hand(config) == total
    assert spec.params == total
    assert total - idle_experts_by_hand(config, ffn_field) == active
    assert spec.active_params == active
    # The cards give one decimal, rounded (OLMoE's 1.28B: "1.3B") or cut (Qwen3's 3.35B: "3.3B").
    assert abs(spec.active_params - card_active) < 0.1e9
    assert (spec.experts, spec.active_experts) == (config["num_experts"], config["num_experts_per_tok"])
    assert spec.ffn_size == config[ffn_field]
    assert spec.model_type == config["model_type"]
    assert spec.notes == ()  # read by its own family, not guessed as a Llama-style decoder


def test_qwen3_moe_shape() -> None:
    spec = from_hf_config(QWEN3_30B_A3B)
    assert spec.attention_head_dim == 128  # head_dim, not hidden_size // heads (64)
    assert spec.kv_heads == 4
    assert spec.sliding_window is None  # use_sliding_window is false
    assert spec.max_seq_len == 40960
    assert spec.params - spec.embedding_params == 29_909_792_768  # the card's "29.9B non-embedding"


def test_moe_attention_biases_are_counted() -> None:
    h = 2048
    olmoe = from_hf_config({**OLMOE_1B_7B, "attention_bias": True}).params - from_hf_config(OLMOE_1B_7B).params
    assert olmoe == 16 * (3 * h + h)  # q, k, v (16 heads of 128) and o
    qwen3 = from_hf_config({**QWEN3_30B_A3B, "attention_bias": True}).params - from_hf_config(QWEN3_30B_A3B).params
    assert qwen3 == 48 * (32 * 128 + 2 * 4 * 128 + h)


@pytest.mark.parametrize(
    ("change", "layers"),
    [({"mlp_only_layers": [0, 47]}, "mlp_only_layers [0, 47]"), ({"decoder_sparse_step": 2}, "decoder_sparse_step 2")],
)
def test_qwen3_moe_with_dense_layers_is_refused(change: dict[str, Any], layers: str) -> None:
    with pytest.raises(ModelConfigError) as caught:
        from_hf_config({**QWEN3_30B_A3B, **change})
    assert caught.value.message == (
        f"config.json: model_type 'qwen3_moe' has dense MLP layers among its MoE layers ({layers}), "
        "which computewise does not model yet"
    )


UNMODELLED_HINT = (
    "pass the total parameter count instead (e.g. --model 14.3B, from the model card; every parameter then "
    "counts as active, an upper bound on compute), or trace the module: "
    "computewise.models.trace_module(model, example_inputs)"
)


@pytest.mark.parametrize(
    ("config", "parts"),
    [
        (QWEN1_5_MOE_A2_7B, "shared experts (shared_expert_intermediate_size 5632)"),
        (
            DEEPSEEK_V3,
            "shared experts (n_shared_experts 1), multi-head latent attention (kv_lora_rank 512) and "
            "dense MLP layers before its MoE layers (first_k_dense_replace 3)",
        ),
        ({**DEEPSEEK_V3, "model_type": "deepseek_v2"}, "shared experts (n_shared_experts 1), multi-head latent"),
    ],
    ids=["qwen2_moe", "deepseek_v3", "deepseek_v2"],
)
def test_moe_layouts_computewise_cannot_count_are_refused_without_blaming_the_file(
    config: dict[str, Any], parts: str
) -> None:
    with pytest.raises(ModelConfigError) as caught:
        from_hf_config(config)
    assert caught.value.message.startswith(f"config.json: model_type {config['model_type']!r} has {parts}")
    assert caught.value.message.endswith(", which computewise does not model yet")
    assert caught.value.hint == UNMODELLED_HINT


@pytest.mark.parametrize(
    ("experts", "field"),
    [
        ({"num_experts": 8}, "num_experts 8"),
        ({"num_local_experts": 8}, "num_local_experts 8"),
        ({"n_routed_experts": 64}, "n_routed_experts 64"),
        ({"moe_num_experts": 16}, "moe_num_experts 16"),
        ({"ffn_config": {"moe_num_experts": 16, "moe_top_k": 4}}, "ffn_config.moe_num_experts 16"),
        ({"num_experts_per_tok": 4}, "num_experts_per_tok 4"),
    ],
)
def test_unknown_model_type_with_experts_is_refused(experts: dict[str, Any], field: str) -> None:
    llama = json.loads((FIXTURES / "llama-2-7b" / "config.json").read_text())
    with pytest.raises(ModelConfigError) as caught:
        from_hf_config({**llama, "model_type": "my-moe", **experts})
    assert caught.value.message == (
        f"config.json: model_type 'my-moe' has mixture-of-experts layers ({field}) of a layout it does not know "
        "(it reads mixtral, olmoe and qwen3_moe), which computewise does not model yet"
    )
    assert caught.value.hint == UNMODELLED_HINT


def test_unknown_model_type_with_a_single_expert_is_still_read() -> None:
    llama = json.loads((FIXTURES / "llama-2-7b" / "config.json").read_text())
    spec = from_hf_config({**llama, "model_type": "my-new-arch", "num_experts": 1, "num_experts_per_tok": 1})
    assert spec.params == 6_738_415_616


def computewise(
    argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, code: int
) -> tuple[str, str]:
    """(stdout, stderr) of ``computewise ARGV`` run in this process, stderr's whitespace collapsed (Rich wraps)."""
    monkeypatch.setattr(sys, "argv", ["computewise", *argv])
    with pytest.raises(SystemExit) as done:
        main()
    out, err = capsys.readouterr()
    stderr = " ".join(err.split())
    assert done.value.code == code, stderr
    return out, stderr


@pytest.fixture
def cli_sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COMPUTEWISE_DB", str(tmp_path / "ledger.sqlite"))
    monkeypatch.setenv("COMPUTEWISE_FAKE_GPU", "")
    return tmp_path


@pytest.mark.parametrize("config", [QWEN1_5_MOE_A2_7B, DEEPSEEK_V3], ids=["qwen2_moe", "deepseek_v3"])
def test_cli_refuses_unmodelled_moe_with_exit_2_and_no_traceback(
    config: dict[str, Any], cli_sandbox: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(cli_sandbox, json.dumps(config))
    _, stderr = computewise(["estimate", "train", "-m", str(path), "-g", "h100"], capsys, monkeypatch, code=2)
    assert stderr.startswith(f"error: {path}: model_type {config['model_type']!r} has shared experts (")
    assert "which computewise does not model yet" in stderr
    assert "To fix: pass the total parameter count instead (e.g. --model 14.3B" in stderr
    assert "Traceback" not in stderr
    assert "as published on the Hugging Face Hub" not in stderr  # the file is the published one
    assert "exceeds" not in stderr


def test_cli_estimates_a_published_moe_config(
    cli_sandbox: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(cli_sandbox, json.dumps(OLMOE_1B_7B))
    out, _ = computewise(["estimate", "train", "-m", str(path), "-g", "h100", "--json"], capsys, monkeypatch, code=0)
    assert json.loads(out)["params"] == 6_919_161_856
