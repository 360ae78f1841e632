"""The sampler thread end to end: a real child process, replayed GPUs, a real SQLite ledger."""

from __future__ import annotations

import logging
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from computewise.catalog import Catalog
from computewise.errors import InputError
from computewise.ledger import GpuSampleRow, Ledger, SampleRow, schema
from computewise.monitor.energy import EnergyModel
from computewise.monitor.gpu import GpuSource, NvmlGpuSource, ReplayGpuSource
from computewise.monitor.process import ProcessTreeSampler
from computewise.monitor.sampler import LedgerWriter, Sampler

Spawn = Callable[..., subprocess.Popen[bytes]]
WaitFor = Callable[..., None]
DATA = Path(__file__).resolve().parents[2] / "src" / "computewise" / "monitor" / "data"
SLEEPER = "import time\ntime.sleep(60)"
READY_SLEEPER = "import sys, time\nopen(sys.argv[1], 'w').close()\ntime.sleep(60)"
BURNER = "import time\nend = time.monotonic() + 60\nwhile time.monotonic() < end: pass"


class Collect:
    """A sink that keeps what it is given."""

    def __init__(self) -> None:
        self.rows: list[SampleRow] = []
        self.gpu_rows: list[tuple[GpuSampleRow, ...]] = []

    def __call__(self, row: SampleRow, gpu_rows: Sequence[GpuSampleRow]) -> None:
        self.rows.append(row)
        self.gpu_rows.append(tuple(gpu_rows))


def _no_gpu() -> GpuSource:
    source = NvmlGpuSource(visible=())  # no device is visible: the CPU-only path on any machine
    assert not source.status().available
    return source


def _run_for(sampler: Sampler, rows: Callable[[], int], count: int, wait_for: WaitFor) -> None:
    sampler.start()
    wait_for(lambda: rows() >= count, f"{count} samples")
    sampler.stop()


def test_gpu_samples_reach_the_ledger_with_counter_energy(
    sqlite_ledger: Ledger, run_id: int, catalog: Catalog, spawn_python: Spawn, wait_for: WaitFor
) -> None:
    child = spawn_python(SLEEPER)
    gpu = ReplayGpuSource(DATA / "a100-training.csv")
    energy = EnergyModel.from_catalog(catalog, gpu.status().devices)
    writer = LedgerWriter(sqlite_ledger, run_id, flush_s=0.2)
    collect = Collect()
    sampler = Sampler(run_id, ProcessTreeSampler(child.pid), gpu, energy, 0.05, sinks=[writer, collect])
    writer.start()
    _run_for(sampler, lambda: len(collect.rows), 30, wait_for)
    assert writer.close()

    rows, gpu_rows = sqlite_ledger.samples(run_id), sqlite_ledger.gpu_samples(run_id)
    assert len(rows) == len(collect.rows) >= 31  # every tick plus the final one
    assert len(gpu_rows) == len(rows)
    trace = ReplayGpuSource(DATA / "a100-training.csv")
    baseline = trace.read([])[0]  # start() took tick 0 as the baseline
    counters = [baseline.energy_counter_j] + [g.energy_counter_j for g in gpu_rows]
    for row, before, after in zip(rows, counters[:-1], counters[1:], strict=True):
        assert before is not None and after is not None
        assert row.energy_measured
        assert row.energy_j == pytest.approx(after - before)
    for row, gpu_row in zip(rows, gpu_rows, strict=True):
        assert row.gpu_count == 1 and row.gpu_util_pct == gpu_row.utilization_pct
        assert row.idle == (gpu_row.utilization_pct is not None and gpu_row.utilization_pct < 5)
        assert row.gpu_power_w == gpu_row.power_w and row.rss_bytes > 0
    assert any(row.idle for row in rows) and not all(row.idle for row in rows)  # the stall at ticks 15-16
    assert sqlite_ledger.run(run_id).heartbeat_at_s >= rows[-1].t_s - 1.0


def test_cpu_only_energy_is_estimated_from_busy_cores(
    tmp_path: Path, run_id: int, catalog: Catalog, spawn_python: Spawn, wait_for: WaitFor
) -> None:
    energy = EnergyModel.from_catalog(catalog)
    collect = Collect()
    busy = Sampler(run_id, ProcessTreeSampler(spawn_python(BURNER).pid), _no_gpu(), energy, 0.2, sinks=[collect])
    _run_for(busy, lambda: len(collect.rows), 4, wait_for)
    for row in collect.rows:
        assert row.gpu_count == 0 and row.gpu_util_pct is None and row.gpu_power_w is None
        assert not row.energy_measured
        expected_j = row.cpu_percent / 100 * catalog.assumption("cpu_power_w_per_busy_cpu") * row.interval_s
        assert row.energy_j == pytest.approx(expected_j)
        assert row.idle == (row.cpu_percent < 5)
    assert sum(row.energy_j for row in collect.rows) > 0.1 * catalog.assumption("cpu_power_w_per_busy_cpu")
    assert collect.gpu_rows == [()] * len(collect.rows)

    ready = tmp_path / "ready"
    sleeper = spawn_python(READY_SLEEPER, str(ready))
    wait_for(ready.exists, "the sleeper to start")
    collect_idle = Collect()
    idle = Sampler(run_id, ProcessTreeSampler(sleeper.pid), _no_gpu(), energy, 0.2, [collect_idle])
    _run_for(idle, lambda: len(collect_idle.rows), 3, wait_for)
    assert all(row.idle for row in collect_idle.rows)


def test_two_gpus_fold_into_one_sample_line(
    run_id: int, catalog: Catalog, spawn_python: Spawn, wait_for: WaitFor
) -> None:
    gpu = ReplayGpuSource(DATA / "2xh100-ddp.csv")
    collect = Collect()
    sampler = Sampler(
        run_id,
        ProcessTreeSampler(spawn_python(SLEEPER).pid),
        gpu,
        EnergyModel.from_catalog(catalog, gpu.status().devices),
        0.02,
        [collect],
    )
    _run_for(sampler, lambda: len(collect.rows), 30, wait_for)  # past the checkpoint at ticks 25-28
    for row, gpus in zip(collect.rows, collect.gpu_rows, strict=True):
        assert [g.gpu_index for g in gpus] == [0, 1] and row.gpu_count == 2
        utils = [g.utilization_pct for g in gpus]
        powers = [g.power_w for g in gpus]
        assert None not in utils and None not in powers
        assert row.gpu_util_pct == pytest.approx(sum(utils) / 2)  # type: ignore[arg-type]
        assert row.gpu_power_w == pytest.approx(sum(powers))  # type: ignore[arg-type]
    # During the checkpoint rank 1 spins in a barrier at 100 %: the mean stays above the idle threshold.
    assert not any(row.idle for row in collect.rows)


def test_a_failing_sink_is_logged_once_and_the_others_keep_receiving(
    run_id: int, catalog: Catalog, spawn_python: Spawn, wait_for: WaitFor, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[float] = []

    def broken(row: SampleRow, gpu_rows: Sequence[GpuSampleRow]) -> None:
        calls.append(row.t_s)
        raise RuntimeError("sink is broken")

    collect = Collect()
    tree = ProcessTreeSampler(spawn_python(SLEEPER).pid)
    sampler = Sampler(run_id, tree, _no_gpu(), EnergyModel.from_catalog(catalog), 0.02, [broken, collect])
    with caplog.at_level(logging.WARNING, logger="computewise.monitor.sampler"):
        _run_for(sampler, lambda: len(collect.rows), 5, wait_for)
    assert len(calls) == len(collect.rows) >= 6
    assert sum("sink" in record.getMessage() for record in caplog.records) == 1


def test_stop_takes_a_final_sample_so_a_short_job_has_a_row(run_id: int, catalog: Catalog, spawn_python: Spawn) -> None:
    collect = Collect()
    tree = ProcessTreeSampler(spawn_python(SLEEPER).pid)
    sampler = Sampler(run_id, tree, _no_gpu(), EnergyModel.from_catalog(catalog), 3600.0, [collect])
    assert sampler.latest is None
    sampler.start()
    final = sampler.stop()
    assert final is not None and collect.rows == [final] and sampler.latest == final
    assert sampler.stop() == final  # idempotent: no second final row
    assert len(collect.rows) == 1


def test_ticks_do_not_drift_and_cover_the_elapsed_time(run_id: int, catalog: Catalog, spawn_python: Spawn) -> None:
    collect = Collect()
    tree = ProcessTreeSampler(spawn_python(SLEEPER).pid)
    sampler = Sampler(run_id, tree, _no_gpu(), EnergyModel.from_catalog(catalog), 0.1, [collect])
    start = time.monotonic()
    sampler.start()
    time.sleep(1.5)
    sampler.stop()
    elapsed_s = time.monotonic() - start
    intervals = [row.interval_s for row in collect.rows]
    assert sum(intervals) == pytest.approx(elapsed_s, rel=0.05, abs=0.05)  # every second is in some row
    assert 5 <= len(collect.rows) <= 17  # ~15 ticks plus the final one; slack for a loaded machine
    assert [row.t_s for row in collect.rows] == sorted(row.t_s for row in collect.rows)


def test_bad_intervals_are_input_errors(sqlite_ledger: Ledger, run_id: int, catalog: Catalog) -> None:
    tree = ProcessTreeSampler(1)
    with pytest.raises(InputError, match="interval"):
        Sampler(run_id, tree, _no_gpu(), EnergyModel.from_catalog(catalog), 0.0)
    with pytest.raises(InputError, match="flush interval"):
        LedgerWriter(sqlite_ledger, run_id, flush_s=5.0)


def test_ledger_writer_survives_a_failing_database_and_catches_up(
    sqlite_ledger: Ledger, run_id: int, catalog: Catalog, spawn_python: Spawn
) -> None:
    errors: list[Exception] = []
    writer = LedgerWriter(sqlite_ledger, run_id, flush_s=1.0, on_error=errors.append)
    tree = ProcessTreeSampler(spawn_python(SLEEPER).pid)
    sampler = Sampler(run_id, tree, _no_gpu(), EnergyModel.from_catalog(catalog), 3600.0, [writer])
    schema.samples.drop(sqlite_ledger.engine)  # the database starts refusing the writes
    for _ in range(3):
        sampler.sample_once()
        assert not writer.flush()
    assert len(errors) == 1  # reported once per run of failures, not once per flush
    schema.samples.create(sqlite_ledger.engine)
    sampler.sample_once()
    assert writer.flush()
    assert len(sqlite_ledger.samples(run_id)) == 4  # nothing was lost while the database refused


def test_ledger_writer_drops_the_oldest_rows_past_its_buffer(
    sqlite_ledger: Ledger, run_id: int, catalog: Catalog, spawn_python: Spawn
) -> None:
    writer = LedgerWriter(sqlite_ledger, run_id, max_buffered_rows=2)
    tree = ProcessTreeSampler(spawn_python(SLEEPER).pid)
    sampler = Sampler(run_id, tree, _no_gpu(), EnergyModel.from_catalog(catalog), 3600.0, [writer])
    schema.samples.drop(sqlite_ledger.engine)
    rows = [sampler.sample_once() for _ in range(3)]
    assert not writer.flush()
    assert writer.dropped_rows == 1 and writer.last_error is not None
    schema.samples.create(sqlite_ledger.engine)
    assert writer.close()
    assert [row.t_s for row in sqlite_ledger.samples(run_id)] == [row.t_s for row in rows[1:] if row is not None]
