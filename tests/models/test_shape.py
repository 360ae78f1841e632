"""The parameter formula against published counts, family by family."""

from __future__ import annotations

from dataclasses import replace

import pytest

from computewise.models.presets import preset_entries
from computewise.models.shape import FAMILIES, count_params
from computewise.specs.model import ModelSpec

# Exact totals: sum(p.numel() for p in model.parameters()) of the transformers / torchvision
# model built from the config.json each preset cites, tied weights once (the figures the
# Hugging Face Hub shows from each checkpoint's safetensors metadata). GPT-2 is
# GPT2LMHeadModel, BERT is BertModel with its pooler (no masked-LM head), ViT-B/16 is
# ViTForImageClassification with the ImageNet-1k head (= timm's vit_base_patch16_224).
EXACT_COUNTS = {
    "gpt2": 124_439_808,
    "gpt2-medium": 354_823_168,
    "gpt2-large": 774_030_080,
    "gpt2-xl": 1_557_611_200,
    "bert-base": 109_482_240,
    "bert-large": 335_141_888,
    "t5-base": 222_903_552,
    "llama-2-7b": 6_738_415_616,
    "llama-2-13b": 13_015_864_320,
    "llama-2-70b": 68_976_648_192,
    "llama-3-8b": 8_030_261_248,
    "llama-3-70b": 70_553_706_496,
    "llama-3.1-8b": 8_030_261_248,
    "llama-3.1-70b": 70_553_706_496,
    "llama-3.1-405b": 405_853_388_800,
    "mistral-7b": 7_241_732_096,
    "mixtral-8x7b": 46_702_792_704,
    "qwen2.5-7b": 7_615_616_512,
    "phi-3-mini": 3_821_079_552,
    "gemma-2-9b": 9_241_705_984,
    "vit-b-16": 86_567_656,
    # torchvision.models.resnet50: "num_params": 25557032.
    "resnet-50": 25_557_032,
}
# Papers round: GPT-3 175.0B (Brown et al. 2020, Table 2.1), Chinchilla 70B (Hoffmann et al.
# 2022, Table 4).
PAPER_COUNTS = {"gpt3-175b": 175.0e9, "chinchilla-70b": 70e9}

ENTRIES = {entry.spec.name: entry for entry in preset_entries()}


def test_every_preset_has_a_published_count() -> None:
    assert set(ENTRIES) == set(EXACT_COUNTS) | set(PAPER_COUNTS)


@pytest.mark.parametrize("name", sorted(EXACT_COUNTS))
def test_preset_params_match_published_count_exactly(name: str) -> None:
    assert ENTRIES[name].spec.params == EXACT_COUNTS[name]


@pytest.mark.parametrize("name", sorted(PAPER_COUNTS))
def test_preset_params_match_paper_within_half_a_percent(name: str) -> None:
    assert ENTRIES[name].spec.params == pytest.approx(PAPER_COUNTS[name], rel=0.005)


@pytest.mark.parametrize("name", sorted(name for name, entry in ENTRIES.items() if entry.family))
def test_csv_params_agree_with_the_formula(name: str) -> None:
    entry = ENTRIES[name]
    assert count_params(entry.spec, FAMILIES[entry.family]) == pytest.approx(entry.spec.params, rel=0.005)


def test_mixtral_active_parameters_match_mistral_ai() -> None:
    # Mistral AI: "12.9B active parameters" per token (2 of 8 experts).
    assert ENTRIES["mixtral-8x7b"].spec.active_params == pytest.approx(12.9e9, rel=0.005)


def test_families_with_position_tables_and_classifier_heads() -> None:
    # roberta-base (RobertaModel, 514 positions with the padding offset): 124,645,632.
    roberta = ModelSpec(
        name="roberta-base",
        params=0,
        architecture="encoder",
        layers=12,
        hidden_size=768,
        heads=12,
        ffn_size=3072,
        vocab_size=50265,
        tied_embeddings=True,
        max_seq_len=512,
    )
    assert count_params(roberta, FAMILIES["roberta"]) == 124_645_632
    # google/vit-base-patch16-224-in21k (ViTModel with pooler, no classifier): 86,389,248.
    backbone = ModelSpec(
        name="vit-in21k",
        params=0,
        architecture="vision-transformer",
        layers=12,
        hidden_size=768,
        heads=12,
        ffn_size=3072,
        image_size=224,
        patch_size=16,
    )
    assert count_params(backbone, FAMILIES["vit-backbone"]) == 86_389_248


def test_untied_head_adds_a_vocabulary_matrix_for_decoders_only() -> None:
    decoder = ModelSpec(name="d", params=0, layers=1, hidden_size=8, heads=2, ffn_size=16, vocab_size=10)
    tied = count_params(replace(decoder, tied_embeddings=True), FAMILIES["llama"])
    assert count_params(decoder, FAMILIES["llama"]) - tied == 10 * 8
    assert count_params(replace(decoder, architecture="encoder"), FAMILIES["llama"]) == tied
