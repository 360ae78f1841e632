"""A LoRA fine-tuning of a tiny Hugging Face Llama built from a config: the reference workload of a rank search.

No download: ``transformers.LlamaConfig`` describes a 2-layer Llama 64 wide (k and v 32 wide, so a
rank of at most 32), initialised from a fixed seed. The data are counting sequences (each token the
previous plus a per-sample stride), a pattern a few adapter steps pick up; ``evaluate`` is the mean
loss over a fixed batch of the task, the quality ``computewise tune --lora-ranks`` compares ranks by.
The toy has only a few hundred distinct sequences, all seen in training, so it measures how far the
adapters learned the task, not how they generalise: a real setup evaluates on held-out data. Try it
from the repository root::

    computewise tune examples.tiny_llama_lora:setup --lora-ranks 2,8,32 --device cpu

``{"rank": 8, "targets": ["attention"]}`` in ``--config`` sets the adapters the setup asks for; a
rank search replaces the rank (keeping alpha / rank).
"""

from __future__ import annotations

from typing import Any

import peft  # noqa: F401 (imported here so the tuner's trial server loads it once, before forking trials)
import torch
import transformers

from computewise.specs.finetune import FineTune
from computewise.train.setup import TrainingSetup

DEFAULTS: dict[str, Any] = {
    "hidden": 64,
    "layers": 2,
    "vocab": 64,
    "sequence": 16,
    "samples": 256,
    "global_batch": 16,
    "lr": 1e-2,
    "method": "lora",
    "rank": 8,
    "alpha": 16.0,
    "targets": ["all-linear"],
    "seed": 0,
}
_STRIDES = (1, 2, 3)
_EVAL_SAMPLES = 48


def _sequences(settings: dict[str, Any], strides: tuple[int, ...], count: int) -> list[torch.Tensor]:
    vocab, length = int(settings["vocab"]), int(settings["sequence"])
    positions = torch.arange(length)
    return [(index + strides[index % len(strides)] * positions) % vocab for index in range(count)]


def _loss(model: Any, batch: torch.Tensor) -> torch.Tensor:
    loss: torch.Tensor = model(input_ids=batch, labels=batch).loss
    return loss


def setup(config: dict[str, Any] | None = None) -> TrainingSetup:
    """The tiny Llama, its counting data and a LoRA fine-tune as ``config`` asks (DEFAULTS otherwise)."""
    settings = {**DEFAULTS, **(config or {})}
    hidden = int(settings["hidden"])
    model_config = transformers.LlamaConfig(
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=int(settings["layers"]),
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=int(settings["vocab"]),
        max_position_embeddings=int(settings["sequence"]),
        tie_word_embeddings=False,
    )
    torch.manual_seed(int(settings["seed"]))
    model = transformers.LlamaForCausalLM(model_config)
    fixed_batch = torch.stack(_sequences(settings, _STRIDES, _EVAL_SAMPLES))

    @torch.no_grad()
    def evaluate(trained: Any) -> float:
        was_training = trained.training
        trained.eval()
        loss = float(_loss(trained, fixed_batch.to(next(trained.parameters()).device)))
        trained.train(was_training)
        return loss

    return TrainingSetup(
        model=model,
        loss=_loss,
        dataset=_sequences(settings, _STRIDES, int(settings["samples"])),
        global_batch_size=int(settings["global_batch"]),
        make_optimizer=lambda params, fused: torch.optim.AdamW(params, lr=float(settings["lr"]), fused=fused),
        evaluate=evaluate,
        tokens_per_sample=int(settings["sequence"]),
        seed=int(settings["seed"]),
        finetune=FineTune(
            method=settings["method"],
            rank=int(settings["rank"]),
            alpha=float(settings["alpha"]),
            targets=tuple(settings["targets"]),
        ),
    )
