"""Per-run aggregates of samples and attempts, computed in the database (one GROUP BY per table).

A run's cost is priced from these figures (``account.totals.price_run``), so they are named fields of
a frozen record rather than positions in a result row: a column added to the SELECT cannot shift the
meaning of another. The statements are SQLAlchemy Core and run unchanged on SQLite and PostgreSQL;
``Ledger.run_totals`` executes them, so the ledger stays the one module that speaks SQL.

A run's samples stop changing when it ends, so its sample aggregate is computed then, once, and kept
in ``run_sample_totals`` (``keep_sample_totals``); a sample that lands later drops it again
(``forget_sample_totals``). ``Ledger.run_totals`` reads kept rows and aggregates only the other runs:
pricing a thousand finished runs reads a thousand rows, not their million samples. A run's own
monitor writes its last samples before it ends the run, so the two never race; on PostgreSQL a batch
committed in the same instant as ``mark_crashed`` ends a run that another host still samples could be
left out of the kept row until that host's next batch drops it or its own ``finish_run`` replaces it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import sqlalchemy as sa

from computewise.ledger import schema

__all__ = [
    "RunTotals",
    "attempt_totals_query",
    "forget_sample_totals",
    "keep_sample_totals",
    "kept_sample_totals_query",
    "sample_totals_query",
]


@dataclass(frozen=True)
class RunTotals:
    """Aggregates of one run's samples and attempts (zeros when it has none yet).

    ``sampled_s`` and ``idle_s`` sum the samples' intervals; the means are weighted by interval (the
    last sample of a run can cover a few milliseconds, not a whole interval); ``energy_measured`` holds
    only when every sample's energy came from the driver's counter. ``attempts_closed_s`` sums the
    durations of finished attempts and ``attempt_open_since_s`` is the start of the one still running.
    """

    run_id: int
    sample_count: int = 0
    sampled_s: float = 0.0
    idle_s: float = 0.0
    cpu_percent_mean: float | None = None
    gpu_util_pct_mean: float | None = None
    energy_j: float = 0.0
    energy_measured: bool = False
    peak_rss_bytes: int | None = None
    peak_gpu_memory_bytes: int | None = None
    last_sample_t_s: float | None = None
    attempt_count: int = 0
    attempts_closed_s: float = 0.0
    attempt_open_since_s: float | None = None

    @classmethod
    def from_rows(cls, run_id: int, samples: sa.RowMapping | None, attempts: sa.RowMapping | None) -> RunTotals:
        """From the rows of ``sample_totals_query`` and ``attempt_totals_query`` (either may be missing).

        Drivers return aggregates as their own types (PostgreSQL sums of BIGINT are ``Decimal``), so
        every field is converted here, once.
        """
        totals = cls(run_id)
        if samples is not None:
            totals = cls(
                run_id=run_id,
                sample_count=int(samples["sample_count"]),
                sampled_s=float(samples["sampled_s"] or 0.0),
                idle_s=float(samples["idle_s"] or 0.0),
                cpu_percent_mean=optional_float(samples["cpu_percent_mean"]),
                gpu_util_pct_mean=optional_float(samples["gpu_util_pct_mean"]),
                energy_j=float(samples["energy_j"] or 0.0),
                energy_measured=bool(samples["energy_measured"]),
                peak_rss_bytes=_opt_int(samples["peak_rss_bytes"]),
                peak_gpu_memory_bytes=_opt_int(samples["peak_gpu_memory_bytes"]),
                last_sample_t_s=optional_float(samples["last_sample_t_s"]),
            )
        if attempts is None:
            return totals
        return replace(
            totals,
            attempt_count=int(attempts["attempt_count"]),
            attempts_closed_s=float(attempts["attempts_closed_s"] or 0.0),
            attempt_open_since_s=optional_float(attempts["attempt_open_since_s"]),
        )


def sample_totals_query(run_ids: Sequence[int]) -> sa.Select[Any]:
    """One row per run of ``run_ids`` that has samples, with the columns ``RunTotals`` names."""
    s = schema.samples
    seconds = sa.func.sum(s.c.interval_s)
    gpu_seconds = sa.func.sum(sa.case((s.c.gpu_util_pct.is_not(None), s.c.interval_s)))
    return (
        sa.select(
            s.c.run_id,
            sa.func.count().label("sample_count"),
            seconds.label("sampled_s"),
            sa.func.sum(sa.case((s.c.idle, s.c.interval_s), else_=0.0)).label("idle_s"),
            (sa.func.sum(s.c.cpu_percent * s.c.interval_s) / sa.func.nullif(seconds, 0)).label("cpu_percent_mean"),
            (sa.func.sum(s.c.gpu_util_pct * s.c.interval_s) / sa.func.nullif(gpu_seconds, 0)).label(
                "gpu_util_pct_mean"
            ),
            sa.func.sum(s.c.energy_j).label("energy_j"),
            sa.func.min(sa.case((s.c.energy_measured, 1), else_=0)).label("energy_measured"),
            sa.func.max(s.c.rss_bytes).label("peak_rss_bytes"),
            sa.func.max(s.c.gpu_memory_used_bytes).label("peak_gpu_memory_bytes"),
            sa.func.max(s.c.t_s).label("last_sample_t_s"),
        )
        .where(s.c.run_id.in_(list(run_ids)))
        .group_by(s.c.run_id)
    )


def keep_sample_totals(run_ids: Sequence[int]) -> sa.Insert:
    """Store ``sample_totals_query``'s rows for ``run_ids`` (runs that have just ended) in ``run_sample_totals``.

    One ``INSERT ... SELECT``, so the figures kept are exactly those the live aggregate returns; a run
    without samples gets no row (its live aggregate reads nothing). Run ``forget_sample_totals`` first.
    """
    live = sample_totals_query(run_ids).subquery()
    names = [column.name for column in schema.run_sample_totals.c]
    # The aggregate's MIN over 0/1 becomes the column's boolean (PostgreSQL will not cast int to boolean here).
    values = [live.c[name] == 1 if name == "energy_measured" else live.c[name] for name in names]
    return schema.run_sample_totals.insert().from_select(names, sa.select(*values))


def forget_sample_totals(run_ids: Sequence[int]) -> sa.Delete:
    """Drop the kept totals of ``run_ids``: they ended again, or a sample landed after they ended."""
    table = schema.run_sample_totals
    return table.delete().where(table.c.run_id.in_(list(run_ids)))


def kept_sample_totals_query(run_ids: Sequence[int]) -> sa.Select[Any]:
    """The kept totals of those of ``run_ids`` that have them, with the columns of ``sample_totals_query``."""
    table = schema.run_sample_totals
    return sa.select(table).where(table.c.run_id.in_(list(run_ids)))


def attempt_totals_query(run_ids: Sequence[int]) -> sa.Select[Any]:
    """One row per run of ``run_ids`` that was submitted through a backend, with its attempts summed."""
    a = schema.attempts
    return (
        sa.select(
            a.c.run_id,
            sa.func.count().label("attempt_count"),
            sa.func.sum(a.c.ended_at_s - a.c.started_at_s).label("attempts_closed_s"),
            sa.func.max(sa.case((a.c.ended_at_s.is_(None), a.c.started_at_s))).label("attempt_open_since_s"),
        )
        .where(a.c.run_id.in_(list(run_ids)))
        .group_by(a.c.run_id)
    )


def optional_float(value: Any) -> float | None:
    """A nullable numeric column as a float, None kept: SQL aggregates over no rows, and unsampled figures, are NULL."""
    return None if value is None else float(value)


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)
