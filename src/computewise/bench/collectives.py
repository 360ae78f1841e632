"""Collective bus bandwidth between local processes, reported the nccl-tests way (algbw and busbw).

``measure_collectives`` starts ``world_size`` processes on this machine (the private worker
``bench.collective_worker``), joined by ``torch.distributed``: gloo over the loopback interface on
CPU, NCCL with one GPU per process on CUDA. Each rank warms up, then times every call of all-reduce,
all-gather and reduce-scatter at each message size, back to back as nccl-tests does. A call is done
when its slowest rank is, so one call's time is the maximum over ranks (nccl-tests averages ranks
by default and offers the maximum with ``-a 3``), and the figure is the median of those calls with
its spread (nccl-tests reports the mean of the loop).

Bandwidths follow nccl-tests' definitions (doc/PERFORMANCE.md in NVIDIA/nccl-tests):

- ``algbw = S / t``, with ``S`` the message size: the whole buffer of an all-reduce, the gathered
  output of an all-gather, the input of a reduce-scatter;
- ``busbw = algbw * 2(n-1)/n`` for all-reduce and ``algbw * (n-1)/n`` for all-gather and
  reduce-scatter: the rate at which the slowest link moves data in the optimal ring algorithm, so it
  can be compared with a link's (or here, the memory system's) peak whatever the rank count.

Processes always end: a rank that fails stops the others (killed by PID), and the whole measurement
has a deadline after which every rank still running is killed and an error says so.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar, Literal, Self

from computewise.bench.timing import Measured
from computewise.errors import ComputewiseError, InputError, MissingExtraError
from computewise.specs.codec import Jsonable, json_field
from computewise.system.ports import free_port
from computewise.units import format_bytes

__all__ = [
    "OPS",
    "CollectiveFigure",
    "bus_factor",
    "measure_collectives",
]

_MIB = 1024 * 1024

OPS = ("all-reduce", "all-gather", "reduce-scatter")
"""The collectives measured, in the order they are run and reported."""

_ELEMENT_BYTES = 4  # float32, the dtype of gradients all-reduced in fp32 and of nccl-tests' default
_MAX_MESSAGE_BYTES = 1024 * _MIB  # one rank holds about two messages at once
_MAX_CPU_RANKS = 64
_WARMUP = {True: 2, False: 5}  # quick: fewer calls, enough for the first-call costs (connections, buffers)
_REPEATS = {True: 10, False: 20}  # ten or more: the spread is p10..p90
_COLLECTIVE_TIMEOUT_S = 120.0  # one call that waits this long for a peer has lost it
_START_BUDGET_S = 120.0  # spawning the ranks, importing torch, joining the group
_SLOWEST_GB_PER_S = 0.02  # a deadline that even a loaded machine meets: 50 ms per MB moved
_POLL_S = 0.05
_PORT_ATTEMPTS = 3
_LOG_TAIL_CHARS = 2000
_WORKER_MODULE = "computewise.bench.collective_worker"


@dataclass(frozen=True)
class CollectiveFigure(Jsonable):
    """One collective at one message size: its time per call and its algorithm and bus bandwidths."""

    json_description: ClassVar[str] = (
        "One collective at one message size, nccl-tests' algbw and busbw (bench.collectives.CollectiveFigure)."
    )
    op: str = field(metadata=json_field(enum=list(OPS)))
    backend: str = field(metadata=json_field(enum=["gloo", "nccl"]))
    world_size: int = field(metadata=json_field(minimum=1))
    message_bytes: int = field(metadata=json_field(minimum=0))
    time_s: Measured
    algbw_gb_per_s: float
    busbw_gb_per_s: float

    @classmethod
    def from_dict(cls, data: object, source: str = "bench result") -> Self:
        """Read a figure back; the bandwidths are recomputed from the time, so they cannot disagree with it."""
        read = super().from_dict(data, source)
        if read.op not in OPS:
            raise InputError(
                f"{source}: op must be one of {', '.join(OPS)}, got {read.op!r}",
                "pass the JSON that computewise bench wrote, unedited",
            )
        if read.world_size < 2 or read.message_bytes < 1 or read.time_s.median <= 0:
            raise InputError(
                f"{source}: a collective needs world_size >= 2, message_bytes >= 1 and a positive time",
                "pass the JSON that computewise bench wrote, unedited",
            )
        algbw, busbw = _bandwidths(read.op, read.world_size, read.message_bytes, read.time_s)
        return replace(read, algbw_gb_per_s=algbw, busbw_gb_per_s=busbw)


def bus_factor(op: str, world_size: int) -> float:
    """busbw / algbw for ``op`` on ``world_size`` ranks (nccl-tests, doc/PERFORMANCE.md).

    An all-reduce in a ring sends and receives ``2(n-1)/n`` of the buffer through every rank's link
    (a reduce-scatter then an all-gather); an all-gather or a reduce-scatter alone ``(n-1)/n``.
    """
    if op == "all-reduce":
        return 2 * (world_size - 1) / world_size
    if op in ("all-gather", "reduce-scatter"):
        return (world_size - 1) / world_size
    raise ValueError(f"unknown collective {op!r}")


def measure_collectives(
    world_size: int,
    sizes_bytes: Sequence[int],
    *,
    quick: bool,
    progress: Callable[[str], None] | None = None,
    device: Literal["cpu", "cuda"] = "cpu",
) -> tuple[CollectiveFigure, ...]:
    """Time every collective in ``OPS`` at every size between ``world_size`` local processes.

    ``device="cpu"`` joins the processes with gloo over 127.0.0.1; ``"cuda"`` with NCCL, one GPU per
    process, and needs ``world_size`` visible GPUs. A size is rounded down to a whole number of
    float32 elements per rank (every op then moves the same bytes), and the figure carries the size
    actually moved. ``quick`` takes fewer warm-up and timed calls. Returns the figures op by op, each
    op in the order of ``sizes_bytes``.
    """
    backend = _check_request(world_size, sizes_bytes, device)
    say = progress or (lambda _message: None)
    messages = tuple(_rounded(size, world_size) for size in sizes_bytes)
    request = {
        "backend": backend,
        "device": device,
        "world_size": world_size,
        "ops": list(OPS),
        "sizes_bytes": list(messages),
        "warmup": _WARMUP[quick],
        "repeats": _REPEATS[quick],
        "collective_timeout_s": _COLLECTIVE_TIMEOUT_S,
    }
    moved_bytes = len(OPS) * sum(messages) * (_WARMUP[quick] + _REPEATS[quick])
    deadline_s = _START_BUDGET_S + moved_bytes / (_SLOWEST_GB_PER_S * 1e9)
    say(f"collectives: starting {world_size} {backend} processes")
    with tempfile.TemporaryDirectory(prefix="computewise-collectives-") as work:
        per_rank = _run_ranks(request, Path(work), deadline_s, say)
    figures: list[CollectiveFigure] = []
    for index, (op, message_bytes) in enumerate((op, size) for op in OPS for size in messages):
        slowest_s = [max(times) for times in zip(*(rank[index] for rank in per_rank), strict=True)]
        figures.append(_figure(op, backend, world_size, message_bytes, Measured.of(slowest_s)))
    return tuple(figures)


def _figure(op: str, backend: str, world_size: int, message_bytes: int, time_s: Measured) -> CollectiveFigure:
    algbw, busbw = _bandwidths(op, world_size, message_bytes, time_s)
    return CollectiveFigure(op, backend, world_size, message_bytes, time_s, algbw, busbw)


def _bandwidths(op: str, world_size: int, message_bytes: int, time_s: Measured) -> tuple[float, float]:
    """Algorithm and bus bandwidth in GB/s of ``message_bytes`` moved in ``time_s``'s median."""
    algbw_gb_per_s = message_bytes / time_s.median / 1e9
    return algbw_gb_per_s, algbw_gb_per_s * bus_factor(op, world_size)


def _check_request(world_size: int, sizes_bytes: Sequence[int], device: str) -> str:
    """The backend for ``device``, after refusing what cannot be measured here."""
    try:
        import torch
        import torch.distributed as dist
    except ImportError as error:
        raise MissingExtraError("torch", "torch", "measuring collectives") from error
    if device == "cuda":
        most, backend, available = torch.cuda.device_count(), "nccl", dist.is_nccl_available()
        where = f"this machine shows {most} GPU(s), and NCCL runs one process per GPU"
    else:
        most, backend, available = _MAX_CPU_RANKS, "gloo", dist.is_gloo_available()
        where = f"at most {most} on one CPU host"
    if most < 2:
        raise InputError(
            f"collectives on {device} need at least 2 GPUs; {where}",
            "measure collectives on cpu (gloo), or on a machine with two or more GPUs",
        )
    if not 2 <= world_size <= most:
        raise InputError(
            f"collectives on {device} need 2 to {most} processes, got {world_size}",
            f"a collective needs at least two ranks; {where}",
        )
    if not available:
        raise InputError(
            f"this torch build has no {backend} backend for torch.distributed",
            "install a torch build with distributed support (the default wheels from pytorch.org have it)",
        )
    smallest = world_size * _ELEMENT_BYTES
    bad = [size for size in sizes_bytes if not smallest <= size <= _MAX_MESSAGE_BYTES]
    if not sizes_bytes or bad:
        raise InputError(
            f"collective message sizes must be {smallest} B to {format_bytes(_MAX_MESSAGE_BYTES)}"
            f" (one float32 per rank at least), got {list(sizes_bytes) or 'none'}",
            "pass one or more sizes in that range, e.g. 64 KiB, 1 _MIB and 16 _MIB",
        )
    if device == "cpu":
        import psutil

        needed = world_size * 2 * max(sizes_bytes)  # a rank holds an op's input and output at once
        available_bytes = psutil.virtual_memory().available
        if needed > available_bytes:
            raise InputError(
                f"collectives on {world_size} processes up to {format_bytes(max(sizes_bytes))} need"
                f" {format_bytes(needed)} of memory, and {format_bytes(available_bytes)} is available",
                "measure smaller messages or fewer processes",
            )
    return backend


def _rounded(size_bytes: int, world_size: int) -> int:
    """``size_bytes`` rounded down so each rank holds a whole number of float32 elements."""
    unit = world_size * _ELEMENT_BYTES
    return size_bytes // unit * unit


def _run_ranks(
    request: dict[str, Any], work: Path, deadline_s: float, say: Callable[[str], None]
) -> list[list[list[float]]]:
    """Start the ranks, wait for them and read their timings: [rank][op x size][call] in seconds.

    A port taken between choosing it and rank 0 binding it is retried with another.
    """
    request_path = work / "request.json"
    request_path.write_text(json.dumps(request), encoding="utf-8")
    failure = ""
    for _ in range(_PORT_ATTEMPTS):
        for stale in [*work.glob("rank-*"), work / "progress.txt"]:
            stale.unlink(missing_ok=True)
        outcome = _launch(request_path, request, work, deadline_s, say)
        if outcome is None:
            return [_read_rank(work, rank) for rank in range(request["world_size"])]
        failure = outcome
        if "address already in use" not in failure.lower():
            break
    raise ComputewiseError(
        f"measuring collectives failed: {failure}",
        "check that local processes may connect to each other on 127.0.0.1 (a firewall, a sandbox),"
        " or run computewise bench without collectives",
    )


def _launch(
    request_path: Path, request: dict[str, Any], work: Path, deadline_s: float, say: Callable[[str], None]
) -> str | None:
    """Run one set of ranks to the end; None when all succeeded, else what went wrong.

    Every rank is a child of this process, killed by its PID when another rank fails, at the
    deadline, or when this process is interrupted, so none outlives the measurement.
    """
    world_size = int(request["world_size"])
    env = _worker_env(world_size, free_port())
    progress_path = work / "progress.txt"
    ranks: list[subprocess.Popen[bytes]] = []
    try:
        for rank in range(world_size):
            with (work / f"rank-{rank}.log").open("wb") as log:
                ranks.append(
                    subprocess.Popen(
                        _worker_command(request_path, rank, work),
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL,
                        env={**env, "RANK": str(rank), "LOCAL_RANK": str(rank)},
                    )
                )
        return _wait(ranks, work, progress_path, deadline_s, say)
    finally:
        for process in ranks:
            if process.poll() is None:
                process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)


def _wait(
    ranks: list[subprocess.Popen[bytes]],
    work: Path,
    progress_path: Path,
    deadline_s: float,
    say: Callable[[str], None],
) -> str | None:
    """Poll the ranks until all exit or one fails, passing rank 0's progress lines on."""
    deadline = time.monotonic() + deadline_s
    shown = 0
    while True:
        shown = _relay_progress(progress_path, shown, say)
        codes = [process.poll() for process in ranks]
        failed = [(rank, code) for rank, code in enumerate(codes) if code not in (None, 0)]
        if failed:
            rank, code = failed[0]
            return f"rank {rank} exited with code {code}: {_log_tail(work / f'rank-{rank}.log')}"
        if all(code == 0 for code in codes):
            _relay_progress(progress_path, shown, say)  # lines written after this round's first look
            return None
        if time.monotonic() > deadline:
            running = [rank for rank, code in enumerate(codes) if code is None]
            tail = _log_tail(work / f"rank-{running[0]}.log")
            late = f"ranks {running} did not finish within {deadline_s:.0f} s and were stopped"
            return late + (f": {tail}" if tail else "")
        time.sleep(_POLL_S)


def _relay_progress(path: Path, shown: int, say: Callable[[str], None]) -> int:
    if not path.exists():
        return shown
    complete = path.read_bytes().decode("utf-8", errors="replace").split("\n")[:-1]  # a line still being written waits
    for line in complete[shown:]:
        say(f"collectives: {line}")
    return max(shown, len(complete))


def _worker_command(request_path: Path, rank: int, work: Path) -> list[str]:
    return [sys.executable, "-m", _WORKER_MODULE, str(request_path), str(rank), str(work)]


def _worker_env(world_size: int, port: int) -> dict[str, str]:
    """The rendezvous (127.0.0.1 and a free port) and one thread per rank, so ranks do not fight over cores."""
    source_root = str(Path(__file__).resolve().parents[2])  # the directory holding computewise/
    env = dict(os.environ)
    env.update(
        {
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "WORLD_SIZE": str(world_size),
            "OMP_NUM_THREADS": "1",
            "PYTHONPATH": os.pathsep.join(filter(None, [source_root, env.get("PYTHONPATH")])),
            "PYTHONWARNINGS": "ignore::FutureWarning",
        }
    )
    loopback = _loopback_interface()
    if loopback is not None:
        # gloo and NCCL's bootstrap otherwise bind the address the host name resolves to.
        env["GLOO_SOCKET_IFNAME"] = loopback
        env["NCCL_SOCKET_IFNAME"] = loopback
    return env


def _loopback_interface() -> str | None:
    """The name of the interface holding 127.0.0.1 (``lo`` on Linux, ``lo0`` on macOS), if any."""
    import psutil

    for name, addresses in psutil.net_if_addrs().items():
        if any(address.family == socket.AF_INET and address.address == "127.0.0.1" for address in addresses):
            return str(name)
    return None


def _read_rank(work: Path, rank: int) -> list[list[float]]:
    path = work / f"rank-{rank}.json"
    try:
        answer = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ComputewiseError(
            f"measuring collectives: rank {rank} exited without its timings ({error})",
            "run again; if it repeats, report it with the output of computewise bench",
        ) from error
    return [[float(value) for value in times] for times in answer["times_s"]]


def _log_tail(path: Path) -> str:
    text = path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""
    return text[-_LOG_TAIL_CHARS:].strip()
