"""One rank of ``bench.collectives``: join the group, time each collective, write the times, exit.

Started by ``bench.collectives.measure_collectives`` as ``python -m
computewise.bench.collective_worker REQUEST RANK WORKDIR`` with the rendezvous in the environment
(``MASTER_ADDR=127.0.0.1``, ``MASTER_PORT``, ``WORLD_SIZE``); not an entry point for users. The
times go to ``WORKDIR/rank-RANK.json`` (written under another name and renamed, so the parent
never reads half a file); rank 0 also appends one line per measurement to ``WORKDIR/progress.txt``.
An exception ends the process with a traceback in its log and a non-zero exit code, which the
parent reports.
"""

from __future__ import annotations

import datetime
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from computewise.bench.timing import time_repeats
from computewise.units import format_bytes

_ELEMENT_BYTES = 4  # float32, as bench.collectives sizes the messages


def main(argv: list[str]) -> int:
    request = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    rank = int(argv[1])
    work = Path(argv[2])
    import torch
    import torch.distributed as dist

    world_size = int(request["world_size"])
    if request["device"] == "cuda":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
        sync: Callable[[], None] | None = torch.cuda.synchronize
    else:
        device, sync = torch.device("cpu"), None
    dist.init_process_group(
        request["backend"],
        init_method="env://",
        rank=rank,
        world_size=world_size,
        timeout=datetime.timedelta(seconds=float(request["collective_timeout_s"])),
    )
    try:
        times_s: list[list[float]] = []
        for op in request["ops"]:
            for message_bytes in request["sizes_bytes"]:
                if rank == 0:
                    _progress(work, f"{op} {format_bytes(message_bytes)}, {world_size} ranks")
                call = _collective(torch, dist, op, message_bytes // _ELEMENT_BYTES, world_size, device)
                dist.barrier()  # every rank starts its warm-up together
                times_s.append(
                    time_repeats(call, warmup=int(request["warmup"]), repeats=int(request["repeats"]), sync=sync)
                )
        dist.barrier()  # no rank leaves while another still needs it
    finally:
        dist.destroy_process_group()
    answer = work / f"rank-{rank}.json"
    partial = answer.with_suffix(".partial")
    partial.write_text(json.dumps({"rank": rank, "times_s": times_s}), encoding="utf-8")
    partial.replace(answer)
    return 0


def _collective(torch: Any, dist: Any, op: str, elements: int, world_size: int, device: Any) -> Callable[[], None]:
    """One call of ``op`` on a message of ``elements`` float32 (nccl-tests' sizes: see bench.collectives)."""
    chunk = elements // world_size
    if op == "all-reduce":
        buffer = torch.ones(elements, dtype=torch.float32, device=device)
        return lambda: dist.all_reduce(buffer)
    if op == "all-gather":
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        gathered = torch.empty(elements, dtype=torch.float32, device=device)
        mine = torch.ones(chunk, dtype=torch.float32, device=device)
        return lambda: gather(gathered, mine)
    if op == "reduce-scatter":
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        everything = torch.ones(elements, dtype=torch.float32, device=device)
        reduced = torch.empty(chunk, dtype=torch.float32, device=device)
        return lambda: scatter(reduced, everything)
    raise ValueError(f"unknown collective {op!r}")


def _progress(work: Path, line: str) -> None:
    with (work / "progress.txt").open("a", encoding="utf-8") as out:
        out.write(line + "\n")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
