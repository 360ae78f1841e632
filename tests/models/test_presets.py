"""The presets file: required models, loose name matching, sources, and loud errors."""

from __future__ import annotations

import datetime
import json
import os

import pytest

from computewise.errors import CatalogError, UnknownNameError
from computewise.models import preset, preset_names, presets
from computewise.models.presets import PRESETS_FILE, _parse, preset_entries

REQUIRED = (
    "gpt2",
    "gpt2-medium",
    "gpt2-large",
    "gpt2-xl",
    "bert-base",
    "bert-large",
    "t5-base",
    "llama-2-7b",
    "llama-2-13b",
    "llama-2-70b",
    "llama-3-8b",
    "llama-3-70b",
    "llama-3.1-405b",
    "mistral-7b",
    "mixtral-8x7b",
    "vit-b-16",
    "resnet-50",
)


def test_required_presets_are_present_and_names_sorted() -> None:
    names = preset_names()
    assert set(REQUIRED) <= set(names)
    assert list(names) == sorted(names)


@pytest.mark.parametrize(
    ("typed", "expected"),
    [
        ("LLAMA-2-7B", "llama-2-7b"),
        ("llama_2 7b", "llama-2-7b"),
        ("Llama 2 7B", "llama-2-7b"),
        ("llama-3-405b", "llama-3.1-405b"),
        ("meta-llama/Llama-2-7b-hf", "llama-2-7b"),
        ("bert-base-uncased", "bert-base"),
        ("Mixtral 8x7B", "mixtral-8x7b"),
        ("GPT2", "gpt2"),
    ],
)
def test_names_match_loosely(typed: str, expected: str) -> None:
    assert preset(typed).name == expected


def test_unknown_name_suggests_the_closest() -> None:
    with pytest.raises(UnknownNameError) as caught:
        preset("lama-2-7b")
    assert "llama-2-7b" in caught.value.suggestions
    assert "did you mean" in str(caught.value)
    assert "parameter count such as 7.5B" in str(caught.value)


def test_every_row_has_a_source_and_a_date() -> None:
    for entry in preset_entries():
        assert entry.spec.source.startswith("https://"), entry.spec.name
        assert datetime.date(2020, 1, 1) <= entry.retrieved <= datetime.date.today()


def test_specific_shapes() -> None:
    assert preset("mistral-7b").sliding_window == 4096
    assert preset("mixtral-8x7b").sliding_window is None
    assert (preset("mixtral-8x7b").experts, preset("mixtral-8x7b").active_experts) == (8, 2)
    assert preset("llama-2-70b").kv_heads == 8
    assert preset("gemma-2-9b").attention_head_dim == 256
    assert preset("t5-base").architecture == "encoder-decoder"
    assert preset("t5-base").total_layers == 24
    assert preset("vit-b-16").max_seq_len == (224 // 16) ** 2 + 1


def test_model_type_is_the_one_the_config_json_names() -> None:
    # A preset and its published config.json must lay out LoRA's modules alike (models.lora).
    fixtures = os.path.join(os.path.dirname(__file__), "fixtures")
    for name in sorted(os.listdir(fixtures)):
        with open(os.path.join(fixtures, name, "config.json"), encoding="utf-8") as file:
            assert preset(name).model_type == json.load(file)["model_type"], name
    assert preset("gpt3-175b").model_type == ""  # no Hugging Face model


def test_cnn_preset_carries_traced_stats_in_place_of_a_shape() -> None:
    resnet = preset("resnet-50")
    assert resnet.architecture == "cnn"
    assert not resnet.is_transformer
    assert resnet.traced is not None
    # torchvision lists 4.09 GFLOPS for ResNet-50 at 224x224, counted as multiply-adds.
    assert resnet.traced.forward_flops_per_sample == pytest.approx(2 * 4.09e9, rel=0.005)
    assert resnet.traced.param_bytes == 4 * resnet.params
    assert all(entry.spec.traced is None for entry in preset_entries() if entry.spec.architecture != "cnn")


def _csv_with(old: str, new: str) -> str:
    path = os.path.join(os.path.dirname(presets.__file__), "data", PRESETS_FILE)
    with open(path, encoding="utf-8") as file:
        text = file.read()
    assert old in text
    return text.replace(old, new, 1)


@pytest.mark.parametrize(
    ("old", "new", "column"),
    [
        (",124439808,", ",124439808x,", "params"),
        ("gpt2,decoder", "gpt2,transformer", "architecture"),
        ("gpt2,gpt2-small;openai-community/gpt2,gpt2,", "gpt2,gpt2-small;openai-community/gpt2,gpt9,", "family"),
        ("openai-community/gpt2,gpt2,gpt2,", "openai-community/gpt2,gpt2,gpt-2,", "model_type"),
        ("1024,0,0,0,0,,,,,,,,,,,,https", "1024,0,0,0,0,1e9,,,,,,,,,,,https", "activation_bytes_per_sample"),
        ("1024,0,0,0,0,,,,,,,,,,,,https", "1024,0,0,0,0,,,174,,,,,,,,,https", "eval_kernels"),
        (",2026-11-21,", ",yesterday,", "retrieved"),
        ("gpt2-medium,openai-community/gpt2-medium", "gpt2-medium,gpt2-small", "aliases"),
    ],
)
def test_malformed_rows_name_line_and_column(old: str, new: str, column: str) -> None:
    with pytest.raises(CatalogError) as caught:
        _parse(_csv_with(old, new), PRESETS_FILE)
    assert caught.value.column == column
    assert caught.value.line >= 2
    assert PRESETS_FILE in str(caught.value)


def test_missing_column_is_reported_on_the_header_line() -> None:
    with pytest.raises(CatalogError) as caught:
        _parse("name,aliases\ngpt2,\n", PRESETS_FILE)
    assert caught.value.line == 1
