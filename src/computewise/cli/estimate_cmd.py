"""``computewise estimate train|infer``: one configuration, every number broken down."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer

from computewise.cli.common import (
    AdapterPrecisionOption,
    CatalogOption,
    DoubleQuantOption,
    FineTuneFlags,
    HtmlOption,
    JsonOption,
    LoraAlphaOption,
    LoraRankOption,
    LoraTargetsOption,
    MethodOption,
    ModelOption,
    OptimizerOption,
    QuantTypeOption,
    SeqLenOption,
    TokensOption,
    TrainedModulesOption,
    bounded_float,
    bounded_int,
    choice,
    emit,
    load,
    model,
    sequence_length,
    training_tokens,
)
from computewise.errors import InputError
from computewise.specs import (
    ATTENTION_KERNELS,
    Accelerator,
    AttentionKernel,
    InferJob,
    ModelSpec,
    Parallelism,
    Precision,
    TrainJob,
)
from computewise.units import parse_positive_int

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


@app.command("train")
def train(
    model_name: ModelOption,
    gpu: GpuOption,
    gpus: Annotated[str, typer.Option("--gpus", "-n", help="Number of accelerators.")] = "1",
    tokens: TokensOption = None,
    seq_len: SeqLenOption = None,
    micro_batch: Annotated[str, typer.Option(help="Sequences per device per micro-step.")] = "1",
    global_batch: Annotated[
        str | None,
        typer.Option(
            help="Sequences per optimizer step. Default: about 1M tokens at 8B parameters, growing with the model "
            "(as plan train), rounded to a multiple of dp*micro-batch."
        ),
    ] = None,
    precision: Annotated[str, typer.Option(help="auto (bf16, else fp16), bf16, fp16, fp32 or fp8.")] = "auto",
    optimizer: OptimizerOption = "adamw",
    zero: Annotated[int, typer.Option(parser=bounded_int("--zero"), help="ZeRO stage 0-3 (3 = FSDP full shard).")] = 0,
    tp: Annotated[int, typer.Option(parser=bounded_int("--tp"), help="Tensor-parallel degree.")] = 1,
    pp: Annotated[int, typer.Option(parser=bounded_int("--pp"), help="Pipeline-parallel degree.")] = 1,
    cp: Annotated[
        int,
        typer.Option(parser=bounded_int("--cp"), help="Context-parallel degree: each sequence split over cp ranks."),
    ] = 1,
    ep: Annotated[
        int, typer.Option(parser=bounded_int("--ep"), help="Expert-parallel degree for MoE models (within dp*cp).")
    ] = 1,
    virtual_stages: Annotated[
        int,
        typer.Option(
            parser=bounded_int("--virtual-stages"),
            help="Model chunks per pipeline rank; > 1 is the interleaved 1F1B schedule.",
        ),
    ] = 1,
    sequence_parallel: Annotated[bool, typer.Option(help="Shard activations over tp too.")] = False,
    recompute: Annotated[
        str,
        typer.Option(
            help="Activation recomputation: none, selective (Megatron's: the attention core), full, or "
            "op-selective (PyTorch's op-level selective checkpointing as torchtitan runs it: every other "
            "matmul's output and attention's output kept, the rest recomputed).",
        ),
    ] = "none",
    flash_attention: Annotated[
        bool, typer.Option(hidden=True, help="Older name: --no-flash-attention is --attention unfused.")
    ] = True,
    attention: Annotated[
        str | None,
        typer.Option(
            help="The attention kernel: flash (FlashAttention-2's CUDA kernels, as PyTorch SDPA, flash-attn and "
            "Megatron run it), triton (FlashAttention written in Triton, e.g. llm-foundry's attn_impl triton: the "
            "same memory, slower) or unfused (the score matrix stored); default flash.",
        ),
    ] = None,
    framework: Annotated[
        str,
        typer.Option(
            help="The code that runs the step, which decides its memory and its kernels: pytorch (autocast over "
            "fp32 weights: plain AMP loops, FSDP, Lightning), transformers (the same layout in Hugging Face "
            "modules: HF Trainer, PEFT; unfused norms and rotary, many more kernel launches), megatron (16-bit "
            "weights and activations, fp32 master copy in the optimizer, fused kernels), or auto: megatron when "
            "tp, pp, cp or ep > 1, else pytorch."
        ),
    ] = "auto",
    execution: ExecutionOption = "eager",
    pricing: Annotated[str, typer.Option(help="on-demand, spot, reserved-1y, reserved-3y or on-prem.")] = "on-demand",
    cloud: Annotated[
        str | None, typer.Option(help="Price on this cloud only (aws, gcp, azure, lambda, coreweave).")
    ] = None,
    region: Annotated[str | None, typer.Option(help="Price in this region only.")] = None,
    instance: Annotated[str | None, typer.Option(help="Price this instance type.")] = None,
    mfu: Annotated[
        float | None,
        typer.Option(
            parser=bounded_float("--mfu"), help="Achieved fraction of peak FLOP/s, e.g. from one measured step."
        ),
    ] = None,
    method: MethodOption = "full",
    lora_rank: LoraRankOption = None,
    lora_alpha: LoraAlphaOption = None,
    lora_targets: LoraTargetsOption = None,
    trained_modules: TrainedModulesOption = None,
    adapter_precision: AdapterPrecisionOption = None,
    quant_type: QuantTypeOption = None,
    double_quant: DoubleQuantOption = None,
    catalog_paths: CatalogOption = None,
    calibration: CalibrationOption = None,
    as_json: JsonOption = False,
    html: HtmlOption = None,
) -> None:
    """Memory per device, FLOPs, time, cost, energy and CO2 of one training configuration."""
    from computewise.catalog.calibration import calibration_catalog_paths, calibration_for
    from computewise.estimate import estimate_train
    from computewise.estimate.layout import default_framework
    from computewise.estimate.train import default_global_batch, default_global_batch_note
    from computewise.report.html import estimate_html
    from computewise.report.terminal import print_estimate
    from computewise.specs import EXECUTIONS, FRAMEWORKS, OPTIMIZERS, PRICINGS, RECOMPUTES

    catalog, assumptions = load([*(catalog_paths or ()), *calibration_catalog_paths(calibration)])
    spec = model(model_name)
    accelerator = catalog.accelerator(gpu)
    measured = calibration_for(accelerator.slug, calibration, accelerator.aliases)
    n_gpus = parse_positive_int(gpus, "--gpus")
    if n_gpus % (tp * pp * cp):
        raise InputError(
            f"tp*pp*cp = {tp * pp * cp} does not divide --gpus {n_gpus}, so dp = gpus/(tp*pp*cp) is not whole",
            "choose --tp, --pp and --cp whose product divides --gpus",
        )
    dp = n_gpus // (tp * pp * cp)
    seq = sequence_length(seq_len, spec)
    micro = parse_positive_int(micro_batch, "--micro-batch")
    finetune = FineTuneFlags(
        lora_rank, lora_alpha, lora_targets, trained_modules, adapter_precision, quant_type, double_quant
    ).spec(method)
    layout = Parallelism(
        dp=dp,
        tp=tp,
        pp=pp,
        zero=zero,
        sequence_parallel=sequence_parallel,
        cp=cp,
        ep=ep,
        virtual_stages=virtual_stages,
    )
    job = TrainJob(
        tokens=training_tokens(tokens, spec),
        seq_len=seq,
        micro_batch=micro,
        global_batch=parse_positive_int(global_batch, "--global-batch")
        if global_batch is not None
        else default_global_batch(seq, spec.params, step_multiple=dp * micro),
        precision=_precision(precision, accelerator),
        optimizer=choice(optimizer, OPTIMIZERS, "--optimizer"),
        recompute=choice(recompute, RECOMPUTES, "--recompute"),
        attention=_attention_kernel(attention, flash_attention),
        framework=default_framework(layout, finetune)
        if framework == "auto"
        else choice(framework, FRAMEWORKS, "--framework"),
        execution=choice(execution, EXECUTIONS, "--execution"),
        finetune=finetune,
    )
    result = estimate_train(
        spec,
        accelerator,
        n_gpus,
        job,
        layout,
        catalog,
        assumptions,
        pricing=choice(pricing, PRICINGS, "--pricing"),
        cloud=cloud,
        region=region,
        instance_type=instance,
        utilization=mfu,
        calibration=measured,
    )
    defaults = (
        *([] if global_batch is not None else [default_global_batch_note(job.global_batch, seq)]),
        *([] if tokens else [f"--tokens not given: 20 tokens per parameter ({job.tokens:.3g}), Chinchilla-optimal"]),
    )
    emit(replace(result, notes=(*result.notes, *defaults)), as_json, html, print_estimate, estimate_html)


@app.command("infer")
def infer(
    model_name: ModelOption,
    gpu: GpuOption,
    gpus: Annotated[
        int,
        typer.Option("--gpus", "-n", parser=bounded_int("--gpus"), help="Accelerators per replica (tensor parallel)."),
    ] = 1,
    batch: Annotated[
        str,
        typer.Option("--batch-size", "--batch", help="Requests per batch: sequences, or images for an image model."),
    ] = "1",
    context_len: Annotated[
        str | None,
        typer.Option(
            "--input-len",
            "--context-len",
            help="Prompt tokens per sequence (default 1024), or an encoder's tokens per sequence (default: the "
            "model's, at most 4096). Not for image models.",
        ),
    ] = None,
    output_len: Annotated[
        str | None, typer.Option(help="Generated tokens per sequence (default 256). Only for models that generate.")
    ] = None,
    precision: Annotated[str, typer.Option(help="Weights: auto (bf16, else fp16), bf16, fp16, fp32, fp8.")] = "auto",
    kv_precision: Annotated[
        str | None, typer.Option(help="KV cache: bf16 (default), fp16 or fp8. Only for models that generate.")
    ] = None,
    framework: Annotated[
        str,
        typer.Option(
            help="pytorch (a generate() loop: only the last position's logits are kept) or transformers "
            "(a plain Hugging Face forward: every position's logits, more kernel launches).",
        ),
    ] = "pytorch",
    execution: ExecutionOption = "eager",
    pricing: Annotated[str, typer.Option(help="on-demand, spot, reserved-1y, reserved-3y or on-prem.")] = "on-demand",
    cloud: Annotated[str | None, typer.Option(help="Price on this cloud only.")] = None,
    region: Annotated[str | None, typer.Option(help="Price in this region only.")] = None,
    instance: Annotated[str | None, typer.Option(help="Price this instance type.")] = None,
    catalog_paths: CatalogOption = None,
    as_json: JsonOption = False,
    html: HtmlOption = None,
) -> None:
    """Memory (weights, KV cache), latency, throughput and $ per 1000 requests of one serving replica.

    A model that generates (a decoder) is timed by its first token and each output token; an image or
    encoder model answers a batch of images or sequences in one forward pass.
    """
    from computewise.estimate import estimate_infer
    from computewise.report.html import estimate_html
    from computewise.report.terminal import print_estimate
    from computewise.specs import EXECUTIONS, PRICINGS

    catalog, assumptions = load(catalog_paths)
    spec = model(model_name)
    accelerator = catalog.accelerator(gpu)
    if gpus < 1:
        raise InputError(f"--gpus must be at least 1, got {gpus}", "use --gpus 1 for one device per replica")
    input_len, generated, kv_bytes = _request_shape(spec, context_len, output_len, kv_precision)
    job = InferJob(
        batch=parse_positive_int(batch, "--batch-size"),
        context_len=input_len,
        output_len=generated,
        precision=_precision(precision, accelerator),
        kv_cache_bytes_per_value=kv_bytes,
        framework=choice(framework, ("pytorch", "transformers"), "--framework"),
        execution=choice(execution, EXECUTIONS, "--execution"),
    )
    result = estimate_infer(
        spec,
        accelerator,
        job,
        catalog,
        assumptions,
        tp=gpus,
        pricing=choice(pricing, PRICINGS, "--pricing"),
        cloud=cloud,
        region=region,
        instance_type=instance,
    )
    emit(result, as_json, html, print_estimate, estimate_html)


def _request_shape(
    spec: ModelSpec, input_len: str | None, output_len: str | None, kv_precision: str | None
) -> tuple[int, int, float]:
    """(tokens per input, generated tokens, KV-cache bytes per value) of one request.

    A model that generates reads a prompt and writes tokens into its KV cache. An image or encoder
    model answers each input in one forward pass: it has no output and no cache, and an image's
    tokens are fixed by its size, so flags that would change them are refused rather than ignored.
    """
    from computewise.estimate.single import input_kind

    kind = input_kind(spec)
    if kind is None:
        input_tokens = parse_positive_int("1024" if input_len is None else input_len, "--input-len")
        generated = parse_positive_int("256" if output_len is None else output_len, "--output-len")
        kv = choice("bf16" if kv_precision is None else kv_precision, ("bf16", "fp16", "fp8"), "--kv-precision")
        return input_tokens, generated, 1.0 if kv == "fp8" else 2.0
    given = [
        flag
        for flag, value in (
            ("--input-len/--context-len", None if kind == "sequences" else input_len),
            ("--output-len", output_len),
            ("--kv-precision", kv_precision),
        )
        if value is not None
    ]
    if given:
        raise InputError(
            f"{spec.name} is {'an' if spec.architecture[0] in 'aeiou' else 'a'} {spec.architecture} model: it reads "
            f"{kind}, a batch in one forward pass, and generates no tokens, so {' and '.join(given)} "
            f"{'does' if len(given) == 1 else 'do'} not apply",
            f"leave out {' and '.join(given)}; --batch sets the {kind} per batch"
            + (", --input-len the tokens per sequence" if kind == "sequences" else ""),
        )
    if input_len is not None:
        return parse_positive_int(input_len, "--input-len"), 0, 2.0
    return sequence_length(None, spec), 0, 2.0


def _precision(text: str, accelerator: Accelerator) -> Precision:
    from computewise.estimate.single import default_precision
    from computewise.specs import PRECISIONS

    return default_precision(accelerator) if text == "auto" else choice(text, PRECISIONS, "--precision")


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
            help="Ranks of this group on each node. Default: a full node.",
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
