"""Replay LoRA fine-tuning steps of Hugging Face Llama on the CPU, as CUDA would allocate them.

Why
---
A LoRA step's memory is not full training's minus the optimizer: the base weights are frozen at
their storage precision, the adapters train in fp32 beside them, and the frozen layers still save
what the adapters' gradients need, in dtypes set by PEFT's casts and autocast. The estimator's LoRA
memory must be checked within 5 % against a step as users run it. With no GPU lent, this script
runs exactly that step (transformers' ``LlamaForCausalLM``, PEFT's ``get_peft_model``, PyTorch's
autocast and AdamW, all unchanged) with storage-free tensors and counts the bytes CUDA would hand out.

Method
------
The machinery is ``replay_memory.py``'s and ``replay_allocator.py``'s (their docstrings say it in
full): ``FakeTensorMode`` tensors with shapes, dtypes and lifetimes but no storage; a
``TorchDispatchMode`` that counts each new storage (rounded to 512 bytes) until it dies; the CUDA
kernels' memory where the CPU's differs (FlashAttention-2's saved tensors after CUDA autocast's cast
to bf16, no materialised causal mask, ``native_dropout``'s 1-byte masks for a ``lora_dropout``);
cuBLAS's two workspaces per training thread; and the model of the caching allocator's placement
rules, whose peaks stand for ``max_memory_allocated`` and ``max_memory_reserved``.

The step is what a PEFT user runs: the model created in bf16 (``torch_dtype=torch.bfloat16``, as a
16-bit checkpoint loads), optionally ``gradient_checkpointing_enable(gradient_checkpointing_kwargs=
{"use_reentrant": False})`` with ``enable_input_require_grads()``; ``get_peft_model`` with
``LoraConfig(r, lora_alpha=2r, target_modules)`` (adapters in fp32, PEFT's
``autocast_adapter_dtype``); forward under bf16 autocast, the loss, backward, fused AdamW over the
trainable parameters only, ``zero_grad(set_to_none=True)``. Four steps; the peaks are reset before
the third, after the optimizer states exist (as ``hf-llama/measure.py`` measured the full-training
rows). Targets: ``attention`` (q, k, v, o projections, the LoRA paper's) and ``all-linear`` (PEFT's
``"all-linear"``: every linear layer of the blocks, not the LM head); ranks 8 and 64; the two Llama
configs of the measured ``hf-llama`` rows.

One adaptation to fake tensors: ``Module.to`` (PEFT moves each new adapter to its base layer's device
and dtype, then back to fp32) swaps a fake parameter with ``torch.utils.swap_tensors``, which refuses
any tensor with a weak reference; the replay assigns ``.data`` instead, which allocates the new
storage and frees the old one as the swap does.

``--check`` runs a tiny LoRA model with *real* CPU tensors, counted by the CPU allocator's own
record (the profiler's memory events) and by the tracker, then with fake tensors; the three peaks
must agree within ``CHECK_TOLERANCE_BYTES``. The tracker on fake tensors misses only the few
``torch.tensor`` constants of the model (RoPE's ``inv_freq``: 2 KiB), which fake mode lifts without an
op; the profiler also sees host-side bookkeeping no op returns (checkpointing's CPU RNG states among
it), 7-47 KiB on the tiny model whatever its batch, sequence or depth: host memory, never GPU memory.

What the replay cannot see
--------------------------
- Scratch memory kernels allocate inside themselves (cuBLAS beyond its workspaces, FlashAttention's
  split-KV buffers, NCCL): a real run may read slightly higher.
- The CUDA context, cuDNN/cuBLAS handles and the driver's own memory: outside
  ``max_memory_allocated``/``max_memory_reserved`` on a GPU too, so not part of these figures.
- CUDA-only code paths the CPU run does not take: a fused cross-entropy or RMSNorm from the
  ``kernels`` hub, Liger kernels, ``torch.compile``; the replay runs transformers' eager modules.
- Allocator settings other than the default (``expandable_segments``, ``max_split_size_mb``,
  garbage collection): the reserved figure is the default configuration's.
- Data loading, tokenisation and padding: the batch is ``micro_batch`` x ``seq_len`` token ids with
  every position a label, no padding mask.

QLoRA is not replayed: bitsandbytes' ``Linear4bit`` cannot be built under ``FakeTensorMode``. Its
weight, ``Params4bit``, is a ``torch.Tensor`` subclass made with ``Tensor._make_subclass`` from the
weight's data, and under fake mode that data is already a ``FakeTensor`` ("the raw Tensor object is
already associated to a python object of type FakeTensor", bitsandbytes 0.50.2, torch 2.13). Were it
built, a second obstacle would remain: bitsandbytes registers fake implementations of its 4-bit
ops, which return only the output, while the memory of a 4-bit matmul on CUDA is in what its kernel
does inside (for a training batch of more than 1536 rows, CUDA's ``gemm_4bit`` dequantizes the whole
weight to bf16, and the nested absmax to fp32, before ``F.linear``); that would have to be patched in
as FlashAttention's memory is.

Usage
-----
    python benchmarks/replay_lora.py                 # every configuration, writes data/lora_replay.json
    python benchmarks/replay_lora.py --only 160m     # configurations whose name contains "160m"
    python benchmarks/replay_lora.py --check         # the replay against real CPU tensors first
Exit status: 0, or 2 when ``--check`` disagrees or ``--only`` matches nothing.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
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
OUT = ROOT / "benchmarks" / "data" / "lora_replay.json"
MODELS = ("llama-160m", "llama-1b-gqa")  # the configs of the measured hf-llama rows
SIZES = ((4, 1024), (8, 2048))  # (micro-batch, sequence length), two of the hf-llama rows' sizes
RANKS = (8, 64)
# PEFT's target_modules for each named target set of ``specs.finetune.LORA_TARGET_SETS``.
TARGET_MODULES: dict[str, list[str] | str] = {
    "attention": ["q_proj", "k_proj", "v_proj", "o_proj"],
    "all-linear": "all-linear",
}
STEPS = 4
RESET_BEFORE = 2  # the peaks are reset before this step (0-based): the optimizer states exist
# A Llama small enough for real CPU tensors under the profiler, with grouped KV heads as llama-1b-gqa.
TINY: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 256,
    "max_position_embeddings": 256,
    "tie_word_embeddings": False,
}
CONFIG_FIELDS = (
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "vocab_size",
    "tie_word_embeddings",
)


@dataclass(frozen=True)
class Case:
    """One LoRA training step's shape; ``model`` names a config of ``hf-llama`` (or ``tiny``)."""

    model: str
    micro_batch: int
    seq_len: int
    checkpointing: bool
    targets: str
    rank: int
    lora_dropout: float = 0.0  # PEFT's default

    @property
    def name(self) -> str:
        checkpointing = "ckpt" if self.checkpointing else "none"
        return f"{self.model} s{self.seq_len} b{self.micro_batch} {checkpointing} {self.targets} r{self.rank}"


def hf_config(model: str) -> Any:
    """The measured rows' Llama config (``replay_allocator``'s), or the tiny one of ``--check``."""
    if model != "tiny":
        return ra._hf_config(model)
    from transformers import LlamaConfig

    config = LlamaConfig(**TINY)
    config._attn_implementation = "sdpa"
    return config


def _set_data(param: Tensor, applied: Tensor) -> None:
    param.data = applied.data


@contextmanager
def lora_on_cuda() -> Iterator[None]:
    """``replay_allocator.hf_on_cuda`` plus CUDA's dropout and ``Module.to`` on fake tensors (docstring)."""
    with (
        ra.hf_on_cuda(),
        mock.patch.object(F, "dropout", rp.native_dropout),
        mock.patch.object(torch.utils, "swap_tensors", _set_data),
    ):
        yield


def peft_model(case: Case) -> Any:
    """The base created in bf16, checkpointing as PEFT users enable it, then ``get_peft_model``."""
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaForCausalLM

    torch.set_default_dtype(torch.bfloat16)  # from_pretrained(torch_dtype=torch.bfloat16)
    try:
        model = LlamaForCausalLM(hf_config(case.model))
    finally:
        torch.set_default_dtype(torch.float32)
    model.config.use_cache = False
    if case.checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})  # type: ignore[no-untyped-call]
        model.enable_input_require_grads()  # type: ignore[no-untyped-call]
    lora = LoraConfig(
        r=case.rank,
        lora_alpha=2 * case.rank,
        target_modules=TARGET_MODULES[case.targets],
        lora_dropout=case.lora_dropout,
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, lora)


def lora_steps(case: Case, tracker: rp.LiveBytes, reset_before: int | None = RESET_BEFORE) -> tuple[int, int]:
    """``STEPS`` LoRA training steps; returns PEFT's (trainable, all) parameter counts."""
    model = peft_model(case)
    model.train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-4, fused=True)
    ids = torch.zeros((case.micro_batch, case.seq_len), dtype=torch.long)
    for step in range(STEPS):
        if step == reset_before:
            tracker.reset_peak()
        with torch.autocast("cpu", dtype=torch.bfloat16):  # stands for CUDA's autocast (hf_on_cuda)
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        del loss
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    counts: tuple[int, int] = model.get_nb_trainable_parameters()
    return counts


# ------------------------------------------------------------------------------------------- rows


@dataclass
class Row:
    """One replayed configuration with every input an estimate needs, and the replay's peaks."""

    name: str
    model: str
    model_config: dict[str, Any]  # the fields of the Hugging Face config that shape memory
    params: int  # base parameters plus adapters, as PEFT counts "all params"
    trainable_params: int  # PEFT's count
    rank: int
    lora_alpha: float
    lora_dropout: float
    targets: str
    target_modules: list[str] | str
    micro_batch: int
    seq_len: int
    checkpointing: bool
    base_dtype: str
    adapter_dtype: str
    autocast: str
    optimizer: str
    attention: str
    allocated_peak_bytes: int  # as max_memory_allocated: whole blocks of the allocator model
    reserved_peak_bytes: int  # as max_memory_reserved: segments of the allocator model
    live_tensor_peak_bytes: int  # live storages rounded to 512 bytes, no allocator model
    blas_workspace_bytes: int
    seconds: float


def replay(case: Case) -> Row:
    began = time.perf_counter()
    tracker = ra.AllocatorBytes()
    with FakeTensorMode(), tracker, lora_on_cuda():
        tracker.blas_workspaces(ra.TRAINING_THREADS)
        trainable, total = lora_steps(case, tracker)
    config = hf_config(case.model)
    return Row(
        name=case.name,
        model=case.model,
        model_config={field: getattr(config, field) for field in CONFIG_FIELDS},
        params=total,
        trainable_params=trainable,
        rank=case.rank,
        lora_alpha=2.0 * case.rank,
        lora_dropout=case.lora_dropout,
        targets=case.targets,
        target_modules=TARGET_MODULES[case.targets],
        micro_batch=case.micro_batch,
        seq_len=case.seq_len,
        checkpointing=case.checkpointing,
        base_dtype="bf16",
        adapter_dtype="fp32",
        autocast="bf16",
        optimizer="adamw (fused), trainable parameters only",
        attention="flash (sdpa)",
        allocated_peak_bytes=tracker.allocator.peak_allocated,
        reserved_peak_bytes=tracker.allocator.peak_reserved,
        live_tensor_peak_bytes=tracker.peak_bytes,
        blas_workspace_bytes=ra.TRAINING_THREADS * sum(ra.BLAS_WORKSPACES),
        seconds=round(time.perf_counter() - began, 1),
    )


def cases() -> list[Case]:
    return [
        Case(model, batch, seq, checkpointing, targets, rank)
        for model, (batch, seq), checkpointing, targets, rank in itertools.product(
            MODELS, SIZES, (False, True), TARGET_MODULES, RANKS
        )
    ]


# -------------------------------------------------------------------------------- self-check (real)

CHECK_CASES = (
    Case("tiny", 2, 64, False, "attention", 8),
    Case("tiny", 2, 64, True, "all-linear", 8, lora_dropout=0.05),
)


CHECK_TOLERANCE_BYTES = 64 * 1024  # the docstring: constants and host bookkeeping, not activations


def check(case: Case) -> rp.Check:
    """One tiny case three ways (profiler, tracker on real tensors, tracker on fake); whole steps."""
    real = rp.LiveBytes()
    with real, lora_on_cuda():
        lora_steps(case, real, reset_before=None)

    def run() -> None:
        with lora_on_cuda():
            lora_steps(case, rp.LiveBytes(), reset_before=None)  # an inert tracker, not on the mode stack

    profiled = rp.profiler_peak_bytes(run)
    fake = rp.LiveBytes()
    with FakeTensorMode(), fake, lora_on_cuda():
        lora_steps(case, fake, reset_before=None)
    return rp.Check(case.name, profiled, real.peak_bytes, fake.peak_bytes)


def run_checks() -> bool:
    ok = True
    for case in CHECK_CASES:
        c = check(case)
        agree = (
            abs(c.tracker_real_bytes - c.tracker_fake_bytes) <= CHECK_TOLERANCE_BYTES
            and abs(c.profiler_bytes - c.tracker_real_bytes) <= CHECK_TOLERANCE_BYTES
        )
        ok &= agree
        print(
            f"check {c.name}: profiler {c.profiler_bytes:,} B, tracker (real) {c.tracker_real_bytes:,} B, "
            f"replay (fake) {c.tracker_fake_bytes:,} B: {'agree' if agree else 'DISAGREE'}",
            flush=True,
        )
    return ok


def environment() -> dict[str, str]:
    import peft
    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--only", metavar="TEXT", help="only configurations whose name contains TEXT")
    parser.add_argument("--check", action="store_true", help="first check the replay against real CPU tensors")
    parser.add_argument("--json", type=Path, default=OUT, metavar="OUT", help=f"where to write the rows ({OUT.name})")
    args = parser.parse_args(argv)
    if args.check and not run_checks():
        return 2
    chosen = [c for c in cases() if not args.only or args.only in c.name]
    if not chosen:
        print(f"no configuration name contains {args.only!r}", file=sys.stderr)
        return 2
    # Rows already in the file are kept and replaced by name, so a run with --only updates its rows alone.
    rows = {r["name"]: r for r in json.loads(args.json.read_text())["rows"]} if args.json.exists() else {}
    order = {case.name: index for index, case in enumerate(cases())}
    print(f"{'configuration':44s} {'trainable':>11s} {'alloc GiB':>10s} {'reserved GiB':>13s}")
    for case in chosen:
        row = replay(case)
        rows[row.name] = asdict(row)
        print(
            f"{row.name:44s} {row.trainable_params:11,d} {row.allocated_peak_bytes / ra.GIB:10.3f} "
            f"{row.reserved_peak_bytes / ra.GIB:13.3f}  ({row.seconds:.0f} s)",
            flush=True,
        )
        ordered = sorted(rows.values(), key=lambda r: order.get(r["name"], len(order)))
        args.json.write_text(json.dumps({"environment": environment(), "rows": ordered}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
