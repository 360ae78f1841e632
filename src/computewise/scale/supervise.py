"""Run a job on an engine until it is done, resubmitting it after preemption: one logical run in the ledger.

Spot capacity and shared pools take nodes away. A job written with ``computewise.train`` saves a
checkpoint and exits 75 when warned (SIGTERM), and a new process started with the same command
resumes from it. ``supervise`` is the loop around that contract:

1. open one ledger run (kind ``command``) for the logical job, priced from its resources;
2. submit the ``JobSpec`` with ``COMPUTEWISE_RUN_ID``/``COMPUTEWISE_DB`` in its environment, so
   the job's ``track()`` writes its steps into that run, numbered from where it resumed;
3. poll until the job ends; record the attempt with the engine's own start and end times;
4. exit 75 (preempted) -> resubmit, up to ``max_preemptions``; another failure -> resubmit up to
   ``spec.max_restarts`` (a hard kill leaves the last periodic checkpoint to resume from);
   success -> done;
5. close the run: billed time is the sum of the attempts, and ``account.interruptions`` prices
   what the interruptions added.

Ctrl-C (or SIGTERM) on the supervisor cancels the job and records the run as interrupted.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import FrameType
from typing import ClassVar

from computewise.account.interruptions import InterruptionCost, interruption_cost
from computewise.account.totals import RunCost, price_run
from computewise.catalog import Catalog
from computewise.errors import InputError
from computewise.estimate.quote import Ask, PriceRequest
from computewise.ledger import PREEMPTED_EXIT_CODE, AttemptOutcome, AttemptRow, Ledger, NewRun, PriceSnapshot
from computewise.ledger.connect import ENV_VAR as LEDGER_ENV
from computewise.ledger.records import RunStatus
from computewise.monitor.pricing import DetectedHardware, frozen_price
from computewise.monitor.recorded import RUN_ID_ENV, Ending, RecordedRun, new_run
from computewise.scale.engine import JobExit, JobHandle, JobSpec, JobStatus, Resources, Supervisable
from computewise.specs.codec import Jsonable, Layout, json_property

__all__ = ["DEFAULT_MAX_PREEMPTIONS", "AttemptEvent", "SupervisedRun", "job_price", "supervise"]

DEFAULT_MAX_PREEMPTIONS = 20
_TERMINAL: tuple[JobStatus, ...] = ("succeeded", "failed", "stopped")
_LOG_TAIL_CHARS = 4000
# The engine may take a moment to publish the exit code after the status turns terminal.
_EXIT_SETTLE_S = 5.0


@dataclass(frozen=True)
class AttemptEvent:
    """A progress note for the CLI: attempt ``number`` is ``state`` (submitted, running, or its outcome)."""

    number: int
    job_id: str
    state: str
    detail: str = ""


@dataclass(frozen=True)
class SupervisedRun(Jsonable):
    """The logical run when it is over: its status, the last exit code, every attempt and what it all cost
    (``run --engine --json``: of the price, its hourly figure and explanation; the log tail is printed, not written)."""

    json_layout: ClassVar[Layout] = (
        "run_id", "name", "backend", "status", "exit_code", "attempts", "interruption", "cost", "hourly_usd",
        "price_explanation",
    )  # fmt: skip

    run_id: int
    name: str
    backend: str
    status: RunStatus
    exit_code: int | None
    attempts: tuple[AttemptRow, ...]
    interruption: InterruptionCost
    cost: RunCost
    price: PriceSnapshot
    log_tail: str

    @json_property(description="The price snapshot's hourly price.")
    def hourly_usd(self) -> float:
        return self.price.hourly_usd

    @json_property(description="How that price was chosen.")
    def price_explanation(self) -> str:
        return self.price.explanation


def job_price(catalog: Catalog, request: PriceRequest, resources: Resources) -> PriceSnapshot:
    """The hourly price of what the job asks for, quoted like every other verb's (``estimate.quote``):
    a fraction of a GPU (or of an instance) pays that share and the explanation says so."""
    accelerator = catalog.accelerator(resources.accelerator) if resources.accelerator else None
    ask = Ask(accelerator, resources.gpus, max(1, math.ceil(resources.cpus)), why="requested by the job")
    return frozen_price(catalog, ask, request)


def supervise(
    engine: Supervisable,
    spec: JobSpec,
    ledger: Ledger,
    ledger_url: str,
    price: PriceSnapshot,
    *,
    max_preemptions: int = DEFAULT_MAX_PREEMPTIONS,
    poll_s: float = 1.0,
    on_event: Callable[[AttemptEvent], None] | None = None,
) -> SupervisedRun:
    """Submit ``spec`` and resubmit it after preemptions and failures until it succeeds or runs out of tries."""
    if max_preemptions < 0:
        raise InputError(f"max_preemptions must be >= 0, got {max_preemptions}", "use 0 to never resubmit")
    if not poll_s > 0:
        raise InputError(f"poll interval must be positive, got {poll_s}", "e.g. 1 second")
    notify = on_event or (lambda event: None)
    preemptions = failures = number = 0
    handle: JobHandle | None = None
    log_tail = ""
    with RecordedRun(ledger, _new_run(spec, engine.name, price)) as record:
        run_id = record.run_id
        job_spec = dataclasses.replace(spec, env={**spec.env, RUN_ID_ENV: str(run_id), LEDGER_ENV: ledger_url})
        try:
            with _stop_on_sigterm():
                while True:
                    number += 1
                    handle = engine.submit(job_spec)
                    ledger.start_attempt(run_id, number, engine.name, handle.job_id, time.time())
                    notify(AttemptEvent(number, handle.job_id, "submitted"))
                    outcome, job_exit = _wait(engine, handle, ledger, run_id, number, poll_s, notify)
                    # The engine's times, when it has them: queueing before the start is not billed.
                    ledger.finish_attempt(
                        run_id,
                        number,
                        outcome,
                        job_exit.ended_at_s or time.time(),
                        job_exit.exit_code,
                        started_at_s=job_exit.started_at_s,
                    )
                    log_tail = _tail(engine, handle)
                    handle = None
                    if outcome == "preempted" and preemptions < max_preemptions:
                        preemptions += 1
                    elif outcome == "failed" and failures < spec.max_restarts:
                        failures += 1
                    else:
                        record.declare(_ending(outcome, job_exit.exit_code))
                        break
                    notify(AttemptEvent(number, "", outcome, _retry_note(outcome, preemptions, failures, spec)))
        except KeyboardInterrupt as stop:  # the run is recorded as interrupted, and the result still returned
            record.declare(Ending.of_exception(stop))
            if handle is not None:
                engine.cancel(handle)
                ledger.finish_attempt(run_id, number, "stopped", time.time(), None)
                log_tail = _tail(engine, handle)
    return _result(ledger, run_id, spec.name, engine.name, price, log_tail)


def _wait(
    engine: Supervisable,
    handle: JobHandle,
    ledger: Ledger,
    run_id: int,
    number: int,
    poll_s: float,
    notify: Callable[[AttemptEvent], None],
) -> tuple[AttemptOutcome, JobExit]:
    """Poll until the job ends (heart-beating the run meanwhile) and classify how it ended."""
    seen_running = False
    while (state := engine.status(handle)) not in _TERMINAL:
        if state == "running" and not seen_running:
            seen_running = True
            notify(AttemptEvent(number, handle.job_id, "running"))
        ledger.heartbeat(run_id, time.time())
        time.sleep(poll_s)
    job_exit = engine.job_exit(handle)
    deadline = time.monotonic() + _EXIT_SETTLE_S
    while state != "succeeded" and job_exit.exit_code is None and time.monotonic() < deadline:
        time.sleep(min(poll_s, 0.2))
        job_exit = engine.job_exit(handle)
    outcome = _classify(state, job_exit.exit_code)
    notify(AttemptEvent(number, handle.job_id, outcome, f"exit code {job_exit.exit_code}"))
    return outcome, job_exit


def _classify(state: JobStatus, exit_code: int | None) -> AttemptOutcome:
    """Exit 75 is a preemption whatever the engine calls it (Ray: FAILED; the local engine: stopped)."""
    if exit_code == PREEMPTED_EXIT_CODE:
        return "preempted"
    if state == "succeeded" or exit_code == 0:
        return "succeeded"
    if state == "stopped":
        return "stopped"
    return "failed"


def _retry_note(outcome: AttemptOutcome, preemptions: int, failures: int, spec: JobSpec) -> str:
    if outcome == "preempted":
        return f"resubmitting (preemption {preemptions}); it resumes from its last checkpoint"
    return f"resubmitting (restart {failures} of {spec.max_restarts}); it resumes from its last checkpoint"


def _tail(engine: Supervisable, handle: JobHandle) -> str:
    try:
        return engine.logs(handle)[-_LOG_TAIL_CHARS:]
    except Exception as failure:  # the logs are a courtesy: a finished run must still be recorded
        return f"(logs unavailable: {failure})"


def _new_run(spec: JobSpec, backend_name: str, price: PriceSnapshot) -> NewRun:
    """The logical run: the job's command, on the resources it asked for (the engine's, not this machine's)."""
    resources = spec.resources
    requested = DetectedHardware(
        gpu_count=math.ceil(resources.gpus),
        gpu_name=None,
        gpu_memory_total_bytes=None,
        logical_cpus=max(1, math.ceil(resources.cpus)),
    )
    return new_run(
        "command",
        spec.command,
        hardware=requested,
        price=price,
        tags={**spec.tags, "backend": backend_name, "run_name": spec.name},
        interval_s=1.0,
        argv=spec.command,
        accelerator=resources.accelerator,
    )


def _ending(outcome: AttemptOutcome, exit_code: int | None) -> Ending:
    """The logical run's ending, from its last attempt by the rule of every run: the engine's success is
    exit 0, and a cancel is a stop signal (interrupted, as Ctrl-C on the supervisor is)."""
    if outcome == "succeeded":
        return Ending.of_exit(0)
    return Ending.of_exit(exit_code, signal.SIGTERM if outcome == "stopped" else None)


def _result(
    ledger: Ledger, run_id: int, name: str, backend_name: str, price: PriceSnapshot, log_tail: str
) -> SupervisedRun:
    now_s = time.time()
    run = ledger.run(run_id)
    attempts = tuple(ledger.attempts(run_id))
    cost = price_run(run, ledger.run_totals([run_id])[run_id], now_s)
    return SupervisedRun(
        run_id=run_id,
        name=name,
        backend=backend_name,
        status=run.status,
        exit_code=run.exit_code,
        attempts=attempts,
        interruption=interruption_cost(attempts, ledger.steps(run_id), price.hourly_usd, now_s),
        cost=cost,
        price=price,
        log_tail=log_tail,
    )


@contextlib.contextmanager
def _stop_on_sigterm() -> Iterator[None]:
    """SIGTERM to the supervisor means what Ctrl-C means: cancel the job, record the run as interrupted."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
