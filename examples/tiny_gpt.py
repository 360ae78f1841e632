"""A GPT-style language model on synthetic tokens: the reference workload of ``computewise tune``.

The nanoGPT shape (token + position embeddings, pre-norm blocks of causal self-attention and an
MLP in an ``nn.ModuleList``, a head tied to the token embedding), small by default so a CPU trains
it in seconds; ``{"preset": "gpt2_124m"}`` builds GPT-2 124M from the same code for the GPU
benchmark. Try it from the repository root::

    computewise tune examples.tiny_gpt:setup --config '{"n_layer": 4}'

The tokens are synthetic but learnable: a fixed seed draws a small dictionary of "phrases"
(random token runs) and the stream is a random sequence of those phrases, so after a phrase's
first token the rest is predictable and the loss falls well below ln(vocab_size) within a few
dozen steps. Every sample is fixed by its index, which the exact-resume tests need.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from computewise.train.setup import TrainingSetup

DEFAULTS: dict[str, Any] = {
    "n_layer": 2,
    "n_head": 2,
    "n_embd": 64,
    "block_size": 64,
    "vocab_size": 512,
    "samples": 1024,
    "eval_samples": 64,
    "global_batch": 32,
    "dropout": 0.0,
    "lr": 3e-4,
    "weight_decay": 0.1,
    "warmup_steps": 0,
    "phrases": 64,
    "phrase_length": 8,
    "seed": 0,
}
# GPT-2 124M as nanoGPT trains it: 12 layers, 12 heads, 768 wide, 1024 context, the vocabulary
# padded from 50257 to 50304 (a multiple of 64, faster matmuls), global batch 0.5M tokens / 1024.
GPT2_124M: dict[str, Any] = {
    "n_layer": 12,
    "n_head": 12,
    "n_embd": 768,
    "block_size": 1024,
    "vocab_size": 50304,
    "samples": 2048,
    "global_batch": 512,
    "lr": 6e-4,
}
# The smallest that still trains: what the tuner's tests search over, in seconds per trial.
SMOKE: dict[str, Any] = {
    "n_layer": 1,
    "n_head": 2,
    "n_embd": 32,
    "block_size": 16,
    "vocab_size": 64,
    "samples": 64,
    "global_batch": 8,
}
PRESETS: dict[str, dict[str, Any]] = {"tiny": {}, "smoke": SMOKE, "gpt2_124m": GPT2_124M}
EVAL_CHUNK = 8


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention through PyTorch's fused ``scaled_dot_product_attention``."""

    def __init__(self, n_embd: int, n_head: int, dropout: float) -> None:
        super().__init__()
        if n_embd % n_head:
            raise ValueError(f"n_embd {n_embd} is not a multiple of n_head {n_head}")
        self.n_head = n_head
        self.dropout = dropout
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.resid_dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.c_attn(x).split(width, dim=2)
        q, k, v = (t.view(batch, length, self.n_head, width // self.n_head).transpose(1, 2) for t in (q, k, v))
        attended = F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True
        )
        projected: torch.Tensor = self.c_proj(attended.transpose(1, 2).contiguous().view(batch, length, width))
        return self.resid_dropout(projected)  # type: ignore[no-any-return]


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, n_embd: int, n_head: int, dropout: float) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, dropout)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(
            nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd), nn.Dropout(dropout)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        out: torch.Tensor = x + self.mlp(self.ln_2(x))
        return out


class TinyGPT(nn.Module):
    """Token ids (batch x length) -> next-token logits (batch x length x vocab)."""

    def __init__(self, n_layer: int, n_head: int, n_embd: int, block_size: int, vocab_size: int, dropout: float):
        super().__init__()
        self.block_size = block_size
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(Block(n_embd, n_head, dropout) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying, as GPT-2
        self.apply(self._init_weights)
        # GPT-2's scaled init of the projections that add into the residual stream.
        for name, parameter in self.named_parameters():
            if name.endswith(("attn.c_proj.weight", "mlp.2.weight")):
                nn.init.normal_(parameter, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(idx.shape[1], device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(positions))
        for block in self.blocks:
            x = block(x)
        logits: torch.Tensor = self.lm_head(self.ln_f(x))
        return logits


class SyntheticTokens(torch.utils.data.Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """``samples`` windows of ``block_size + 1`` tokens from a phrase stream; item i is always the same."""

    def __init__(
        self, samples: int, block_size: int, vocab_size: int, phrases: int, phrase_length: int, seed: int, stream: int
    ) -> None:
        # The phrase dictionary depends on ``seed`` only, so training and validation share the
        # language; ``stream`` picks which sentences of it this split draws.
        dictionary = torch.randint(vocab_size, (phrases, phrase_length), generator=torch.Generator().manual_seed(seed))
        total = samples * (block_size + 1)
        picks = torch.randint(
            phrases, (math.ceil(total / phrase_length),), generator=torch.Generator().manual_seed(seed * 7919 + stream)
        )
        self.windows = dictionary[picks].reshape(-1)[:total].reshape(samples, block_size + 1)

    def __len__(self) -> int:
        return int(self.windows.shape[0])

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        window = self.windows[index]
        return window[:-1], window[1:]


def lm_loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Mean next-token cross-entropy of one micro-batch."""
    inputs, targets = batch
    logits = model(inputs)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def adamw(lr: float, weight_decay: float) -> Any:
    """nanoGPT's AdamW: decay on matrices and embeddings only, betas (0.9, 0.95); fused on request."""

    def make(parameters: Iterable[nn.Parameter], fused: bool) -> torch.optim.Optimizer:
        params = [p for p in parameters if p.requires_grad]
        groups = [
            {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
        ]
        return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), fused=fused)

    return make


def settings(config: dict[str, Any]) -> dict[str, Any]:
    """DEFAULTS, then the preset's values, then the caller's; an unknown key is an error, not ignored."""
    preset = config.get("preset", "tiny")
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose one of {', '.join(PRESETS)}")
    unknown = sorted(set(config) - set(DEFAULTS) - {"preset"})
    if unknown:
        raise ValueError(f"unknown tiny_gpt setting(s) {', '.join(unknown)}; known: {', '.join(DEFAULTS)}")
    values = {**DEFAULTS, **PRESETS[preset], **config}
    values.pop("preset", None)
    return values


def setup(config: dict[str, Any]) -> TrainingSetup:
    """The training setup for ``config`` (see DEFAULTS and PRESETS)."""
    values = settings(config)
    seed = int(values["seed"])
    with torch.random.fork_rng(devices=[]):
        # A fixed initialization that leaves the caller's RNG stream untouched.
        torch.manual_seed(seed)
        model = TinyGPT(
            values["n_layer"],
            values["n_head"],
            values["n_embd"],
            values["block_size"],
            values["vocab_size"],
            values["dropout"],
        )
    data = {key: values[key] for key in ("block_size", "vocab_size", "phrases", "phrase_length")}
    train = SyntheticTokens(values["samples"], **data, seed=seed, stream=0)
    held_out = SyntheticTokens(values["eval_samples"], **data, seed=seed, stream=1)
    warmup_steps = int(values["warmup_steps"])

    def make_scheduler(optimizer: torch.optim.Optimizer) -> Any:
        return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / warmup_steps))

    def evaluate(trained: nn.Module) -> float:
        """Validation loss on the held-out windows, on the model's own device."""
        device = next(trained.parameters()).device
        was_training = trained.training
        trained.eval()
        total = 0.0
        with torch.no_grad():
            # In chunks: one batch of GPT-2-sized logits for every held-out window would not fit.
            for chunk in torch.split(held_out.windows.to(device), EVAL_CHUNK):
                total += float(lm_loss(trained, (chunk[:, :-1], chunk[:, 1:]))) * len(chunk)
        trained.train(was_training)
        return total / len(held_out)

    return TrainingSetup(
        model=model,
        loss=lm_loss,
        dataset=train,
        global_batch_size=int(values["global_batch"]),
        make_optimizer=adamw(float(values["lr"]), float(values["weight_decay"])),
        make_scheduler=make_scheduler if warmup_steps > 0 else None,
        evaluate=evaluate,
        tokens_per_sample=int(values["block_size"]),
        seed=seed,
    )
