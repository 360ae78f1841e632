"""Runs with known prices and samples, written through the real ledger API, for the accounting tests.

``add_run`` starts a run, adds evenly spaced samples over its wall time and finishes it (or leaves it
running), so every figure a test expects can be worked out by hand from its arguments.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from accounting_runs import NOW_S, AddRun

from computewise.ledger import Ledger, NewRun, SampleRow


@pytest.fixture
def add_run(new_run: Callable[..., NewRun]) -> AddRun:
    def add(
        ledger: Ledger,
        *,
        start_s: float,
        end_s: float | None,
        hourly_usd: float,
        tags: dict[str, str] | None = None,
        kind: str = "command",
        gpu_count: int = 1,
        samples: int = 4,
        gpu_util_pct: float | None = 80.0,
        cpu_percent: float = 100.0,
        idle_samples: int = 0,
        power_w: float = 300.0,
        energy_measured: bool = True,
        inferences: int = 0,
        pue: float = 1.0,
        carbon_g_per_kwh: float = 400.0,
        assumed: bool = False,
    ) -> int:
        base = new_run(started_at_s=start_s)
        overrides: dict[str, Any] = {
            "kind": kind,
            "tags": dict(tags or {}),
            "gpu_count": gpu_count,
            "price": replace(
                base.price, hourly_usd=hourly_usd, pue=pue, carbon_g_per_kwh=carbon_g_per_kwh, assumed=assumed
            ),
        }
        run_id = ledger.start_run(replace(base, **overrides))
        span_s = (end_s if end_s is not None else NOW_S) - start_s
        interval_s = span_s / samples if samples else 0.0
        rows = [
            SampleRow(
                run_id=run_id,
                t_s=start_s + (i + 1) * interval_s,
                interval_s=interval_s,
                cpu_percent=cpu_percent,
                rss_bytes=2_000_000_000,
                read_bytes=0,
                write_bytes=0,
                net_sent_bytes=0,
                net_recv_bytes=0,
                host_cpu_percent=50.0,
                host_memory_used_bytes=8_000_000_000,
                gpu_count=gpu_count,
                gpu_util_pct=None if gpu_util_pct is None else (5.0 if i < idle_samples else gpu_util_pct),
                gpu_memory_used_bytes=None if gpu_util_pct is None else 10_000_000_000,
                gpu_power_w=None if gpu_util_pct is None else power_w,
                energy_j=power_w * interval_s,
                energy_measured=energy_measured,
                idle=i < idle_samples,
            )
            for i in range(samples)
        ]
        if rows:
            ledger.add_samples(rows)
        if inferences:
            ledger.add_inferences(run_id, inferences)
        if end_s is not None:
            ledger.finish_run(run_id, "succeeded", end_s, exit_code=0)
        return run_id

    return add
