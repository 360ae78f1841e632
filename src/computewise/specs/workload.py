"""What the user wants to run: a training or inference job, and how it is laid out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = [
    "OPTIMIZERS",
    "PRECISIONS",
    "RECOMPUTES",
    "InferJob",
    "Optimizer",
    "Parallelism",
    "Precision",
    "Recompute",
    "TrainJob",
]

Precision = Literal["fp32", "bf16", "fp16", "fp8"]
PRECISIONS: tuple[Precision, ...] = ("fp32", "bf16", "fp16", "fp8")
Optimizer = Literal["adamw", "adam", "sgd", "adam8bit"]
OPTIMIZERS: tuple[Optimizer, ...] = ("adamw", "adam", "sgd", "adam8bit")
Recompute = Literal["none", "selective", "full"]
RECOMPUTES: tuple[Recompute, ...] = ("none", "selective", "full")


@dataclass(frozen=True)
class Parallelism:
    """Degrees of data, tensor and pipeline parallelism; gpus = dp * tp * pp.

    ``zero`` is the ZeRO stage over the data-parallel group (3 is FSDP's full sharding).
    ``sequence_parallel`` shards the activations outside attention over tp (Korthikanti et al.).
    """

    dp: int = 1
    tp: int = 1
    pp: int = 1
    zero: int = 0
    sequence_parallel: bool = False

    @property
    def gpus(self) -> int:
        return self.dp * self.tp * self.pp


@dataclass(frozen=True)
class TrainJob:
    tokens: float  # training tokens in total
    seq_len: int
    micro_batch: int  # sequences per device per micro-step
    global_batch: int  # sequences per optimizer step (across dp, with accumulation)
    precision: Precision = "bf16"
    optimizer: Optimizer = "adamw"
    recompute: Recompute = "none"
    flash_attention: bool = True


@dataclass(frozen=True)
class InferJob:
    batch: int  # concurrent sequences
    context_len: int  # prompt tokens
    output_len: int  # generated tokens
    precision: Precision = "bf16"
    kv_cache_bytes_per_value: float = 2.0  # fp16/bf16 cache; 1.0 for an fp8/int8 cache
