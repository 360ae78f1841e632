"""One short training trial, isolated in its own process, timed the same way for every configuration.

A trial builds the training setup, prepares the ``StepEngine`` for one configuration, runs a few
warm-up steps (compilation, allocator growth and loader start-up happen there and are timed
separately), then ``steps`` measured optimizer steps, each including the wait for its
micro-batches; the median step time is the configuration's speed. Peak memory is what PyTorch
allocated on a GPU; on a CPU, how far the trial's resident memory rose above where it started
(a forked trial starts with the server's torch already mapped, which is not the trial's).

**Isolation.** A trial that runs out of memory, crashes the interpreter or hangs in a compiler
must not take the search down, nor leave a fragmented allocator, TF32 switched on or a compiled
graph cached for the next trial. So every trial runs in a fresh process. Starting a Python that
imports torch costs seconds, more than a short trial, so ``python -m computewise.tune.trial`` is a
small server: it imports torch and the entry point's module once, then forks a child per
request (JSON lines in on stdin, out on stdout). The child starts with nothing run yet, so
CUDA is initialised only in the child and its memory and process-wide settings die with it;
the server enforces the trial's timeout and turns a child killed by a signal into a status.
Where ``os.fork`` does not exist, or an imported module already initialised CUDA (a forked child
could not use it), each trial is a new interpreter instead: slower, as isolated.

Each result carries its wall time and its CPU time (the trial process and the workers it waited
for): on a machine shared with other jobs, wall time also measures the neighbours.

**A LoRA rank search** (``lora_rank``): the trial replaces the rank of the setup's ``finetune``
(alpha / rank kept, so the adapters' scaling stays), and after its measured steps it measures the
quality the ranks are compared by: ``TrainingSetup.evaluate`` on the trained model when the entry
point gives one, else the last step's training loss. Every trial of a search takes the same
number of steps of the same global batch, so the ranks are compared after the same tokens.

Statuses: ``ok``; ``oom`` (an allocation failed, or the kernel killed the process); ``error``
(the setup, the engine or a step raised: the message says what); ``timeout``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import math
import os
import select
import signal
import statistics
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Literal

from computewise.errors import ComputewiseError
from computewise.specs.codec import Jsonable, json_field, json_property
from computewise.specs.finetune import FineTune
from computewise.train.config import TrainConfig

__all__ = ["TrialRequest", "TrialResult", "TrialRunner", "TrialStatus", "run_trial", "with_lora_rank"]

TrialStatus = Literal["ok", "oom", "error", "timeout"]
# The server answers within the trial's timeout plus this, or it is presumed dead and restarted.
_SERVER_GRACE_S = 60.0
_LOG_TAIL_LINES = 5
_OOM_MARKERS = ("out of memory", "can't allocate memory", "cannot allocate memory")


@dataclass(frozen=True)
class TrialRequest(Jsonable):
    """What to run: the entry point and its settings, one configuration, and how long to measure it.

    Its JSON is the line the tuner sends a trial process; the setup's settings are the user's free-form JSON,
    passed on as they are. A request of an older tuner, without the keys added since (``lora_rank``), reads
    with their defaults.
    """

    entry: str
    setup_config: dict[str, Any]
    config: TrainConfig
    device: str
    steps: int
    warmup_steps: int = 2
    threads: int = 1
    timeout_s: float = 600.0
    log_path: str | None = None
    lora_rank: int | None = None  # a rank search's rank, replacing the setup's; None: the setup as it is


@dataclass(frozen=True)
class TrialResult(Jsonable):
    """What a trial measured; ``step_times_s`` are the measured steps only (warm-up is ``warmup_s``).

    Its JSON is what the trial process answers, and every trial's figures in ``tune --json``: the
    derived speeds are written after the fields and not read back.
    """

    status: TrialStatus
    message: str | None = None
    step_times_s: tuple[float, ...] = ()
    warmup_s: float | None = None
    first_step_s: float | None = None
    setup_s: float | None = None
    wall_s: float = 0.0
    cpu_s: float | None = None
    peak_memory_bytes: int | None = None
    peak_memory_kind: str | None = None
    final_loss: float | None = None
    global_batch_size: int | None = None
    tokens_per_sample: int | None = None
    threads: int | None = None
    # A rank search's quality measure after the trial (module docstring); written only where one was measured.
    quality: float | None = field(
        default=None,
        metadata=json_field(
            omit_empty=True,
            description="The quality measured after the trial (a --lora-ranks search only): the setup's evaluate, "
            "else the last step's training loss.",
        ),
    )

    @json_property()
    def median_step_s(self) -> float | None:
        return statistics.median(self.step_times_s) if self.step_times_s else None

    @json_property()
    def samples_per_s(self) -> float | None:
        median = self.median_step_s
        if median is None or not median > 0 or self.global_batch_size is None:
            return None
        return self.global_batch_size / median

    @json_property()
    def tokens_per_s(self) -> float | None:
        samples = self.samples_per_s
        return None if samples is None or self.tokens_per_sample is None else samples * self.tokens_per_sample


def run_trial(request: TrialRequest) -> TrialResult:
    """Run one trial in this process (the child's work); every failure becomes a status, never an exception."""
    started = time.perf_counter()
    measured: list[float] = []
    try:
        return _measure(request, started, measured)
    except BaseException as failure:  # the child reports everything, even SystemExit from a user's setup
        traceback.print_exc()
        status: TrialStatus = "oom" if _is_oom(failure) else "error"
        return TrialResult(
            status=status,
            message=_describe(failure),
            step_times_s=tuple(measured),
            wall_s=time.perf_counter() - started,
            threads=request.threads,
        )


def _measure(request: TrialRequest, started: float, measured: list[float]) -> TrialResult:
    import torch

    from computewise.train.data import make_loader
    from computewise.train.engine import StepEngine
    from computewise.train.setup import load_setup

    torch.set_num_threads(request.threads)
    device = torch.device(request.device)
    start_rss_bytes = _rss_bytes()
    setup = load_setup(request.entry, request.setup_config)
    if request.lora_rank is not None:
        setup.finetune = with_lora_rank(setup.finetune, request.lora_rank)
    engine = StepEngine.prepare(setup, request.config, device)
    loader = make_loader(setup, request.config, engine.micro_batch_size, start_sample=0)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    setup_s = time.perf_counter() - started

    def one_step() -> tuple[float, float]:
        begin = time.perf_counter()
        loss = engine.step([next(loader) for _ in range(engine.accumulation_steps)])  # float(): waits for the device
        return time.perf_counter() - begin, loss

    warmup_start = time.perf_counter()
    first_step_s, loss = one_step()
    for _ in range(request.warmup_steps - 1):
        _, loss = one_step()
    warmup_s = time.perf_counter() - warmup_start
    for _ in range(request.steps):
        seconds, loss = one_step()
        measured.append(seconds)
    if not math.isfinite(loss):
        raise FloatingPointError(f"the loss is {loss} after {request.warmup_steps + request.steps} steps")
    quality = None
    if request.lora_rank is not None:
        quality = float(setup.evaluate(engine.raw_model)) if setup.evaluate is not None else loss
    if device.type == "cuda":
        peak, kind = int(torch.cuda.max_memory_allocated(device)), "cuda-allocated"
    else:
        peak, kind = max(0, _peak_rss_bytes() - start_rss_bytes), "process-rss-rise"
    return TrialResult(
        status="ok",
        step_times_s=tuple(measured),
        warmup_s=warmup_s,
        first_step_s=first_step_s,
        setup_s=setup_s,
        wall_s=time.perf_counter() - started,
        peak_memory_bytes=peak,
        peak_memory_kind=kind,
        final_loss=loss,
        global_batch_size=setup.global_batch_size,
        tokens_per_sample=setup.tokens_per_sample,
        threads=request.threads,
        quality=quality,
    )


def with_lora_rank(finetune: FineTune, rank: int) -> FineTune:
    """``finetune`` at ``rank``, alpha scaled with it: PEFT scales the adapters by alpha / rank, which stays."""
    return replace(finetune, rank=rank, alpha=finetune.alpha * rank / finetune.rank)


def _rss_bytes() -> int:
    """Resident memory now: the forked trial starts with the server's torch already mapped."""
    import psutil

    return int(psutil.Process().memory_info().rss)


def _peak_rss_bytes() -> int:
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)  # macOS reports bytes, Linux KiB


def _is_oom(failure: BaseException) -> bool:
    if isinstance(failure, MemoryError) or type(failure).__name__ == "OutOfMemoryError":
        return True
    return isinstance(failure, RuntimeError) and any(marker in str(failure).lower() for marker in _OOM_MARKERS)


def _describe(failure: BaseException) -> str:
    if isinstance(failure, ComputewiseError):
        return str(failure)
    first_line = (str(failure).strip().splitlines() or [""])[0]
    return f"{type(failure).__name__}: {first_line}" if first_line else type(failure).__name__


# -- the server (child side) ---------------------------------------------------------------------


def _serve(preload: str | None) -> None:
    """Answer one JSON request per line of stdin with one JSON result per line, each trial in a fork."""
    protocol = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # prints from a user's setup must not corrupt the protocol
    # Imported once here, so forked trials start with them loaded: torch._dynamo alone takes seconds,
    # and the optimizers import it on construction.
    import torch._dynamo
    import torch.utils.checkpoint
    import torch.utils.data

    import computewise.train.data
    import computewise.train.engine  # noqa: F401

    if preload:
        with contextlib.suppress(Exception):  # a broken entry point is reported by its trial, not here
            importlib.import_module(preload)
    # CUDA cannot be used in a child forked after it was initialised; a module that touches the GPU
    # when imported leaves only the slower way, a new interpreter per trial.
    fork = hasattr(os, "fork") and not torch.cuda.is_initialized()  # type: ignore[no-untyped-call]
    for line in sys.stdin:
        if not line.strip():
            continue
        request = TrialRequest.from_dict(json.loads(line))
        cpu_before_s = _children_cpu_s()
        result = _forked(request) if fork else _in_new_interpreter(request)
        cpu_after_s = _children_cpu_s()
        if cpu_before_s is not None and cpu_after_s is not None:
            result = replace(result, cpu_s=cpu_after_s - cpu_before_s)
        protocol.write(json.dumps(result.to_dict()) + "\n")
        protocol.flush()


def _children_cpu_s() -> float | None:
    """CPU seconds of this process's finished children (a trial and the workers it waited for); None on Windows."""
    try:
        import resource
    except ImportError:
        return None
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return float(usage.ru_utime + usage.ru_stime)


def _forked(request: TrialRequest) -> TrialResult:
    started = time.perf_counter()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the trial process
        os.close(read_end)
        _redirect_output(request.log_path)
        try:
            payload = json.dumps(run_trial(request).to_dict()).encode()
            with os.fdopen(write_end, "wb") as stream:
                stream.write(payload)
        finally:
            os._exit(0)
    os.close(write_end)
    payload, timed_out = _read_until(read_end, started + request.timeout_s)
    os.close(read_end)
    if timed_out:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    _, wait_status = os.waitpid(pid, 0)
    wall_s = time.perf_counter() - started
    if timed_out:
        return TrialResult(
            "timeout", f"no result within {request.timeout_s:.0f} s; the trial was killed", wall_s=wall_s
        )
    if payload:
        return replace(TrialResult.from_dict(json.loads(payload)), wall_s=wall_s)
    return _died(os.waitstatus_to_exitcode(wait_status), request.log_path, wall_s)


def _redirect_output(log_path: str | None) -> None:
    """Send the trial's stdout and stderr to its log (or nowhere), and detach it from the server's stdin."""
    target = os.open(log_path or os.devnull, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(target, 1)
    os.dup2(target, 2)
    os.close(target)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)


def _read_until(fd: int, deadline: float) -> tuple[bytes, bool]:
    """Everything written to ``fd`` until it closes; (what came, True) when the deadline passed first."""
    chunks: list[bytes] = []
    while True:
        remaining = deadline - time.perf_counter()
        if remaining <= 0:
            return b"".join(chunks), True
        ready, _, _ = select.select([fd], [], [], remaining)
        if ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                return b"".join(chunks), False
            chunks.append(chunk)


def _died(exit_code: int, log_path: str | None, wall_s: float) -> TrialResult:
    """A child that left no result: killed by a signal (SIGKILL is the kernel's out-of-memory killer) or crashed."""
    tail = _log_tail(log_path)
    if exit_code == -signal.SIGKILL:
        return TrialResult(
            "oom", "the trial process was killed (SIGKILL): the system likely ran out of memory", wall_s=wall_s
        )
    if exit_code < 0:
        reason = f"the trial process died of signal {signal.Signals(-exit_code).name}"
    else:
        reason = f"the trial process exited with code {exit_code} without a result"
    return TrialResult("error", reason + (f"; its log ends: {tail}" if tail else ""), wall_s=wall_s)


def _log_tail(log_path: str | None) -> str:
    if log_path is None:
        return ""
    try:
        lines = Path(log_path).read_text(encoding="utf-8", errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(lines[-_LOG_TAIL_LINES:])


def _in_new_interpreter(request: TrialRequest) -> TrialResult:
    started = time.perf_counter()
    command = [sys.executable, "-m", "computewise.tune.trial", "--single"]
    log = open(request.log_path or os.devnull, "a", encoding="utf-8")  # noqa: SIM115 (closed below)
    try:
        done = subprocess.run(
            command,
            input=json.dumps(request.to_dict()),
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            timeout=request.timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        wall_s = time.perf_counter() - started
        return TrialResult(
            "timeout", f"no result within {request.timeout_s:.0f} s; the trial was killed", wall_s=wall_s
        )
    finally:
        log.close()
    wall_s = time.perf_counter() - started
    if done.stdout.strip():
        return replace(TrialResult.from_dict(json.loads(done.stdout)), wall_s=wall_s)
    return _died(done.returncode, request.log_path, wall_s)


# -- the runner (parent side) --------------------------------------------------------------------


@dataclass
class TrialRunner:
    """Runs trials of one entry point through one trial server, restarting it if it dies."""

    entry: str
    setup_config: dict[str, Any]
    device: str
    threads: int
    timeout_s: float = 600.0
    warmup_steps: int = 2
    log_dir: Path | None = None
    lora_rank: int | None = None
    _server: subprocess.Popen[str] | None = field(default=None, init=False, repr=False)
    _server_log: IO[str] | None = field(default=None, init=False, repr=False)
    _count: int = field(default=0, init=False, repr=False)

    def run(self, config: TrainConfig, steps: int) -> TrialResult:
        """One trial of ``config`` with ``steps`` measured steps; a dead server becomes an error status."""
        self._count += 1
        log_path = str(self.log_dir / f"trial-{self._count:03d}.log") if self.log_dir is not None else None
        request = TrialRequest(
            entry=self.entry,
            setup_config=self.setup_config,
            config=config,
            device=self.device,
            steps=steps,
            warmup_steps=self.warmup_steps,
            threads=self.threads,
            timeout_s=self.timeout_s,
            log_path=log_path,
            lora_rank=self.lora_rank,
        )
        server = self._ensure_server()
        started = time.perf_counter()
        if server.stdin is None or server.stdout is None:
            raise RuntimeError("the trial server has no pipes")
        try:
            server.stdin.write(json.dumps(request.to_dict()) + "\n")
            server.stdin.flush()
            ready, _, _ = select.select([server.stdout], [], [], self.timeout_s + _SERVER_GRACE_S)
            line = server.stdout.readline() if ready else ""
        except (BrokenPipeError, OSError):
            line = ""
        if not line:
            self.close()
            message = "the trial server stopped answering" + (f"; its log ends: {t}" if (t := self._tail()) else "")
            return TrialResult("error", message, wall_s=time.perf_counter() - started)
        return TrialResult.from_dict(json.loads(line))

    def _ensure_server(self) -> subprocess.Popen[str]:
        if self._server is not None and self._server.poll() is None:
            return self._server
        self.close()
        module = self.entry.partition(":")[0]
        command = [sys.executable, "-m", "computewise.tune.trial"] + (["--preload", module] if module else [])
        log_path = self.log_dir / "server.log" if self.log_dir is not None else None
        self._server_log = open(log_path or os.devnull, "a", encoding="utf-8")  # noqa: SIM115 (closed in close())
        self._server = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._server_log, text=True, bufsize=1
        )
        return self._server

    def _tail(self) -> str:
        return _log_tail(str(self.log_dir / "server.log")) if self.log_dir is not None else ""

    def close(self) -> None:
        """Stop the server (closing its stdin ends its loop; a stuck one is killed)."""
        server, self._server = self._server, None
        if server is not None:
            with contextlib.suppress(OSError):
                if server.stdin is not None:
                    server.stdin.close()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
            if server.stdout is not None:
                server.stdout.close()
        if self._server_log is not None:
            self._server_log.close()
            self._server_log = None

    def __enter__(self) -> TrialRunner:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m computewise.tune.trial", description=__doc__.split("\n\n")[0])
    parser.add_argument("--preload", help="module to import once before forking trials (the entry point's)")
    parser.add_argument("--single", action="store_true", help="run one request from stdin in this process")
    arguments = parser.parse_args(argv)
    if arguments.single:
        protocol = os.fdopen(os.dup(1), "w", encoding="utf-8")
        os.dup2(2, 1)  # as in the server: the user's prints go to the log, not into the result
        result = run_trial(TrialRequest.from_dict(json.loads(sys.stdin.read())))
        protocol.write(json.dumps(result.to_dict()) + "\n")
        protocol.close()
        return
    _serve(arguments.preload)


if __name__ == "__main__":
    main()
