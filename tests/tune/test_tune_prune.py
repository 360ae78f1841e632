"""Memory pruning before any trial: a meta-device trace of the real reference workloads, then the estimate."""

from __future__ import annotations

from dataclasses import replace

import pytest

pytest.importorskip("torch")

from computewise.catalog import Catalog
from computewise.errors import InputError, NothingFitsError
from computewise.estimate import Assumptions
from computewise.specs.finetune import FULL_TRAINING
from computewise.train.config import TrainConfig
from computewise.train.setup import load_setup
from computewise.tune.prune import Capacity, ModelProfile, estimate_memory, profile_setup, prune
from computewise.units import MIB

pytestmark = pytest.mark.torch

# Entry points resolve from the working directory, as the CLI resolves them (pytest runs from the repository root).
GPT = "examples.tiny_gpt:setup"
CNN = "examples.digits_cnn:setup"


@pytest.fixture(scope="module")
def gpt() -> ModelProfile:
    return profile_setup(load_setup(GPT))


@pytest.fixture(scope="module")
def cnn() -> ModelProfile:
    return profile_setup(load_setup(CNN))


@pytest.fixture(scope="module")
def assumptions(catalog: Catalog) -> Assumptions:
    return Assumptions.from_catalog(catalog)


def test_the_profile_of_a_transformer(gpt: ModelProfile) -> None:
    model = load_setup(GPT).model
    assert gpt.params == sum(p.numel() for p in model.parameters())  # the tied head counts once
    assert gpt.optimizer == "adamw" and gpt.tokens_per_sample == 64 and gpt.global_batch_size == 32
    assert gpt.facts.has_blocks and not gpt.facts.has_convolutions
    assert gpt.checkpointed_activation_bytes_per_sample is not None
    assert 0 < gpt.checkpointed_activation_bytes_per_sample < gpt.activation_bytes_per_sample
    # The logits and their cross-entropy alone save 64 x 512 x 4 bytes a sample: outside any block.
    assert gpt.checkpointed_activation_bytes_per_sample > 64 * 512 * 4
    # Forward FLOPs: at least 2 x parameters x tokens (the matmuls), plus attention.
    assert gpt.forward_flops_per_sample > 2 * gpt.params * 64


def test_the_profile_of_a_cnn(cnn: ModelProfile) -> None:
    assert cnn.has_convolutions and not cnn.facts.has_blocks
    assert cnn.checkpointed_activation_bytes_per_sample is None
    assert cnn.activation_bytes_per_sample > 0


def test_the_estimate_scales_with_the_micro_batch_and_precision(gpt: ModelProfile, assumptions: Assumptions) -> None:
    fp32_8 = estimate_memory(gpt, TrainConfig(precision="fp32", micro_batch_size=8), "cpu", assumptions)
    fp32_16 = estimate_memory(gpt, TrainConfig(precision="fp32", micro_batch_size=16), "cpu", assumptions)
    bf16_16 = estimate_memory(gpt, TrainConfig(precision="bf16", micro_batch_size=16), "cpu", assumptions)
    ckpt_16 = estimate_memory(
        gpt, TrainConfig(precision="fp32", micro_batch_size=16, activation_checkpointing=True), "cpu", assumptions
    )
    assert fp32_16.activations_bytes == pytest.approx(2 * fp32_8.activations_bytes)
    assert bf16_16.activations_bytes == pytest.approx(fp32_16.activations_bytes / 2)
    assert bf16_16.weights_bytes == pytest.approx(fp32_16.weights_bytes + 2 * gpt.params)  # the autocast copies
    assert ckpt_16.activations_bytes < fp32_16.activations_bytes
    # FP32 master weights, FP32 gradients and AdamW's two moments: 16 bytes a parameter before overhead.
    states = fp32_8.weights_bytes + fp32_8.gradients_bytes + fp32_8.optimizer_bytes
    assert states == pytest.approx(16 * gpt.params)
    on_gpu = estimate_memory(gpt, TrainConfig(precision="fp32", micro_batch_size=8), "cuda", assumptions)
    assert on_gpu.total_bytes - fp32_8.total_bytes == pytest.approx(assumptions.runtime_overhead_bytes)


def test_pruning_drops_what_does_not_fit_and_useless_checkpointing(gpt: ModelProfile, assumptions: Assumptions) -> None:
    configs = [
        TrainConfig(precision="fp32", micro_batch_size=micro, activation_checkpointing=ckpt)
        for micro in (8, 32)
        for ckpt in (False, True)
    ]
    big = estimate_memory(gpt, configs[2], "cpu", assumptions).total_bytes  # micro 32 without checkpointing
    big_ckpt = estimate_memory(gpt, configs[3], "cpu", assumptions).total_bytes
    capacity = Capacity((big + big_ckpt) / 2, "test")
    result = prune(configs, gpt, capacity, "cpu", assumptions)
    kept = [config for config, _ in result.kept]
    assert kept == [configs[0], configs[3]]  # micro 8 plain; micro 32 only fits checkpointed
    reasons = {config: reason for config, _, reason in result.dropped}
    assert reasons[configs[1]].startswith("checkpointing only recomputes")
    assert reasons[configs[2]].startswith("needs ")


def test_when_nothing_fits_the_error_names_the_need_and_the_largest_batch_that_fits(
    gpt: ModelProfile, assumptions: Assumptions
) -> None:
    configs = [TrainConfig(precision="fp32", micro_batch_size=32)]
    at_4 = estimate_memory(gpt, replace(configs[0], micro_batch_size=4), "cpu", assumptions).total_bytes
    with pytest.raises(NothingFitsError) as caught:
        prune(configs, gpt, Capacity(at_4 * 1.01, "--memory"), "cpu", assumptions)
    assert "every configuration of the search space runs out of memory" in caught.value.message
    assert "needs" in caught.value.message and "--memory" in caught.value.message
    assert "the largest micro-batch that would fit is 4" in (caught.value.hint or "")
    with pytest.raises(NothingFitsError) as tiny:
        prune(configs, gpt, Capacity(MIB, "--memory"), "cpu", assumptions)
    assert "even a micro-batch of 1 needs" in (tiny.value.hint or "")


def test_a_loss_that_cannot_be_traced_leaves_the_model_states_as_the_estimate(assumptions: Assumptions) -> None:
    import torch

    from computewise.train.setup import TrainingSetup

    def data_dependent_loss(model: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        inputs, targets = batch
        outputs = model(inputs)
        scale = 2.0 if outputs.abs().max().item() > 1e6 else 1.0  # .item(): a meta tensor has no value
        return torch.nn.functional.mse_loss(outputs * scale, targets)

    data = torch.utils.data.TensorDataset(torch.randn(8, 4), torch.randn(8, 1))
    setup = TrainingSetup(
        torch.nn.Linear(4, 1), data_dependent_loss, data, 4, lambda p, fused: torch.optim.SGD(p, lr=0.1)
    )
    profile = profile_setup(setup)
    assert profile.forward_flops_per_sample is None and profile.activation_bytes_per_sample == 0.0
    assert profile.optimizer == "sgd" and profile.params == 5
    assert any("could not be traced" in note for note in profile.notes)
    estimate = estimate_memory(profile, TrainConfig(precision="fp32", micro_batch_size=4), "cpu", assumptions)
    # FP32 weights and gradients (4 + 4 bytes) and SGD's momentum (4 bytes) per parameter.
    assert estimate.weights_bytes + estimate.gradients_bytes + estimate.optimizer_bytes == pytest.approx(12 * 5)


LLAMA_LORA = "examples.tiny_llama_lora:setup"  # a tiny Hugging Face Llama built from a config, fine-tuned with LoRA


@pytest.fixture(scope="module")
def llama_lora() -> ModelProfile:
    pytest.importorskip("peft")
    pytest.importorskip("transformers")
    return profile_setup(load_setup(LLAMA_LORA))


def test_a_lora_setup_is_costed_as_estimate_train_method_lora_counts_it(
    llama_lora: ModelProfile, assumptions: Assumptions
) -> None:
    """Frozen fp32 base, fp32 adapters with AdamW's two moments: Adapters.of on the model's own HF config."""
    from computewise.estimate.adapters import Adapters

    assert llama_lora.finetune.method == "lora" and llama_lora.spec is not None and llama_lora.base_bytes == 4
    adapters = Adapters.of(llama_lora.spec, llama_lora.finetune, "adamw")
    assert adapters is not None and llama_lora.adapters == adapters
    assert llama_lora.spec.params == llama_lora.params  # the config's count is the built model's
    estimate = estimate_memory(llama_lora, TrainConfig(precision="fp32", micro_batch_size=4), "cpu", assumptions)
    trained = adapters.trainable_params * 4
    assert estimate.gradients_bytes == trained and estimate.optimizer_bytes == 2 * trained
    assert estimate.weights_bytes == llama_lora.params * 4 + trained
    wider = estimate_memory(
        llama_lora.with_rank(32), TrainConfig(precision="fp32", micro_batch_size=4), "cpu", assumptions
    )
    assert wider.gradients_bytes == pytest.approx(4 * estimate.gradients_bytes)  # rank 8 -> 32: four times the adapters


def test_a_lora_trial_that_full_training_would_reject_is_kept(
    llama_lora: ModelProfile, assumptions: Assumptions
) -> None:
    """Before, every setup was costed as full FP32 training (16 bytes a parameter) and this one was pruned."""
    full = replace(llama_lora, finetune=FULL_TRAINING, spec=None, adapters=None)
    config = TrainConfig(precision="fp32", micro_batch_size=4)
    as_lora = estimate_memory(llama_lora, config, "cpu", assumptions).total_bytes
    as_full = estimate_memory(full, config, "cpu", assumptions).total_bytes
    capacity = Capacity((as_lora + as_full) / 2, "--memory")
    assert [kept for kept, _ in prune([config], llama_lora, capacity, "cpu", assumptions).kept] == [config]
    with pytest.raises(NothingFitsError):
        prune([config], full, capacity, "cpu", assumptions)


@pytest.mark.parametrize(
    ("rank", "message"), [(64, "LoRA rank 64 exceeds self_attn.k_proj"), (0, "rank 0 is out of range")]
)
def test_a_rank_the_model_cannot_take_is_refused_before_any_trial(
    llama_lora: ModelProfile, rank: int, message: str
) -> None:
    with pytest.raises(InputError) as caught:
        llama_lora.with_rank(rank)
    assert message in caught.value.message and caught.value.hint


def test_a_rank_search_needs_a_lora_setup(gpt: ModelProfile) -> None:
    with pytest.raises(InputError) as caught:
        gpt.with_rank(8)
    assert "method full" in caught.value.message and "--lora-ranks" in (caught.value.hint or "")
