"""The sampler: one daemon thread that turns the process tree, the host and the GPUs into ledger rows.

Each tick reads the tree (``ProcessTreeSampler``), the host, and every GPU, prices the interval's
energy (``EnergyModel``), decides whether it was idle (``IdleRule``), and hands one ``SampleRow`` plus
one ``GpuSampleRow`` per GPU to each sink: the ``LedgerWriter``, the Prometheus server, the idle
guard. Ticks are drift-free (due at start + k x interval; a late tick skips the ones it missed rather
than bunching up), and each row carries the interval it really covers, so sums of energy and idle
time stay right when a tick is late. A sink that raises is logged once and keeps being called; a
sampling error is logged and the next tick tries again.

``LedgerWriter`` batches rows and writes them from its own thread at most every ``flush_s`` (<= 2 s),
so a database that is slow or briefly locked never delays a sample, and a ``computewise run`` killed
with SIGKILL loses at most the last flush interval.

    tree = ProcessTreeSampler(child.pid)
    writer = LedgerWriter(ledger, run_id)
    sampler = Sampler(run_id, tree, gpu, EnergyModel.from_catalog(catalog, gpu.status().devices), 1.0,
                      sinks=[writer, metrics, guard])
    writer.start(); sampler.start()
    ...                                  # the job runs
    sampler.stop(exit.usage)             # one last sample, so even a 0.1 s job has a row
    writer.close()
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from statistics import fmean

from computewise.errors import InputError
from computewise.ledger import GpuSampleRow, Ledger, SampleRow
from computewise.monitor.energy import EnergyModel
from computewise.monitor.gpu import GpuReading, GpuSource
from computewise.monitor.idle import IdleRule
from computewise.monitor.process import ExitUsage, HostSampler, ProcessTreeSampler

__all__ = ["MAX_FLUSH_S", "LedgerWriter", "Sampler", "Sink"]

Sink = Callable[[SampleRow, Sequence[GpuSampleRow]], None]
MAX_FLUSH_S = 2.0
_LOG = logging.getLogger(__name__)


class Sampler:
    """Samples every ``interval_s`` on a daemon thread between ``start()`` and ``stop()``."""

    def __init__(
        self,
        run_id: int,
        tree: ProcessTreeSampler,
        gpu: GpuSource,
        energy: EnergyModel,
        interval_s: float,
        sinks: Sequence[Sink] = (),
        host: HostSampler | None = None,
        idle_rule: IdleRule | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if not math.isfinite(interval_s) or interval_s <= 0:
            raise InputError(f"the sampling interval must be positive, not {interval_s}", "e.g. --interval 1s")
        self.run_id = run_id
        self.interval_s = interval_s
        self._tree = tree
        self._gpu = gpu
        self._energy = energy
        self._sinks = list(sinks)
        self._failed_sinks: set[int] = set()
        self._host = host or HostSampler()
        self._idle_rule = idle_rule or IdleRule()
        self._clock = clock
        self._monotonic = monotonic
        self._gpu_count = len(gpu.status().devices)
        self._previous_gpu: dict[int, GpuReading] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._stopped = False
        self._latest: tuple[SampleRow, tuple[GpuSampleRow, ...]] | None = None
        self._errors_logged = 0

    @property
    def latest(self) -> SampleRow | None:
        """The most recent row (None before the first tick)."""
        latest = self._latest
        return None if latest is None else latest[0]

    @property
    def latest_gpu(self) -> tuple[GpuSampleRow, ...]:
        latest = self._latest
        return () if latest is None else latest[1]

    def start(self) -> None:
        """Take the GPU baseline (so the first interval's energy comes from the counter) and start ticking."""
        if self._thread is not None:
            return
        if self._gpu_count:
            self._previous_gpu = {r.index: r for r in self._gpu.read((self._tree.root_pid,))}
        self._thread = threading.Thread(target=self._run, name=f"computewise-sampler-{self.run_id}", daemon=True)
        self._thread.start()

    def stop(self, exit_usage: ExitUsage | None = None) -> SampleRow | None:
        """Stop ticking and take one final sample (``exit_usage``: the job's ``wait4`` totals); idempotent."""
        if self._stopped or self._thread is None:
            return self.latest
        self._stopped = True
        self._stop.set()
        self._thread.join(timeout=self.interval_s + 10.0)
        return self._tick(exit_usage)

    def sample_once(self, exit_usage: ExitUsage | None = None) -> SampleRow | None:
        """One sample now, on the calling thread, delivered to the sinks like a tick."""
        return self._tick(exit_usage)

    # -- internals ------------------------------------------------------------------------------

    def _run(self) -> None:
        start = self._monotonic()
        k = 1
        while not self._stop.wait(max(0.0, start + k * self.interval_s - self._monotonic())):
            self._tick(None)
            elapsed_ticks = (self._monotonic() - start) / self.interval_s
            k = max(k + 1, math.floor(elapsed_ticks) + 1)

    def _tick(self, exit_usage: ExitUsage | None) -> SampleRow | None:
        with self._lock:
            try:
                row, gpu_rows = self._make_rows(exit_usage)
            except Exception:  # a sampling bug must not take the job's monitoring down for good
                self._log_error("computewise: a sample failed; the sampler keeps going", exc_info=True)
                return None
            self._latest = (row, gpu_rows)
            for number, sink in enumerate(self._sinks):
                try:
                    sink(row, gpu_rows)
                except Exception:
                    if number not in self._failed_sinks:
                        self._failed_sinks.add(number)
                        _LOG.warning("computewise: sink %r failed; it keeps being called", sink, exc_info=True)
            return row

    def _make_rows(self, exit_usage: ExitUsage | None) -> tuple[SampleRow, tuple[GpuSampleRow, ...]]:
        tree = self._tree.sample(exit_usage)
        host = self._host.sample()
        readings = self._gpu.read(tree.pids) if self._gpu_count else []
        t_s = self._clock()
        energy = self._energy.interval(self._previous_gpu, readings, tree.interval_s, tree.cpu_percent)
        self._previous_gpu = {r.index: r for r in readings} or self._previous_gpu
        utils = [r.utilization_pct for r in readings if r.utilization_pct is not None]
        gpu_util_pct = fmean(utils) if utils else None
        row = SampleRow(
            run_id=self.run_id,
            t_s=t_s,
            interval_s=tree.interval_s,
            cpu_percent=tree.cpu_percent,
            rss_bytes=tree.rss_bytes,
            read_bytes=tree.read_bytes,
            write_bytes=tree.write_bytes,
            net_sent_bytes=host.net_sent_bytes,
            net_recv_bytes=host.net_recv_bytes,
            host_cpu_percent=host.cpu_percent,
            host_memory_used_bytes=host.memory_used_bytes,
            gpu_count=self._gpu_count,
            gpu_util_pct=gpu_util_pct,
            gpu_memory_used_bytes=_sum_bytes([r.memory_used_bytes for r in readings]),
            gpu_power_w=_sum_w([r.power_w for r in readings]),
            energy_j=energy.energy_j,
            energy_measured=energy.measured,
            idle=self._idle_rule.is_idle(tree.cpu_percent, gpu_util_pct),
        )
        gpu_rows = tuple(
            GpuSampleRow(
                run_id=self.run_id,
                t_s=t_s,
                gpu_index=r.index,
                utilization_pct=r.utilization_pct,
                sm_clock_mhz=r.sm_clock_mhz,
                memory_used_bytes=r.memory_used_bytes,
                power_w=r.power_w,
                energy_counter_j=r.energy_counter_j,
                pcie_tx_bytes_per_s=r.pcie_tx_bytes_per_s,
                pcie_rx_bytes_per_s=r.pcie_rx_bytes_per_s,
                process_memory_bytes=r.process_memory_bytes,
            )
            for r in readings
        )
        return row, gpu_rows

    def _log_error(self, message: str, exc_info: bool) -> None:
        if self._errors_logged < 3:  # enough to diagnose, not enough to flood a training log
            self._errors_logged += 1
            _LOG.warning(message, exc_info=exc_info)


def _sum_bytes(values: Sequence[int | None]) -> int | None:
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def _sum_w(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) if present else None


class LedgerWriter:
    """A sink that batches rows and writes them, with a heartbeat, from its own thread every ``flush_s``.

    A failed write keeps its rows for the next flush (up to ``max_buffered_rows``; older rows are
    dropped past that and counted in ``dropped_rows``) and calls ``on_error`` once per run of failures,
    so a locked or unreachable database is reported, never fatal to the job.
    """

    def __init__(
        self,
        ledger: Ledger,
        run_id: int,
        flush_s: float = 1.0,
        on_error: Callable[[Exception], None] | None = None,
        clock: Callable[[], float] = time.time,
        max_buffered_rows: int = 100_000,
    ) -> None:
        if not 0 < flush_s <= MAX_FLUSH_S:
            raise InputError(
                f"the ledger flush interval must be in (0, {MAX_FLUSH_S:g}] s, not {flush_s:g} s",
                "a killed run loses at most one flush interval of samples; keep it short",
            )
        self.ledger = ledger
        self.run_id = run_id
        self.flush_s = flush_s
        self.dropped_rows = 0
        self.last_error: Exception | None = None
        self._on_error = on_error
        self._clock = clock
        self._max_rows = max_buffered_rows
        self._rows: list[SampleRow] = []
        self._gpu_rows: list[GpuSampleRow] = []
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing = False

    def __call__(self, row: SampleRow, gpu_rows: Sequence[GpuSampleRow]) -> None:
        with self._lock:
            self._rows.append(row)
            self._gpu_rows.extend(gpu_rows)

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"computewise-ledger-{self.run_id}", daemon=True)
            self._thread.start()

    def flush(self) -> bool:
        """Write what is buffered and a heartbeat now; False if the database refused (rows kept)."""
        with self._write_lock:
            with self._lock:
                rows, gpu_rows = self._rows, self._gpu_rows
                self._rows, self._gpu_rows = [], []
            try:
                if rows or gpu_rows:
                    self.ledger.add_samples(rows, gpu_rows)
                self.ledger.heartbeat(self.run_id, self._clock())
            except Exception as error:  # any database error: report, keep the rows, keep the job running
                self._requeue(rows, gpu_rows)
                self.last_error = error
                if not self._failing:
                    self._failing = True
                    _LOG.warning("computewise: cannot write samples to the ledger: %s", error)
                    if self._on_error is not None:
                        self._on_error(error)
                return False
            self._failing = False
            return True

    def close(self) -> bool:
        """Stop the thread and flush what is left; False if the last rows could not be written."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.flush_s + 30.0)
        return self.flush()

    def _run(self) -> None:
        while not self._stop.wait(self.flush_s):
            self.flush()

    def _requeue(self, rows: list[SampleRow], gpu_rows: list[GpuSampleRow]) -> None:
        with self._lock:
            self._rows = rows + self._rows
            self._gpu_rows = gpu_rows + self._gpu_rows
            excess = len(self._rows) - self._max_rows
            if excess > 0:
                cutoff_s = self._rows[excess].t_s
                self._rows = self._rows[excess:]
                self._gpu_rows = [g for g in self._gpu_rows if g.t_s >= cutoff_s]
                self.dropped_rows += excess
