"""Read-only queries for views over many runs: a filtered, sorted page of runs, and time series in buckets.

The dashboard must answer in well under a second over a million samples, so the work stays in the
database: filters, sort and ``LIMIT/OFFSET`` in one SELECT, and a run's time series averaged into at
most a few hundred time buckets by ``GROUP BY`` instead of shipping every sample to Python. The
statements are SQLAlchemy Core and run unchanged on SQLite and PostgreSQL; ``Ledger`` executes them.

Sorting by cost or duration needs the figures in SQL. ``run_duration_s`` mirrors the duration of
``account.totals.price_run`` (wall time, or the sum of attempts for a resubmitted run); the dollars a
page shows still come from ``price_run`` itself, this expression only orders the rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import sqlalchemy as sa

from computewise.ledger import schema
from computewise.ledger.aggregates import optional_float
from computewise.specs.codec import Jsonable, json_field

__all__ = [
    "RUN_SORTS",
    "GpuBucket",
    "RunFilter",
    "RunSort",
    "SampleBucket",
    "gpu_buckets_query",
    "run_duration_s",
    "runs_count_query",
    "runs_page_query",
    "sample_buckets_query",
]

RunSort = Literal["started", "cost", "duration", "name", "status"]
RUN_SORTS: tuple[RunSort, ...] = ("started", "cost", "duration", "name", "status")


@dataclass(frozen=True)
class RunFilter(Jsonable):
    """Which runs a list shows: every given condition must hold (tags AND-ed).

    ``text`` matches, case-insensitively, a substring of the command or of any ``key=value`` tag;
    ``since_s``/``until_s`` bound the start time, ``[since_s, until_s)``. Its JSON (``q`` for the text, as
    in the query string) is where the dashboard's ``/api/runs`` says what it filtered by.
    """

    text: str | None = field(default=None, metadata=json_field(name="q"))
    tags: dict[str, str] = field(default_factory=dict)
    status: str | None = None
    kind: str | None = None
    since_s: float | None = None
    until_s: float | None = None


@dataclass(frozen=True)
class SampleBucket:
    """The samples of one time bucket: mean time, means of the rates, peaks of memory, the energy summed."""

    t_s: float
    samples: int
    sampled_s: float
    cpu_percent: float
    rss_bytes: float
    host_memory_used_bytes: float
    gpu_util_pct: float | None
    gpu_memory_used_bytes: float | None
    gpu_power_w: float | None
    energy_j: float

    @classmethod
    def from_row(cls, row: sa.RowMapping) -> SampleBucket:
        """Drivers return aggregates as their own types (PostgreSQL's avg of BIGINT is ``Decimal``)."""
        return cls(
            t_s=float(row["t_s"]),
            samples=int(row["samples"]),
            sampled_s=float(row["sampled_s"]),
            cpu_percent=float(row["cpu_percent"]),
            rss_bytes=float(row["rss_bytes"]),
            host_memory_used_bytes=float(row["host_memory_used_bytes"]),
            gpu_util_pct=optional_float(row["gpu_util_pct"]),
            gpu_memory_used_bytes=optional_float(row["gpu_memory_used_bytes"]),
            gpu_power_w=optional_float(row["gpu_power_w"]),
            energy_j=float(row["energy_j"] or 0.0),
        )


@dataclass(frozen=True)
class GpuBucket:
    """One GPU's samples in one time bucket: mean utilization and power, peak memory."""

    gpu_index: int
    t_s: float
    utilization_pct: float | None
    memory_used_bytes: float | None
    power_w: float | None

    @classmethod
    def from_row(cls, row: sa.RowMapping) -> GpuBucket:
        return cls(
            gpu_index=int(row["gpu_index"]),
            t_s=float(row["t_s"]),
            utilization_pct=optional_float(row["utilization_pct"]),
            memory_used_bytes=optional_float(row["memory_used_bytes"]),
            power_w=optional_float(row["power_w"]),
        )


def _filtered(query: sa.Select[Any], where: RunFilter) -> sa.Select[Any]:
    runs, tags = schema.runs, schema.run_tags
    for key, value in where.tags.items():
        query = query.where(sa.exists().where(tags.c.run_id == runs.c.id, tags.c.key == key, tags.c.value == value))
    if where.text:
        pattern = where.text.lower()
        tag_text = sa.func.lower(tags.c.key + "=" + tags.c.value)
        query = query.where(
            sa.or_(
                sa.func.lower(runs.c.command).contains(pattern, autoescape=True),
                sa.exists().where(tags.c.run_id == runs.c.id, tag_text.contains(pattern, autoescape=True)),
            )
        )
    if where.status is not None:
        query = query.where(runs.c.status == where.status)
    if where.kind is not None:
        query = query.where(runs.c.kind == where.kind)
    if where.since_s is not None:
        query = query.where(runs.c.started_at_s >= where.since_s)
    if where.until_s is not None:
        query = query.where(runs.c.started_at_s < where.until_s)
    return query


def _attempt_sums() -> sa.Subquery:
    a = schema.attempts
    return (
        sa.select(
            a.c.run_id,
            sa.func.sum(a.c.ended_at_s - a.c.started_at_s).label("closed_s"),
            sa.func.max(sa.case((a.c.ended_at_s.is_(None), a.c.started_at_s))).label("open_since_s"),
        )
        .group_by(a.c.run_id)
        .subquery("attempt_sums")
    )


def _non_negative(value: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
    return sa.case((value > 0, value), else_=0.0)


def run_duration_s(attempts: sa.Subquery, now_s: float) -> sa.ColumnElement[Any]:
    """The billed duration of ``account.totals.price_run`` as SQL (the module docstring says why)."""
    runs = schema.runs
    end_s = sa.func.coalesce(
        runs.c.ended_at_s, sa.case((runs.c.status == "running", sa.literal(now_s)), else_=runs.c.heartbeat_at_s)
    )
    open_s = sa.case((attempts.c.open_since_s.is_not(None), _non_negative(end_s - attempts.c.open_since_s)), else_=0.0)
    return sa.case(
        (attempts.c.run_id.is_not(None), sa.func.coalesce(attempts.c.closed_s, 0.0) + open_s),
        else_=_non_negative(end_s - runs.c.started_at_s),
    )


def runs_page_query(
    where: RunFilter, sort: RunSort, descending: bool, now_s: float, offset: int, limit: int | None
) -> sa.Select[Any]:
    """The runs matching ``where``, ordered by ``sort`` (ties: newest id first), one page of them."""
    runs = schema.runs
    attempts = _attempt_sums()
    duration = run_duration_s(attempts, now_s)
    key: sa.ColumnElement[Any] = {
        "started": runs.c.started_at_s,
        "cost": runs.c.hourly_usd * duration,
        "duration": duration,
        "name": runs.c.command,
        "status": runs.c.status,
    }[sort]
    query = _filtered(sa.select(runs).outerjoin(attempts, attempts.c.run_id == runs.c.id), where)
    order = key.desc() if descending else key.asc()
    query = query.order_by(order, runs.c.id.desc() if descending else runs.c.id.asc()).offset(offset)
    return query.limit(limit) if limit is not None else query


def runs_count_query(where: RunFilter) -> sa.Select[Any]:
    return _filtered(sa.select(sa.func.count()).select_from(schema.runs), where)


def _bucket(t: sa.ColumnElement[Any], start_s: float, width_s: float, dialect: str) -> sa.ColumnElement[Any]:
    """The bucket number of time ``t``: ``floor((t - start) / width)``; a cast truncates, which is
    the floor for the non-negative offsets asked for, and SQLite has no ``floor`` in every build."""
    offset = (t - sa.literal(start_s)) / sa.literal(width_s)
    if dialect == "sqlite":
        return sa.cast(offset, sa.Integer)
    return sa.cast(sa.func.floor(offset), sa.Integer)


def sample_buckets_query(run_id: int, start_s: float, width_s: float, dialect: str) -> sa.Select[Any]:
    """One row per ``width_s`` bucket of the run's samples from ``start_s`` on, in time order."""
    s = schema.samples
    bucket = _bucket(s.c.t_s, start_s, width_s, dialect).label("bucket")
    return (
        sa.select(
            bucket,
            sa.func.avg(s.c.t_s).label("t_s"),
            sa.func.count().label("samples"),
            sa.func.sum(s.c.interval_s).label("sampled_s"),
            sa.func.avg(s.c.cpu_percent).label("cpu_percent"),
            sa.func.max(s.c.rss_bytes).label("rss_bytes"),
            sa.func.max(s.c.host_memory_used_bytes).label("host_memory_used_bytes"),
            sa.func.avg(s.c.gpu_util_pct).label("gpu_util_pct"),
            sa.func.max(s.c.gpu_memory_used_bytes).label("gpu_memory_used_bytes"),
            sa.func.avg(s.c.gpu_power_w).label("gpu_power_w"),
            sa.func.sum(s.c.energy_j).label("energy_j"),
        )
        .where(s.c.run_id == run_id, s.c.t_s >= start_s)
        .group_by(bucket)
        .order_by(bucket)
    )


def gpu_buckets_query(run_id: int, start_s: float, width_s: float, dialect: str) -> sa.Select[Any]:
    """One row per GPU and ``width_s`` bucket of the run's per-GPU samples, by GPU then time."""
    g = schema.gpu_samples
    bucket = _bucket(g.c.t_s, start_s, width_s, dialect).label("bucket")
    return (
        sa.select(
            g.c.gpu_index,
            bucket,
            sa.func.avg(g.c.t_s).label("t_s"),
            sa.func.avg(g.c.utilization_pct).label("utilization_pct"),
            sa.func.max(g.c.memory_used_bytes).label("memory_used_bytes"),
            sa.func.avg(g.c.power_w).label("power_w"),
        )
        .where(g.c.run_id == run_id, g.c.t_s >= start_s)
        .group_by(g.c.gpu_index, bucket)
        .order_by(g.c.gpu_index, bucket)
    )
