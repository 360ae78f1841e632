"""What the user wants to run: a training or inference job, and how it is laid out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from computewise import limits
from computewise.errors import InputError
from computewise.specs.finetune import FULL_TRAINING, FineTune
from computewise.units import check_range

__all__ = [
    "ATTENTION_KERNELS",
    "EXECUTIONS",
    "FP32_VALUED",
    "FRAMEWORKS",
    "GRAD_REDUCES",
    "LOSSES",
    "OPTIMIZERS",
    "PAGED_OPTIMIZERS",
    "PRECISIONS",
    "RECOMPUTES",
    "AttentionKernel",
    "Execution",
    "Framework",
    "GradReduce",
    "InferJob",
    "Loss",
    "Optimizer",
    "Parallelism",
    "Precision",
    "Recompute",
    "TrainJob",
]

# tf32 keeps every value in fp32 and runs the matmuls and convolutions on TF32 tensor cores (Ampere and
# later): torch.backends.cuda.matmul.allow_tf32, set_float32_matmul_precision("high"), the HF Trainer's
# --tf32; cuDNN's convolutions take it by default. fp32 is fp32 throughout.
Precision = Literal["fp32", "bf16", "fp16", "fp8", "tf32"]
PRECISIONS: tuple[Precision, ...] = ("fp32", "bf16", "fp16", "fp8", "tf32")
FP32_VALUED: tuple[Precision, ...] = ("fp32", "tf32")  # weights, gradients and activations 4 bytes wide
# The paged ones are bitsandbytes' (HF's paged_adamw_32bit, paged_adamw_8bit): their states live in CUDA
# unified memory, which the driver pages out to host RAM when the GPU runs short (QLoRA, section 3).
Optimizer = Literal["adamw", "adam", "sgd", "adam8bit", "paged-adamw", "paged-adam8bit"]
OPTIMIZERS: tuple[Optimizer, ...] = ("adamw", "adam", "sgd", "adam8bit", "paged-adamw", "paged-adam8bit")
PAGED_OPTIMIZERS: tuple[Optimizer, ...] = ("paged-adamw", "paged-adam8bit")
# selective is Megatron's (the attention core recomputed, Korthikanti et al. 2022); op-selective is
# PyTorch's op-level selective activation checkpointing as torchtitan runs it under FSDP (every other
# matmul's output and attention's output kept, everything else recomputed in the backward); dots is JAX's
# checkpoint_dots_with_no_batch_dims, MaxText's remat_policy minimal (every weight matmul's output kept,
# attention and the elementwise work recomputed).
Recompute = Literal["none", "selective", "full", "op-selective", "dots"]
RECOMPUTES: tuple[Recompute, ...] = ("none", "selective", "full", "op-selective", "dots")
# The code that runs the step, which decides what it holds and how many kernels it launches:
# Megatron-LM keeps activations at the training precision and fuses its elementwise kernels;
# PyTorch autocast (AMP) keeps the residual stream in fp32 and caches 16-bit weight copies;
# Hugging Face transformers is that autocast layout with its own modules (unfused norms and
# rotary, separate q/k/v and gate/up projections, fp32 logits for the loss and in a prefill).
Framework = Literal["megatron", "pytorch", "transformers"]
FRAMEWORKS: tuple[Framework, ...] = ("megatron", "pytorch", "transformers")
# How the kernels are issued: one by one from Python (eager), by torch.compile's generated code
# (fused elementwise kernels, a cheaper launch), or replayed from a captured CUDA graph.
Execution = Literal["eager", "compile", "cuda-graphs"]
EXECUTIONS: tuple[Execution, ...] = ("eager", "compile", "cuda-graphs")
# The attention kernel: none fused (the score matrix materialised), FlashAttention-2's CUDA kernels
# (what PyTorch's SDPA, flash-attn and Megatron run), FlashAttention written in Triton (llm-foundry's
# attn_impl triton, ALiBi through a bias), or the first FlashAttention (flash-attn 1.x, and xformers'
# memory-efficient attention with its backward, as LLaMA trained in 2023). The fused kernels hold the
# same memory; the older and the Triton ones run slower.
AttentionKernel = Literal["unfused", "flash", "triton", "flash-v1"]
ATTENTION_KERNELS: tuple[AttentionKernel, ...] = ("unfused", "flash", "triton", "flash-v1")
# The cross entropy over the vocabulary: the framework's own (PyTorch's ``cross_entropy`` on fp32
# logits, Megatron's vocabulary-parallel one computed in place), or one fused kernel on the 16-bit
# logits that writes their gradient in a single pass (flash-attn's ``CrossEntropyLoss``, the default
# ``loss_fn`` of llm-foundry), which holds no fp32 copy of the logits. Under torch.compile the
# framework's own is compiled with the model that computes it (nanoGPT's and Hugging Face's forward take
# the labels); ``eager`` is PyTorch's ``cross_entropy`` called on a compiled model's logits, outside
# its graph (a training loop's own loss function), which moves all of eager's bytes.
Loss = Literal["standard", "fused", "eager"]
LOSSES: tuple[Loss, ...] = ("standard", "fused", "eager")
# The width gradients are reduced over data parallelism in: auto is the framework's default (Megatron
# accumulates and reduces an fp32 buffer under bf16 and fp8, a 16-bit one under fp16; PyTorch autocast
# reduces its fp32 gradients); 16-bit is NVIDIA's performance recipes' choice (grad_reduce_in_fp32
# False), whose Megatron buffer is 16-bit too, and FSDP's reduce_dtype=bfloat16.
GradReduce = Literal["auto", "fp32", "16-bit"]
GRAD_REDUCES: tuple[GradReduce, ...] = ("auto", "fp32", "16-bit")


@dataclass(frozen=True)
class Parallelism:
    """Degrees of data, tensor, pipeline and context parallelism; gpus = dp * tp * pp * cp.

    ``zero`` is the ZeRO stage over the data-parallel group (3 is FSDP's full sharding); ``zero_group``
    > 0 shards over groups of that many of the dp*cp ranks instead, replicated across groups whose
    gradients are all-reduced between them (hybrid sharding: PyTorch FSDP's HYBRID_SHARD over a node's
    GPUs, MaxText's FSDP over a TPU slice with data parallelism across slices); 0 is all of them.
    ``tp_overlap`` hides the tensor-parallel all-gathers and reduce-scatters behind the GEMMs they feed,
    a chunk at a time (Transformer Engine's userbuffers, Megatron's ``--tp-comm-overlap``).
    ``sequence_parallel`` shards the activations outside attention over tp (Korthikanti et al.).
    ``cp`` splits every sequence over ranks (ring attention); ``ep`` spreads the experts of an MoE
    layer over that many of the dp*cp ranks (it adds no GPUs). ``virtual_stages`` > 1 is
    Megatron's interleaved 1F1B schedule with that many model chunks per pipeline rank.
    """

    dp: int = 1
    tp: int = 1
    pp: int = 1
    zero: int = 0
    sequence_parallel: bool = False
    cp: int = 1
    ep: int = 1
    virtual_stages: int = 1
    zero_group: int = 0
    tp_overlap: bool = False

    @property
    def gpus(self) -> int:
        return self.dp * self.tp * self.pp * self.cp


@dataclass(frozen=True)
class TrainJob:
    tokens: float  # training tokens in total
    seq_len: int
    micro_batch: int  # sequences per device per micro-step
    global_batch: int  # sequences per optimizer step (across dp, with accumulation)
    precision: Precision = "bf16"
    optimizer: Optimizer = "adamw"
    recompute: Recompute = "none"
    attention: AttentionKernel = "flash"
    framework: Framework = "pytorch"
    execution: Execution = "eager"
    finetune: FineTune = FULL_TRAINING  # or LoRA/QLoRA adapters on a frozen base
    loss: Loss = "standard"
    grad_reduce: GradReduce = "auto"

    @property
    def flash_attention(self) -> bool:
        """Fused attention of either kind: the score matrix is never stored."""
        return self.attention != "unfused"

    def __post_init__(self) -> None:
        """A job the library is handed directly is held to the CLI's ranges: no 30-digit cost from ``tokens=1e30``."""
        check_range(self.tokens, "tokens", limits.TOKENS)
        check_range(self.seq_len, "seq_len", limits.SEQUENCE_TOKENS)
        check_range(self.micro_batch, "micro_batch", limits.MICRO_BATCH)
        check_range(self.global_batch, "global_batch", limits.BATCH)
        if self.grad_reduce == "16-bit" and self.precision in FP32_VALUED:
            raise InputError(
                f"a 16-bit gradient reduce needs 16-bit training, and {self.precision} keeps every value in fp32",
                "train in bf16, fp16 or fp8 (--precision), or reduce in fp32 (--grad-reduce auto)",
            )


@dataclass(frozen=True)
class InferJob:
    batch: int  # concurrent sequences
    context_len: int  # prompt tokens
    output_len: int  # generated tokens; 0 for an image or encoder model, which generates none
    precision: Precision = "bf16"
    kv_cache_bytes_per_value: float = 2.0  # fp16/bf16 cache; 1.0 for an fp8/int8 cache
    # pytorch: generate() keeps the last position's logits; transformers: a plain forward keeps all.
    framework: Framework = "pytorch"
    execution: Execution = "eager"

    def __post_init__(self) -> None:
        check_range(self.batch, "batch", limits.BATCH)
        check_range(self.context_len, "context_len", limits.SEQUENCE_TOKENS)
        if self.output_len:  # 0: a model that generates nothing (estimate.single.input_kind)
            check_range(self.output_len, "output_len", limits.SEQUENCE_TOKENS)
