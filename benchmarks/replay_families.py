"""Replay full training steps of Hugging Face decoders of several families on the CPU, as CUDA would
allocate them: memory checked on models the estimator was not fitted to.

Why
---
The estimator's Hugging Face memory was checked on ``LlamaForCausalLM`` (the measured ``hf-llama``
rows of the H100 run and their CPU replay). Users run other families, and each differs in what a
step keeps: GPT-2 and GPT-NeoX use LayerNorm with biases and GELU instead of RMSNorm and SwiGLU,
GPT-2 learns its position embeddings, GPT-NeoX runs attention and MLP in parallel with a partial
rotary embedding, Phi-3 fuses q/k/v and gate/up into one matrix each, Qwen2 has q/k/v biases, Gemma
scales its embeddings and ties its head, Falcon shares one KV head. A memory model that is right for
Llama only is fitted to a row, not to a principle (issue 26: "fit principles, not rows"). This script
runs each family's own ``*ForCausalLM`` from transformers, unchanged, through the same training step
as ``replay_allocator.hf_train`` (fp32 weights, bf16 autocast, fused AdamW, the loss over every
position), on storage-free tensors, and counts what CUDA's caching allocator would hand out.

Method
------
``replay_allocator.py``'s and ``replay_memory.py``'s, unchanged (their docstrings say it in full, with
what the replay cannot see): ``FakeTensorMode`` tensors, a ``TorchDispatchMode`` that counts each
storage until it dies, FlashAttention-2's memory for SDPA after CUDA autocast's cast to bf16, no
materialised causal mask (each family module's mask builders return None, so SDPA runs causal as on
CUDA), CUDA's dropout (a 1-byte mask), ``torch.pow`` in fp32 as CUDA's autocast runs it, cuBLAS's two
workspaces per training thread, and the caching allocator's placement rules.
Four steps; the peaks are reset before the third, after the optimizer states exist.

The configs are ~100-200M-parameter members of each family (a real checkpoint's shape scaled down:
the same ratios of hidden, MLP and head sizes), small enough to replay in about a minute each on two
cores. No constant of the estimator is fitted to these rows; ``tests/estimate/test_family_replay.py``
holds every row to issue 26's targets (allocated within 10 %, median within 5 %; reserved median
within 10 %).

Usage
-----
    python benchmarks/replay_families.py                # every configuration, writes data/family_replay.json
    python benchmarks/replay_families.py --only gpt2    # configurations whose name contains "gpt2"
Exit status: 0, or 2 when ``--only`` matches nothing.
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import json
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import torch
import torch.nn.functional as F
from torch import Tensor
from torch._subclasses.fake_tensor import FakeTensorMode

sys.path.insert(0, str(Path(__file__).resolve().parent))
import replay_allocator as ra
import replay_memory as rp

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "data" / "family_replay.json"
STEPS = 4
RESET_BEFORE = 2  # the peaks are reset before this step (0-based): the optimizer states exist
SIZES = ((4, 1024),)  # (micro-batch, sequence length): one of the hf-llama rows' sizes
_TORCH_POW = torch.pow
_MASK_BUILDERS = ("create_causal_mask", "create_sliding_window_causal_mask")

_GPT2_SMALL = {"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "vocab_size": 50257}
# config.json of each family's small member: the fields a user's checkpoint carries (model_type included),
# read by transformers' AutoConfig here and by computewise's ``from_hf_config`` in the test.
CONFIGS: dict[str, dict[str, Any]] = {
    "gpt2-124m": {**_GPT2_SMALL, "n_positions": 1024},
    # GPT-2 with transformers' two other activations composed of several ops (``memory.composite_activation_bytes``).
    "gpt2-124m-gelu-fast": {**_GPT2_SMALL, "activation_function": "gelu_fast"},
    "gpt2-124m-quick-gelu": {**_GPT2_SMALL, "activation_function": "quick_gelu"},
    "qwen2-150m": {
        "model_type": "qwen2",
        "hidden_size": 768,
        "intermediate_size": 2048,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "num_key_value_heads": 2,
        "vocab_size": 32000,
        "max_position_embeddings": 4096,
        "tie_word_embeddings": False,
    },
    "mistral-150m": {
        "model_type": "mistral",
        "hidden_size": 768,
        "intermediate_size": 2688,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "num_key_value_heads": 4,
        "vocab_size": 32000,
        "max_position_embeddings": 4096,
        "sliding_window": None,
        "tie_word_embeddings": False,
    },
    "phi3-150m": {
        "model_type": "phi3",
        "hidden_size": 768,
        "intermediate_size": 2048,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "num_key_value_heads": 12,
        "vocab_size": 32064,
        "max_position_embeddings": 4096,
        "original_max_position_embeddings": 4096,
        "resid_pdrop": 0.0,
        "embd_pdrop": 0.0,
        "attention_dropout": 0.0,
        "tie_word_embeddings": False,
        "pad_token_id": 0,
    },
    "gpt-neox-160m": {
        "model_type": "gpt_neox",
        "hidden_size": 768,
        "intermediate_size": 3072,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "vocab_size": 50304,
        "max_position_embeddings": 2048,
        "rotary_pct": 0.25,
        "use_parallel_residual": True,
        "hidden_dropout": 0.0,
        "attention_dropout": 0.0,
        "tie_word_embeddings": False,
    },
    "gemma-200m": {
        "model_type": "gemma",
        "hidden_size": 768,
        "intermediate_size": 6144,
        "num_hidden_layers": 8,
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "head_dim": 192,
        "vocab_size": 32000,
        "max_position_embeddings": 4096,
        "hidden_activation": "gelu_pytorch_tanh",
    },
}


@dataclass(frozen=True)
class Case:
    """One full training step's shape on one family's config."""

    model: str
    micro_batch: int
    seq_len: int
    checkpointing: bool

    @property
    def name(self) -> str:
        return f"{self.model} s{self.seq_len} b{self.micro_batch} {'ckpt' if self.checkpointing else 'none'}"


def hf_config(model: str) -> Any:
    from transformers import AutoConfig

    fields = dict(CONFIGS[model])
    config = AutoConfig.for_model(fields.pop("model_type"), **fields)
    config._attn_implementation = "sdpa"
    return config


def cuda_autocast_pow(input: Tensor, exponent: Any) -> Tensor:
    """``torch.pow`` as CUDA autocast runs it: in fp32 (CUDA's autocast lists pow among its fp32 ops, the
    CPU's does not), so a 16-bit input is cast first and the fp32 copy is what pow saves for backward."""
    if torch.is_autocast_enabled("cpu") and input.dtype in (torch.bfloat16, torch.float16):
        input = input.float()
    return _TORCH_POW(input, exponent)


@contextmanager
def family_on_cuda(model_module: str) -> Iterator[None]:
    """SDPA, dropout and pow as CUDA runs them and no materialised mask, in the family module that builds
    the model (GPT-2's ``gelu_new`` is pow, tanh and products in Python: ``cuda_autocast_pow``)."""
    module = importlib.import_module(model_module)
    with ExitStack() as stack:
        stack.enter_context(mock.patch.object(F, "scaled_dot_product_attention", ra.cuda_autocast_sdpa))
        stack.enter_context(mock.patch.object(F, "dropout", rp.native_dropout))
        stack.enter_context(mock.patch.object(torch, "pow", cuda_autocast_pow))
        stack.enter_context(rp.no_init())
        for builder in _MASK_BUILDERS:
            if hasattr(module, builder):
                stack.enter_context(mock.patch.object(module, builder, lambda **_: None))
        yield


def train_steps(case: Case, tracker: ra.AllocatorBytes) -> int:
    """``replay_allocator.hf_train``'s step on the family's model; returns its parameter count."""
    from transformers import AutoModelForCausalLM

    config = hf_config(case.model)
    # the mapping's annotation says a pair of classes; for a config it holds the one model class
    model_class: type[Any] = AutoModelForCausalLM._model_mapping[type(config)]  # type: ignore[assignment]
    with family_on_cuda(model_class.__module__):
        tracker.blas_workspaces(ra.TRAINING_THREADS)
        model = model_class(config)
        if case.checkpointing:
            model.gradient_checkpointing_enable()
        model.config.use_cache = False
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
        ids = torch.zeros((case.micro_batch, case.seq_len), dtype=torch.long)
        for step in range(STEPS):
            if step == RESET_BEFORE:
                tracker.reset_peak()
            with torch.autocast("cpu", dtype=torch.bfloat16):  # stands for CUDA's autocast
                loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            del loss
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        return sum(p.numel() for p in model.parameters())


@dataclass
class Row:
    """One replayed configuration with every input an estimate needs, and the replay's peaks."""

    name: str
    model: str
    config: dict[str, Any]  # the config.json fields, model_type included
    params: int
    micro_batch: int
    seq_len: int
    checkpointing: bool
    weights: str
    autocast: str
    optimizer: str
    attention: str
    allocated_peak_bytes: int  # as max_memory_allocated: whole blocks of the allocator model
    reserved_peak_bytes: int  # as max_memory_reserved: segments of the allocator model
    live_tensor_peak_bytes: int  # live storages rounded to 512 bytes, no allocator model
    seconds: float


def replay(case: Case) -> Row:
    began = time.perf_counter()
    tracker = ra.AllocatorBytes()
    with FakeTensorMode(), tracker:
        params = train_steps(case, tracker)
    return Row(
        name=case.name,
        model=case.model,
        config=CONFIGS[case.model],
        params=params,
        micro_batch=case.micro_batch,
        seq_len=case.seq_len,
        checkpointing=case.checkpointing,
        weights="fp32",
        autocast="bf16",
        optimizer="adamw (fused)",
        attention="flash (sdpa)",
        allocated_peak_bytes=tracker.allocator.peak_allocated,
        reserved_peak_bytes=tracker.allocator.peak_reserved,
        live_tensor_peak_bytes=tracker.peak_bytes,
        seconds=round(time.perf_counter() - began, 1),
    )


def cases() -> list[Case]:
    return [
        Case(model, batch, seq, checkpointing)
        for model, (batch, seq), checkpointing in itertools.product(CONFIGS, SIZES, (False, True))
    ]


def environment() -> dict[str, str]:
    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--only", metavar="TEXT", help="only configurations whose name contains TEXT")
    parser.add_argument("--json", type=Path, default=OUT, metavar="OUT", help=f"where to write the rows ({OUT.name})")
    args = parser.parse_args(argv)
    chosen = [c for c in cases() if not args.only or args.only in c.name]
    if not chosen:
        print(f"no configuration name contains {args.only!r}", file=sys.stderr)
        return 2
    # Rows already in the file are kept and replaced by name, so a run with --only updates its rows alone.
    rows = {r["name"]: r for r in json.loads(args.json.read_text())["rows"]} if args.json.exists() else {}
    order = {case.name: index for index, case in enumerate(cases())}
    print(f"{'configuration':32s} {'params':>13s} {'alloc GiB':>10s} {'reserved GiB':>13s}")
    for case in chosen:
        row = replay(case)
        rows[row.name] = asdict(row)
        print(
            f"{row.name:32s} {row.params:13,d} {row.allocated_peak_bytes / ra.GIB:10.3f} "
            f"{row.reserved_peak_bytes / ra.GIB:13.3f}  ({row.seconds:.0f} s)",
            flush=True,
        )
        ordered = sorted(rows.values(), key=lambda r: order.get(r["name"], len(order)))
        args.json.write_text(json.dumps({"environment": environment(), "rows": ordered}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
