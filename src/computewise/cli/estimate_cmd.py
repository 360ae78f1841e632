"""``computewise estimate train|infer``: one configuration, every number broken down."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from computewise.cli.common import (
    CatalogOption,
    FineTuneFlags,
    FlagGroup,
    HtmlOption,
    JsonOption,
    MethodOption,
    ModelOption,
    OptimizerOption,
    SeqLenOption,
    TokensOption,
    bounded_float,
    bounded_int,
    choice,
    emit,
    flag_groups,
    load,
    model,
    sequence_length,
)
from computewise.errors import InputError
from computewise.specs import (
    ATTENTION_KERNELS,
    EXECUTIONS,
    FRAMEWORKS,
    GRAD_REDUCES,
    LOSSES,
    OPTIMIZERS,
    PRECISIONS,
    PRICINGS,
    RECOMPUTES,
    AttentionKernel,
    Parallelism,
    Precision,
)
from computewise.units import parse_count, parse_positive_int

if TYPE_CHECKING:
    from computewise.estimate.quote import PriceRequest

app = typer.Typer(help="Estimate memory, FLOPs, time, cost, energy and CO2 of one configuration.", no_args_is_help=True)


GpuOption = Annotated[str, typer.Option("--gpu", "-g", help="Accelerator slug or alias: t4, a100, h100-sxm, mi300x...")]
ExecutionOption = Annotated[
    str,
    typer.Option(
        help="How the kernels are issued: eager (one by one from Python), compile (torch.compile: fused "
        "elementwise kernels, cheaper launches) or cuda-graphs (replayed with no host work per kernel, as "
        "vLLM and TensorRT-LLM decode). Small models and decoding are often bound by the host's launches.",
    ),
]
CalibrationOption = Annotated[
    Path | None,
    typer.Option(
        "--calibration",
        help="A calibration file from `computewise bench --save` (default: the one saved for --gpu, if any).",
    ),
]
_Pricing = Annotated[str, typer.Option(help="on-demand, spot, reserved-1y, reserved-3y or on-prem.")]
_Region = Annotated[str | None, typer.Option(help="Price in this region only.")]
_Instance = Annotated[str | None, typer.Option(help="Price this instance type.")]

# The flags of estimate train, one type each, so the verb's signature reads in a screen.
_Gpus = Annotated[str, typer.Option("--gpus", "-n", help="Number of accelerators.")]
_MicroBatch = Annotated[
    str | None,
    typer.Option(
        help="Sequences per device per micro-step (default 1; an image model's: its share of the global batch, "
        "at most 256)."
    ),
]
_GlobalBatch = Annotated[
    str | None,
    typer.Option(
        help="Sequences per optimizer step. Default: about 1M tokens at 8B parameters, growing with the model "
        "(as plan train), rounded to a multiple of dp*micro-batch."
    ),
]
_TrainPrecision = Annotated[
    str,
    typer.Option(
        help="auto (bf16, else fp16), bf16, fp16, fp32, tf32 (fp32 values, matmuls and convolutions on TF32 "
        "tensor cores: allow_tf32, the HF Trainer's --tf32) or fp8."
    ),
]
_Recompute = Annotated[
    str,
    typer.Option(
        help="Activation recomputation: none, selective (Megatron's: the attention core), full, or "
        "op-selective (PyTorch's op-level selective checkpointing as torchtitan runs it: every other "
        "matmul's output and attention's output kept, the rest recomputed), or dots (JAX's "
        "checkpoint_dots_with_no_batch_dims, MaxText's remat_policy minimal: every weight matmul's output "
        "kept, attention and the elementwise work recomputed).",
    ),
]
_FlashAttention = Annotated[
    bool, typer.Option(hidden=True, help="Older name: --no-flash-attention is --attention unfused.")
]
_Attention = Annotated[
    str | None,
    typer.Option(
        help="The attention kernel: flash (FlashAttention-2's CUDA kernels, as PyTorch SDPA, flash-attn and "
        "Megatron run it), triton (FlashAttention written in Triton, e.g. llm-foundry's attn_impl triton: the "
        "same memory, slower), flash-v1 (flash-attn 1.x or xformers' memory-efficient attention, as LLaMA "
        "trained: the same memory, slower still) or unfused (the score matrix stored); default flash.",
    ),
]
_TrainFramework = Annotated[
    str,
    typer.Option(
        help="The code that runs the step, which decides its memory and its kernels: pytorch (autocast over "
        "fp32 weights: plain AMP loops, FSDP, Lightning), transformers (the same layout in Hugging Face "
        "modules: HF Trainer, PEFT; unfused norms and rotary, many more kernel launches), megatron (16-bit "
        "weights and activations, fp32 master copy in the optimizer, fused kernels), or auto: megatron when "
        "tp, pp, cp or ep > 1, else pytorch."
    ),
]
_Loss = Annotated[
    str,
    typer.Option(
        help="The cross entropy over the vocabulary: standard (the framework's own: PyTorch's cross_entropy on "
        "fp32 logits, up to 12 bytes a logit; Megatron's in place, 6; compiled with the model under "
        "--execution compile), fused (one kernel on the 16-bit logits that writes their gradient in a pass, "
        "4 bytes a logit: flash-attn's CrossEntropyLoss, llm-foundry's default loss_fn) or eager (PyTorch's "
        "cross_entropy called on a compiled model's logits, outside its graph: eager's passes under any "
        "--execution).",
    ),
]
_GradReduce = Annotated[
    str,
    typer.Option(
        help="The width gradients are reduced in over data parallelism: auto (the framework's default: fp32 "
        "under Megatron's bf16 and fp8 and under autocast, 16 bits under Megatron's fp16), fp32, or 16-bit "
        "(NVIDIA's NeMo and Megatron-Bridge recipes, grad_reduce_in_fp32 False: Megatron's gradient buffer is "
        "16-bit too; FSDP's reduce_dtype bfloat16: half the bytes on the wire).",
    ),
]
_Mfu = Annotated[
    float | None,
    typer.Option(parser=bounded_float("--mfu"), help="Achieved fraction of peak FLOP/s, e.g. from one measured step."),
]


@dataclass(frozen=True)
class _Layout(FlagGroup):
    """How estimate train splits the model over the GPUs; dp is what the GPUs leave (the library's to work out)."""

    zero: Annotated[int, typer.Option(parser=bounded_int("--zero"), help="ZeRO stage 0-3 (3 = FSDP full shard).")] = 0
    tp: Annotated[int, typer.Option(parser=bounded_int("--tp"), help="Tensor-parallel degree.")] = 1
    pp: Annotated[int, typer.Option(parser=bounded_int("--pp"), help="Pipeline-parallel degree.")] = 1
    cp: Annotated[
        int,
        typer.Option(parser=bounded_int("--cp"), help="Context-parallel degree: each sequence split over cp ranks."),
    ] = 1
    ep: Annotated[
        int, typer.Option(parser=bounded_int("--ep"), help="Expert-parallel degree for MoE models (within dp*cp).")
    ] = 1
    virtual_stages: Annotated[
        int,
        typer.Option(
            parser=bounded_int("--virtual-stages"),
            help="Model chunks per pipeline rank; > 1 is the interleaved 1F1B schedule.",
        ),
    ] = 1
    sequence_parallel: Annotated[bool, typer.Option(help="Shard activations over tp too.")] = False
    tp_overlap: Annotated[
        bool,
        typer.Option(
            help="Hide the tensor-parallel collectives behind the GEMMs they feed, a chunk at a time (Transformer "
            "Engine's userbuffers: Megatron's --tp-comm-overlap, on in NVIDIA's Llama 3 70B and 405B recipes)."
        ),
    ] = False
    zero_group: Annotated[
        int,
        typer.Option(
            parser=bounded_int("--zero-group"),
            help="Hybrid sharding: ZeRO shards over groups of this many of the dp*cp ranks and replicates "
            "across groups, whose gradients are all-reduced between them once a step (PyTorch FSDP's "
            "HYBRID_SHARD: a node's GPUs; MaxText on several TPU slices: a slice's chips). 0: all dp*cp ranks.",
        ),
    ] = 0

    def parallelism(self) -> Parallelism:
        return Parallelism(**dataclasses.asdict(self))


@dataclass(frozen=True)
class _TrainPrice(FlagGroup):
    """Where estimate train rents its GPUs, as the library's ``PriceRequest``."""

    pricing: _Pricing = "on-demand"
    cloud: Annotated[
        str | None, typer.Option(help="Price on this cloud only (aws, gcp, azure, lambda, coreweave).")
    ] = None
    region: _Region = None
    instance: _Instance = None

    def request(self) -> PriceRequest:
        from computewise.estimate.quote import PriceRequest

        return PriceRequest(None, self.instance, self.cloud, self.region, choice(self.pricing, PRICINGS, "--pricing"))


@app.command("train")
@flag_groups
def train(
    *,
    model_name: ModelOption,
    gpu: GpuOption,
    gpus: _Gpus = "1",
    tokens: TokensOption = None,
    seq_len: SeqLenOption = None,
    micro_batch: _MicroBatch = None,
    global_batch: _GlobalBatch = None,
    precision: _TrainPrecision = "auto",
    optimizer: OptimizerOption = "adamw",
    layout: _Layout,
    recompute: _Recompute = "none",
    flash_attention: _FlashAttention = True,
    attention: _Attention = None,
    framework: _TrainFramework = "auto",
    execution: ExecutionOption = "eager",
    loss: _Loss = "standard",
    grad_reduce: _GradReduce = "auto",
    price: _TrainPrice,
    mfu: _Mfu = None,
    method: MethodOption = "full",
    finetune: FineTuneFlags,
    catalog_paths: CatalogOption = None,
    calibration: CalibrationOption = None,
    as_json: JsonOption = False,
    html: HtmlOption = None,
) -> None:
    """Memory per device, FLOPs, time, cost, energy and CO2 of one training configuration."""
    from computewise.catalog.calibration import calibration_catalog_paths, calibration_for
    from computewise.estimate.request import TrainEstimateRequest, estimate_train_request
    from computewise.report.html import estimate_html
    from computewise.report.terminal import print_estimate

    catalog, assumptions = load([*(catalog_paths or ()), *calibration_catalog_paths(calibration)])
    spec = model(model_name)
    accelerator = catalog.accelerator(gpu)
    request = TrainEstimateRequest(
        model=spec,
        accelerator=accelerator,
        gpus=parse_positive_int(gpus, "--gpus"),
        layout=layout.parallelism(),
        seq_len=sequence_length(seq_len, spec),
        micro_batch=None if micro_batch is None else parse_positive_int(micro_batch, "--micro-batch"),
        tokens=None if tokens is None else parse_count(tokens, "--tokens"),
        global_batch=None if global_batch is None else parse_positive_int(global_batch, "--global-batch"),
        precision=_precision(precision),
        optimizer=choice(optimizer, OPTIMIZERS, "--optimizer"),
        recompute=choice(recompute, RECOMPUTES, "--recompute"),
        attention=_attention_kernel(attention, flash_attention),
        framework=None if framework == "auto" else choice(framework, FRAMEWORKS, "--framework"),
        execution=choice(execution, EXECUTIONS, "--execution"),
        finetune=finetune.spec(method),
        loss=choice(loss, LOSSES, "--loss"),
        grad_reduce=choice(grad_reduce, GRAD_REDUCES, "--grad-reduce"),
        price=price.request(),
        utilization=mfu,
        calibration=calibration_for(accelerator.slug, calibration, accelerator.aliases),
    )
    emit(estimate_train_request(request, catalog, assumptions), as_json, html, print_estimate, estimate_html)


# The flags of estimate infer.
_ReplicaGpus = Annotated[
    int,
    typer.Option("--gpus", "-n", parser=bounded_int("--gpus"), help="Accelerators per replica (tensor parallel)."),
]
_Batch = Annotated[
    str, typer.Option("--batch-size", "--batch", help="Requests per batch: sequences, or images for an image model.")
]
_InputLen = Annotated[
    str | None,
    typer.Option(
        "--input-len",
        "--context-len",
        help="Prompt tokens per sequence (default 1024, less where the output would overflow the model's "
        "context), or an encoder's tokens per sequence (default: the model's, at most 4096). Not for image models.",
    ),
]
_OutputLen = Annotated[
    str | None, typer.Option(help="Generated tokens per sequence (default 256). Only for models that generate.")
]
_WeightPrecision = Annotated[
    str, typer.Option(help="Weights: auto (bf16, else fp16), bf16, fp16, fp32, tf32 (fp32 on TF32 tensor cores), fp8.")
]
_KvPrecision = Annotated[
    str | None, typer.Option(help="KV cache: bf16 (default), fp16 or fp8. Only for models that generate.")
]
_InferFramework = Annotated[
    str,
    typer.Option(
        help="pytorch (a generate() loop: only the last position's logits are kept) or transformers "
        "(a plain Hugging Face forward: every position's logits, more kernel launches).",
    ),
]
_Cloud = Annotated[str | None, typer.Option(help="Price on this cloud only.")]


@app.command("infer")
def infer(
    model_name: ModelOption,
    gpu: GpuOption,
    gpus: _ReplicaGpus = 1,
    batch: _Batch = "1",
    context_len: _InputLen = None,
    output_len: _OutputLen = None,
    precision: _WeightPrecision = "auto",
    kv_precision: _KvPrecision = None,
    framework: _InferFramework = "pytorch",
    execution: ExecutionOption = "eager",
    pricing: _Pricing = "on-demand",
    cloud: _Cloud = None,
    region: _Region = None,
    instance: _Instance = None,
    catalog_paths: CatalogOption = None,
    as_json: JsonOption = False,
    html: HtmlOption = None,
) -> None:
    """Memory (weights, KV cache), latency, throughput and $ per 1000 requests of one serving replica.

    A model that generates (a decoder) is timed by its first token and each output token; an image or
    encoder model answers a batch of images or sequences in one forward pass.
    """
    from computewise.estimate.quote import PriceRequest
    from computewise.estimate.request import KV_PRECISIONS, InferEstimateRequest, estimate_infer_request
    from computewise.report.html import estimate_html
    from computewise.report.terminal import print_estimate

    catalog, assumptions = load(catalog_paths)
    request = InferEstimateRequest(
        model=model(model_name),
        accelerator=catalog.accelerator(gpu),
        tp=gpus,
        batch=parse_positive_int(batch, "--batch-size"),
        input_len=None if context_len is None else parse_positive_int(context_len, "--input-len"),
        output_len=None if output_len is None else parse_positive_int(output_len, "--output-len"),
        kv_precision=None if kv_precision is None else choice(kv_precision, KV_PRECISIONS, "--kv-precision"),
        precision=_precision(precision),
        framework=choice(framework, ("pytorch", "transformers"), "--framework"),
        execution=choice(execution, EXECUTIONS, "--execution"),
        price=PriceRequest(None, instance, cloud, region, choice(pricing, PRICINGS, "--pricing")),
    )
    emit(estimate_infer_request(request, catalog, assumptions), as_json, html, print_estimate, estimate_html)


def _precision(text: str) -> Precision | None:
    """--precision: None for auto, which the library reads as the accelerator's default."""
    return None if text == "auto" else choice(text, PRECISIONS, "--precision")


@app.command("comm")
def comm(
    gpu: GpuOption,
    gpus: Annotated[str, typer.Option("--gpus", "-n", help="Ranks in the group (one per accelerator).")] = "8",
    op: Annotated[
        str, typer.Option("--op", help="all-reduce, all-gather, reduce-scatter, all-to-all or send-recv.")
    ] = "all-reduce",
    message_bytes: Annotated[
        str | None,
        typer.Option("--bytes", help="Buffer size as nccl-tests counts it: 1GiB, 256MB, 8e9. Default: 8 B .. 8 GiB."),
    ] = None,
    per_node: Annotated[
        int | None,
        typer.Option(
            "--per-node",
            parser=bounded_int("--per-node"),
            help="Ranks of this group on each node; it must divide --gpus. Default: a full node.",
        ),
    ] = None,
    cloud: Annotated[str | None, typer.Option(help="Assume this cloud's instance (aws, azure, ...).")] = None,
    instance: Annotated[str | None, typer.Option(help="Assume this instance type, e.g. p5.48xlarge.")] = None,
    catalog_paths: CatalogOption = None,
    as_json: JsonOption = False,
) -> None:
    """Time and nccl-tests bus bandwidth of one collective, at one size or over a sweep of sizes."""
    import json
    import sys

    from rich.console import Console

    from computewise.estimate.comm_report import SWEEP_BYTES, CommQuery, estimate_comm, parse_collective
    from computewise.report.comm import print_comm
    from computewise.units import parse_bytes

    catalog, assumptions = load(catalog_paths)
    query = CommQuery(
        op=parse_collective(op),
        gpus=parse_positive_int(gpus, "--gpus"),
        sizes_bytes=(parse_bytes(message_bytes, "--bytes"),) if message_bytes is not None else SWEEP_BYTES,
        ranks_per_node=per_node,
        cloud=cloud,
        instance_type=instance,
    )
    result = estimate_comm(catalog, catalog.accelerator(gpu), query, assumptions)
    if as_json:
        sys.stdout.write(json.dumps(result.to_dict(), indent=2) + "\n")
    else:
        print_comm(result, Console())


def _attention_kernel(attention: str | None, flash_attention: bool) -> AttentionKernel:
    """--attention, or what --[no-]flash-attention says; the two must not contradict each other."""
    if attention is None:
        return "flash" if flash_attention else "unfused"
    kernel = choice(attention, ATTENTION_KERNELS, "--attention")
    if not flash_attention and kernel != "unfused":
        raise InputError(
            f"--no-flash-attention and --attention {kernel} contradict each other",
            "give only one of them: --attention unfused is --no-flash-attention",
        )
    return kernel
