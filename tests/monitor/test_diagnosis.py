"""The classic utilization table, row by row, and idle periods with their cost."""

from __future__ import annotations

import pytest

from computewise.ledger import SampleRow
from computewise.monitor.diagnosis import UsageStats, diagnose, idle_periods


def usage(**overrides: object) -> UsageStats:
    base: dict[str, object] = {
        "gpu_count": 1,
        "logical_cpus": 16,
        "gpu_util_pct_mean": 95.0,
        "gpu_memory_share_peak": 0.8,
        "cpu_percent_mean": 100.0,
        "host_cpu_percent_mean": 10.0,
        "disk_read_bytes_per_s": 0.0,
        "net_recv_bytes_per_s": 0.0,
        "data_wait_share": None,
    }
    base.update(overrides)
    return UsageStats(**base)  # type: ignore[arg-type]


def verdicts(stats: UsageStats) -> list[str]:
    return [f.verdict for f in diagnose(stats)]


def test_gpu_high_is_compute_bound_and_suggests_mixed_precision() -> None:
    findings = diagnose(usage(gpu_util_pct_mean=97.0))
    assert [f.verdict for f in findings] == ["compute-bound"]
    assert "mixed precision" in findings[0].advice


def test_gpu_low_cpu_high_is_the_input_pipeline() -> None:
    findings = diagnose(usage(gpu_util_pct_mean=30.0, cpu_percent_mean=1500.0))
    assert findings[0].verdict == "input-bound"
    assert "workers" in findings[0].advice


def test_one_saturated_core_counts_as_cpu_high() -> None:
    assert verdicts(usage(gpu_util_pct_mean=30.0, cpu_percent_mean=99.0)) == ["input-bound"]


def test_both_low_is_small_batch_or_io() -> None:
    findings = diagnose(usage(gpu_util_pct_mean=20.0, cpu_percent_mean=20.0, gpu_memory_share_peak=0.2))
    assert findings[0].verdict == "starved"
    assert "batch" in findings[0].advice and "raise the batch size" in findings[0].advice


def test_middling_gpu_is_partly_stalled() -> None:
    assert verdicts(usage(gpu_util_pct_mean=65.0, cpu_percent_mean=20.0)) == ["partly stalled: starved"]


def test_cpu_only_rows() -> None:
    no_gpu = {"gpu_count": 0, "gpu_util_pct_mean": None, "gpu_memory_share_peak": None, "logical_cpus": 8}
    assert verdicts(usage(**no_gpu, cpu_percent_mean=790.0)) == ["CPU compute-bound"]
    assert verdicts(usage(**no_gpu, cpu_percent_mean=100.0)) == ["single-threaded"]
    assert verdicts(usage(**no_gpu, cpu_percent_mean=3.0)) == ["mostly waiting"]
    assert verdicts(usage(**no_gpu, cpu_percent_mean=40.0, host_cpu_percent_mean=100.0)) == ["CPU contended"]


def test_a_cpu_job_busy_less_than_half_the_run_is_mostly_waiting_whatever_its_busy_moments() -> None:
    no_gpu = {"gpu_count": 0, "gpu_util_pct_mean": None, "gpu_memory_share_peak": None, "logical_cpus": 2}
    spike = usage(**no_gpu, cpu_percent_mean=200.0, busy_s=0.01, run_s=5.0, cpu_percent_run_mean=0.4)
    [finding] = diagnose(spike)
    assert finding.verdict == "mostly waiting"
    assert "busy 10.0 ms of 5.0 s" in finding.evidence and "used 0 % CPU" in finding.evidence


def test_data_wait_from_steps_adds_a_finding() -> None:
    assert verdicts(usage(data_wait_share=0.35)) == ["compute-bound", "input-bound steps"]


def _sample(t_s: float, idle: bool) -> SampleRow:
    return SampleRow(1, t_s, 1.0, 0.0, 0, 0, 0, 0, 0, 0.0, 0, 1, 0.0 if idle else 90.0, 0, 0.0, 0.0, False, idle)


def test_idle_periods_merge_consecutive_samples_and_price_them() -> None:
    pattern = [False] * 5 + [True] * 30 + [False] * 5 + [True] * 3 + [False] * 2 + [True] * 12
    samples = [_sample(float(i + 1), idle) for i, idle in enumerate(pattern)]
    periods = idle_periods(samples, hourly_usd=36.0, min_period_s=10.0)
    assert [(p.start_s, p.duration_s) for p in periods] == [(5.0, 30.0), (45.0, 12.0)]
    assert periods[0].cost_usd == pytest.approx(36.0 * 30 / 3600)
