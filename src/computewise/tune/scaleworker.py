"""One rank of ``computewise scaletest``: run under torchrun, time a few training steps, write JSON.

``python -m torch.distributed.run --nproc_per_node N ... -m computewise.tune.scaleworker REQUEST``
starts N copies of this module. Each reads the request (a JSON file the parent wrote), builds the
user's training setup, wraps the model in DDP (``computewise.train.distributed``) when N > 1 and times
``warmup_steps + steps`` optimizer steps through the same ``StepEngine`` a real run uses.

Weak scaling: every rank keeps the setup's own batch (and its micro-batch split), so the global
batch grows with N and the work per rank per step stays the same. A single process runs without
DDP: its throughput is the baseline a user would get without distributing at all, so the measured
efficiency includes everything DDP adds (the reducer, the all-reduce, waiting for the slowest rank).

Each rank writes ``rank-RANK.json`` into the request's ``out_dir``: ``status`` ok with its step
times, or error with the message (and the fix, for errors the user can cause), written then
renamed so the parent never reads half a file.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from computewise.errors import ComputewiseError
from computewise.train.config import TrainConfig
from computewise.train.data import make_loader
from computewise.train.distributed import cleanup, init_distributed, wrapper
from computewise.train.engine import StepEngine
from computewise.train.setup import load_setup

if TYPE_CHECKING:
    import torch

__all__ = ["main", "rank_file"]


def rank_file(out_dir: Path, rank: int) -> Path:
    return out_dir / f"rank-{rank}.json"


def _write_json(path: Path, payload: dict[str, Any]) -> None:
    """Write then rename: the parent must never read a partial answer."""
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(json.dumps(payload), encoding="utf-8")
    os.replace(temporary, path)


def _rank_result(request: dict[str, Any], rank: int, world_size: int, local_rank: int) -> dict[str, Any]:
    """Build the setup, (DDP-)wrap it, run the steps; the per-step times of this rank."""
    import torch

    torch.set_num_threads(int(request["threads"]))
    cuda = request["device"] == "cuda"
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    # One process stays out of any process group: the baseline is training without distribution at all.
    if world_size > 1:
        init_distributed(device, timeout_s=float(request["collective_timeout_s"]))
    try:
        return _run_steps(request, device, rank, world_size)
    finally:
        cleanup()


def _run_steps(request: dict[str, Any], device: torch.device, rank: int, world_size: int) -> dict[str, Any]:
    import torch

    setup = load_setup(str(request["entry"]), request["config"])
    config = TrainConfig.from_dict(request["train_config"])
    # Weak scaling: the global batch is world_size of the setup's batches, so each rank keeps one whole.
    scaled = replace(setup, global_batch_size=setup.global_batch_size * world_size)
    engine = StepEngine.prepare(scaled, config, device=device, wrap=wrapper("auto"))
    loader = make_loader(scaled, config, engine.micro_batch_size, 0, rank=rank, world_size=world_size)
    cuda = device.type == "cuda"

    def one_step() -> float:
        """Seconds for one optimizer step, loading its micro-batches included."""
        if cuda:
            torch.cuda.synchronize(device)
        started = time.perf_counter()
        engine.step([next(loader) for _ in range(engine.accumulation_steps)])
        if cuda:
            torch.cuda.synchronize(device)
        return time.perf_counter() - started

    warmup_started = time.perf_counter()
    for _ in range(int(request["warmup_steps"])):
        one_step()
    warmup_s = time.perf_counter() - warmup_started
    step_times_s = [one_step() for _ in range(int(request["steps"]))]
    return {
        "status": "ok",
        "rank": rank,
        "warmup_s": warmup_s,
        "step_times_s": step_times_s,
        "median_step_s": statistics.median(step_times_s),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Exit 0 with ``rank-RANK.json`` written, or 1 with the error in it (torchrun then stops the others)."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    if len(arguments) != 1:
        sys.stderr.write("usage: python -m computewise.tune.scaleworker REQUEST.json (under torchrun)\n")
        return 2
    request = json.loads(Path(arguments[0]).read_text(encoding="utf-8"))
    out_dir = Path(request["out_dir"])
    rank = int(os.environ.get("RANK", "0"))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    try:
        result = _rank_result(request, rank, world_size, local_rank)
    except ComputewiseError as error:
        _write_json(
            rank_file(out_dir, rank),
            {"status": "error", "user_error": True, "rank": rank, "message": error.message, "hint": error.hint},
        )
        return 1
    except Exception as error:  # any crash of the user's code: reported by the parent, not a traceback here
        message = f"{type(error).__name__}: {error}"
        _write_json(
            rank_file(out_dir, rank),
            {"status": "error", "user_error": False, "rank": rank, "message": message, "hint": None},
        )
        sys.stderr.write(f"rank {rank}: {message}\n")
        return 1
    _write_json(rank_file(out_dir, rank), result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
