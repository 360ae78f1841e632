"""Whether a parallel layout is possible at all for a model, in words a user can act on."""

from __future__ import annotations

from computewise.errors import ParallelismError
from computewise.specs import ModelSpec, Parallelism

__all__ = ["check_layout", "layout_problem"]


def layout_problem(model: ModelSpec, gpus: int, tp: int, pp: int, global_batch: int, micro_batch: int) -> str | None:
    """The first reason the layout cannot run, or None. The planner uses the same rules, vectorised."""
    if gpus % (tp * pp):
        return f"tp*pp = {tp}*{pp} = {tp * pp} does not divide {gpus} GPUs"
    if not model.is_transformer and (tp > 1 or pp > 1):
        return f"{model.name} has no transformer layers to split; use --tp 1 --pp 1"
    if model.heads and model.heads % tp:
        return f"{model.heads} attention heads are not divisible by tp={tp}"
    if model.is_transformer and pp > model.total_layers:
        return f"pp={pp} exceeds the {model.total_layers} layers of {model.name}"
    dp = gpus // (tp * pp)
    if global_batch % (dp * micro_batch):
        return (
            f"global batch {global_batch} is not a multiple of dp*micro-batch = {dp}*{micro_batch} = {dp * micro_batch}"
        )
    return None


def check_layout(model: ModelSpec, gpus: int, parallelism: Parallelism, global_batch: int, micro_batch: int) -> None:
    """Raise ParallelismError with a fix when tp*pp*dp != gpus or the model cannot be split that way."""
    if parallelism.gpus != gpus:
        raise ParallelismError(
            f"tp*pp*dp = {parallelism.tp}*{parallelism.pp}*{parallelism.dp} = {parallelism.gpus} != {gpus} GPUs",
            "choose --tp and --pp whose product divides --gpus (dp is --gpus / (tp*pp))",
        )
    problem = layout_problem(model, gpus, parallelism.tp, parallelism.pp, global_batch, micro_batch)
    if problem:
        raise ParallelismError(problem, "change --tp/--pp/--gpus/--global-batch so the degrees divide evenly")
