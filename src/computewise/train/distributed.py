"""Data-parallel training under torchrun: the process group, DDP/FSDP wrappers, rank helpers.

torchrun (``python -m torch.distributed.run``) starts one process per device and tells each its
place through the environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``,
``MASTER_PORT``); ``init_distributed`` reads that (``init_method="env://"``) and picks the backend
from the device: NCCL between GPUs, gloo on CPUs. Outside torchrun everything here is a
single-process no-op, so the same training script runs both ways.

Strategies: ``ddp`` replicates the model and all-reduces gradients; ``fsdp`` shards parameters,
gradients and optimizer state (FSDP2 ``fully_shard``, per repeated block then the root, so only
one block's full weights exist at a time); ``auto`` is DDP with several processes and nothing
with one. FSDP's sharded state is gathered into one full state dict for checkpoints
(``full_state``), so a checkpoint does not depend on the number of processes that wrote it.
"""

from __future__ import annotations

import atexit
import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal, get_args

from computewise.errors import DistributedError

if TYPE_CHECKING:
    import torch
    from torch import nn

__all__ = [
    "Placement",
    "ResolvedStrategy",
    "Strategy",
    "all_reduce_mean",
    "barrier",
    "broadcast_object",
    "cleanup",
    "full_state",
    "gather_objects",
    "init_distributed",
    "is_initialized",
    "load_full_state",
    "placement",
    "resolve_strategy",
    "torchrun_placement",
    "wrapper",
]

Strategy = Literal["auto", "none", "ddp", "fsdp"]
ResolvedStrategy = Literal["none", "ddp", "fsdp"]
# torch's default for gloo and NCCL is 30 min; a peer that died should not hold the others that long.
_DEFAULT_TIMEOUT_S = 600.0
# How long a gloo rank waits at teardown for its peers before leaving anyway.
_TEARDOWN_BARRIER_S = 10.0


@dataclass(frozen=True)
class Placement:
    """Where this process sits: its global rank, the number of processes, its rank on this host."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        """Rank 0: the one process that writes checkpoints and prints."""
        return self.rank == 0


def torchrun_placement() -> Placement | None:
    """The placement torchrun gave this process through its environment, or None outside torchrun."""
    if "WORLD_SIZE" not in os.environ and "RANK" not in os.environ:
        return None
    try:
        found = Placement(
            rank=int(os.environ["RANK"]),
            world_size=int(os.environ["WORLD_SIZE"]),
            local_rank=int(os.environ.get("LOCAL_RANK", "0")),
        )
    except (KeyError, ValueError) as failure:
        raise DistributedError(
            f"the torchrun environment is incomplete or malformed ({type(failure).__name__}: {failure}): "
            f"RANK={os.environ.get('RANK')!r} WORLD_SIZE={os.environ.get('WORLD_SIZE')!r}",
            "launch with `python -m torch.distributed.run --nproc_per_node N script.py`, or unset RANK and WORLD_SIZE",
        ) from failure
    if found.world_size < 1 or not 0 <= found.rank < found.world_size:
        raise DistributedError(f"RANK={found.rank} is not within WORLD_SIZE={found.world_size}")
    return found


def is_initialized() -> bool:
    """Whether a torch.distributed process group is up in this process."""
    import torch.distributed as dist

    return bool(dist.is_available() and dist.is_initialized())


def placement() -> Placement:
    """This process's placement: from the process group when one is up, else a single process."""
    import torch.distributed as dist

    if not is_initialized():
        return Placement()
    return Placement(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")))


def init_distributed(
    device: torch.device | str | None = None, timeout_s: float = _DEFAULT_TIMEOUT_S
) -> tuple[Placement, bool]:
    """Join torchrun's process group (idempotent); returns the placement and whether this call created it.

    Outside torchrun it does nothing. NCCL when the process trains on a GPU, gloo otherwise. The
    group stays up until ``cleanup()`` or the process exits (an ``atexit`` hook leaves it then):
    tearing a group down and creating it again in the same process is fragile in torch (we saw a
    gloo re-initialization hang), and a second ``fit()`` in the same job should simply reuse it.
    """
    import torch
    import torch.distributed as dist

    if is_initialized():
        return placement(), False
    found = torchrun_placement()
    if found is None:
        return Placement(), False
    if not dist.is_available():
        raise DistributedError("this torch build has no torch.distributed", "install a torch build with it")
    on_gpu = torch.device(device).type == "cuda" if device is not None else torch.cuda.is_available()
    if on_gpu:
        torch.cuda.set_device(found.local_rank)
    dist.init_process_group(
        backend="nccl" if on_gpu else "gloo",
        init_method="env://",
        rank=found.rank,
        world_size=found.world_size,
        timeout=timedelta(seconds=timeout_s),
    )
    atexit.register(cleanup)
    return found, True


def cleanup() -> None:
    """Leave the process group (a no-op without one), after the other ranks are done with it.

    A gloo rank that tears down while a peer still holds its connection can abort the peer at
    interpreter exit, so gloo ranks first meet at a barrier that gives up after a few seconds (a
    crashed peer must not keep the survivors waiting). NCCL has no bounded barrier and needs none.
    """
    import torch.distributed as dist

    if not is_initialized():
        return
    if dist.get_backend() == "gloo":
        with contextlib.suppress(RuntimeError):
            dist.monitored_barrier(timeout=timedelta(seconds=_TEARDOWN_BARRIER_S))
    dist.destroy_process_group()


def resolve_strategy(strategy: Strategy, world_size: int) -> ResolvedStrategy:
    """``auto`` becomes DDP with several processes and none with one; DDP/FSDP need a process group."""
    if strategy not in get_args(Strategy):
        raise DistributedError(
            f"unknown distributed strategy {strategy!r}", f"choose one of {', '.join(get_args(Strategy))}"
        )
    if strategy == "auto":
        return "ddp" if world_size > 1 else "none"
    if strategy != "none" and not is_initialized():
        raise DistributedError(
            f"strategy {strategy!r} needs a process group, and this process was not started by torchrun",
            "launch with `python -m torch.distributed.run --nproc_per_node N ...`, or use strategy='auto'",
        )
    return strategy


def wrapper(strategy: Strategy) -> Callable[[nn.Module], nn.Module] | None:
    """The function ``StepEngine.prepare(wrap=...)`` applies to the model on its device; None for no wrapping."""
    resolved = resolve_strategy(strategy, placement().world_size)
    if resolved == "ddp":
        return _wrap_ddp
    if resolved == "fsdp":
        return _wrap_fsdp
    return None


def _wrap_ddp(model: nn.Module) -> nn.Module:
    from torch.nn.parallel import DistributedDataParallel

    device = next(model.parameters()).device
    device_ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=device_ids)


def _wrap_fsdp(model: nn.Module) -> nn.Module:
    """Shard every block of the largest ``nn.ModuleList`` (a transformer's layers), then the root.

    ``fully_shard`` changes the module in place (same object, same state_dict keys), so the
    engine's ``raw_model`` is the sharded module.
    """
    from torch import nn
    from torch.distributed.fsdp import fully_shard

    lists = [module for module in model.modules() if isinstance(module, nn.ModuleList)]
    if lists:
        for block in max(lists, key=len):
            fully_shard(block)
    fully_shard(model)
    return model


def full_state(model: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[dict[str, Any], dict[str, Any]]:
    """The full (unsharded) model and optimizer state on rank 0's CPU; empty dicts on other ranks.

    A collective: every rank must call it. The optimizer state is keyed by parameter name.
    """
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    model_state, optimizer_state = get_state_dict(
        model, optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
    )
    return dict(model_state), dict(optimizer_state)


def load_full_state(
    model: nn.Module, optimizer: torch.optim.Optimizer, model_state: dict[str, Any], optimizer_state: dict[str, Any]
) -> None:
    """Load a full state (from ``full_state``, read from disk by every rank) into the sharded model."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

    set_state_dict(
        model,
        optimizer,
        model_state_dict=model_state,
        optim_state_dict=optimizer_state,
        options=StateDictOptions(full_state_dict=True),
    )


def barrier() -> None:
    """Wait for every rank (a no-op in one process)."""
    import torch
    import torch.distributed as dist

    if not is_initialized():
        return
    if dist.get_backend() == "nccl":
        dist.barrier(device_ids=[torch.cuda.current_device()])
    else:
        dist.barrier()


def gather_objects(value: Any) -> list[Any]:
    """Every rank's ``value``, in rank order, on every rank (``[value]`` in one process)."""
    import torch.distributed as dist

    if not is_initialized():
        return [value]
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, value)
    return gathered


def broadcast_object(value: Any, source_rank: int = 0) -> Any:
    """Rank ``source_rank``'s ``value`` on every rank (``value`` itself in one process)."""
    import torch.distributed as dist

    if not is_initialized():
        return value
    holder = [value]
    dist.broadcast_object_list(holder, src=source_rank)
    return holder[0]


def all_reduce_mean(value: float) -> float:
    """The mean of ``value`` over the ranks (``value`` itself in one process)."""
    import torch
    import torch.distributed as dist

    if not is_initialized():
        return value
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else None
    total = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(total, op=dist.ReduceOp.SUM)
    return float(total.item()) / dist.get_world_size()
