"""``Ledger``: the one door to the runs database (SQLite by default, any SQLAlchemy URL otherwise).

Every write is a short transaction so that many processes can share one SQLite file (WAL mode,
busy timeout); readers never block writers. Opening a ledger creates or migrates it first
(see ``computewise.ledger.migrate``), so callers never see a half-made schema.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict
from typing import Any

import sqlalchemy as sa

from computewise.errors import InputError
from computewise.ledger import schema
from computewise.ledger.connect import connect
from computewise.ledger.records import (
    AlertRow,
    BudgetRow,
    GpuSampleRow,
    NewRun,
    PriceSnapshot,
    RunRow,
    RunStatus,
    SampleRow,
    StepRow,
)

__all__ = ["Ledger"]

_SAMPLE_FIELDS = tuple(f for f in SampleRow.__dataclass_fields__)
_GPU_FIELDS = tuple(f for f in GpuSampleRow.__dataclass_fields__)
_STEP_FIELDS = tuple(f for f in StepRow.__dataclass_fields__)


class Ledger:
    """Runs, samples, steps, budgets and alerts in one SQL database."""

    def __init__(self, engine: sa.Engine, url: str) -> None:
        self.engine = engine
        self.url = url

    @classmethod
    def open(cls, url: str | None = None) -> Ledger:
        """Open (creating or migrating as needed) the ledger at ``url``, ``$COMPUTEWISE_DB`` or the default file."""
        engine, resolved = connect(url)
        return cls(engine, resolved)

    def close(self) -> None:
        self.engine.dispose()

    # -- runs -------------------------------------------------------------------------------

    def start_run(self, run: NewRun) -> int:
        values = asdict(run)
        price: PriceSnapshot = run.price
        values.pop("price")
        values["argv"] = list(run.argv)
        with self.engine.begin() as conn:
            result = conn.execute(
                schema.runs.insert().values(
                    **values,
                    heartbeat_at_s=run.started_at_s,
                    status="running",
                    hourly_usd=price.hourly_usd,
                    price=price.to_dict(),
                )
            )
            run_id = _inserted_id(result)
            if run.tags:
                conn.execute(
                    schema.run_tags.insert(),
                    [{"run_id": run_id, "key": key, "value": value} for key, value in run.tags.items()],
                )
        return run_id

    def heartbeat(self, run_id: int, t_s: float) -> None:
        with self.engine.begin() as conn:
            conn.execute(schema.runs.update().where(schema.runs.c.id == run_id).values(heartbeat_at_s=t_s))

    def finish_run(
        self,
        run_id: int,
        status: RunStatus,
        ended_at_s: float,
        exit_code: int | None = None,
        summary: Mapping[str, Any] | None = None,
        error: str | None = None,
    ) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                schema.runs.update()
                .where(schema.runs.c.id == run_id)
                .values(
                    status=status,
                    ended_at_s=ended_at_s,
                    heartbeat_at_s=ended_at_s,
                    exit_code=exit_code,
                    summary=dict(summary) if summary is not None else None,
                    error=error,
                )
            )

    def add_inferences(self, run_id: int, count: int) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                schema.runs.update()
                .where(schema.runs.c.id == run_id)
                .values(inferences=schema.runs.c.inferences + count)
            )

    def run(self, run_id: int) -> RunRow:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(schema.runs).where(schema.runs.c.id == run_id)).mappings().first()
        if row is None:
            raise InputError(f"no run with id {run_id} in {self.url}", "list the runs with `computewise runs`")
        return _run_row(row)

    def runs(
        self,
        tags: Mapping[str, str] | None = None,
        status: RunStatus | None = None,
        since_s: float | None = None,
        limit: int | None = 50,
    ) -> list[RunRow]:
        """Most recent first, filtered by every given tag (AND), status and start time."""
        query = sa.select(schema.runs).order_by(schema.runs.c.started_at_s.desc(), schema.runs.c.id.desc())
        for key, value in (tags or {}).items():
            tag = schema.run_tags.alias()
            query = query.join(tag, sa.and_(tag.c.run_id == schema.runs.c.id, tag.c.key == key, tag.c.value == value))
        if status is not None:
            query = query.where(schema.runs.c.status == status)
        if since_s is not None:
            query = query.where(schema.runs.c.started_at_s >= since_s)
        if limit is not None:
            query = query.limit(limit)
        with self.engine.connect() as conn:
            return [_run_row(row) for row in conn.execute(query).mappings()]

    # -- time series ------------------------------------------------------------------------

    def add_samples(self, rows: Sequence[SampleRow], gpu_rows: Sequence[GpuSampleRow] = ()) -> None:
        """Insert a batch in one transaction (executemany): the sampler flushes about once a second."""
        with self.engine.begin() as conn:
            if rows:
                conn.execute(schema.samples.insert(), [_values(row, _SAMPLE_FIELDS) for row in rows])
            if gpu_rows:
                conn.execute(schema.gpu_samples.insert(), [_values(row, _GPU_FIELDS) for row in gpu_rows])

    def add_steps(self, rows: Sequence[StepRow]) -> None:
        if not rows:
            return
        with self.engine.begin() as conn:
            conn.execute(schema.steps.insert(), [_values(row, _STEP_FIELDS) for row in rows])

    def samples(self, run_id: int) -> list[SampleRow]:
        return list(self._rows(schema.samples, run_id, SampleRow, _SAMPLE_FIELDS))

    def gpu_samples(self, run_id: int) -> list[GpuSampleRow]:
        return list(self._rows(schema.gpu_samples, run_id, GpuSampleRow, _GPU_FIELDS))

    def steps(self, run_id: int) -> list[StepRow]:
        return list(self._rows(schema.steps, run_id, StepRow, _STEP_FIELDS))

    def _rows(self, table: sa.Table, run_id: int, kind: Any, fields: tuple[str, ...]) -> Iterator[Any]:
        order = table.c.step if table is schema.steps else table.c.t_s
        query = sa.select(*(table.c[f] for f in fields)).where(table.c.run_id == run_id).order_by(order, table.c.id)
        with self.engine.connect() as conn:
            for row in conn.execute(query):
                yield kind(*row)

    # -- budgets and alerts -----------------------------------------------------------------

    def set_budget(
        self,
        scope: str,
        monthly_usd: float,
        alert_at_pct: Sequence[float],
        webhook_url: str | None,
        command: str | None,
        now_s: float,
    ) -> BudgetRow:
        """Create or replace the budget of ``scope``; alerts already fired this month stay fired."""
        values = {
            "monthly_usd": monthly_usd,
            "alert_at_pct": list(alert_at_pct),
            "webhook_url": webhook_url,
            "command": command,
        }
        with self.engine.begin() as conn:
            existing = conn.execute(sa.select(schema.budgets.c.id).where(schema.budgets.c.scope == scope)).first()
            if existing is None:
                conn.execute(schema.budgets.insert().values(scope=scope, created_at_s=now_s, **values))
            else:
                conn.execute(schema.budgets.update().where(schema.budgets.c.id == existing.id).values(**values))
        return next(b for b in self.budgets() if b.scope == scope)

    def budgets(self) -> list[BudgetRow]:
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(schema.budgets).order_by(schema.budgets.c.scope)).mappings().all()
        return [
            BudgetRow(
                id=row["id"],
                scope=row["scope"],
                monthly_usd=row["monthly_usd"],
                alert_at_pct=tuple(float(p) for p in row["alert_at_pct"]),
                webhook_url=row["webhook_url"],
                command=row["command"],
                created_at_s=row["created_at_s"],
            )
            for row in rows
        ]

    def record_alert(
        self,
        kind: str,
        message: str,
        fired_at_s: float,
        scope: str | None = None,
        budget_id: int | None = None,
        run_id: int | None = None,
        period: str | None = None,
        threshold_pct: float | None = None,
    ) -> int | None:
        """Store an alert; None when this (budget, period, threshold) already fired, so it is sent once."""
        try:
            with self.engine.begin() as conn:
                result = conn.execute(
                    schema.alerts.insert().values(
                        kind=kind,
                        scope=scope,
                        budget_id=budget_id,
                        run_id=run_id,
                        period=period,
                        threshold_pct=threshold_pct,
                        message=message,
                        fired_at_s=fired_at_s,
                        delivery={},
                    )
                )
        except sa.exc.IntegrityError:
            return None
        return _inserted_id(result)

    def set_alert_delivery(self, alert_id: int, delivery: Mapping[str, Any]) -> None:
        with self.engine.begin() as conn:
            conn.execute(schema.alerts.update().where(schema.alerts.c.id == alert_id).values(delivery=dict(delivery)))

    def alerts(self, since_s: float | None = None) -> list[AlertRow]:
        query = sa.select(schema.alerts).order_by(schema.alerts.c.fired_at_s)
        if since_s is not None:
            query = query.where(schema.alerts.c.fired_at_s >= since_s)
        with self.engine.connect() as conn:
            return [AlertRow(**row) for row in conn.execute(query).mappings()]


def _inserted_id(result: sa.CursorResult[Any]) -> int:
    key = result.inserted_primary_key
    if key is None:
        raise RuntimeError("the database returned no primary key for an insert")
    return int(key[0])


def _values(row: Any, fields: tuple[str, ...]) -> dict[str, Any]:
    return {f: getattr(row, f) for f in fields}


def _run_row(row: sa.RowMapping) -> RunRow:
    return RunRow(
        id=row["id"],
        kind=row["kind"],
        command=row["command"],
        argv=tuple(row["argv"]),
        tags=dict(row["tags"]),
        host=row["host"],
        pid=row["pid"],
        user=row["user"],
        cwd=row["cwd"],
        started_at_s=row["started_at_s"],
        ended_at_s=row["ended_at_s"],
        heartbeat_at_s=row["heartbeat_at_s"],
        status=row["status"],
        exit_code=row["exit_code"],
        interval_s=row["interval_s"],
        price=PriceSnapshot.from_dict(row["price"]),
        gpu_count=row["gpu_count"],
        gpu_name=row["gpu_name"],
        accelerator=row["accelerator"],
        input_hash=row["input_hash"],
        inferences=row["inferences"],
        error=row["error"],
        summary=row["summary"],
    )
