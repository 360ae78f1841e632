"""``computewise scaletest``: measured data-parallel scaling beside the planner's prediction.

For each world size N the entry point trains a few steps under torchrun
(``python -m torch.distributed.run --nproc_per_node N --master_addr 127.0.0.1 --master_port FREE``,
gloo on CPU, NCCL on GPU), one rank per process (:mod:`computewise.tune.scaleworker`).

Weak scaling: each rank keeps the setup's batch, so the global batch is N times larger and the
ideal step time does not change. Measured efficiency = throughput(N) / (N x throughput(1)), where
throughput(N) = N x batch / step time of the slowest rank (DDP waits for it every step).

The prediction is the planner's data-parallel model: the step time of one process plus the ring
all-reduce of the gradients (:func:`computewise.estimate.collectives.bus_factor` over the link), with
no overlap of communication and backward (DDP overlaps some, so the prediction errs pessimistic).
On a CPU, ranks that need more threads than there are cores share them, so their compute slows by
that oversubscription. The link is the catalog's interconnect times its achievable fraction for a
known GPU; on a CPU, gloo runs over TCP on the loopback interface, for which we assume
:data:`CPU_LINK_BYTES_PER_S` (``--link-gb-per-s`` overrides either).

Where adding workers stops paying: the first N whose efficiency falls below
:data:`EFFICIENCY_FLOOR`, or whose throughput no longer grows.

Every launch is bounded by a timeout. On a timeout (or Ctrl-C) torchrun gets SIGTERM, which it
forwards to its ranks; whatever is still alive after a grace period, torchrun and every process
it started, is killed by PID.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from computewise.errors import ScaleTestError
from computewise.specs.codec import Document, Jsonable, json_field
from computewise.system.cpu import cpu_model_name, usable_cpus
from computewise.system.ports import free_port
from computewise.train.config import TrainConfig
from computewise.train.setup import load_setup
from computewise.tune.scaleworker import rank_file
from computewise.units import plural

if TYPE_CHECKING:
    import psutil

__all__ = [
    "CPU_LINK_BYTES_PER_S",
    "EFFICIENCY_FLOOR",
    "Link",
    "ScaleOptions",
    "ScaleTestResult",
    "WorldSizeResult",
    "parse_nproc",
    "run_scaletest",
    "stops_paying",
]

DeviceChoice = Literal["auto", "cpu", "cuda"]
Status = Literal["ok", "error", "timeout"]

EFFICIENCY_FLOOR = 0.70
"""Below 70 % of linear, an extra worker buys less than 0.7 of its own throughput: the usual rule of thumb
for where data parallelism stops paying for the hardware it adds."""

CPU_LINK_BYTES_PER_S = 1.0e9
"""Assumed all-reduce bus bandwidth of gloo over TCP on 127.0.0.1 (judgement: gloo's ring all-reduce of
1-64 MB between two ranks measured 0.3-1.3 GB/s bus bandwidth on a shared 2-core VM; 1 GB/s is the middle)."""

WORKER_MODULE = "computewise.tune.scaleworker"
_GRACE_S = 5.0  # torchrun's own shutdown of its ranks after SIGTERM, before we kill by PID
_PORT_ATTEMPTS = 3  # a free port found by bind(0) can be taken before torchrun binds it
_LOG_TAIL_CHARS = 1500
_NOT_MEASURED = "; null when not measured (status not ok)."
_WITHOUT_LINK = "; null when no link is known (no prediction)."


@dataclass(frozen=True)
class ScaleOptions:
    """What ``computewise scaletest`` was asked for; ``threads`` None shares the cores among the largest N."""

    nproc: tuple[int, ...]
    steps: int = 10
    warmup_steps: int = 3
    config: Mapping[str, Any] = field(default_factory=dict)
    train_config: TrainConfig = field(default_factory=TrainConfig)
    threads: int | None = None
    device: DeviceChoice = "auto"
    timeout_s: float = 300.0
    link_bytes_per_s: float | None = None

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise ScaleTestError(f"--steps must be >= 1, got {self.steps}", "e.g. --steps 10")
        if self.warmup_steps < 0:
            raise ScaleTestError(f"--warmup-steps must be >= 0, got {self.warmup_steps}", "e.g. --warmup-steps 3")
        if self.threads is not None and self.threads < 1:
            raise ScaleTestError(f"--threads must be >= 1, got {self.threads}")
        if not self.timeout_s > 0:
            raise ScaleTestError(f"--timeout must be positive, got {self.timeout_s:g} s", "e.g. --timeout 5m")
        if self.link_bytes_per_s is not None and not self.link_bytes_per_s > 0:
            raise ScaleTestError("--link-gb-per-s must be positive", "e.g. --link-gb-per-s 1")


@dataclass(frozen=True)
class Link(Jsonable):
    """The bandwidth the prediction moves gradients over, and where the figure comes from."""

    json_description: ClassVar[str] = "The all-reduce bandwidth the prediction assumes, and where it comes from."

    name: str
    bytes_per_s: float = field(metadata=json_field(exclusive_minimum=0, description="Bus bandwidth, bytes/s."))
    source: str


@dataclass(frozen=True)
class WorldSizeResult(Jsonable):
    """One world size: measured (``status`` ok) or why not, beside the prediction."""

    json_description: ClassVar[str] = "One world size: measured (status ok) or why not, beside the prediction."

    nproc: int = field(metadata=json_field(minimum=1, description="Processes, one rank each."))
    status: Status
    message: str | None = field(metadata=json_field(description="Why it was not measured; null when ok."))
    global_batch_size: int = field(metadata=json_field(minimum=1, description="nproc x batch_per_rank."))
    rank_median_step_s: tuple[float, ...] = field(
        metadata=json_field(description="Each rank's median step time, seconds; empty when not measured.")
    )
    step_s: float | None = field(metadata=json_field(description="The slowest rank's median step, s" + _NOT_MEASURED))
    warmup_s: float | None = field(metadata=json_field(description="The untimed steps' time, s" + _NOT_MEASURED))
    samples_per_s: float | None = field(metadata=json_field(description="Samples/s of all ranks" + _NOT_MEASURED))
    tokens_per_s: float | None = field(
        metadata=json_field(description="Tokens/s of all ranks; null when not measured or not a token model.")
    )
    speedup: float | None = field(metadata=json_field(description="samples_per_s over one process's" + _NOT_MEASURED))
    efficiency: float | None = field(metadata=json_field(description="speedup / nproc" + _NOT_MEASURED))
    predicted_allreduce_s: float | None = field(
        metadata=json_field(description="Ring all-reduce of the gradients over the link, s (0 for one)" + _WITHOUT_LINK)
    )
    predicted_step_s: float | None = field(
        metadata=json_field(description="One process's step plus the all-reduce, s" + _WITHOUT_LINK)
    )
    predicted_efficiency: float | None = field(
        metadata=json_field(description="One process's step over predicted_step_s" + _WITHOUT_LINK)
    )
    wall_s: float = field(metadata=json_field(description="Seconds the launch of this world size took."))


@dataclass(frozen=True)
class ScaleTestResult(Jsonable):
    """Every world size measured, the link assumed, and the first N where scaling stops paying."""

    json_document: ClassVar[Document] = Document(
        "scaletest",
        "scaletest ENTRYPOINT --json",
        "Measured data-parallel scaling of a training entry point under torchrun (weak scaling: each rank keeps "
        "the setup's batch) beside the planner's prediction, and where adding workers stops paying "
        "(tune.scaletest.ScaleTestResult).",
    )

    entry: str = field(metadata=json_field(description="The training entry point, package.module:function."))
    device: str = field(metadata=json_field(enum=["cpu", "cuda"]))
    device_name: str = field(metadata=json_field(description="The CPU model or the GPU's name."))
    cores: int = field(metadata=json_field(minimum=1, description="Usable CPU cores."))
    threads_per_process: int = field(metadata=json_field(minimum=1))
    batch_per_rank: int = field(metadata=json_field(minimum=1, description="Samples each rank trains per step."))
    micro_batch_size: int = field(
        metadata=json_field(minimum=1, description="Samples per forward and backward (after gradient accumulation).")
    )
    steps: int = field(metadata=json_field(minimum=1, description="Measured steps per world size."))
    warmup_steps: int = field(metadata=json_field(minimum=0, description="Untimed steps first, per world size."))
    params: int = field(metadata=json_field(minimum=0, description="Parameters that train."))
    gradient_bytes: int = field(metadata=json_field(minimum=0, description="Bytes all-reduced per step."))
    train_config: str = field(
        metadata=json_field(description="The training settings that differ from the defaults, or defaults.")
    )
    link: Link | None = field(metadata=json_field(description="Null when none is known: nothing is predicted."))
    rows: tuple[WorldSizeResult, ...] = field(metadata=json_field(description="One per world size, by nproc."))
    stops_paying_at: int | None = field(
        metadata=json_field(
            description="The first nproc whose efficiency is under efficiency_floor or whose throughput does not "
            "grow; null when none measured does."
        )
    )
    predicted_stops_paying_at: int | None = field(
        metadata=json_field(description="The same, predicted; null when none does, or nothing is predicted.")
    )
    efficiency_floor: float = field(metadata=json_field(description="Efficiency under which a worker stops paying."))
    warnings: tuple[str, ...]


@dataclass(frozen=True)
class _Hardware:
    kind: Literal["cpu", "cuda"]
    name: str
    cores: int
    gpus: int
    memory_bytes: float | None


@dataclass(frozen=True)
class _Measured:
    status: Status
    message: str | None
    hint: str | None
    user_error: bool
    rank_median_step_s: tuple[float, ...]
    warmup_s: float | None
    wall_s: float


def parse_nproc(text: str) -> tuple[int, ...]:
    """``"1,2,4"`` -> (1, 2, 4): sorted, without repeats; 1 is added because efficiency is relative to it."""
    try:
        sizes = {int(part) for part in text.split(",") if part.strip()}
    except ValueError as failure:
        raise ScaleTestError(f"--nproc {text!r} is not a list of integers", "e.g. --nproc 1,2,4") from failure
    if not sizes or min(sizes) < 1:
        raise ScaleTestError(f"--nproc {text!r} must name positive process counts", "e.g. --nproc 1,2,4")
    return tuple(sorted(sizes | {1}))


def stops_paying(points: Sequence[tuple[int, float]], floor: float = EFFICIENCY_FLOOR) -> int | None:
    """The first N > 1 whose efficiency is under ``floor`` or whose throughput does not beat the previous N.

    ``points`` are (N, throughput) in increasing N, starting with N = 1; efficiency is derived from them.
    """
    if not points or points[0][0] != 1:
        return None
    base = points[0][1]
    previous = base
    for nproc, throughput in points[1:]:
        if throughput / (nproc * base) < floor or throughput <= previous:
            return nproc
        previous = throughput
    return None


def _hardware(choice: DeviceChoice) -> _Hardware:
    import torch

    cuda = torch.cuda.is_available()
    if choice == "cuda" and not cuda:
        raise ScaleTestError("--device cuda, but torch sees no CUDA device", "use --device cpu or auto")
    if choice == "cpu" or not cuda:
        return _Hardware("cpu", cpu_model_name(), usable_cpus(), 0, None)
    properties = torch.cuda.get_device_properties(0)
    cores = usable_cpus()
    return _Hardware("cuda", str(properties.name), cores, torch.cuda.device_count(), float(properties.total_memory))


def _threads(options: ScaleOptions, hardware: _Hardware) -> int:
    """The same threads for every world size, so each rank's compute is alike and only scaling differs."""
    if options.threads is not None:
        return options.threads
    return max(1, hardware.cores // max(options.nproc))


def _check_world_sizes(nproc: Sequence[int], threads: int, hardware: _Hardware) -> list[str]:
    """Refuse more ranks than GPUs (each rank needs its own); warn when CPU ranks must share cores."""
    largest = max(nproc)
    if hardware.kind == "cuda" and largest > hardware.gpus:
        raise ScaleTestError(
            f"--nproc {largest} needs {largest} GPUs, but this machine has {hardware.gpus}",
            f"use --nproc up to {hardware.gpus}, or --device cpu",
        )
    if hardware.kind == "cpu" and largest * threads > hardware.cores:
        return [
            f"{plural(largest, 'process', 'processes')} x {plural(threads, 'thread')} oversubscribe the "
            f"{plural(hardware.cores, 'usable CPU core')}: "
            "those ranks share cores, so their measured efficiency shows contention, not the network"
        ]
    return []


def _link(options: ScaleOptions, hardware: _Hardware) -> Link | None:
    if options.link_bytes_per_s is not None:
        return Link("given", options.link_bytes_per_s, "--link-gb-per-s")
    if hardware.kind == "cpu":
        return Link(
            "loopback (gloo over TCP on 127.0.0.1)",
            CPU_LINK_BYTES_PER_S,
            "assumed: gloo ring all-reduce measured 0.3-1.3 GB/s bus bandwidth between two ranks on a 2-core VM",
        )
    from computewise.catalog import load_catalog

    catalog = load_catalog()
    accelerator = catalog.match_device(hardware.name, hardware.memory_bytes)
    if accelerator is None or not accelerator.interconnect_bytes_per_s:
        return None
    efficiency = catalog.assumption("intra_node_link_efficiency")
    return Link(
        f"{accelerator.name} interconnect",
        accelerator.interconnect_bytes_per_s * efficiency,
        f"catalog: {accelerator.interconnect_bytes_per_s / 1e9:g} GB/s x intra_node_link_efficiency {efficiency:g}",
    )


def _gradient_bytes(model: Any) -> tuple[int, int]:
    """Parameters that train, and the bytes of their gradients (the parameters' dtype: master weights)."""
    trained = [p for p in model.parameters() if p.requires_grad]
    return sum(p.numel() for p in trained), sum(p.numel() * p.element_size() for p in trained)


def _process_tree(pid: int) -> list[psutil.Process]:
    import psutil

    try:
        return list(psutil.Process(pid).children(recursive=True))
    except psutil.NoSuchProcess:
        return []


def _stop(launcher: subprocess.Popen[bytes]) -> None:
    """SIGTERM to torchrun (it forwards it to its ranks), then SIGKILL by PID to it and all it started.

    torchrun starts each rank in its own session, so killing torchrun alone would orphan them; the
    ranks' PIDs are read from the process tree while torchrun is still alive. ``is_running`` checks
    the start time too, so a PID reused since is never hit.
    """
    import psutil

    if launcher.poll() is not None:
        return
    tree = _process_tree(launcher.pid)
    launcher.send_signal(signal.SIGTERM)
    try:
        launcher.wait(timeout=_GRACE_S)
    except subprocess.TimeoutExpired:
        tree += _process_tree(launcher.pid)  # ranks started since the first look
        launcher.kill()
        launcher.wait()
    for process in tree:
        with contextlib.suppress(psutil.NoSuchProcess):
            if process.is_running():
                process.kill()
    psutil.wait_procs(tree, timeout=_GRACE_S)


def _log_tail(log_path: Path) -> str:
    text = log_path.read_text(encoding="utf-8", errors="replace") if log_path.exists() else ""
    return text[-_LOG_TAIL_CHARS:].strip()


def _launch_once(command: list[str], env: dict[str, str], run_dir: Path, timeout_s: float) -> tuple[int | None, str]:
    """Run torchrun once; (exit code or None on timeout, the tail of its output)."""
    log_path = run_dir / "torchrun.log"
    with log_path.open("wb") as log:
        launcher = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=Path.cwd())
        try:
            code: int | None = launcher.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            code = None
        except BaseException:
            _stop(launcher)
            raise
        if code is None:
            _stop(launcher)
    return code, _log_tail(log_path)


def _measure(entry: str, options: ScaleOptions, nproc: int, threads: int, hardware: _Hardware, work: Path) -> _Measured:
    """Launch N ranks under torchrun and read their answers."""
    run_dir = work / f"nproc-{nproc}"
    run_dir.mkdir()
    request = {
        "entry": entry,
        "config": dict(options.config),
        "train_config": options.train_config.to_dict(),
        "steps": options.steps,
        "warmup_steps": options.warmup_steps,
        "threads": threads,
        "device": hardware.kind,
        "out_dir": str(run_dir),
        "collective_timeout_s": options.timeout_s,
    }
    request_path = run_dir / "request.json"
    request_path.write_text(json.dumps(request), encoding="utf-8")
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(threads)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path.cwd()), env.get("PYTHONPATH")]))
    started = time.perf_counter()
    code: int | None = None
    tail = ""
    for _ in range(_PORT_ATTEMPTS):
        for stale in run_dir.glob("rank-*.json"):
            stale.unlink()
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nnodes",
            "1",
            "--nproc_per_node",
            str(nproc),
            "--master_addr",
            "127.0.0.1",
            "--master_port",
            str(free_port()),
            "--max_restarts",
            "0",
            "-m",
            WORKER_MODULE,
            str(request_path),
        ]
        code, tail = _launch_once(command, env, run_dir, options.timeout_s)
        if code == 0 or "address already in use" not in tail.lower():
            break
    wall_s = time.perf_counter() - started
    if code is None:
        message = f"{plural(nproc, 'process', 'processes')} did not finish within {options.timeout_s:g} s; stopped"
        return _Measured("timeout", message, "raise --timeout or lower --steps", False, (), None, wall_s)
    answers = [_read_rank(run_dir, rank) for rank in range(nproc)]
    failed = [answer for answer in answers if answer is None or answer.get("status") != "ok"]
    if code != 0 or failed:
        reported = next((answer for answer in failed if answer is not None), None)
        if reported is None:
            message = f"torchrun exited with {code} and no rank reported why: {tail or 'no output'}"
            return _Measured("error", message, None, False, (), None, wall_s)
        return _Measured(
            "error",
            str(reported["message"]),
            reported.get("hint"),
            bool(reported.get("user_error")),
            (),
            None,
            wall_s,
        )
    ok = [answer for answer in answers if answer is not None]
    return _Measured(
        "ok",
        None,
        None,
        False,
        tuple(float(answer["median_step_s"]) for answer in ok),
        max(float(answer["warmup_s"]) for answer in ok),
        wall_s,
    )


def _read_rank(run_dir: Path, rank: int) -> dict[str, Any] | None:
    path = rank_file(run_dir, rank)
    if not path.exists():
        return None
    answer: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return answer


def _predicted_allreduce_s(gradient_bytes: int, nproc: int, link: Link | None) -> float | None:
    """The planner's DDP gradient sync: a ring all-reduce of every gradient once per optimizer step."""
    if link is None:
        return None
    from computewise.estimate.arrays import col
    from computewise.estimate.collectives import bus_factor

    sent_bytes = float(bus_factor("all-reduce", col(float(nproc)))) * gradient_bytes
    return sent_bytes / link.bytes_per_s if sent_bytes > 0 else 0.0


def run_scaletest(
    entry: str, options: ScaleOptions, progress: Callable[[int, int, int], None] | None = None
) -> ScaleTestResult:
    """Measure each world size in ``options.nproc`` (1 always first) and compare with the prediction.

    ``progress(nproc, done, total)`` is called before each launch. The entry point is loaded here
    first, so a bad one fails in a second with its name instead of inside N ranks.
    """
    nproc = tuple(sorted(set(options.nproc) | {1}))
    setup = load_setup(entry, options.config)
    accumulation = options.train_config.accumulation_steps(setup.global_batch_size)
    batch = setup.global_batch_size
    params, gradient_bytes = _gradient_bytes(setup.model)
    tokens_per_sample = setup.tokens_per_sample
    del setup
    hardware = _hardware(options.device)
    threads = _threads(options, hardware)
    warnings = _check_world_sizes(nproc, threads, hardware)
    link = _link(options, hardware)
    measured: dict[int, _Measured] = {}
    with tempfile.TemporaryDirectory(prefix="computewise-scaletest-") as work:
        for done, size in enumerate(nproc):
            if progress is not None:
                progress(size, done, len(nproc))
            measured[size] = _measure(entry, options, size, threads, hardware, Path(work))
            if size == 1 and measured[1].status != "ok":
                base = measured[1]
                if base.user_error:
                    raise ScaleTestError(f"{entry}: {base.message}", base.hint)
                raise ScaleTestError(
                    f"the single-process run of {entry} failed, so nothing can be compared: {base.message}",
                    base.hint or "run a few steps of the entry point in one process to see the error",
                )
        if progress is not None:
            progress(nproc[-1], len(nproc), len(nproc))
    rows = _rows(measured, batch, tokens_per_sample, params, gradient_bytes, threads, hardware, link)
    measured_points = [(row.nproc, row.samples_per_s) for row in rows if row.samples_per_s is not None]
    predicted_points = [
        (row.nproc, row.nproc * batch / row.predicted_step_s) for row in rows if row.predicted_step_s is not None
    ]
    return ScaleTestResult(
        entry=entry,
        device=hardware.kind,
        device_name=hardware.name,
        cores=hardware.cores,
        threads_per_process=threads,
        batch_per_rank=batch,
        micro_batch_size=batch // accumulation,
        steps=options.steps,
        warmup_steps=options.warmup_steps,
        params=params,
        gradient_bytes=gradient_bytes,
        train_config=options.train_config.describe(),
        link=link,
        rows=tuple(rows),
        stops_paying_at=stops_paying(measured_points),
        predicted_stops_paying_at=stops_paying(predicted_points) if predicted_points else None,
        efficiency_floor=EFFICIENCY_FLOOR,
        warnings=tuple(warnings),
    )


def _rows(
    measured: Mapping[int, _Measured],
    batch: int,
    tokens_per_sample: int | None,
    params: int,
    gradient_bytes: int,
    threads: int,
    hardware: _Hardware,
    link: Link | None,
) -> list[WorldSizeResult]:
    base = measured[1]
    base_step_s = max(base.rank_median_step_s)
    rows: list[WorldSizeResult] = []
    for nproc, run in sorted(measured.items()):
        step_s = max(run.rank_median_step_s) if run.status == "ok" else None
        samples_per_s = nproc * batch / step_s if step_s else None
        base_per_s = batch / base_step_s
        allreduce_s = _predicted_allreduce_s(gradient_bytes, nproc, link) if nproc > 1 else 0.0
        # On a CPU, ranks needing more threads than there are cores take turns on them.
        sharing = max(1.0, nproc * threads / hardware.cores) if hardware.kind == "cpu" else 1.0
        predicted_step_s = base_step_s * sharing + allreduce_s if allreduce_s is not None else None
        rows.append(
            WorldSizeResult(
                nproc=nproc,
                status=run.status,
                message=run.message,
                global_batch_size=nproc * batch,
                rank_median_step_s=run.rank_median_step_s,
                step_s=step_s,
                warmup_s=run.warmup_s,
                samples_per_s=samples_per_s,
                tokens_per_s=samples_per_s * tokens_per_sample if samples_per_s and tokens_per_sample else None,
                speedup=samples_per_s / base_per_s if samples_per_s else None,
                efficiency=samples_per_s / (nproc * base_per_s) if samples_per_s else None,
                predicted_allreduce_s=allreduce_s,
                predicted_step_s=predicted_step_s,
                predicted_efficiency=base_step_s / predicted_step_s if predicted_step_s else None,
                wall_s=run.wall_s,
            )
        )
    return rows
