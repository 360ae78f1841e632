"""Replay the measured H100 memory rows on the CPU through a model of PyTorch's CUDA caching allocator.

Why
---
``torch.cuda.max_memory_reserved`` (what an out-of-memory error is decided by) depends on where the
caching allocator places every block, not only on how many bytes are live. This script rebuilds the
allocation sequence of each memory row measured on a real H100 (``benchmarks/data/measured/
h100-2026-11-26``: the project's PyTorch ladder in ``validate.json`` and Hugging Face
``LlamaForCausalLM`` in ``hf-llama/truth.jsonl``) and runs it through a model of the allocator's
placement rules, so the estimator's reserved figure (``estimate/memory.py``,
``training_fragmentation_bytes`` and ``prefill_memory``'s fragmentation) can be checked against a
mechanism as well as against the measurements, and the mechanism against the measurements.

Method
------
1. **The allocation sequence.** As in ``replay_memory.py``: the measuring script's own code runs
   under ``FakeTensorMode`` with CUDA's kernels' memory patched in (FlashAttention's saved tensors,
   ``native_dropout``'s masks, the fused RMSNorm), and a ``TorchDispatchMode`` sees every new
   storage and, through a finalizer, its death. Hugging Face's modules run unchanged, with two
   CUDA behaviours restored: autocast casts ``scaled_dot_product_attention``'s inputs to 16 bits
   (a lower-precision op in CUDA's autocast lists), and the causal mask is ``None`` (transformers
   skips it for SDPA's ``is_causal`` when nothing is padded, but takes fake tensors for tracing).
   Two cuBLAS workspaces of 32 MiB + 1 MiB (sm90; one per thread issuing matmuls, created by the
   measuring process's first training step and never freed) are allocated first.
2. **The allocator** (``CachingAllocator``), after c10/cuda/CUDACachingAllocator.cpp with its
   default configuration (no expandable segments, no max_split_size, no garbage collection):
   a request is rounded up to 512 bytes; requests up to 1 MiB come from the small pool, larger ones
   from the large pool; the smallest free block of the pool that fits is taken (best fit, ties by
   address); a block is split when the remainder is at least 512 bytes (small pool) or more than
   1 MiB (large pool), else handed out whole; with no block, a segment is reserved: 2 MiB for a
   small request, 20 MiB for one under 10 MiB, else the request rounded up to 2 MiB; a freed
   block merges with free neighbours of its segment; segments are never released. Allocated bytes
   count whole blocks, so an unsplit remainder counts, as in ``max_memory_allocated``.
3. **The measuring scripts' sequences**: ``validate_gpu.measure_train`` (peak reset after the first
   step), ``hf-llama/measure.py`` training (peak reset before the third step) and inference (the
   model built in fp32 and cast to bf16, two forwards, the peak reset before the third). The
   ladder's three inference rows (``generate`` loops over a static cache) are not replayed.

The estimate is ``estimate_train`` / ``estimate_infer`` for one H100 with the row's framework.

Usage
-----
    python benchmarks/replay_allocator.py              # every row, about 2 minutes on 2 cores
    python benchmarks/replay_allocator.py --only hf    # rows whose name contains "hf"
    python benchmarks/replay_allocator.py --only prefill --bf16-weights  # prefills of a model loaded in bf16
    python benchmarks/replay_allocator.py --json rows.json
Exit status: 0 when the replay's reserved peaks are within 5 % of every measured one, else 1.
"""

from __future__ import annotations

import argparse
import bisect
import json
import statistics
import sys
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any
from unittest import mock

import torch
import torch.nn.functional as F
from torch import Tensor
from torch._subclasses.fake_tensor import FakeTensorMode

sys.path.insert(0, str(Path(__file__).resolve().parent))
import replay_memory as rp
import validate_gpu as vg
from computewise.catalog import load_catalog
from computewise.estimate import Assumptions, estimate_infer, estimate_train
from computewise.models.resolve import resolve_model
from computewise.specs import InferJob, ModelSpec, Parallelism, TrainJob

DATA = Path(__file__).resolve().parent / "data" / "measured" / "h100-2026-11-26"
GPU = "h100-sxm"
MIB = 2**20
GIB = 2**30
# aten/src/ATen/cuda/CublasHandlePool.cpp: cuBLAS workspace on sm90, then cuBLASLt's default.
BLAS_WORKSPACES = (32 * MIB, 1 * MIB)
TRAINING_THREADS = 2  # the caller's thread runs the forward, autograd's device thread the backward
REPLAY_WORST_TARGET = 0.05

# c10/cuda/CUDACachingAllocator.cpp constants
MIN_BLOCK = 512  # kMinBlockSize
SMALL_SIZE = MIB  # kSmallSize: largest request of the small pool
SMALL_BUFFER = 2 * MIB  # kSmallBuffer: a small pool segment
LARGE_BUFFER = 20 * MIB  # kLargeBuffer: the segment of a request between 1 and 10 MiB
MIN_LARGE_ALLOC = 10 * MIB  # kMinLargeAlloc
ROUND_LARGE = 2 * MIB  # kRoundLarge


# ------------------------------------------------------------------------------------- allocator


class Block:
    """A piece of a segment: free or handed out; ``prev``/``next`` are its neighbours in the segment."""

    __slots__ = ("free", "next", "prev", "ptr", "size", "small")

    def __init__(self, size: int, ptr: int, small: bool) -> None:
        self.size, self.ptr, self.small = size, ptr, small
        self.prev: Block | None = None
        self.next: Block | None = None
        self.free = True


def round_size(nbytes: int) -> int:
    """``round_size``: at least one 512-byte block, else a multiple of 512 bytes."""
    return MIN_BLOCK if nbytes < MIN_BLOCK else -(-nbytes // MIN_BLOCK) * MIN_BLOCK


def segment_size(nbytes: int) -> int:
    """``get_allocation_size``: the segment reserved for a request no free block can serve."""
    if nbytes <= SMALL_SIZE:
        return SMALL_BUFFER
    if nbytes < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return -(-nbytes // ROUND_LARGE) * ROUND_LARGE


class Pool:
    """Free blocks ordered by (size, address), as the allocator's ``BlockPool`` set."""

    def __init__(self) -> None:
        self._keys: list[tuple[int, int]] = []
        self._blocks: dict[tuple[int, int], Block] = {}

    def __len__(self) -> int:
        return len(self._keys)

    def add(self, block: Block) -> None:
        key = (block.size, block.ptr)
        bisect.insort(self._keys, key)
        self._blocks[key] = block

    def remove(self, block: Block) -> None:
        key = (block.size, block.ptr)
        del self._keys[bisect.bisect_left(self._keys, key)]
        del self._blocks[key]

    def best_fit(self, size: int) -> Block | None:
        """The smallest free block of at least ``size`` bytes, the lowest address among equals."""
        index = bisect.bisect_left(self._keys, (size, -1))
        return self._blocks[self._keys[index]] if index < len(self._keys) else None


class CachingAllocator:
    """The placement rules of PyTorch's CUDA caching allocator (module docstring), on one stream."""

    def __init__(self) -> None:
        self._pools = {small: Pool() for small in (True, False)}
        self._next_address = 0
        self.allocated = self.reserved = 0
        self.peak_allocated = self.peak_reserved = 0
        self.segments = 0

    def malloc(self, nbytes: int) -> Block:
        size = round_size(nbytes)
        small = size <= SMALL_SIZE
        pool = self._pools[small]
        found = pool.best_fit(size)
        if found is not None:
            block = found
            pool.remove(block)
        else:
            reserved = segment_size(size)
            block = Block(reserved, self._next_address, small)
            self._next_address += reserved + GIB  # segments are never adjacent
            self.reserved += reserved
            self.segments += 1
            self.peak_reserved = max(self.peak_reserved, self.reserved)
        remaining = block.size - size
        if remaining >= MIN_BLOCK if small else remaining > SMALL_SIZE:
            rest = Block(remaining, block.ptr + size, small)
            rest.prev, rest.next = block, block.next
            if block.next is not None:
                block.next.prev = rest
            block.next, block.size = rest, size
            pool.add(rest)
        block.free = False
        self.allocated += block.size
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        return block

    def free(self, block: Block) -> None:
        self.allocated -= block.size
        block.free = True
        pool = self._pools[block.small]
        before, after = block.prev, block.next
        if before is not None and before.free:
            pool.remove(before)
            block.ptr, block.size, block.prev = before.ptr, before.size + block.size, before.prev
            if before.prev is not None:
                before.prev.next = block
        if after is not None and after.free:
            pool.remove(after)
            block.size, block.next = block.size + after.size, after.next
            if after.next is not None:
                after.next.prev = block
        pool.add(block)

    def reset_peak(self) -> None:
        """``torch.cuda.reset_peak_memory_stats``: the peaks restart from what is held now."""
        self.peak_allocated, self.peak_reserved = self.allocated, self.reserved


class AllocatorBytes(rp.LiveBytes):  # type: ignore[no-untyped-call]  # torch leaves it untyped
    """``replay_memory.LiveBytes`` that also places every storage with ``CachingAllocator``."""

    def __init__(self) -> None:
        super().__init__()
        self.allocator = CachingAllocator()

    def _track(self, tensor: Tensor) -> None:
        storage = tensor.untyped_storage()
        if storage in self._seen:
            return
        super()._track(tensor)
        block = self.allocator.malloc(storage.nbytes())
        weakref.finalize(storage, self.allocator.free, block)

    def reset_peak(self) -> None:
        super().reset_peak()
        self.allocator.reset_peak()

    def blas_workspaces(self, threads: int) -> None:
        """cuBLAS's and cuBLASLt's workspaces of each thread: allocated once, never freed."""
        for _ in range(threads):
            for nbytes in BLAS_WORKSPACES:
                self.allocator.malloc(nbytes)


# -------------------------------------------------------------------------------- Hugging Face


def cuda_autocast_sdpa(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> Tensor:
    """FlashAttention's memory (``replay_memory.FusedAttention``) after CUDA autocast's cast to bf16."""
    if torch.is_autocast_enabled("cpu"):  # the replay's autocast stands for CUDA's
        query, key, value = (t.to(torch.bfloat16) for t in (query, key, value))
    return rp.fused_attention(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)


@contextmanager
def hf_on_cuda() -> Iterator[None]:
    """Hugging Face's Llama as it runs on the GPU: SDPA as CUDA runs it, no materialised causal mask."""
    with (
        mock.patch.object(F, "scaled_dot_product_attention", cuda_autocast_sdpa),
        mock.patch("transformers.models.llama.modeling_llama.create_causal_mask", lambda **_: None),
        rp.no_init(),
    ):
        yield


def _hf_config(name: str) -> Any:
    from transformers import LlamaConfig

    config = LlamaConfig.from_json_file(str(DATA / "hf-llama" / f"{name}.config.json"))
    config._attn_implementation = "sdpa"
    return config


def hf_train(name: str, batch: int, seq: int, recompute: bool, tracker: AllocatorBytes) -> None:
    """hf-llama/measure.py's training: 8 steps there, the peak reset before the third; 4 here."""
    from transformers import LlamaForCausalLM

    tracker.blas_workspaces(TRAINING_THREADS)
    model = LlamaForCausalLM(_hf_config(name))
    if recompute:
        model.gradient_checkpointing_enable()  # type: ignore[no-untyped-call]
    model.config.use_cache = False
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    ids = torch.zeros((batch, seq), dtype=torch.long)
    for step in range(4):
        if step == 2:
            tracker.reset_peak()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def hf_infer(name: str, batch: int, seq: int, fp32_build: bool, tracker: AllocatorBytes) -> None:
    """hf-llama/measure.py's inference: built in fp32 and cast to bf16 (unless not ``fp32_build``: created
    in bf16, as a 16-bit checkpoint loads), two forwards, then the measured one."""
    from transformers import LlamaForCausalLM

    tracker.blas_workspaces(TRAINING_THREADS)  # left by the training cases the same process ran first
    torch.set_default_dtype(torch.float32 if fp32_build else torch.bfloat16)
    try:
        model = LlamaForCausalLM(_hf_config(name))
    finally:
        torch.set_default_dtype(torch.float32)
    with torch.no_grad():
        for param in list(model.parameters()):  # Module.to(bfloat16): a new tensor each, the fp32 one freed
            param.data = param.data.to(torch.bfloat16)
    model.eval()  # type: ignore[no-untyped-call]
    ids = torch.zeros((batch, seq), dtype=torch.long)
    with torch.no_grad():
        for _ in range(2):
            out = model(input_ids=ids, use_cache=True)
            del out
        tracker.reset_peak()
        out = model(input_ids=ids, use_cache=True)
        del out


def ladder_train(config: vg.Config, tracker: AllocatorBytes) -> None:
    """validate_gpu.measure_train's steps: the peak reset after the first (``replay_memory.train_steps``)."""
    tracker.blas_workspaces(TRAINING_THREADS)
    rp.train_steps(config, tracker, steps=3)


# ------------------------------------------------------------------------------------------- rows


@dataclass
class Row:
    name: str
    measured_allocated_bytes: float
    measured_reserved_bytes: float
    replay_allocated_bytes: float
    replay_reserved_bytes: float
    estimated_allocated_bytes: float
    estimated_reserved_bytes: float

    def error(self, which: str, figure: str) -> float:
        measured = getattr(self, f"measured_{figure}_bytes")
        return float((getattr(self, f"{which}_{figure}_bytes") - measured) / measured)


@dataclass(frozen=True)
class Case:
    name: str
    run: Callable[[AllocatorBytes], None]
    patches: Callable[[], Any]
    estimate: Callable[[], dict[str, float]]
    allocated_bytes: float
    reserved_bytes: float


def _train_job(batch: int, seq: int, precision: Any, recompute: Any, framework: Any) -> TrainJob:
    return TrainJob(
        tokens=float(batch * seq),
        seq_len=seq,
        micro_batch=batch,
        global_batch=batch,
        precision=precision,
        recompute=recompute,
        attention="flash",
        framework=framework,
    )


def cases(fp32_build: bool = True) -> list[Case]:
    """Every measured memory row; ``fp32_build`` False creates the HF prefills' weights in bf16."""
    catalog = load_catalog()
    assumptions = Assumptions.from_catalog(catalog)
    h100 = catalog.accelerator(GPU)

    def train(spec: ModelSpec, job: TrainJob) -> Callable[[], dict[str, float]]:
        return lambda: estimate_train(spec, h100, 1, job, Parallelism(), catalog, assumptions).memory_per_device

    def infer(spec: ModelSpec, job: InferJob) -> Callable[[], dict[str, float]]:
        return lambda: estimate_infer(spec, h100, job, catalog, assumptions).memory_per_device

    found: list[Case] = []
    for line in (DATA / "hf-llama" / "truth.jsonl").read_text().splitlines():
        r = json.loads(line)
        spec = resolve_model(str(DATA / "hf-llama" / f"{r['model']}.config.json"))
        if r["kind"] == "train":
            b, s, full = r["micro_batch"], r["seq"], r["recompute"] == "full"
            job = _train_job(b, s, "bf16", r["recompute"], "transformers")
            found.append(
                Case(
                    f"hf {r['model']} s{s} b{b} {r['recompute']}",
                    partial(hf_train, r["model"], b, s, full),
                    hf_on_cuda,
                    train(spec, job),
                    r["peak_allocated"],
                    r["peak_reserved"],
                )
            )
        else:
            b, s = r["batch"], r["context"]
            job_i = InferJob(batch=b, context_len=s, output_len=1, framework="transformers")
            found.append(
                Case(
                    f"hf {r['model']} prefill p{s} b{b}",
                    partial(hf_infer, r["model"], b, s, fp32_build),
                    hf_on_cuda,
                    infer(spec, job_i),
                    r["peak_allocated"],
                    r["peak_reserved"],
                )
            )
    measured = {r["name"]: r for r in json.loads((DATA / "validate.json").read_text())["rows"]}
    for config in vg.ladder("cuda"):
        row = measured.get(config.name)
        if config.kind != "train" or row is None or row["status"] != "ok":
            continue
        job = _train_job(config.batch, config.seq, config.precision, config.recompute, "pytorch")
        found.append(
            Case(
                config.name,
                partial(ladder_train, config),
                rp.cuda_kernels,
                train(vg.model_spec(config.shape), job),
                row["allocated_bytes"],
                row["reserved_bytes"],
            )
        )
    return found


def replay(case: Case) -> Row:
    tracker = AllocatorBytes()
    with FakeTensorMode(), tracker, case.patches():
        case.run(tracker)
    memory = case.estimate()
    return Row(
        case.name,
        case.allocated_bytes,
        case.reserved_bytes,
        float(tracker.allocator.peak_allocated),
        float(tracker.allocator.peak_reserved),
        memory["allocated_peak"],
        memory["reserved_peak"],
    )


def summary(rows: list[Row]) -> list[str]:
    lines = []
    for which in ("replay", "estimated"):
        for figure in ("allocated", "reserved"):
            errors = [abs(r.error(which, figure)) for r in rows]
            lines.append(
                f"{which} {figure}: median {statistics.median(errors) * 100:.1f} %, "
                f"worst {max(errors) * 100:.1f} % over {len(rows)} rows"
            )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--only", metavar="TEXT", help="only rows whose name contains TEXT")
    parser.add_argument("--json", type=Path, metavar="OUT", help="write every row as JSON")
    parser.add_argument(
        "--bf16-weights",
        action="store_true",
        help="create the HF prefills' weights in bf16 (as a 16-bit checkpoint loads) instead of measure.py's "
        "fp32 build and cast, whose fp32 segments stay cached: the reserved peak a clean process would read",
    )
    args = parser.parse_args(argv)
    chosen = [c for c in cases(not args.bf16_weights) if not args.only or args.only in c.name]
    if not chosen:
        print(f"no row name contains {args.only!r}", file=sys.stderr)
        return 2
    rows = []
    print(f"{'row':36s} {'GiB: measured alloc / rsv':>26s} {'replay alloc / rsv':>24s} {'estimate alloc / rsv':>24s}")
    for case in chosen:
        r = replay(case)
        rows.append(r)
        print(
            f"{r.name:36s} {r.measured_allocated_bytes / GIB:12.3f} {r.measured_reserved_bytes / GIB:8.3f} "
            f"{r.replay_allocated_bytes / GIB:10.3f} {r.replay_reserved_bytes / GIB:8.3f} "
            f"({r.error('replay', 'reserved') * 100:+5.1f} %) "
            f"{r.estimated_allocated_bytes / GIB:8.3f} {r.estimated_reserved_bytes / GIB:8.3f} "
            f"({r.error('estimated', 'reserved') * 100:+5.1f} %)",
            flush=True,
        )
    for line in summary(rows):
        print(line)
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=2) + "\n")
    worst = max(abs(r.error("replay", "reserved")) for r in rows)
    return 0 if worst <= REPLAY_WORST_TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
