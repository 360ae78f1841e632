"""``computewise run``: launch a command, watch it, record it, price it, and say what happened.

The order matters for "nothing lost": the ledger is opened (and a bad URL refused) and the Prometheus
port bound (and a taken one refused) before anything starts; the run row is written before the child is
launched, so a launch that fails is recorded too; samples are flushed at most ``flush_s`` apart; the run
is closed with the child's exit code even when the monitor's own pieces (webhook) fail; and a child is
never left running unwatched: if watching it fails, it is stopped before the error goes on.

    ledger -> price -> duplicate check -> metrics port -> run row -> child + sampler + sinks -> wait -> close
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TextIO

from computewise.account.alerts import Alert, Notifier
from computewise.account.budgets import check_budgets
from computewise.catalog import Catalog
from computewise.errors import LaunchError
from computewise.estimate.quote import PriceRequest
from computewise.ledger import GpuSampleRow, Ledger, NewRun, RunRow, SampleRow
from computewise.monitor.gpu import GpuSource
from computewise.monitor.idle import IdleAction, IdleGuard
from computewise.monitor.inputs import input_hash
from computewise.monitor.launcher import Child, ChildExit, SignalForwarder
from computewise.monitor.prometheus import MetricsServer
from computewise.monitor.recorded import RUN_ID_ENV, Ending, RecordedRun, hardware_of
from computewise.monitor.sampler import Sink
from computewise.monitor.summary import RunSummary, summarize
from computewise.monitor.watch import Periodic, Watch, priced_row, say
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
# A job whose watch failed gets this long to end on SIGTERM before it is killed (see _stop_unwatched).
STOP_GRACE_S = 5.0


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
        say(sys.stderr, f"budget check failed: {error}")


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
        say(stream, f"GPU metrics {status.reason}")
    row = priced_row(
        catalog,
        "command",
        options.argv,
        hardware_of(status),
        options.price,
        tags=options.tags,
        interval_s=options.interval_s,
        argv=options.argv,
        input_hash=input_hash(options.argv, options.inputs),
        stream=stream,
    )
    duplicate = _duplicate_warning(ledger, row, row.started_at_s)
    if duplicate:
        say(stream, duplicate)
    with _metrics_endpoint(options.prometheus_port, row.price.hourly_usd, stream) as metrics:
        notifier = Notifier(
            ledger,
            stream=stream,
            timeout_s=ALERT_DELIVERY_S,
            total_timeout_s=ALERT_DELIVERY_S,
            run_commands=alert_commands_allowed(ledger.url),
        )
        try:
            return _record(ledger, catalog, gpu, options, row, _Helpers(metrics, notifier, live), stream)
        finally:
            notifier.close(timeout_s=ALERT_DELIVERY_S + 0.5)


@dataclass(frozen=True)
class _Helpers:
    """What serves and tells while a run is watched: the metrics endpoint (already bound), alerts, the status line."""

    metrics: _RunMetrics | None
    notifier: Notifier
    live: LiveSink | None


def _record(
    ledger: Ledger,
    catalog: Catalog,
    gpu: GpuSource,
    options: RunOptions,
    row: NewRun,
    helpers: _Helpers,
    stream: TextIO,
) -> RunOutcome:
    """Write the run row, start the child, watch it to its end and close the run with its exit code."""
    launch_error: LaunchError | None = None
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
            with _never_orphaned(child, stream):
                ended = _watch(record, catalog, gpu, options, child, helpers, stream)
            record.declare(Ending.of_exit(ended.exit_code, ended.signalled_by))
    # No summary is stored: it is a function of the rows, rebuilt by `runs show` whenever asked.
    ending, ended_s = record.finish(), record.ended_at_s or time.time()
    if launch_error is None:
        _check_budgets(ledger, helpers.notifier)
    summary = replace(
        summarize(ledger, record.run_id, ended_s, catalog),
        child_stdout="stderr" if options.child_stdout_to_stderr else "stdout",
    )
    return RunOutcome(record.run_id, ending.exit_code or 0, summary, launch_error=launch_error)


class _RunMetrics(MetricsServer):
    """The Prometheus endpoint of a run, bound before the run has an id.

    The port is bound before the run row is written and the job started, so a taken port refuses the run
    with nothing launched or recorded. Until ``serve_run`` names the run, a scrape gets an empty page
    rather than series labelled with a wrong ``run_id``.
    """

    def __init__(self, hourly_usd: float, port: int) -> None:
        super().__init__(0, hourly_usd, port=port)
        self._named = False

    def serve_run(self, run_id: int) -> None:
        self.run_id, self._named = run_id, True  # in this order: a scrape in between still sees no series

    def render(self) -> str:
        return super().render() if self._named else ""


@contextmanager
def _metrics_endpoint(port: int | None, hourly_usd: float, stream: TextIO) -> Iterator[_RunMetrics | None]:
    """The bound endpoint (None without ``--prometheus-port``), closed on the way out whatever happened."""
    if port is None:
        yield None
        return
    metrics = _RunMetrics(hourly_usd, port)
    metrics.start()  # a taken port raises InputError here, before the run is recorded or the job started
    try:
        say(stream, f"Prometheus metrics at {metrics.url}")
        yield metrics
    finally:
        metrics.close()


@contextmanager
def _never_orphaned(child: Child, stream: TextIO) -> Iterator[None]:
    """If watching the child fails (a sink, the sampler, the ledger), stop the child before the error goes on.

    Left running, the job would go on unwatched and unpriced while its run is closed as failed, and a
    retry would run it twice at once.
    """
    try:
        yield
    except BaseException:
        _stop_unwatched(child, stream)
        raise


def _stop_unwatched(child: Child, stream: TextIO) -> None:
    """SIGTERM to the job's process tree, SIGKILL after ``STOP_GRACE_S``; reaped before returning."""
    if not child.signal_tree(signal.SIGTERM):
        return  # already reaped by the watch that failed, or gone
    say(stream, f"the monitor failed: stopping the job (pid {child.pid}) rather than leave it running unwatched")
    deadline = time.monotonic() + STOP_GRACE_S
    while not _has_exited(child.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if not _has_exited(child.pid):
        child.signal_tree(signal.SIGKILL)
    child.wait()


def _has_exited(pid: int) -> bool:
    """Whether our child ``pid`` has ended, without reaping it (``Child.wait`` does, for its exact totals)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


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
    record: RecordedRun,
    catalog: Catalog,
    gpu: GpuSource,
    options: RunOptions,
    child: Child,
    helpers: _Helpers,
    stream: TextIO,
) -> ChildExit:
    """Sample the child until it exits; every helper thread is stopped before returning."""
    ledger, run_id, hourly_usd = record.ledger, record.run_id, record.row.price.hourly_usd
    metrics, notifier, live = helpers.metrics, helpers.notifier, helpers.live
    sinks: list[Sink] = []
    if metrics is not None:
        metrics.serve_run(run_id)
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
    watch = Watch(
        record,
        child.pid,
        gpu,
        catalog,
        options.interval_s,
        flush_s=options.flush_s,
        on_error=lambda e: say(stream, f"ledger write failed: {e}"),
        sinks=sinks,
    ).start()
    # Alerts go out through the notifier, never blocking the job.
    budgets = Periodic(lambda: _check_budgets(ledger, notifier), BUDGET_CHECK_EVERY_S, "computewise-budgets").start()
    ended: ChildExit | None = None
    try:
        ended = child.wait()
    finally:
        budgets.stop()
        # The job's exact wait4 totals (CPU, disk, peak memory) go into the last sample.
        watch.stop(ended.usage if ended is not None else None)
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
