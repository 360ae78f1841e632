"""What a run cost: one SQL pass over its samples, then one pure formula.

The run summary, ``runs``, ``cost report`` and budgets all price runs through ``run_totals`` and
``price_run``, so a run's dollars, kWh and idle cost are the same number wherever they appear.

    duration_h     = (end or last heartbeat or now) - start, or for a resubmitted run (one with
                     attempts) the sum of its attempts' durations: waiting between them is not billed
    cost_usd       = hourly_usd (the price snapshot taken at launch) x duration_h
    gpu_hours      = gpu_count x duration_h
    energy_kwh     = sum(sample energy_j) / 3.6e6 x PUE          (measured or estimated per sample)
    co2_kg         = energy_kwh x grid gCO2/kWh / 1000
    idle_cost_usd  = cost_usd x idle seconds / sampled seconds
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import sqlalchemy as sa

from computewise.ledger import Ledger, RunRow, schema

__all__ = ["RunCost", "RunTotals", "empty_totals", "price_run", "price_runs", "run_end_s", "run_totals"]

_J_PER_KWH = 3.6e6


@dataclass(frozen=True)
class RunTotals:
    """Aggregates of one run's samples (zeros when it has none yet)."""

    run_id: int
    sample_count: int
    sampled_s: float
    idle_s: float
    cpu_percent_mean: float | None
    gpu_util_pct_mean: float | None
    energy_j: float
    energy_measured: bool
    peak_rss_bytes: int | None
    peak_gpu_memory_bytes: int | None
    last_sample_t_s: float | None
    attempt_count: int = 0
    attempts_closed_s: float = 0.0
    attempt_open_since_s: float | None = None


@dataclass(frozen=True)
class RunCost:
    """The money, GPU-hours, energy and carbon of one run."""

    run_id: int
    duration_s: float
    cost_usd: float
    gpu_hours: float
    energy_kwh: float
    energy_measured: bool
    co2_kg: float
    idle_s: float
    idle_cost_usd: float
    gpu_util_pct_mean: float | None
    cpu_percent_mean: float | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "duration_s": self.duration_s,
            "cost_usd": self.cost_usd,
            "gpu_hours": self.gpu_hours,
            "energy_kwh": self.energy_kwh,
            "energy_measured": self.energy_measured,
            "co2_kg": self.co2_kg,
            "idle_s": self.idle_s,
            "idle_cost_usd": self.idle_cost_usd,
            "gpu_util_pct_mean": self.gpu_util_pct_mean,
            "cpu_percent_mean": self.cpu_percent_mean,
        }


def run_totals(ledger: Ledger, run_ids: Sequence[int] | None = None) -> dict[int, RunTotals]:
    """Aggregate samples per run in the database (one GROUP BY, so a million samples stay fast)."""
    s = schema.samples
    query = sa.select(
        s.c.run_id,
        sa.func.count(),
        sa.func.sum(s.c.interval_s),
        sa.func.sum(sa.case((s.c.idle, s.c.interval_s), else_=0.0)),
        # Time-weighted means: the last sample of a run can cover a few milliseconds, not a whole interval.
        sa.func.sum(s.c.cpu_percent * s.c.interval_s) / sa.func.nullif(sa.func.sum(s.c.interval_s), 0),
        sa.func.sum(s.c.gpu_util_pct * s.c.interval_s)
        / sa.func.nullif(sa.func.sum(sa.case((s.c.gpu_util_pct.is_not(None), s.c.interval_s))), 0),
        sa.func.sum(s.c.energy_j),
        sa.func.min(sa.case((s.c.energy_measured, 1), else_=0)),
        sa.func.max(s.c.rss_bytes),
        sa.func.max(s.c.gpu_memory_used_bytes),
        sa.func.max(s.c.t_s),
    ).group_by(s.c.run_id)
    if run_ids is not None:
        query = query.where(s.c.run_id.in_(list(run_ids)))
    a = schema.attempts
    attempt_query = sa.select(
        a.c.run_id,
        sa.func.count(),
        sa.func.sum(a.c.ended_at_s - a.c.started_at_s),
        sa.func.max(sa.case((a.c.ended_at_s.is_(None), a.c.started_at_s))),
    ).group_by(a.c.run_id)
    if run_ids is not None:
        attempt_query = attempt_query.where(a.c.run_id.in_(list(run_ids)))
    with ledger.engine.connect() as conn:
        rows = conn.execute(query).all()
        attempt_rows = {int(row[0]): row for row in conn.execute(attempt_query).all()}
    totals = {
        int(row[0]): RunTotals(
            run_id=int(row[0]),
            sample_count=int(row[1]),
            sampled_s=float(row[2] or 0.0),
            idle_s=float(row[3] or 0.0),
            cpu_percent_mean=_opt_float(row[4]),
            gpu_util_pct_mean=_opt_float(row[5]),
            energy_j=float(row[6] or 0.0),
            energy_measured=bool(row[7]),
            peak_rss_bytes=_opt_int(row[8]),
            peak_gpu_memory_bytes=_opt_int(row[9]),
            last_sample_t_s=_opt_float(row[10]),
        )
        for row in rows
    }
    for run_id, row in attempt_rows.items():
        totals[run_id] = replace(
            totals.get(run_id, empty_totals(run_id)),
            attempt_count=int(row[1]),
            attempts_closed_s=float(row[2] or 0.0),
            attempt_open_since_s=_opt_float(row[3]),
        )
    return totals


def empty_totals(run_id: int) -> RunTotals:
    return RunTotals(run_id, 0, 0.0, 0.0, None, None, 0.0, False, None, None, None)


def run_end_s(run: RunRow, now_s: float) -> float:
    """When the run stopped costing money: its end, or now while it is still running."""
    if run.ended_at_s is not None:
        return run.ended_at_s
    if run.status == "running":
        return now_s
    return run.heartbeat_at_s


def price_run(run: RunRow, totals: RunTotals, now_s: float) -> RunCost:
    """Price one run from its snapshot price and its sample totals (formulas in the module docstring)."""
    end_s = run_end_s(run, now_s)
    if totals.attempt_count:
        open_s = max(0.0, end_s - totals.attempt_open_since_s) if totals.attempt_open_since_s is not None else 0.0
        duration_s = totals.attempts_closed_s + open_s
    else:
        duration_s = max(0.0, end_s - run.started_at_s)
    duration_h = duration_s / 3600.0
    cost_usd = run.price.hourly_usd * duration_h
    energy_kwh = totals.energy_j / _J_PER_KWH * run.price.pue
    idle_fraction = totals.idle_s / totals.sampled_s if totals.sampled_s > 0 else 0.0
    return RunCost(
        run_id=run.id,
        duration_s=duration_s,
        cost_usd=cost_usd,
        gpu_hours=run.gpu_count * duration_h,
        energy_kwh=energy_kwh,
        energy_measured=totals.energy_measured,
        co2_kg=energy_kwh * run.price.carbon_g_per_kwh / 1000.0,
        idle_s=totals.idle_s,
        idle_cost_usd=cost_usd * idle_fraction,
        gpu_util_pct_mean=totals.gpu_util_pct_mean,
        cpu_percent_mean=totals.cpu_percent_mean,
    )


def price_runs(ledger: Ledger, runs: Iterable[RunRow], now_s: float) -> list[RunCost]:
    """Price many runs with one aggregate query."""
    run_list = list(runs)
    totals = run_totals(ledger, [r.id for r in run_list])
    return [price_run(r, totals.get(r.id, empty_totals(r.id)), now_s) for r in run_list]


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)
