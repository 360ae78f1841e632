"""from_hf_config on real published config.json files, other families, and malformed input.

The fixtures under fixtures/<preset>/config.json are copies of the files published on the
Hugging Face Hub for the repository each preset's ``source`` names.
"""

from __future__ import annotations

import json
import os
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

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


def test_pathlike_and_str_paths() -> None:
    path = FIXTURES / "bert-base" / "config.json"
    assert from_hf_config(os.fspath(path)).params == from_hf_config(path).params == 109_482_240
