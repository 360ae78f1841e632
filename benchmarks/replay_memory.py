"""Replay the training ladder of ``validate_gpu.py`` on the CPU with storage-free tensors, as CUDA would
allocate it, and compare the peak with computewise's memory estimate.

Why
---
The memory estimator is checked against ``torch.cuda.max_memory_allocated()`` by
``benchmarks/validate_gpu.py`` when a GPU is lent. Without one, this replay runs the same models, the
same training step and the same ladder on the CPU, with tensors that have shapes, dtypes and
lifetimes but no storage, and counts the bytes the CUDA caching allocator would hand out.

Method
------
1. **Storage-free tensors.** Everything runs under ``torch._subclasses.fake_tensor.FakeTensorMode``:
   every op computes its outputs' shapes, dtypes and strides but touches no memory, so a 1.3B model at
   16 x 2048 tokens replays in seconds on a laptop. (Fake *CUDA* tensors cannot go through autograd
   in a CPU-only build of PyTorch, so the fake tensors live on the CPU and the CUDA kernels' memory
   behaviour is patched in, below.)
2. **Allocated bytes.** A ``TorchDispatchMode`` (``LiveBytes``) sees every op's outputs. Each new
   untyped storage is counted once, rounded up to 512 bytes as the CUDA caching allocator rounds
   every block (``kMinBlockSize``), and uncounted when the storage dies (a ``weakref.finalize`` on
   the storage: PyTorch keeps one Python object per storage for its whole life). The largest live
   sum since the reset is the replay's ``max_memory_allocated``. cuBLAS's workspaces, which no op
   returns, are added as CUDA allocates them: 32 MiB + 1 MiB (cuBLASLt) per thread that runs
   matmuls on Hopper, two threads in training (the forward's, autograd's), from the caching
   allocator and never freed (aten/src/ATen/cuda/CublasHandlePool.cpp). What the tracker cannot
   see: other scratch buffers kernels allocate internally and the caching allocator's occasional
   hand-out of a block up to 1 MiB larger than asked (``replay_allocator.py`` models those); so the
   replay reads a little low, never high.
3. **CUDA's kernels, not the CPU's**, where their memory differs:
   - attention: ``scaled_dot_product_attention`` becomes an autograd function with the memory of
     FlashAttention-2 (16-bit: keeps q, k, v, the output in (b, s, h, d) layout and an fp32
     log-sum-exp of b * h * s; backward allocates dq, dk, dv, an fp32 dq accumulator and the fp32
     softmax row sums; grouped KV heads are taken as they are) or of the memory-efficient kernel
     (fp32: log-sum-exp rows padded to 32; K and V repeated to every head by the model, as on
     CUDA). Attention dropout regenerates its mask from the Philox seed: no mask is stored;
   - dropout: ``native_dropout`` (what CUDA runs), whose mask is 1 byte per element, instead of the
     CPU's mask at the activation's dtype;
   - RMSNorm: the fused kernel CUDA runs (keeps the input and one fp32 rstd per row), instead of the
     CPU's composite that also keeps the normalised tensor.
   Everything else (autocast and its bf16 weight cache, the fp32 residual stream, checkpointing,
   cross-entropy on fp32-upcast logits, AdamW's fused step, ``zero_grad(set_to_none=True)``) is
   PyTorch's own code, unchanged.
4. **The step** is ``validate_gpu.measure_train``'s: forward under autocast (bf16) or not (fp32),
   loss, backward, fused AdamW, ``zero_grad(set_to_none=True)``; the peak is taken over steps 2 and
   3, after the optimizer states exist.
5. **The replay checks itself** (``--check``): a tiny model is run twice with *real* CPU tensors and
   the same patches, once under the profiler's allocator events (``profile_memory``: every
   allocation and free the CPU allocator makes, an independent record) and once under
   ``LiveBytes``; then under fake tensors. All three peaks must agree.

The estimate is ``estimate_train`` for one GPU, no parallelism, AdamW, flash attention, the
framework of ``--framework`` (default ``pytorch``, the layout this script runs); its allocated
figure (``memory.allocated_peak_bytes``: tensors only, no fragmentation, no CUDA context) is compared
with the replay's peak, its reserved figure is shown beside it.

Usage
-----
    python benchmarks/replay_memory.py                  # the 22-configuration training ladder
    python benchmarks/replay_memory.py --quick          # 3 configurations
    python benchmarks/replay_memory.py --check          # the replay against real CPU tensors first
    python benchmarks/replay_memory.py --json rows.json --markdown table.md
Exit status: 0 PASS (allocated error median <= 5 %, worst <= 10 %), 1 FAIL, 2 a failed --check.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import subprocess
import sys
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import torch
import torch.nn.functional as F
from torch import Tensor
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.weak import WeakIdKeyDictionary

sys.path.insert(0, str(Path(__file__).resolve().parent))
import validate_gpu as vg
from computewise.catalog import load_catalog
from computewise.estimate import Assumptions, estimate_train
from computewise.specs import Framework, Parallelism, TrainJob

BLOCK_BYTES = 512  # the CUDA caching allocator's smallest block; every block is a multiple of it
TRAINING_BLAS_WORKSPACE_BYTES = 2 * (32 + 1) * 2**20  # cuBLAS + cuBLASLt, two threads, sm90 (docstring)
GPU = "h100-sxm"  # the card the estimate is made for (capacity only; memory does not depend on it)
QUICK = ("gpt-125m s1024 b8 bf16 none", "llama-160m s2048 b16 bf16 full", "llama-400m s1024 b8 fp32 none")
# Tiny shapes for --check, small enough for real CPU tensors under the profiler.
CHECK_CONFIGS = (
    vg.Config(vg.CPU_SHAPES["gpt-125m"], "train", 64, 2, "fp32", "none"),
    vg.Config(vg.CPU_SHAPES["gpt-125m"], "train", 64, 2, "bf16", "full"),
    vg.Config(vg.CPU_SHAPES["llama-1.1b"], "train", 64, 2, "bf16", "none"),
    vg.Config(vg.CPU_SHAPES["llama-1.1b"], "train", 64, 2, "fp32", "full"),
)
# Checkpointing stashes the CPU generator's state (5,056 bytes) outside any op: the profiler sees it,
# the tracker does not, and on a GPU it is host memory anyway.
CHECK_TOLERANCE_BYTES = 2 * 5120


def rounded(nbytes: int) -> int:
    """A block as the CUDA caching allocator hands it out: a multiple of 512 bytes."""
    return -(-nbytes // BLOCK_BYTES) * BLOCK_BYTES


# --------------------------------------------------------------------------------------- tracking


class LiveBytes(TorchDispatchMode):  # type: ignore[no-untyped-call]  # torch leaves it untyped
    """Bytes of live tensor storages (each rounded to 512) and their peak; which phase the peak fell in."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.live_bytes = 0
        self.peak_bytes = 0
        self.phase = "setup"
        self.peak_phase = "setup"
        self._seen: WeakIdKeyDictionary = WeakIdKeyDictionary()

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        out = func(*args, **(kwargs or {}))
        for value in tree_leaves(out):
            if isinstance(value, Tensor):
                self._track(value)
        return out

    def _track(self, tensor: Tensor) -> None:
        storage = tensor.untyped_storage()
        if storage in self._seen:  # a view, or an in-place op's output
            return
        nbytes = rounded(storage.nbytes())
        self._seen[storage] = nbytes
        self.live_bytes += nbytes
        if self.live_bytes > self.peak_bytes:
            self.peak_bytes, self.peak_phase = self.live_bytes, self.phase
        weakref.finalize(storage, self._free, nbytes)

    def _free(self, nbytes: int) -> None:
        self.live_bytes -= nbytes

    def reset_peak(self) -> None:
        self.peak_bytes, self.peak_phase = self.live_bytes, self.phase

    def hold(self, nbytes: int) -> None:
        """Bytes allocated outside any op and never freed (cuBLAS's workspaces)."""
        self.live_bytes += nbytes
        self.peak_bytes = max(self.peak_bytes, self.live_bytes)


# ------------------------------------------------------------------------------- CUDA's kernels


class FusedAttention(torch.autograd.Function):
    """The memory of CUDA's fused attention: FlashAttention-2 for 16-bit inputs, memory-efficient for fp32.

    Outputs carry no numbers: this stands in for the kernel only where tensors have no storage (or in
    ``--check``, where only bytes are compared).
    """

    @staticmethod
    def forward(ctx: Any, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        b, heads, s, d = q.shape
        flash = q.dtype in (torch.float16, torch.bfloat16)
        lse_rows = s if flash else 32 * math.ceil(s / 32)
        out = q.new_empty((b, s, heads, d)).transpose(1, 2)  # (b, s, h, d) in memory, as both kernels write it
        lse = q.new_empty((b, heads, lse_rows), dtype=torch.float32)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.flash = flash
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        q, k, v, _out, lse = ctx.saved_tensors
        b, heads, s, d = q.shape
        row_sums = q.new_empty(lse.shape, dtype=torch.float32)  # softmax_d / delta
        accumulator = q.new_empty((b, s, heads, d), dtype=torch.float32) if ctx.flash else None
        dq = q.new_empty((b, s, heads, d)).transpose(1, 2)
        kv_heads = k.shape[1]
        if kv_heads != heads:  # flash computes dk, dv for every query head, then sums each group
            expanded = (q.new_empty((b, s, heads, d)), q.new_empty((b, s, heads, d)))
            dk = expanded[0].view(b, s, kv_heads, heads // kv_heads, d).sum(3).transpose(1, 2)
            dv = expanded[1].view(b, s, kv_heads, heads // kv_heads, d).sum(3).transpose(1, 2)
            del expanded
        else:
            dk = k.new_empty((b, s, kv_heads, d)).transpose(1, 2)
            dv = v.new_empty((b, s, kv_heads, d)).transpose(1, 2)
        del row_sums, accumulator
        return dq, dk, dv


def fused_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> Tensor:
    """``F.scaled_dot_product_attention`` as CUDA runs it; dropout is regenerated from a seed, not stored."""
    if attn_mask is not None:
        raise ValueError("the replay's fused attention takes no explicit mask (the ladder uses is_causal)")
    out: Tensor = FusedAttention.apply(query, key, value)  # type: ignore[no-untyped-call]
    return out


def native_dropout(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """``F.dropout`` as CUDA runs it: ``native_dropout``, which keeps a 1-byte mask for backward."""
    if not training or p == 0.0:
        return input
    out: Tensor = torch.ops.aten.native_dropout(input, p, True)[0]
    return out


class FusedRMSNorm(torch.autograd.Function):
    """CUDA's ``_fused_rms_norm``: keeps the input and one fp32 rstd per row."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, weight: Tensor) -> Tensor:
        rstd = x.new_empty((*x.shape[:-1], 1), dtype=torch.float32)
        ctx.save_for_backward(x, weight, rstd)
        return x.new_empty(x.shape, dtype=torch.promote_types(x.dtype, weight.dtype))

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor, Tensor]:
        x, weight, _rstd = ctx.saved_tensors
        return x.new_empty(x.shape), weight.new_empty(weight.shape)


def fused_rms_norm(
    input: Tensor, normalized_shape: Any, weight: Tensor | None = None, eps: float | None = None
) -> Tensor:
    if weight is None:
        raise ValueError("the replay's RMSNorm expects an elementwise weight, as the ladder's models have")
    out: Tensor = FusedRMSNorm.apply(input, weight)  # type: ignore[no-untyped-call]
    return out


def _native_gqa(q: Tensor) -> bool:
    return q.dtype in (torch.float16, torch.bfloat16)  # what a CUDA tensor of that dtype would get


@contextmanager
def cuda_kernels() -> Iterator[None]:
    """Swap in the memory behaviour of CUDA's kernels where the CPU's differ (see the module docstring)."""
    with (
        mock.patch.object(F, "scaled_dot_product_attention", fused_attention),
        mock.patch.object(F, "dropout", native_dropout),
        mock.patch.object(F, "rms_norm", fused_rms_norm),
        mock.patch.object(vg, "native_gqa_kernel", _native_gqa),
    ):
        yield


def _keep(tensor: Tensor, *args: Any, **kwargs: Any) -> Tensor:
    return tensor


@contextmanager
def no_init() -> Iterator[None]:
    """Skip weight initialisation: the values do not matter and fake tensors cannot draw random numbers."""
    names = ("kaiming_uniform_", "uniform_", "normal_", "ones_", "zeros_")
    kept: dict[str, Any] = dict.fromkeys(names, _keep)
    with mock.patch.multiple(torch.nn.init, **kept):
        yield


# ------------------------------------------------------------------------------------------ replay


@dataclass
class Replayed:
    allocated_bytes: int  # peak over steps 2.., rounded blocks, as max_memory_allocated
    peak_phase: str  # forward, backward or optimizer
    seconds: float


def train_steps(config: vg.Config, tracker: LiveBytes, steps: int = 3, reset: bool = True) -> None:
    """``validate_gpu.measure_train``'s step, ``steps`` times; the peak is reset after the first if ``reset``."""
    device = torch.device("cpu")
    with no_init():
        model = vg.build(config.shape, device)
    model.recompute = config.recompute == "full"
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    tokens = torch.zeros((config.batch, config.seq + 1), dtype=torch.long)
    ids, targets = tokens[:, :-1], tokens[:, 1:]
    for step in range(steps):
        tracker.phase = "forward"
        with vg._autocast(device, config.precision):
            loss = model(ids, targets)
        tracker.phase = "backward"
        loss.backward()
        del loss
        tracker.phase = "optimizer"
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step == 0 and reset:
            tracker.reset_peak()


def replay(config: vg.Config, steps: int = 3) -> Replayed:
    """Peak allocated bytes of the configuration's training steps, with fake tensors and CUDA's kernels."""
    began = time.perf_counter()
    tracker = LiveBytes()
    with FakeTensorMode(), tracker, cuda_kernels():
        tracker.hold(TRAINING_BLAS_WORKSPACE_BYTES)
        train_steps(config, tracker, steps)
    return Replayed(tracker.peak_bytes, tracker.peak_phase, time.perf_counter() - began)


# -------------------------------------------------------------------------------- self-check (real)


def profiler_peak_bytes(run: Callable[[], None]) -> int:
    """Peak of the CPU allocator's own allocation record (the profiler's memory events), rounded as CUDA would."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        run()
    events = sorted(
        ((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"),
        key=lambda pair: pair[0],
    )
    live = peak = 0
    for _, nbytes in events:
        live += rounded(nbytes) if nbytes > 0 else -rounded(-nbytes)
        peak = max(peak, live)
    return peak


@dataclass
class Check:
    name: str
    profiler_bytes: int  # real tensors, the allocator's record
    tracker_real_bytes: int  # real tensors, LiveBytes
    tracker_fake_bytes: int  # fake tensors, LiveBytes (the replay)


def check(config: vg.Config) -> Check:
    """One tiny configuration three ways; whole steps (peak over all of them, setup included)."""
    real = LiveBytes()
    with real, cuda_kernels():
        train_steps(config, real, steps=2, reset=False)

    def run() -> None:
        with cuda_kernels():
            train_steps(config, LiveBytes(), steps=2, reset=False)  # an inert tracker, not on the mode stack

    profiled = profiler_peak_bytes(run)
    fake = LiveBytes()
    with FakeTensorMode(), fake, cuda_kernels():
        train_steps(config, fake, steps=2, reset=False)
    return Check(config.name, profiled, real.peak_bytes, fake.peak_bytes)


# ---------------------------------------------------------------------------------------- estimate


@dataclass
class Row:
    name: str
    params: int
    precision: str
    recompute: str
    replay_allocated_bytes: int
    estimated_allocated_bytes: float
    estimated_reserved_bytes: float  # as max_memory_reserved: allocated plus fragmentation, no CUDA context
    error: float  # (estimated allocated - replay) / replay
    peak_phase: str
    seconds: float


def estimate_row(config: vg.Config, replayed: Replayed, framework: Framework) -> Row:
    catalog = load_catalog()
    assumptions = Assumptions.from_catalog(catalog)
    job = TrainJob(
        tokens=float(config.batch * config.seq),
        seq_len=config.seq,
        micro_batch=config.batch,
        global_batch=config.batch,
        precision=config.precision,
        optimizer="adamw",
        recompute=config.recompute,
        attention="flash",
        framework=framework,
    )
    spec = vg.model_spec(config.shape)
    estimate = estimate_train(spec, catalog.accelerator(GPU), 1, job, Parallelism(), catalog, assumptions)
    memory = estimate.to_dict()["memory"]
    allocated = float(memory["allocated_peak_bytes"])
    return Row(
        name=config.name,
        params=spec.params,
        precision=config.precision,
        recompute=config.recompute,
        replay_allocated_bytes=replayed.allocated_bytes,
        estimated_allocated_bytes=allocated,
        estimated_reserved_bytes=float(memory["reserved_peak_bytes"]),
        error=(allocated - replayed.allocated_bytes) / replayed.allocated_bytes,
        peak_phase=replayed.peak_phase,
        seconds=replayed.seconds,
    )


def configs(quick: bool, only: str | None) -> list[vg.Config]:
    ladder = [c for c in vg.ladder("cuda") if c.kind == "train"]
    if quick:
        ladder = [c for c in ladder if c.name in QUICK]
    if only:
        ladder = [c for c in ladder if only in c.name]
    return ladder


def summary(rows: list[Row]) -> dict[str, Any]:
    errors = [abs(r.error) for r in rows]
    median, worst = statistics.median(errors), max(errors)
    return {
        "median_abs_error": median,
        "worst_abs_error": worst,
        "worst": max(rows, key=lambda r: abs(r.error)).name,
        "verdict": "PASS" if median <= vg.MEMORY_MEDIAN_TARGET and worst <= vg.MEMORY_WORST_TARGET else "FAIL",
    }


def cpu_model() -> str:
    try:
        done = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10, check=False)
    except OSError:
        return platform.processor() or platform.machine()
    for line in done.stdout.splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _gib(nbytes: float) -> str:
    return f"{nbytes / vg.GIB:.3f}"


def format_markdown(rows: list[Row], result: dict[str, Any], framework: str) -> str:
    lines = [
        f"Replayed on {cpu_model()} ({platform.machine()}), torch {torch.__version__}, "
        f"by `benchmarks/replay_memory.py` (estimate: `--framework {framework}`).",
        "",
        "| config | params | replay alloc GiB | est alloc GiB | alloc err % | est reserved GiB | peak in |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    lines += [
        f"| {r.name} | {vg._params(r.params)} | {_gib(r.replay_allocated_bytes)} | "
        f"{_gib(r.estimated_allocated_bytes)} | {r.error * 100:+.2f} | {_gib(r.estimated_reserved_bytes)} | "
        f"{r.peak_phase} |"
        for r in rows
    ]
    lines += [
        "",
        f"Allocated |error|: median {result['median_abs_error'] * 100:.2f} %, worst "
        f"{result['worst_abs_error'] * 100:.2f} % ({result['worst']}); target median <= "
        f"{vg.MEMORY_MEDIAN_TARGET:.0%}, worst <= {vg.MEMORY_WORST_TARGET:.0%}: {result['verdict']}.",
    ]
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help=f"only {len(QUICK)} configurations")
    parser.add_argument("--only", metavar="TEXT", help="only configurations whose name contains TEXT")
    parser.add_argument("--check", action="store_true", help="first check the replay against real CPU tensors")
    parser.add_argument("--framework", choices=("pytorch", "megatron"), default="pytorch")
    parser.add_argument("--json", type=Path, metavar="OUT", help="write every row and the summary as JSON")
    parser.add_argument("--markdown", type=Path, metavar="OUT", help="write a table for docs/ACCURACY.md")
    return parser.parse_args(argv)


def run_checks() -> bool:
    ok = True
    for config in CHECK_CONFIGS:
        c = check(config)
        agree = c.tracker_real_bytes == c.tracker_fake_bytes and (
            abs(c.profiler_bytes - c.tracker_real_bytes) <= CHECK_TOLERANCE_BYTES
        )
        ok &= agree
        print(
            f"check {c.name}: profiler {c.profiler_bytes:,} B, tracker (real) {c.tracker_real_bytes:,} B, "
            f"replay (fake) {c.tracker_fake_bytes:,} B: {'agree' if agree else 'DISAGREE'}",
            flush=True,
        )
    return ok


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.check and not run_checks():
        return 2
    chosen = configs(args.quick, args.only)
    if not chosen:
        print(f"no configuration name contains {args.only!r}", file=sys.stderr)
        return 2
    rows = []
    for i, config in enumerate(chosen, 1):
        replayed = replay(config)
        rows.append(estimate_row(config, replayed, args.framework))
        print(f"[{i}/{len(chosen)}] {config.name}: {replayed.seconds:.1f} s", file=sys.stderr, flush=True)
    result = summary(rows)
    table = format_markdown(rows, result, args.framework)
    print(table)
    if args.json:
        payload = {
            "environment": {"cpu": cpu_model(), "torch": torch.__version__, "framework": args.framework},
            "summary": result,
            "rows": [asdict(r) for r in rows],
        }
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
    if args.markdown:
        args.markdown.write_text(table)
    return 0 if result["verdict"] == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
