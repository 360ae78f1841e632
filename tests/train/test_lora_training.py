"""LoRA fine-tuning through PEFT: a tiny random-initialised Hugging Face Llama trained for real on the CPU.

The model is built from a config (no download). The counts are checked against the LoRA paper's
r x (in + out) per adapted layer and against PEFT's own count; the weights before and after say
what trained.
"""

from __future__ import annotations

from typing import Any

import pytest

from computewise.errors import ConfigError
from computewise.specs.finetune import FineTune
from computewise.train.config import TrainConfig
from computewise.train.data import make_loader
from computewise.train.engine import StepEngine
from computewise.train.fit import fit
from computewise.train.setup import TrainingSetup

torch = pytest.importorskip("torch")
pytest.importorskip("peft")
transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.torch

VOCAB, SEQ = 64, 16
# q and o: 64 -> 64; k and v: 64 -> 32 (2 KV heads of 16); gate and up: 64 -> 128; down: 128 -> 64.
ATTENTION_PER_RANK = 2 * ((64 + 64) * 2 + (64 + 32) * 2)
ALL_LINEAR_PER_RANK = ATTENTION_PER_RANK + 2 * 3 * (64 + 128)


def tiny_llama() -> Any:
    config = transformers.LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=VOCAB,
        max_position_embeddings=SEQ,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config)


def lm_loss(model: Any, batch: Any) -> Any:
    return model(input_ids=batch, labels=batch).loss


def setup_for(model: Any, finetune: FineTune) -> TrainingSetup:
    """Counting sequences (each token is the previous plus one): a pattern a few adapter steps pick up."""
    dataset = [(start + torch.arange(SEQ)) % VOCAB for start in range(64)]
    return TrainingSetup(
        model=model,
        loss=lm_loss,
        dataset=dataset,
        global_batch_size=16,
        make_optimizer=lambda params, fused: torch.optim.AdamW(params, lr=1e-2, fused=fused),
        tokens_per_sample=SEQ,
        finetune=finetune,
    )


def prepared(finetune: FineTune) -> StepEngine:
    return StepEngine.prepare(setup_for(tiny_llama(), finetune), TrainConfig(precision="fp32"), device="cpu")


def test_lora_trains_the_adapters_only_and_learns() -> None:
    model = tiny_llama()
    before = {name: value.detach().clone() for name, value in model.named_parameters()}
    lora = FineTune(method="lora", rank=4, alpha=8, targets=("attention",))
    result = fit(setup_for(model, lora), TrainConfig(precision="fp32"), max_steps=12, track=False)
    assert result.losses[-1] < result.losses[0] - 0.2, result.losses  # from ln(64): a uniform guess
    # PEFT adapted the user's model in place: q_proj.weight is now q_proj.base_layer.weight.
    after = {name: value.detach() for name, value in model.named_parameters()}
    base = {name.replace(".base_layer", ""): value for name, value in after.items() if "lora_" not in name}
    assert base.keys() == before.keys()
    for name, value in base.items():
        assert torch.equal(value, before[name]), name
        assert not value.requires_grad
    adapters = {name: value for name, value in after.items() if "lora_" in name}
    assert len(adapters) == 2 * 4 * 2  # A and B of q, k, v, o in 2 layers
    assert all(value.abs().sum() > 0 for name, value in adapters.items() if "lora_B" in name)  # B starts at zero


@pytest.mark.parametrize(
    ("targets", "per_rank"), [(("attention",), ATTENTION_PER_RANK), (("all-linear",), ALL_LINEAR_PER_RANK)]
)
def test_the_optimizer_holds_what_peft_trains(targets: tuple[str, ...], per_rank: int) -> None:
    engine = prepared(FineTune(method="lora", rank=8, targets=targets))
    in_optimizer = sum(p.numel() for group in engine.optimizer.param_groups for p in group["params"])
    trainable, _total = engine.raw_model.get_nb_trainable_parameters()
    assert in_optimizer == trainable == 8 * per_rank
    batches = make_loader(engine.setup, engine.config, engine.micro_batch_size, 0)
    engine.step([next(batches)])
    assert len(engine.optimizer.state) == len([p for group in engine.optimizer.param_groups for p in group["params"]])


def test_full_training_leaves_the_model_as_it_is() -> None:
    engine = prepared(FineTune())
    assert isinstance(engine.raw_model, transformers.LlamaForCausalLM)
    assert all(p.requires_grad for p in engine.raw_model.parameters())


def test_explicit_names_and_the_embeddings_trained_in_full() -> None:
    engine = prepared(FineTune(method="lora", rank=2, targets=("attention", "down_proj"), train_embeddings=True))
    trainable = {name for name, p in engine.raw_model.named_parameters() if p.requires_grad}
    assert any("down_proj.lora_A" in name for name in trainable)
    assert not any("gate_proj.lora_A" in name for name in trainable)
    assert any("embed_tokens.modules_to_save" in name for name in trainable)


@pytest.mark.parametrize(
    ("finetune", "message", "fix"),
    [
        (FineTune(method="lora", targets=("qkv",)), "LoRA cannot adapt this model", "down_proj, gate_proj"),
        (FineTune(method="lora", rank=40), "rank 40 is larger than layer", "at most 32"),
        (FineTune(method="lora", targets=("all-linear", "q_proj")), "mix all-linear", "all-linear alone"),
        (FineTune(method="qlora"), "loaded in 4 bits", "BitsAndBytesConfig"),
        (FineTune(method="lora", adapter_bytes=2), "base is not 16-bit (float32)", "torch_dtype=torch.bfloat16"),
    ],
)
def test_what_cannot_be_adapted_is_refused_with_the_fix(finetune: FineTune, message: str, fix: str) -> None:
    with pytest.raises(ConfigError) as refused:
        prepared(finetune)
    assert message in refused.value.message
    assert fix in (refused.value.hint or "")


def test_attention_names_the_familys_own_projections_and_trains_what_the_estimate_counts() -> None:
    """GPT-2 calls its attention projections c_attn and attn.c_proj, not q_proj..o_proj; a tied embedding
    trained in full stays one tensor. Both as ``models.lora`` counts them for the estimate."""
    from computewise.models.hf_config import from_hf_config
    from computewise.models.lora import lora_params
    from computewise.train.lora import adapt

    config = transformers.GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=VOCAB, n_positions=SEQ)
    finetune = FineTune(method="lora", rank=4, targets=("attention",), train_embeddings=True)
    adapted = adapt(transformers.GPT2LMHeadModel(config), finetune)
    trained = sum(p.numel() for p in adapted.parameters() if p.requires_grad)
    assert trained == lora_params(from_hf_config(config.to_dict()), finetune).trainable
    assert any("c_attn.lora_A" in name for name, _ in adapted.named_parameters())
