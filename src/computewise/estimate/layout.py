"""Whether a parallel layout is possible at all for a model, in words a user can act on."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from computewise.errors import ParallelismError
from computewise.specs import FineTune, Framework, ModelSpec, Parallelism
from computewise.specs.finetune import FULL_TRAINING
from computewise.units import plural

__all__ = [
    "VIRTUAL_STAGES",
    "check_layout",
    "default_framework",
    "heads_fix",
    "layout_problem",
    "schedule_problem",
    "stage_slots",
]

# Model chunks per pipeline rank the planner tries; Megatron-LM users pick small powers of two.
VIRTUAL_STAGES = (1, 2, 4, 8)


def default_framework(parallelism: Parallelism, finetune: FineTune = FULL_TRAINING) -> Framework:
    """Megatron's memory layout wherever the model itself is split (tp, pp, cp or ep > 1), which only
    Megatron-style frameworks run; PyTorch autocast (DDP, FSDP, HF Trainer) for data parallelism.
    LoRA and QLoRA run as PEFT runs them, on Hugging Face's modules. The planner applies the same
    rule to every candidate."""
    if finetune.adapted:
        return "transformers"
    p = parallelism
    return "megatron" if max(p.tp, p.pp, p.cp, p.ep) > 1 else "pytorch"


def stage_slots(layers: int, pp: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Layer slots a pipeline of ``pp`` stages balances: the layers, or the layers plus two when the
    embedding and the output head each take a layer's slot on the first and last stage (Llama 3
    405B: 126 layers on 16 stages; arXiv:2407.21783 section 3.3.2)."""
    return np.where(layers % pp == 0, layers, layers + 2)


def layout_problem(
    model: ModelSpec, gpus: int, tp: int, pp: int, global_batch: int, micro_batch: int
) -> tuple[str, str] | None:
    """The first reason the layout cannot run and its fix, or None. The planner uses the same rules, vectorised."""
    if gpus % (tp * pp):
        return (
            f"tp*pp = {tp}*{pp} = {tp * pp} does not divide {plural(gpus, 'GPU')}",
            "choose --tp and --pp whose product divides --gpus",
        )
    if not model.is_transformer and (tp > 1 or pp > 1):
        return (
            f"{model.name} has no transformer layers to split",
            "use --tp 1 --pp 1: every GPU holds the whole network (data parallel; --zero shards its states)",
        )
    if model.heads and model.heads % tp:
        return f"{model.heads} attention heads are not divisible by tp={tp}", heads_fix(model, "--tp")
    if model.is_transformer and pp > model.total_layers:
        return (
            f"pp={pp} exceeds the {model.total_layers} layers of {model.name}",
            f"use --pp {model.total_layers} or fewer: a pipeline stage holds at least one layer",
        )
    dp = gpus // (tp * pp)
    if global_batch % (dp * micro_batch):
        return (
            f"global batch {global_batch} is not a multiple of dp*micro-batch = {dp}*{micro_batch} = "
            f"{dp * micro_batch}",
            f"use a --global-batch that is a multiple of {dp * micro_batch}, or change --micro-batch or --gpus",
        )
    return None


def heads_fix(model: ModelSpec, flag: str) -> str:
    """How to split ``model``'s heads: the tensor-parallel degrees that divide them, and where a count came from
    a parameter count, that the heads are the inferred shape's, not the model's."""
    degrees = [str(d) for d in (1, 2, 4, 8, 16, 32, 64) if model.heads % d == 0]
    fix = f"use {flag} {', '.join(degrees)}"
    if model.shape_inferred:
        fix += (
            f" ({model.heads} heads is the shape guessed from a parameter count; give a preset or a config.json "
            "for the model's own)"
        )
    return fix


def schedule_problem(
    model: ModelSpec, parallelism: Parallelism, seq_len: int, microbatches: int
) -> tuple[str, str] | None:
    """The first reason the context/expert/interleaving degrees, sequence parallelism or ZeRO cannot
    run, with its fix, or None."""
    p = parallelism
    if p.sequence_parallel and p.tp <= 1:
        # Megatron-LM's sequence parallelism splits the norms' and dropouts' activations over the tp ranks.
        return (
            "--sequence-parallel needs tensor parallelism: it shards activations over the tp ranks, and --tp is 1",
            "use --tp 2 or more, or drop --sequence-parallel",
        )
    if p.zero >= 3 and p.pp > 1:
        # DeepSpeed's pipeline engine refuses ZeRO-2/3; Llama 3 ran FSDP with pipelining without resharding
        # its weights after the forward pass (ZeRO-2), since ZeRO-3 would gather them again for each micro-batch.
        return (
            f"--zero 3 with --pp {p.pp}: ZeRO-3 gathers every stage's weights again for each micro-batch",
            "use --zero 2 or less with --pp, or --pp 1 with --zero 3",
        )
    if p.cp > 1 and seq_len % (2 * p.cp):
        # Ring attention balances causal work by giving each rank two chunks of the sequence.
        return (
            f"--seq-len {seq_len} is not a multiple of 2*cp = {2 * p.cp}",
            "choose --cp so that 2*cp divides --seq-len",
        )
    if p.ep > 1 and (model.experts <= 1 or model.experts % p.ep):
        return (
            f"ep={p.ep} needs a mixture-of-experts model whose experts divide by it ({model.name} has {model.experts})",
            "use --ep 1, or an --ep that divides the number of experts",
        )
    if p.ep > 1 and (p.dp * p.cp) % p.ep:
        return f"ep={p.ep} does not divide dp*cp = {p.dp * p.cp}", "experts are spread over data-parallel ranks"
    if p.virtual_stages > 1:
        if p.pp <= 1:
            return "--virtual-stages needs pipeline parallelism", "use --pp 2 or more, or --virtual-stages 1"
        slots = int(stage_slots(model.total_layers, np.array(p.pp)))
        if slots % (p.pp * p.virtual_stages):
            return (
                f"pp*virtual-stages = {p.pp * p.virtual_stages} does not split the {model.total_layers} layers "
                f"evenly ({slots} slots with the embedding and head)",
                "choose --virtual-stages so that every model chunk holds the same number of layers",
            )
        if microbatches % p.pp:
            return (
                f"the interleaved schedule needs micro-batches per step ({microbatches}) to be a multiple of pp={p.pp}",
                "change --global-batch or --micro-batch (Megatron-LM's rule), or use --virtual-stages 1",
            )
    return None


def check_layout(
    model: ModelSpec, gpus: int, parallelism: Parallelism, global_batch: int, micro_batch: int, seq_len: int = 0
) -> None:
    """Raise ParallelismError with a fix when tp*pp*cp*dp != gpus or the model cannot be split that way."""
    p = parallelism
    if p.gpus != gpus:
        raise ParallelismError(
            f"tp*pp*cp*dp = {p.tp}*{p.pp}*{p.cp}*{p.dp} = {p.gpus} != {plural(gpus, 'GPU')}",
            "choose --tp, --pp and --cp whose product divides --gpus (dp is --gpus / (tp*pp*cp))",
        )
    problem = layout_problem(model, gpus // p.cp, p.tp, p.pp, global_batch, micro_batch)
    if problem:
        raise ParallelismError(*problem)
    if p.zero_group and (p.zero < 1 or (p.dp * p.cp) % p.zero_group):
        raise ParallelismError(
            f"--zero-group {p.zero_group} needs ZeRO (--zero 1 to 3) over dp*cp = {p.dp * p.cp} ranks it divides",
            "give --zero 1, 2 or 3 and a --zero-group that divides dp*cp (a node's or a TPU slice's "
            "data-parallel ranks), or --zero-group 0 to shard over all of them",
        )
    scheduled = schedule_problem(model, p, seq_len, global_batch // (p.dp * micro_batch))
    if scheduled:
        raise ParallelismError(*scheduled)
