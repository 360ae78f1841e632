"""The end-of-run summary on a real SQLite ledger: the verdict reads the very figures the summary prints."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from computewise.ledger import Ledger, NewRun, SampleRow
from computewise.monitor.summary import summarize


def _sample(run_id: int, t_s: float, interval_s: float, cpu_percent: float, idle: bool) -> SampleRow:
    return SampleRow(
        run_id=run_id,
        t_s=t_s,
        interval_s=interval_s,
        cpu_percent=cpu_percent,
        rss_bytes=14 << 20,
        read_bytes=0,
        write_bytes=0,
        net_sent_bytes=0,
        net_recv_bytes=0,
        host_cpu_percent=5.0,
        host_memory_used_bytes=1 << 30,
        gpu_count=0,
        gpu_util_pct=None,
        gpu_memory_used_bytes=None,
        gpu_power_w=None,
        energy_j=0.0,
        energy_measured=False,
        idle=idle,
    )


def test_a_sleeping_job_with_a_busy_exit_instant_is_waiting_not_compute_bound(
    sqlite_ledger: Ledger, new_run: Callable[..., NewRun]
) -> None:
    """What `run -- python -c "time.sleep(5)"` records: four idle seconds, then a last sample covering the
    10 ms of the interpreter's exit, when the kernel's 10 ms CPU ticks read as both cores busy."""
    run_id = sqlite_ledger.start_run(
        new_run(started_at_s=1000.0, gpu_count=0, gpu_name=None, accelerator=None, logical_cpus=2)
    )
    samples = [_sample(run_id, 1000.0 + t, 1.0, 0.0, idle=True) for t in (1, 2, 3, 4)]
    samples.append(_sample(run_id, 1004.01, 0.01, 200.0, idle=False))
    sqlite_ledger.add_samples(samples, [])
    sqlite_ledger.finish_run(run_id, "succeeded", 1004.01, exit_code=0)

    summary = summarize(sqlite_ledger, run_id, 1004.01)

    # Time-weighted by hand: 200 % for 0.01 s of 4.01 s.
    expected_cpu_percent = 200.0 * 0.01 / 4.01
    assert summary.stats.cpu_percent is not None
    assert summary.stats.cpu_percent.mean == pytest.approx(expected_cpu_percent)
    # 4 of 4.01 s at 0 %: 0 % for 95 % of the time; the 10 ms spike is the maximum, not the p95
    assert summary.stats.cpu_percent.p95 == 0.0 and summary.stats.cpu_percent.highest == 200.0
    assert summary.usage.cpu_percent_run_mean == pytest.approx(expected_cpu_percent)
    assert summary.usage.busy_s == pytest.approx(0.01) and summary.usage.run_s == pytest.approx(4.01)
    [finding] = summary.findings
    assert finding.verdict == "mostly waiting"
    assert "busy 10.0 ms of 4.0 s" in finding.evidence
    assert f"used {expected_cpu_percent:.0f} % CPU" in finding.evidence  # the same figure the summary prints


def test_a_job_busy_on_every_core_then_idle_is_compute_bound_while_busy(
    sqlite_ledger: Ledger, new_run: Callable[..., NewRun]
) -> None:
    """12 s on both cores, then 10 s asleep: judged on the 12 busy seconds (not "single-threaded" at 104 %),
    with the span said, while the summary's CPU figure stays the whole run's."""
    run_id = sqlite_ledger.start_run(
        new_run(started_at_s=1000.0, gpu_count=0, gpu_name=None, accelerator=None, logical_cpus=2)
    )
    busy = [_sample(run_id, 1001.0 + t, 1.0, 190.0, idle=False) for t in range(12)]
    asleep = [_sample(run_id, 1013.0 + t, 1.0, 0.0, idle=True) for t in range(10)]
    sqlite_ledger.add_samples(busy + asleep, [])
    sqlite_ledger.finish_run(run_id, "succeeded", 1022.0, exit_code=0)

    summary = summarize(sqlite_ledger, run_id, 1022.0)

    assert summary.stats.cpu_percent is not None
    assert summary.stats.cpu_percent.mean == pytest.approx(190.0 * 12 / 22)
    assert summary.stats.cpu_percent.p50 == 190.0  # 12 of 22 s at 190 %: over half the time
    [finding, *_] = summary.findings
    assert finding.verdict == "CPU compute-bound"
    assert "while busy (12.0 s of 22.0 s) the job's processes used 190 % CPU" in finding.evidence
    assert summary.idle_text is not None and "10.0 s" in summary.idle_text
