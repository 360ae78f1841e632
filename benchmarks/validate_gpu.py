"""Check the memory and step-time estimators against real training and inference runs on one GPU.

Method
------
A ladder of GPT- and Llama-shaped decoders (125M to 1.3B parameters) is built in plain PyTorch
below: token embedding (plus learned positions for GPT), pre-norm blocks (LayerNorm for GPT,
RMSNorm for Llama), fused QKV projection with grouped KV heads for Llama, attention through
``scaled_dot_product_attention(is_causal=True)`` restricted to the fused (flash / memory-efficient
/ cuDNN) kernels, a 4h GeLU MLP with dropout 0.1 for GPT or a SwiGLU MLP without dropout for
Llama, a final norm and an LM head (tied for GPT, untied for Llama). The loss is cross-entropy
on fp32-upcast logits. Configurations vary size, micro-batch, sequence length, precision (bf16
autocast over fp32 weights, or plain fp32) and recompute (none, or full: ``torch.utils.checkpoint``
around every block). A few inference configurations (bf16 weights, a static KV cache, a prefill
then N greedy decode steps) check the inference estimator.

For every configuration the matching ``ModelSpec`` (exact parameter count) goes through
``estimate_train`` (one GPU, no parallelism, AdamW, flash attention) or ``estimate_infer``:

- memory: the estimate's allocated peak (``memory.allocated_peak_bytes``: live tensors at the
  step's peak, no fragmentation, no CUDA context) against ``torch.cuda.max_memory_allocated()``
  over the steps after the first one (the optimizer states exist from step 2 on); its reserved peak
  (plus fragmentation) against ``max_memory_reserved()``, beside it. The estimate uses
  ``--framework pytorch`` (the default): PyTorch AMP keeps fp32 weights, fp32 gradients and 8
  bytes of Adam state per parameter, an fp32 residual stream and autocast's bf16 weight copies.
  ``benchmarks/replay_memory.py`` replays the same ladder on the CPU without a GPU.
- time: the median of the timed steps (CUDA events) after warm-up, against the estimate as every
  user gets it: the kernels the step launches, timed by the accelerator's catalog profile, with
  nothing fitted on these rows (an earlier version calibrated one utilization on one row, which
  the kernel model replaced). Inference latency is shown, not gated.

An out-of-memory configuration is recorded as such and compared with the estimate's "fits".

Targets (training and inference memory; training step time)
------------------------------------------------------------
memory error: median <= 5 %, worst <= 10 %; step-time error: median <= 15 %; and no OOM
where the estimate said it fits. Exit status: 0 PASS, 1 FAIL, 2 no CUDA device.

Usage
-----
    python benchmarks/validate_gpu.py                      # full ladder on the local GPU
    python benchmarks/validate_gpu.py --json rows.json --markdown table.md  # table for docs/ACCURACY.md
    python benchmarks/validate_gpu.py --quick              # 3 configurations
    python benchmarks/validate_gpu.py --gpu h100-pcie      # when the name is not detected
    python benchmarks/validate_gpu.py --device cpu --quick  # smoke run on tiny models: time only, nominal peak
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.checkpoint import checkpoint

from computewise.catalog import Catalog, load_catalog
from computewise.estimate import Assumptions, estimate_infer, estimate_train
from computewise.specs import Accelerator, InferJob, ModelSpec, Parallelism, TrainJob

GIB = 1024**3
MEMORY_MEDIAN_TARGET = 0.05
MEMORY_WORST_TARGET = 0.10
TIME_MEDIAN_TARGET = 0.15
NO_CUDA = "no CUDA device: run on a GPU machine, or --device cpu for a smoke run"
NO_MEMORY = "max_memory_allocated needs CUDA"
# Fused attention only: a silent fall-back to the math kernel would materialise the s^2 scores.
FUSED_ATTENTION = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION]

Family = Literal["gpt", "llama"]
Precision = Literal["bf16", "fp32"]
Recompute = Literal["none", "full"]


# ----------------------------------------------------------------------------------------- models


@dataclass(frozen=True)
class Shape:
    """A decoder's shape. GPT: LayerNorm, biases, learned positions, 4h GeLU MLP, tied head, dropout.
    Llama: RMSNorm, no biases, SwiGLU MLP, grouped KV heads, untied head, no dropout."""

    name: str
    family: Family
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    positions: int  # learned position rows (GPT) and the longest sequence either family runs

    @property
    def gated(self) -> bool:
        return self.family == "llama"

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def dropout(self) -> float:
        return 0.1 if self.family == "gpt" else 0.0


def param_count(shape: Shape) -> int:
    """Closed form of the parameters ``Decoder(shape)`` holds (tied head counted once)."""
    h, kv_dim = shape.hidden, shape.kv_heads * shape.head_dim
    gpt = shape.family == "gpt"
    norm = 2 * h if gpt else h
    attention = h * (h + 2 * kv_dim) + h * h + ((h + 2 * kv_dim) + h if gpt else 0)
    mlp = 3 * h * shape.ffn if shape.gated else 2 * h * shape.ffn + shape.ffn + h
    layer = attention + mlp + 2 * norm
    embeddings = shape.vocab * h * (1 if gpt else 2) + (shape.positions * h if gpt else 0)
    return shape.layers * layer + norm + embeddings


def model_spec(shape: Shape) -> ModelSpec:
    return ModelSpec(
        name=shape.name,
        params=param_count(shape),
        architecture="decoder",
        layers=shape.layers,
        hidden_size=shape.hidden,
        heads=shape.heads,
        kv_heads=shape.kv_heads,
        ffn_size=shape.ffn,
        vocab_size=shape.vocab,
        tied_embeddings=shape.family == "gpt",
        gated_ffn=shape.gated,
        max_seq_len=shape.positions,
        source="benchmarks/validate_gpu.py",
    )


KVCache = tuple[Tensor, Tensor]


def native_gqa_kernel(q: Tensor) -> bool:
    """Flash attention takes fewer KV heads than query heads as they are (CUDA, 16-bit); other kernels
    need K and V repeated to every head. A module function so the CPU replay can answer as CUDA would."""
    return q.is_cuda and q.dtype in (torch.float16, torch.bfloat16)


class Block(nn.Module):
    def __init__(self, shape: Shape) -> None:
        super().__init__()
        gpt = shape.family == "gpt"
        h, self.heads, self.kv_heads, self.head_dim = shape.hidden, shape.heads, shape.kv_heads, shape.head_dim
        self.norm1 = nn.LayerNorm(h) if gpt else nn.RMSNorm(h)
        self.norm2 = nn.LayerNorm(h) if gpt else nn.RMSNorm(h)
        self.qkv = nn.Linear(h, h + 2 * self.kv_heads * self.head_dim, bias=gpt)
        self.proj = nn.Linear(h, h, bias=gpt)
        self.gated = shape.gated
        # SwiGLU's gate and up projections are one matmul, so autocast casts the input once.
        self.up = nn.Linear(h, (2 if self.gated else 1) * shape.ffn, bias=gpt)
        self.down = nn.Linear(shape.ffn, h, bias=gpt)
        self.drop: nn.Module = nn.Dropout(shape.dropout) if shape.dropout else nn.Identity()
        self.attention_dropout = shape.dropout

    def attention(self, x: Tensor, cache: KVCache | None, pos: int) -> Tensor:
        b, s, _ = x.shape
        kv_dim = self.kv_heads * self.head_dim
        q, k, v = self.qkv(x).split([self.heads * self.head_dim, kv_dim, kv_dim], dim=-1)
        q = q.view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = k.view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        v = v.view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        if cache is not None:
            cache[0][:, :, pos : pos + s] = k
            cache[1][:, :, pos : pos + s] = v
            k, v = cache[0][:, :, : pos + s], cache[1][:, :, : pos + s]
        gqa = self.kv_heads != self.heads
        native_gqa = gqa and native_gqa_kernel(q)
        if gqa and not native_gqa:  # the memory-efficient and CPU kernels take equal head counts
            k = k.repeat_interleave(self.heads // self.kv_heads, dim=1)
            v = v.repeat_interleave(self.heads // self.kv_heads, dim=1)
        y = F.scaled_dot_product_attention(
            q,
            k,
            v,
            dropout_p=self.attention_dropout if self.training else 0.0,
            is_causal=s > 1,  # a single decode query attends to the whole cache
            enable_gqa=native_gqa,
        )
        # Fused kernels return (b, s, heads, d) memory, so this reshape is a view, not a copy.
        return self.drop(self.proj(y.transpose(1, 2).reshape(b, s, -1)))

    def mlp(self, x: Tensor) -> Tensor:
        if self.gated:
            gate, up = self.up(x).chunk(2, dim=-1)
            return self.down(F.silu(gate) * up)
        return self.drop(self.down(F.gelu(self.up(x), approximate="tanh")))

    def forward(self, x: Tensor, cache: KVCache | None = None, pos: int = 0) -> Tensor:
        x = x + self.attention(self.norm1(x), cache, pos)
        return x + self.mlp(self.norm2(x))


class Decoder(nn.Module):
    def __init__(self, shape: Shape) -> None:
        super().__init__()
        gpt = shape.family == "gpt"
        self.embed = nn.Embedding(shape.vocab, shape.hidden)
        self.positions = nn.Embedding(shape.positions, shape.hidden) if gpt else None
        self.drop: nn.Module = nn.Dropout(shape.dropout) if shape.dropout else nn.Identity()
        self.blocks = nn.ModuleList(Block(shape) for _ in range(shape.layers))
        self.norm = nn.LayerNorm(shape.hidden) if gpt else nn.RMSNorm(shape.hidden)
        self.head = nn.Linear(shape.hidden, shape.vocab, bias=False)
        if gpt:
            self.head.weight = self.embed.weight
        self.recompute = False

    def hidden_states(self, ids: Tensor, caches: list[KVCache] | None = None, pos: int = 0) -> Tensor:
        x = self.embed(ids)
        if self.positions is not None:
            x = x + self.positions(torch.arange(pos, pos + ids.shape[1], device=ids.device))
        x = self.drop(x)
        for i, block in enumerate(self.blocks):
            if self.recompute and self.training:
                x = checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x, None if caches is None else caches[i], pos)
        return self.norm(x)

    def forward(self, ids: Tensor, targets: Tensor) -> Tensor:
        logits = self.head(self.hidden_states(ids))
        return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())

    def next_token(self, ids: Tensor, caches: list[KVCache], pos: int) -> Tensor:
        logits = self.head(self.hidden_states(ids, caches, pos)[:, -1])
        return logits.float().argmax(dim=-1, keepdim=True)


def build(shape: Shape, device: torch.device | str) -> Decoder:
    with torch.device(device):
        return Decoder(shape)


def built_param_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())  # shared (tied) tensors are yielded once


# ----------------------------------------------------------------------------------------- ladder


@dataclass(frozen=True)
class Config:
    shape: Shape
    kind: Literal["train", "infer"]
    seq: int  # training sequence length, or the prompt length
    batch: int  # micro-batch, or concurrent sequences
    precision: Precision = "bf16"
    recompute: Recompute = "none"
    new_tokens: int = 0  # decode steps after the prefill
    key: str = ""  # the row's name in the GPU ladder, the same on the CPU (for --quick)

    @property
    def name(self) -> str:
        if self.kind == "infer":
            return f"{self.shape.name} infer p{self.seq}+{self.new_tokens} b{self.batch}"
        return f"{self.shape.name} s{self.seq} b{self.batch} {self.precision} {self.recompute}"


def _gpt(name: str, layers: int, hidden: int, heads: int, positions: int = 2048) -> Shape:
    return Shape(name, "gpt", layers, hidden, heads, heads, 4 * hidden, 50257, positions)


def _llama(name: str, layers: int, hidden: int, heads: int, kv: int, ffn: int, vocab: int = 32000) -> Shape:
    return Shape(name, "llama", layers, hidden, heads, kv, ffn, vocab, 4096)


# GPT-3 paper (Brown et al. 2020, Table 2.1) shapes with the GPT-2 vocabulary; TinyLlama-1.1B's shape.
GPU_SHAPES = {
    s.name: s
    for s in (
        _gpt("gpt-125m", 12, 768, 12),
        _gpt("gpt-350m", 24, 1024, 16),
        _gpt("gpt-760m", 24, 1536, 16),
        _gpt("gpt-1.3b", 24, 2048, 16),
        _llama("llama-160m", 12, 768, 12, 4, 2048),
        _llama("llama-400m", 24, 1024, 16, 8, 2816),
        _llama("llama-1.1b", 22, 2048, 32, 4, 5632),
    )
}
# The same ladder in miniature for the CPU smoke run (sequences 32 to 128).
CPU_SHAPES = {
    s.name: s
    for s in (
        Shape("gpt-125m", "gpt", 2, 64, 4, 4, 256, 512, 128),
        Shape("gpt-350m", "gpt", 2, 96, 4, 4, 384, 512, 128),
        Shape("gpt-760m", "gpt", 3, 128, 4, 4, 512, 512, 128),
        Shape("gpt-1.3b", "gpt", 4, 128, 4, 4, 512, 512, 128),
        Shape("llama-160m", "llama", 2, 64, 4, 2, 176, 512, 128),
        Shape("llama-400m", "llama", 2, 96, 4, 2, 256, 512, 128),
        Shape("llama-1.1b", "llama", 4, 128, 8, 2, 352, 512, 128),
    )
}

# (shape, seq, micro-batch, precision, recompute)
TRAIN_LADDER: list[tuple[str, int, int, Precision, Recompute]] = [
    ("gpt-125m", 1024, 8, "bf16", "none"),
    ("gpt-125m", 1024, 16, "bf16", "none"),
    ("gpt-125m", 2048, 8, "bf16", "full"),
    ("gpt-125m", 1024, 8, "fp32", "none"),
    ("gpt-350m", 1024, 8, "bf16", "none"),
    ("gpt-350m", 2048, 8, "bf16", "full"),
    ("gpt-350m", 1024, 4, "fp32", "full"),
    ("gpt-760m", 2048, 4, "bf16", "none"),
    ("gpt-760m", 2048, 8, "bf16", "full"),
    ("gpt-1.3b", 2048, 4, "bf16", "none"),
    ("gpt-1.3b", 2048, 8, "bf16", "full"),
    ("gpt-1.3b", 1024, 4, "fp32", "full"),
    ("llama-160m", 1024, 8, "bf16", "none"),
    ("llama-160m", 2048, 16, "bf16", "full"),
    ("llama-400m", 2048, 8, "bf16", "none"),
    ("llama-400m", 1024, 8, "fp32", "none"),
    ("llama-1.1b", 2048, 4, "bf16", "none"),
    ("llama-1.1b", 2048, 8, "bf16", "full"),
    ("llama-1.1b", 4096, 2, "bf16", "none"),
    ("llama-1.1b", 4096, 8, "bf16", "full"),
    ("llama-1.1b", 2048, 16, "bf16", "none"),  # near an 80 GB card's capacity
    ("gpt-1.3b", 2048, 16, "bf16", "none"),  # estimated not to fit 80 GB: checks the "fits" verdict
]
# (shape, prompt, batch, new tokens)
INFER_LADDER: list[tuple[str, int, int, int]] = [
    ("gpt-350m", 512, 8, 64),
    ("llama-1.1b", 1024, 16, 64),
    ("llama-1.1b", 2048, 1, 128),
]
QUICK = ("gpt-125m s1024 b8 bf16 none", "llama-160m s2048 b16 bf16 full", "llama-1.1b infer p2048+128 b1")


def ladder(device: str, quick: bool = False) -> list[Config]:
    """The configurations to run; the CPU ladder keeps every row, with tiny shapes, sequences / 32 and batches / 4."""
    cpu = device == "cpu"
    configs: list[Config] = []
    for name, seq, batch, precision, recompute in TRAIN_LADDER:
        gpu = Config(GPU_SHAPES[name], "train", seq, batch, precision, recompute)
        configs.append(replace(gpu, shape=CPU_SHAPES[name], seq=seq // 32, batch=max(batch // 4, 1)) if cpu else gpu)
    for name, prompt, batch, new in INFER_LADDER:
        gpu = Config(GPU_SHAPES[name], "infer", prompt, batch, new_tokens=new)
        tiny = replace(gpu, shape=CPU_SHAPES[name], seq=prompt // 32, batch=max(batch // 4, 1), new_tokens=16)
        configs.append(tiny if cpu else gpu)
    configs = [replace(c, key=gpu_name) for c, gpu_name in zip(configs, _gpu_names(), strict=True)]
    if quick:
        configs = [c for c in configs if c.key in QUICK]
    return configs


def _gpu_names() -> list[str]:
    train = [Config(GPU_SHAPES[n], "train", s, b, p, r).name for n, s, b, p, r in TRAIN_LADDER]
    return train + [Config(GPU_SHAPES[n], "infer", p, b, new_tokens=t).name for n, p, b, t in INFER_LADDER]


# ------------------------------------------------------------------------------------ measurement


@dataclass
class Measured:
    step_s: float | None = None  # training step, or a whole inference (prefill + decode)
    prefill_s: float | None = None
    decode_s_per_token: float | None = None
    allocated_bytes: float | None = None
    reserved_bytes: float | None = None
    status: str = "ok"  # "ok", "oom" or "error: ..."


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(fn: Callable[[], object], repeats: int, device: torch.device) -> list[float]:
    """Seconds per call: CUDA events on a GPU (no host sync between calls), a wall clock on the CPU."""
    if device.type == "cuda":
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(repeats)]  # type: ignore[no-untyped-call]
        for start, end in events:
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize(device)
        return [start.elapsed_time(end) / 1000.0 for start, end in events]
    seconds = []
    for _ in range(repeats):
        begin = time.perf_counter()
        fn()
        seconds.append(time.perf_counter() - begin)
    return seconds


def _autocast(device: torch.device, precision: Precision) -> AbstractContextManager[Any]:
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")


def _attention_kernels(device: torch.device) -> AbstractContextManager[Any]:
    if device.type == "cuda":
        return sdpa_kernel(FUSED_ATTENTION)
    return sdpa_kernel([*FUSED_ATTENTION, SDPBackend.MATH])  # CPU smoke: whatever runs


def _peak_memory(device: torch.device) -> tuple[float | None, float | None]:
    if device.type != "cuda":
        return None, None
    return float(torch.cuda.max_memory_allocated(device)), float(torch.cuda.max_memory_reserved(device))


def _reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def measure_train(config: Config, device: torch.device, warmup: int, steps: int) -> Measured:
    """Median step time and peak memory of forward + backward + AdamW, after ``warmup`` steps."""
    model = build(config.shape, device)
    model.recompute = config.recompute == "full"
    model.train()
    # Fused AdamW updates in place: no full-size temporaries that the estimator does not model.
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
    tokens = torch.randint(config.shape.vocab, (config.batch, config.seq + 1), device=device)
    ids, targets = tokens[:, :-1], tokens[:, 1:]

    def step() -> None:
        with _autocast(device, config.precision), _attention_kernels(device):
            loss = model(ids, targets)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()  # creates the optimizer states
    _synchronize(device)
    _reset_peak(device)
    for _ in range(max(warmup - 1, 0)):
        step()
    seconds = _timed(step, steps, device)
    allocated, reserved = _peak_memory(device)
    return Measured(step_s=statistics.median(seconds), allocated_bytes=allocated, reserved_bytes=reserved)


def measure_infer(config: Config, device: torch.device, warmup: int, repeats: int) -> Measured:
    """Prefill ``seq`` prompt tokens, then ``new_tokens`` greedy decode steps over a static KV cache."""
    shape = config.shape
    model = build(shape, device).to(torch.bfloat16).eval()
    prompt = torch.randint(shape.vocab, (config.batch, config.seq), device=device)
    _synchronize(device)
    _reset_peak(device)  # the bf16 weights count, their fp32 build does not
    cache_shape = (config.batch, shape.kv_heads, config.seq + config.new_tokens, shape.head_dim)
    caches = [
        (
            torch.zeros(cache_shape, dtype=torch.bfloat16, device=device),
            torch.zeros(cache_shape, dtype=torch.bfloat16, device=device),
        )
        for _ in range(shape.layers)
    ]

    @torch.inference_mode()
    def prefill() -> Tensor:
        return model.next_token(prompt, caches, 0)

    @torch.inference_mode()
    def generate() -> None:
        token = prefill()
        for i in range(config.new_tokens):
            token = model.next_token(token, caches, config.seq + i)

    with _attention_kernels(device):
        for _ in range(warmup):
            generate()
        _synchronize(device)
        total_s = statistics.median(_timed(generate, repeats, device))
        prefill_s = statistics.median(_timed(prefill, repeats, device))
    allocated, reserved = _peak_memory(device)
    return Measured(
        step_s=total_s,
        prefill_s=prefill_s,
        decode_s_per_token=(total_s - prefill_s) / max(config.new_tokens, 1),
        allocated_bytes=allocated,
        reserved_bytes=reserved,
    )


def measure(config: Config, device: torch.device, warmup: int, steps: int) -> Measured:
    """Run one configuration; an OOM or a missing kernel is a result, not a crash."""
    try:
        if config.kind == "train":
            return measure_train(config, device, warmup, steps)
        return measure_infer(config, device, max(warmup - 1, 1), max(steps // 2, 2))
    except torch.OutOfMemoryError:
        return Measured(status="oom")
    except RuntimeError as error:  # e.g. no fused attention kernel for this shape
        return Measured(status=f"error: {str(error).splitlines()[0][:120]}")


def release(device: torch.device) -> None:
    """Free what the last configuration left (an OOM's traceback held its tensors until now)."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


# ------------------------------------------------------------------------------------- estimation


@dataclass
class Row:
    name: str
    kind: str
    family: str
    params: int
    seq: int
    batch: int
    new_tokens: int
    precision: str
    recompute: str
    status: str
    estimated_bytes: float  # the estimate's allocated peak (no fragmentation, no CUDA context)
    estimated_tensor_bytes: float  # weights + gradients + optimizer + activations + KV cache, as if together
    estimated_breakdown_bytes: dict[str, float]
    estimated_fits: bool
    allocated_bytes: float | None
    reserved_bytes: float | None
    memory_error: float | None  # (estimated - allocated) / allocated
    reserved_error: float | None  # (estimated reserved peak - reserved) / reserved
    tensor_error: float | None  # (sum of the parts - allocated) / allocated
    memory_note: str
    estimated_s: float  # training step, or inference latency
    measured_s: float | None
    time_error: float | None
    model_flops: float  # per step (training) or per generation (inference)
    hardware_flops: float
    mfu: float | None  # measured: model FLOPs / (step time * peak)
    estimated_prefill_s: float | None = None
    measured_prefill_s: float | None = None
    estimated_decode_s_per_token: float | None = None
    measured_decode_s_per_token: float | None = None
    notes: list[str] = field(default_factory=list)


def _error(estimate: float, measured: float | None) -> float | None:
    return None if measured is None or measured <= 0 else (estimate - measured) / measured


def _estimate_row(
    config: Config,
    measured: Measured,
    accelerator: Accelerator,
    catalog: Catalog,
    assumptions: Assumptions,
) -> Row:
    spec = model_spec(config.shape)
    if config.kind == "train":
        job = TrainJob(
            tokens=float(config.batch * config.seq),  # one step
            seq_len=config.seq,
            micro_batch=config.batch,
            global_batch=config.batch,
            precision=config.precision,
            optimizer="adamw",
            recompute=config.recompute,
            attention="flash",
        )
        train = estimate_train(spec, accelerator, 1, job, Parallelism(), catalog, assumptions)
        data = train.to_dict()
        estimated_s = data["time"]["step_seconds"]
        flops, hardware_flops = data["compute"]["flops"], data["compute"]["hardware_flops"]
        memory, fits = train.memory_per_device, train.fits
        prefill = decode = None
        peak = accelerator.peak_flops_for(config.precision)
    else:
        job_i = InferJob(batch=config.batch, context_len=config.seq, output_len=config.new_tokens, precision="bf16")
        infer = estimate_infer(spec, accelerator, job_i, catalog, assumptions)
        data = infer.to_dict()
        estimated_s = data["time"]["seconds"]
        prefill, decode = data["time"]["time_to_first_token_seconds"], data["time"]["seconds_per_output_token"]
        flops = hardware_flops = data["compute"]["flops"]
        memory, fits = infer.memory_per_device, infer.fits
        peak = 0.0
    estimated = memory["allocated_peak"]  # live tensors at the step's peak: max_memory_allocated's figure
    reserved = memory["reserved_peak"]  # plus fragmentation: max_memory_reserved's figure
    tensors = sum(memory[k] for k in ("weights", "gradients", "optimizer_states", "activations", "kv_cache"))
    if measured.status == "oom":
        note = "OOM; estimate said " + ("it fits" if fits else "it does not fit")
    elif measured.allocated_bytes is None and measured.status == "ok":
        note = NO_MEMORY
    else:
        note = ""
    return Row(
        name=config.name,
        kind=config.kind,
        family=config.shape.family,
        params=spec.params,
        seq=config.seq,
        batch=config.batch,
        new_tokens=config.new_tokens,
        precision=config.precision,
        recompute=config.recompute if config.kind == "train" else "-",
        status=measured.status,
        estimated_bytes=estimated,
        estimated_tensor_bytes=tensors,
        estimated_breakdown_bytes=memory,
        estimated_fits=fits,
        allocated_bytes=measured.allocated_bytes,
        reserved_bytes=measured.reserved_bytes,
        memory_error=_error(estimated, measured.allocated_bytes),
        reserved_error=_error(reserved, measured.reserved_bytes),
        tensor_error=_error(tensors, measured.allocated_bytes),
        memory_note=note,
        estimated_s=estimated_s,
        measured_s=measured.step_s,
        time_error=_error(estimated_s, measured.step_s),
        model_flops=flops,
        hardware_flops=hardware_flops,
        mfu=flops / (measured.step_s * peak) if config.kind == "train" and measured.step_s else None,
        estimated_prefill_s=prefill,
        measured_prefill_s=measured.prefill_s,
        estimated_decode_s_per_token=decode,
        measured_decode_s_per_token=measured.decode_s_per_token,
    )


# ---------------------------------------------------------------------------------------- report


def _gib(value: float | None) -> str:
    return "n/a" if value is None else f"{value / GIB:.3g}"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 100:+.1f}"


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 1000:.1f}"


COLUMNS = (
    "config",
    "params",
    "seq",
    "mb",
    "prec",
    "recompute",
    "est GiB",
    "alloc GiB",
    "rsv GiB",
    "mem err %",
    "est ms",
    "meas ms",
    "time err %",
)


def _params(count: int) -> str:
    if count >= 1e9:
        return f"{count / 1e9:.2f}B"
    return f"{count / 1e6:.0f}M" if count >= 1e7 else f"{count / 1e6:.2f}M"


def _cells(row: Row) -> list[str]:
    seq = f"{row.seq}+{row.new_tokens}" if row.kind == "infer" else str(row.seq)
    if row.status == "oom":
        alloc = "OOM"
    elif row.status != "ok":
        alloc = "error"
    else:
        alloc = _gib(row.allocated_bytes)
    time_error = _pct(row.time_error)
    return [
        row.name,
        _params(row.params),
        seq,
        str(row.batch),
        row.precision,
        row.recompute,
        _gib(row.estimated_bytes),
        alloc,
        _gib(row.reserved_bytes),
        _pct(row.memory_error),
        _ms(row.estimated_s),
        _ms(row.measured_s),
        time_error,
    ]


def format_table(rows: list[Row]) -> str:
    table = [list(COLUMNS), *(_cells(r) for r in rows)]
    widths = [max(len(line[i]) for line in table) for i in range(len(COLUMNS))]
    lines = [
        "  ".join(
            cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(line, widths, strict=True))
        )
        for line in table
    ]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def format_markdown(rows: list[Row], summary: dict[str, Any], environment: dict[str, Any]) -> str:
    out = [
        f"Measured on {environment['device_name']} (driver {environment['driver']}, torch {environment['torch']}, "
        f"CUDA {environment['cuda']}), {environment['date']}, by `benchmarks/validate_gpu.py`.",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "|".join("---" if i < 2 else "---:" for i in range(len(COLUMNS))) + "|",
    ]
    out += ["| " + " | ".join(_cells(r)) + " |" for r in rows]
    out += ["", *(f"- {line}" for line in summary["lines"])]
    return "\n".join(out) + "\n"


def _abs(values: Iterator[float | None]) -> list[float]:
    return [abs(v) for v in values if v is not None]


def summarize(rows: list[Row], device: torch.device) -> dict[str, Any]:
    memory = _abs(r.memory_error for r in rows if r.status == "ok")
    reserved = _abs(r.reserved_error for r in rows if r.status == "ok")
    tensors = _abs(r.tensor_error for r in rows if r.status == "ok")
    times = _abs(r.time_error for r in rows if r.kind == "train" and r.status == "ok")
    latency = _abs(r.time_error for r in rows if r.kind == "infer" and r.status == "ok")
    ooms = [r for r in rows if r.status == "oom"]
    wrong_fits = [r.name for r in ooms if r.estimated_fits]
    errors = [r.name for r in rows if r.status.startswith("error")]

    def stat(values: list[float], pick: Callable[[list[float]], float]) -> float | None:
        return pick(values) if values else None

    result: dict[str, Any] = {
        "memory_median_abs_error": stat(memory, statistics.median),
        "memory_worst_abs_error": stat(memory, max),
        "reserved_median_abs_error": stat(reserved, statistics.median),
        "tensor_median_abs_error": stat(tensors, statistics.median),
        "time_median_abs_error": stat(times, statistics.median),
        "time_worst_abs_error": stat(times, max),
        "infer_latency_median_abs_error": stat(latency, statistics.median),
        "ooms": [r.name for r in ooms],
        "oom_but_estimated_fits": wrong_fits,
        "errors": errors,
        "targets": {
            "memory_median": MEMORY_MEDIAN_TARGET,
            "memory_worst": MEMORY_WORST_TARGET,
            "time_median": TIME_MEDIAN_TARGET,
        },
    }

    def show(value: float | None) -> str:
        return "n/a" if value is None else f"{value * 100:.1f} %"

    lines = [
        "memory |error| (estimated allocated peak vs max_memory_allocated): "
        f"median {show(result['memory_median_abs_error'])}, "
        f"worst {show(result['memory_worst_abs_error'])}; target median <= {MEMORY_MEDIAN_TARGET:.0%}, "
        f"worst <= {MEMORY_WORST_TARGET:.0%}",
        f"  estimated reserved peak vs max_memory_reserved: median {show(result['reserved_median_abs_error'])}; "
        f"sum of the parts (as if all peaked together) vs allocated: "
        f"median {show(result['tensor_median_abs_error'])}",
        "step time |error| (the kernel model, nothing fitted on these rows): "
        f"median {show(result['time_median_abs_error'])}, worst {show(result['time_worst_abs_error'])}; "
        f"target median <= {TIME_MEDIAN_TARGET:.0%}",
        "inference latency |error| (catalog assumptions, not gated): "
        f"median {show(result['infer_latency_median_abs_error'])}",
        f"OOM: {len(ooms)} ({', '.join(r.name for r in ooms) or 'none'}); "
        f"OOM although the estimate said it fits: {', '.join(wrong_fits) or 'none'}",
    ]
    if errors:
        lines.append(f"failed to run: {', '.join(errors)}")
    if device.type != "cuda":
        result["verdict"] = "n/a"
        lines.append(f"verdict: n/a (smoke run on the CPU; memory: {NO_MEMORY}; targets apply to GPU runs)")
    else:
        passed = (
            result["memory_median_abs_error"] is not None
            and result["memory_median_abs_error"] <= MEMORY_MEDIAN_TARGET
            and result["memory_worst_abs_error"] <= MEMORY_WORST_TARGET
            and result["time_median_abs_error"] is not None
            and result["time_median_abs_error"] <= TIME_MEDIAN_TARGET
            and not wrong_fits
            and not errors
        )
        result["verdict"] = "PASS" if passed else "FAIL"
        lines.append(f"verdict: {result['verdict']}")
    result["lines"] = lines
    return result


# ------------------------------------------------------------------------------------ environment


def _driver_version() -> str:
    nvidia_smi = shutil.which("nvidia-smi")
    if nvidia_smi is None:
        return "unknown"
    try:
        done = subprocess.run(
            [nvidia_smi, "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout.strip() else "unknown"


def pick_accelerator(catalog: Catalog, device: torch.device, override: str | None) -> Accelerator:
    if override:
        return catalog.accelerator(override)
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        accelerator = catalog.match_device(props.name, float(props.total_memory))
        if accelerator is None:
            raise SystemExit(
                f"unknown GPU {props.name!r}: pass --gpu SLUG (see `computewise catalog list accelerators`)"
            )
        return accelerator
    # Smoke run: a catalog CPU row (for its slug) with nominal figures (the times are not judged on the
    # CPU), and one device needs no link (a zero bandwidth would give 0/0).
    base = next(a for a in catalog.accelerators if a.kind == "cpu")
    return replace(
        base,
        name=f"host CPU, nominal figures (as {base.slug})",
        peak_flops={"fp32": 1e12, "bf16": 1e12},
        interconnect_bytes_per_s=base.interconnect_bytes_per_s or 1e10,
        source="nominal: benchmarks/validate_gpu.py --device cpu",
    )


def environment(device: torch.device, accelerator: Accelerator) -> dict[str, Any]:
    cuda = device.type == "cuda"
    return {
        "device": device.type,
        "device_name": torch.cuda.get_device_name(device)
        if cuda
        else f"CPU ({platform.machine()}, {os.cpu_count()} cores)",
        "driver": _driver_version() if cuda else "n/a",
        "torch": torch.__version__,
        "cuda": torch.version.cuda or "n/a",
        "python": platform.python_version(),
        "accelerator": accelerator.slug,
        "peak_flops": {k: v for k, v in accelerator.peak_flops.items() if k in ("fp32", "bf16")},
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
    }


# ------------------------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cpu: tiny models, time only")
    parser.add_argument("--gpu", metavar="SLUG", help="catalog accelerator to estimate for (default: detected)")
    parser.add_argument("--quick", action="store_true", help=f"only {len(QUICK)} configurations")
    parser.add_argument("--only", metavar="TEXT", help="only configurations whose name contains TEXT")
    parser.add_argument("--warmup", type=int, default=None, help="warm-up steps (default 3 on a GPU, 2 on the CPU)")
    parser.add_argument("--steps", type=int, default=None, help="timed steps (default 10 on a GPU, 3 on the CPU)")
    parser.add_argument("--json", type=Path, metavar="OUT", help="write every row and the summary as JSON")
    parser.add_argument("--markdown", type=Path, metavar="OUT", help="write a table for docs/ACCURACY.md")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print(NO_CUDA, file=sys.stderr)
        return 2
    device = torch.device(args.device)
    cpu = device.type == "cpu"
    warmup = args.warmup if args.warmup is not None else (2 if cpu else 3)
    steps = args.steps if args.steps is not None else (3 if cpu else 10)
    if warmup < 2 or steps < 1:
        print("--warmup must be >= 2 (optimizer states exist from step 2) and --steps >= 1", file=sys.stderr)
        return 2

    catalog = load_catalog()
    assumptions = Assumptions.from_catalog(catalog)
    accelerator = pick_accelerator(catalog, device, args.gpu)
    env = environment(device, accelerator)
    configs = ladder(args.device, args.quick)
    if args.only:
        configs = [c for c in configs if args.only in c.name]
        if not configs:
            print(f"no configuration name contains {args.only!r}", file=sys.stderr)
            return 2
    torch.manual_seed(0)
    print(
        f"{env['device_name']}  driver {env['driver']}  torch {env['torch']}  CUDA {env['cuda']}  "
        f"estimating for {accelerator.slug}",
        flush=True,
    )

    measured: list[Measured] = []
    for i, config in enumerate(configs, 1):
        began = time.perf_counter()
        result = measure(config, device, warmup, steps)
        release(device)
        measured.append(result)
        took = time.perf_counter() - began
        print(f"[{i}/{len(configs)}] {config.name}: {result.status}, {took:.1f} s", file=sys.stderr, flush=True)

    rows = [_estimate_row(c, m, accelerator, catalog, assumptions) for c, m in zip(configs, measured, strict=True)]
    summary = summarize(rows, device)

    print(format_table(rows))
    print()
    for line in summary["lines"]:
        print(line)
    if args.json:
        payload = {"environment": env, "summary": summary, "rows": [asdict(r) for r in rows]}
        args.json.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    if args.markdown:
        args.markdown.write_text(format_markdown(rows, summary, env))
    return 1 if summary["verdict"] == "FAIL" else 0


if __name__ == "__main__":
    sys.exit(main())
