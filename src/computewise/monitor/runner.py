"""``computewise run``: launch a command, watch it, record it, price it, and say what happened.

The order matters for "nothing lost": the ledger is opened (and a bad URL refused) before anything
starts; the run row is written before the child is launched, so a launch that fails is recorded
too; samples are flushed at most ``flush_s`` apart; and the run is closed with the child's exit
code even when the monitor's own pieces (Prometheus port, webhook) fail.

    ledger -> price -> duplicate check -> run row -> child + sampler + sinks -> wait -> close -> summary
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TextIO

from computewise.account.alerts import Alert, Notifier
from computewise.account.budgets import check_budgets
from computewise.catalog import Catalog
from computewise.errors import LaunchError
from computewise.estimate.quote import PriceRequest
from computewise.ledger import GpuSampleRow, Ledger, NewRun, RunRow, SampleRow
from computewise.monitor.energy import EnergyModel
from computewise.monitor.gpu import GpuSource
from computewise.monitor.idle import IdleAction, IdleGuard
from computewise.monitor.inputs import input_hash
from computewise.monitor.launcher import Child, ChildExit, SignalForwarder
from computewise.monitor.process import ProcessTreeSampler
from computewise.monitor.prometheus import MetricsServer
from computewise.monitor.recorded import Ending, RecordedRun, catalog_accelerator, hardware_of, hardware_price, new_run
from computewise.monitor.sampler import LedgerWriter, Sampler, Sink
from computewise.monitor.summary import RunSummary, summarize
from computewise.monitor.track import RUN_ID_ENV
from computewise.units import format_duration

__all__ = [
    "ALERT_COMMANDS_ENV",
    "DUPLICATE_WINDOW_S",
    "RUN_ID_ENV",
    "RunOptions",
    "RunOutcome",
    "alert_commands_allowed",
    "child_env",
    "monitored_run",
]

DUPLICATE_WINDOW_S = 7 * 86400.0
ALERT_COMMANDS_ENV = "COMPUTEWISE_ALERT_COMMANDS"
BUDGET_CHECK_EVERY_S = 60.0
# A run's webhook alerts get this long in all, retries included, and its exit waits for them no
# longer (plus a moment to record the outcome): the job's own time comes first, and a receiver that
# accepts and never answers must not add seconds to every run of a team over its budget.
ALERT_DELIVERY_S = 1.5


@dataclass(frozen=True)
class RunOptions:
    """Everything ``computewise run`` was asked to do, already parsed and validated."""

    argv: tuple[str, ...]
    tags: dict[str, str] = field(default_factory=dict)
    interval_s: float = 1.0
    flush_s: float = 1.0
    price: PriceRequest = field(default_factory=PriceRequest)
    inputs: tuple[str, ...] = ()
    prometheus_port: int | None = None
    idle_s_limit: float | None = None
    idle_action: IdleAction = "none"
    idle_grace_s: float = 60.0
    idle_enforce: bool = False
    child_stdout_to_stderr: bool = False  # --json: our stdout carries the report and nothing else


@dataclass(frozen=True)
class RunOutcome:
    run_id: int
    exit_code: int
    summary: RunSummary | None
    launch_error: LaunchError | None = None


LiveSink = Callable[[SampleRow, float, float], None]
"""Called on every tick with the sample, seconds since start and the cost so far (the live status line)."""


def _warn(stream: TextIO, message: str) -> None:
    try:
        stream.write(f"computewise: {message}\n")
        stream.flush()
    except (OSError, ValueError):
        pass


def _duplicate_warning(ledger: Ledger, row: NewRun, now_s: float) -> str | None:
    previous: RunRow | None = ledger.recent_successful_run(
        row.command, row.tags, row.input_hash, now_s - DUPLICATE_WINDOW_S
    )
    if previous is None:
        return None
    ago = format_duration(now_s - previous.started_at_s)
    return (
        f"run {previous.id} ran this same command with the same tags and inputs {ago} ago and succeeded; "
        f"see `computewise runs show {previous.id}`. Launching anyway."
    )


def _check_budgets(ledger: Ledger, notifier: Notifier) -> None:
    try:
        check_budgets(ledger, time.time(), notifier)
    except Exception as error:  # a budget check must never take the job down
        _warn(sys.stderr, f"budget check failed: {error}")


class _BudgetWatch:
    """Checks budgets now and then on a daemon thread; alerts go out through the notifier, never blocking."""

    def __init__(self, ledger: Ledger, notifier: Notifier, every_s: float) -> None:
        self._ledger, self._notifier, self._every_s = ledger, notifier, every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="computewise-budgets", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self._every_s):
            _check_budgets(self._ledger, self._notifier)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5.0)


def monitored_run(
    ledger: Ledger,
    catalog: Catalog,
    gpu: GpuSource,
    options: RunOptions,
    live: LiveSink | None = None,
    stream: TextIO = sys.stderr,
) -> RunOutcome:
    """Run ``options.argv`` under watch; returns its shell-style exit code and the summary."""
    status = gpu.status()
    if not status.available:
        _warn(stream, f"GPU metrics {status.reason}")
    hardware = hardware_of(status)
    price = hardware_price(catalog, options.price, hardware)
    if price.assumed:
        _warn(stream, f"price {price.explanation}")
    row = new_run(
        "command",
        options.argv,
        hardware=hardware,
        price=price,
        tags=options.tags,
        interval_s=options.interval_s,
        argv=options.argv,
        accelerator=catalog_accelerator(catalog, hardware),
        input_hash=input_hash(options.argv, options.inputs),
    )
    duplicate = _duplicate_warning(ledger, row, row.started_at_s)
    if duplicate:
        _warn(stream, duplicate)
    notifier = Notifier(
        ledger,
        stream=stream,
        timeout_s=ALERT_DELIVERY_S,
        total_timeout_s=ALERT_DELIVERY_S,
        run_commands=alert_commands_allowed(ledger.url),
    )
    launch_error: LaunchError | None = None
    try:
        with RecordedRun(ledger, row) as record, SignalForwarder() as forwarder:
            try:
                child = Child.start(
                    options.argv, env=child_env(ledger, record.run_id), stdout_to_stderr=options.child_stdout_to_stderr
                )
            except LaunchError as error:
                launch_error = error
                record.declare(Ending.of_exit(error.exit_code, error=error.message))
            else:
                forwarder.attach(child)
                ended = _watch(
                    ledger, catalog, gpu, options, record.run_id, price.hourly_usd, child, notifier, live, stream
                )
                record.declare(Ending.of_exit(ended.exit_code, ended.signalled_by))
        # No summary is stored: it is a function of the rows, rebuilt by `runs show` whenever asked.
        ending, ended_s = record.finish(), record.ended_at_s or time.time()
        if launch_error is None:
            _check_budgets(ledger, notifier)
        summary = summarize(ledger, record.run_id, ended_s, catalog)
        return RunOutcome(record.run_id, ending.exit_code or 0, summary, launch_error=launch_error)
    finally:
        notifier.close(timeout_s=ALERT_DELIVERY_S + 0.5)


def child_env(ledger: Ledger, run_id: int) -> dict[str, str]:
    """The job's environment: ours, plus where its own ``track()`` should record (into this run, not a new one)."""
    return {
        **os.environ,
        RUN_ID_ENV: str(run_id),
        "COMPUTEWISE_DB": ledger.connect_url,
    }


def alert_commands_allowed(url: str) -> bool:
    """Budget alert commands run only from a local SQLite ledger, or when ``$COMPUTEWISE_ALERT_COMMANDS=1``.

    A budget's command is stored in the ledger: on a shared PostgreSQL ledger, whoever can write a
    budget could otherwise run commands on every machine that checks budgets.
    """
    return url.startswith("sqlite") or os.environ.get(ALERT_COMMANDS_ENV) == "1"


def _watch(
    ledger: Ledger,
    catalog: Catalog,
    gpu: GpuSource,
    options: RunOptions,
    run_id: int,
    hourly_usd: float,
    child: Child,
    notifier: Notifier,
    live: LiveSink | None,
    stream: TextIO,
) -> ChildExit:
    """Sample the child until it exits; every helper thread is stopped before returning."""
    writer = LedgerWriter(
        ledger, run_id, flush_s=options.flush_s, on_error=lambda e: _warn(stream, f"ledger write failed: {e}")
    )
    sinks: list[Sink] = [writer]
    metrics: MetricsServer | None = None
    if options.prometheus_port is not None:
        metrics = MetricsServer(run_id, hourly_usd, port=options.prometheus_port).start()
        _warn(stream, f"Prometheus metrics at {metrics.url}")
        sinks.append(metrics)
    if options.idle_s_limit is not None:
        sinks.append(_idle_guard(ledger, options, options.idle_s_limit, run_id, child, notifier))
    started_s = time.time()
    if live is not None:
        show = live

        def live_sink(row: SampleRow, gpu_rows: Sequence[GpuSampleRow]) -> None:
            elapsed_s = row.t_s - started_s
            show(row, elapsed_s, hourly_usd * elapsed_s / 3600.0)

        sinks.append(live_sink)
    sampler = Sampler(
        run_id,
        ProcessTreeSampler(child.pid),
        gpu,
        EnergyModel.from_catalog(catalog, gpu.status().devices),
        options.interval_s,
        sinks=sinks,
    )
    budgets = _BudgetWatch(ledger, notifier, BUDGET_CHECK_EVERY_S)
    writer.start()
    sampler.start()
    budgets.start()
    ended: ChildExit | None = None
    try:
        ended = child.wait()
    finally:
        budgets.stop()
        # The job's exact wait4 totals (CPU, disk, peak memory) go into the last sample.
        sampler.stop(ended.usage if ended is not None else None)
        writer.close()
        if metrics is not None:
            metrics.close()
    return ended


def _idle_guard(
    ledger: Ledger, options: RunOptions, limit_s: float, run_id: int, child: Child, notifier: Notifier
) -> IdleGuard:
    def on_alert(message: str, idle_s: float) -> None:
        fired_s = time.time()
        alert_id = ledger.record_alert("idle", message, fired_s, run_id=run_id)
        notifier.notify(Alert(alert_id, "idle", message, fired_s, details={"run_id": run_id, "idle_s": idle_s}))

    return IdleGuard(
        limit_s,
        on_alert,
        action=options.idle_action,
        grace_s=options.idle_grace_s,
        dry_run=not options.idle_enforce,
        send_signal=child.send_signal,
    )
