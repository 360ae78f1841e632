"""``Ledger``: the one door to the runs database (SQLite by default, PostgreSQL for a team).

Every write is one short transaction (``connect.write``: ``BEGIN IMMEDIATE`` on SQLite, retried
while the file is locked), so many ``computewise run`` processes can share one SQLite file in WAL
mode while readers never block them. Opening a ledger connects eagerly and creates or migrates it
first (``computewise.ledger.migrate``), so callers never see a half-made schema and a job never
starts against a ledger that cannot record it. Database failures surface as ``LedgerError``.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict
from functools import lru_cache
from operator import attrgetter
from types import TracebackType
from typing import Any, TypeVar

import psutil
import sqlalchemy as sa

from computewise.errors import InputError
from computewise.ledger import schema
from computewise.ledger.aggregates import (
    RunTotals,
    attempt_totals_query,
    forget_sample_totals,
    keep_sample_totals,
    kept_sample_totals_query,
    sample_totals_query,
)
from computewise.ledger.connect import display_url, ledger_error, open_engine, write
from computewise.ledger.migrate import SchemaChange, ensure_schema
from computewise.ledger.queries import (
    GpuBucket,
    RunFilter,
    RunSort,
    SampleBucket,
    gpu_buckets_query,
    runs_count_query,
    runs_page_query,
    sample_buckets_query,
)
from computewise.ledger.records import (
    AlertRow,
    AttemptOutcome,
    AttemptRow,
    BudgetRow,
    GpuSampleRow,
    NewRun,
    PriceSnapshot,
    RunRow,
    RunStatus,
    SampleRow,
    StepRow,
    StorageAction,
    StorageActionRow,
    StorageApplyRow,
    StorageOutcome,
)
from computewise.ledger.rows import alert_row, budget_row, run_row

__all__ = ["STALE_HEARTBEATS", "STALE_MIN_S", "Ledger"]

T = TypeVar("T")

# A run on another host is presumed dead when nothing (heartbeat or sample) arrived for this long.
STALE_HEARTBEATS = 10
STALE_MIN_S = 120.0
# psutil derives create times from the boot time in whole seconds; a pid created later than the run's
# start by more than this is another process that reused the number.
_PID_CREATE_SLACK_S = 2.0

_SAMPLE_FIELDS = tuple(SampleRow.__dataclass_fields__)
_GPU_FIELDS = tuple(GpuSampleRow.__dataclass_fields__)
_STEP_FIELDS = tuple(StepRow.__dataclass_fields__)
_IDS_PER_QUERY = 5000  # run ids per IN list in aggregates: far below every supported database's parameter limit


class Ledger:
    """Runs, samples, steps, budgets and alerts in one SQL database.

    ``url`` is printable (the password masked); ``schema_change`` says whether opening created or
    migrated the schema (None when it was already current), so the CLI can mention the backup.
    """

    def __init__(self, engine: sa.Engine, url: str, schema_change: SchemaChange | None = None) -> None:
        self.engine = engine
        self.url = url
        self.schema_change = schema_change
        # SQLite admits one writer at a time and makes the others nap (1 ms and up) before retrying;
        # threads of one process queue here instead, which hands the file over without the naps.
        self._write_lock = threading.Lock() if engine.dialect.name == "sqlite" else contextlib.nullcontext()

    @classmethod
    def open(cls, url: str | None = None, create: bool = True) -> Ledger:
        """Open, creating or migrating as needed, the ledger at ``url``, ``$COMPUTEWISE_DB`` or the default file.

        ``url`` is a file path, ``sqlite:///PATH`` or ``postgresql://...``. Raises ``LedgerError``
        (with a hint) when it cannot be reached, written or trusted, in about five seconds at most.
        ``create=False`` is for readers: a SQLite file that does not exist is an error, not a new ledger.
        """
        engine, resolved = open_engine(url, create)
        try:
            change = ensure_schema(engine, resolved)
        except BaseException:
            engine.dispose()
            raise
        return cls(engine, display_url(resolved), change)

    @property
    def connect_url(self) -> str:
        """The URL with its password, for a job this process starts to open the same ledger
        (``$COMPUTEWISE_DB``); never printed, which is what ``url`` is for."""
        return self.engine.url.render_as_string(hide_password=False)

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- runs -------------------------------------------------------------------------------

    def start_run(self, run: NewRun) -> int:
        values = asdict(run)
        price: PriceSnapshot = run.price
        values.pop("price")
        values["argv"] = list(run.argv)

        def work(conn: sa.Connection) -> int:
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

        return self._write(work)

    def heartbeat(self, run_id: int, t_s: float) -> None:
        self._execute(schema.runs.update().where(schema.runs.c.id == run_id).values(heartbeat_at_s=t_s))

    def finish_run(
        self,
        run_id: int,
        status: RunStatus,
        ended_at_s: float,
        exit_code: int | None = None,
        summary: Mapping[str, Any] | None = None,
        error: str | None = None,
    ) -> None:
        """Record the run's end and keep its sample totals (``aggregates``), in one transaction."""
        ending = (
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

        def work(conn: sa.Connection) -> None:
            conn.execute(ending)
            _keep_sample_totals(conn, [run_id])

        self._write(work)

    def set_run_hardware(
        self, run_id: int, price: PriceSnapshot, gpu_count: int, gpu_name: str | None, accelerator: str | None
    ) -> None:
        """Fix a run's hardware and price once they are known (``track()`` learns the GPU after it starts)."""
        self._execute(
            schema.runs.update()
            .where(schema.runs.c.id == run_id)
            .values(
                hourly_usd=price.hourly_usd,
                price=price.to_dict(),
                gpu_count=gpu_count,
                gpu_name=gpu_name,
                accelerator=accelerator,
            )
        )

    def add_inferences(self, run_id: int, count: int) -> None:
        self._execute(
            schema.runs.update().where(schema.runs.c.id == run_id).values(inferences=schema.runs.c.inferences + count)
        )

    def run(self, run_id: int) -> RunRow:
        with self._reading() as conn:
            row = conn.execute(sa.select(schema.runs).where(schema.runs.c.id == run_id)).mappings().first()
        if row is None:
            raise InputError(f"no run with id {run_id} in {self.url}", "list the runs with `computewise runs`")
        return self._run_row(row)

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
        with self._reading() as conn:
            return [self._run_row(row) for row in conn.execute(query).mappings()]

    def runs_page(
        self, where: RunFilter, sort: RunSort, descending: bool, now_s: float, offset: int = 0, limit: int | None = 50
    ) -> list[RunRow]:
        """One page of the runs matching ``where``, sorted in the database (``ledger.queries``)."""
        with self._reading() as conn:
            query = runs_page_query(where, sort, descending, now_s, offset, limit)
            return [self._run_row(row) for row in conn.execute(query).mappings()]

    def count_runs(self, where: RunFilter) -> int:
        with self._reading() as conn:
            return int(conn.execute(runs_count_query(where)).scalar_one())

    def finished_run_ids(self, run_ids: Iterable[int]) -> set[int]:
        """Those of ``run_ids`` no longer running: their samples, and so their totals, can no longer change."""
        wanted = list(dict.fromkeys(run_ids))
        finished: set[int] = set()
        with self._reading() as conn:
            for start in range(0, len(wanted), _IDS_PER_QUERY):
                chunk = wanted[start : start + _IDS_PER_QUERY]
                runs = schema.runs
                query = sa.select(runs.c.id).where(runs.c.id.in_(chunk), runs.c.status != "running")
                finished.update(int(run_id) for run_id in conn.execute(query).scalars())
        return finished

    def tag_key_counts(self) -> list[tuple[str, int]]:
        """Every tag key with the number of runs carrying it, most common first (then by name)."""
        tags = schema.run_tags
        count = sa.func.count().label("runs")
        query = sa.select(tags.c.key, count).group_by(tags.c.key).order_by(count.desc(), tags.c.key)
        with self._reading() as conn:
            return [(str(key), int(n)) for key, n in conn.execute(query)]

    def sample_span(self, run_id: int) -> tuple[int, float | None, float | None]:
        """How many samples the run has, and the times of its first and last one (None without samples)."""
        s = schema.samples
        query = sa.select(sa.func.count(), sa.func.min(s.c.t_s), sa.func.max(s.c.t_s)).where(s.c.run_id == run_id)
        with self._reading() as conn:
            count, first_s, last_s = conn.execute(query).one()
        return int(count), first_s, last_s

    def sample_buckets(self, run_id: int, start_s: float, width_s: float) -> list[SampleBucket]:
        """The run's samples from ``start_s`` averaged into ``width_s`` buckets in the database, in time order."""
        query = sample_buckets_query(run_id, start_s, width_s, self.engine.dialect.name)
        with self._reading() as conn:
            return [SampleBucket.from_row(row) for row in conn.execute(query).mappings()]

    def gpu_buckets(self, run_id: int, start_s: float, width_s: float) -> list[GpuBucket]:
        """Each GPU's samples from ``start_s`` averaged into ``width_s`` buckets in the database."""
        query = gpu_buckets_query(run_id, start_s, width_s, self.engine.dialect.name)
        with self._reading() as conn:
            return [GpuBucket.from_row(row) for row in conn.execute(query).mappings()]

    def recent_successful_run(
        self, command: str, tags: Mapping[str, str], input_hash: str | None, since_s: float
    ) -> RunRow | None:
        """The latest succeeded run with this exact command, tag set and input hash, started at or after ``since_s``.

        ``computewise run`` asks before launching, to warn that the same job already ran (and what it cost).
        """
        runs = schema.runs
        same_input = runs.c.input_hash.is_(None) if input_hash is None else runs.c.input_hash == input_hash
        query = (
            sa.select(runs)
            .where(runs.c.command == command, runs.c.status == "succeeded", runs.c.started_at_s >= since_s, same_input)
            .order_by(runs.c.started_at_s.desc(), runs.c.id.desc())
        )
        wanted = dict(tags)
        with self._reading() as conn:
            for row in conn.execute(query).mappings():
                run = self._run_row(row)
                if run.tags == wanted:  # the whole set: {team: a} is not {team: a, exp: b}
                    return run
        return None

    def mark_crashed(self, now_s: float, host: str) -> list[int]:
        """Mark every ``running`` run whose monitor is gone as ``crashed``; return their ids.

        On ``host`` a run is gone when its pid is no live process, or is a process created after the
        run started (the number was reused). A run on another host is gone when nothing, heartbeat or
        sample, came from it for ``STALE_HEARTBEATS`` intervals (at least ``STALE_MIN_S``). The run
        ends at that last sign of life, so its cost stops where the evidence does.
        """
        runs, samples = schema.runs, schema.samples
        last_sample_s = sa.select(sa.func.max(samples.c.t_s)).where(samples.c.run_id == runs.c.id).scalar_subquery()
        query = sa.select(
            runs.c.id, runs.c.host, runs.c.pid, runs.c.started_at_s, runs.c.heartbeat_at_s, runs.c.interval_s,
            last_sample_s,
        ).where(runs.c.status == "running")  # fmt: skip
        with self._reading() as conn:
            candidates = conn.execute(query).all()
        gone: dict[int, tuple[float, str]] = {}
        for run_id, run_host, pid, started_at_s, heartbeat_at_s, interval_s, sample_s in candidates:
            last_seen_s = max(heartbeat_at_s, sample_s if sample_s is not None else heartbeat_at_s)
            if run_host == host:
                if not _process_alive(pid, started_at_s):
                    gone[run_id] = (last_seen_s, f"process {pid} on {host} ended without recording the end of the run")
            elif (silent_s := now_s - last_seen_s) > max(STALE_HEARTBEATS * interval_s, STALE_MIN_S):
                gone[run_id] = (last_seen_s, f"no heartbeat from host {run_host} for {silent_s:.0f} s")
        if not gone:
            return []

        def work(conn: sa.Connection) -> list[int]:
            marked = []
            for run_id, (ended_at_s, error) in gone.items():
                result = conn.execute(
                    runs.update()
                    .where(runs.c.id == run_id, runs.c.status == "running")  # unless it finished meanwhile
                    .values(status="crashed", ended_at_s=ended_at_s, error=error)
                )
                if result.rowcount == 1:
                    marked.append(run_id)
            _keep_sample_totals(conn, marked)
            return marked

        return self._write(work)

    # -- time series ------------------------------------------------------------------------

    def start_attempt(self, run_id: int, number: int, backend: str, job_id: str, started_at_s: float) -> None:
        """Record submission ``number`` (from 1) of a logical run; a duplicate number is a ``LedgerError``."""
        self._execute(
            schema.attempts.insert().values(
                run_id=run_id,
                number=number,
                backend=backend,
                job_id=job_id,
                started_at_s=started_at_s,
                outcome="running",
            )
        )

    def finish_attempt(
        self,
        run_id: int,
        number: int,
        outcome: AttemptOutcome,
        ended_at_s: float,
        exit_code: int | None,
        started_at_s: float | None = None,
    ) -> None:
        """Close an attempt; ``started_at_s`` replaces the submit time with the engine's own start time."""
        values: dict[str, Any] = {"outcome": outcome, "ended_at_s": ended_at_s, "exit_code": exit_code}
        if started_at_s is not None:
            values["started_at_s"] = started_at_s
        self._execute(
            schema.attempts.update()
            .where(schema.attempts.c.run_id == run_id, schema.attempts.c.number == number)
            .values(**values)
        )

    def attempts(self, run_id: int) -> list[AttemptRow]:
        """The run's submissions in order; empty for a run that was never resubmitted through a backend."""
        query = sa.select(schema.attempts).where(schema.attempts.c.run_id == run_id).order_by(schema.attempts.c.number)
        with self._reading() as conn:
            return [AttemptRow(**row) for row in conn.execute(query).mappings()]

    def run_totals(self, run_ids: Iterable[int]) -> dict[int, RunTotals]:
        """Each run's sample and attempt aggregates, computed in the database; zeros for a run with none.

        A finished run's sample aggregate is the row kept when it ended (``aggregates``); the other runs
        get one GROUP BY over their samples. One query per table and per ``_IDS_PER_QUERY`` runs, so an
        IN list stays far below SQLite's and PostgreSQL's bound-parameter limits.
        """
        wanted = list(dict.fromkeys(run_ids))
        samples: dict[int, sa.RowMapping] = {}
        attempts: dict[int, sa.RowMapping] = {}
        with self._reading() as conn:
            for start in range(0, len(wanted), _IDS_PER_QUERY):
                chunk = wanted[start : start + _IDS_PER_QUERY]
                kept = conn.execute(kept_sample_totals_query(chunk)).mappings()
                samples.update((row["run_id"], row) for row in kept)
                live = [run_id for run_id in chunk if run_id not in samples]  # running, or sampled after its end
                if live:
                    rows = conn.execute(sample_totals_query(live)).mappings()
                    samples.update((row["run_id"], row) for row in rows)
                attempts.update((row["run_id"], row) for row in conn.execute(attempt_totals_query(chunk)).mappings())
        return {run_id: RunTotals.from_rows(run_id, samples.get(run_id), attempts.get(run_id)) for run_id in wanted}

    def add_samples(self, rows: Sequence[SampleRow], gpu_rows: Sequence[GpuSampleRow] = ()) -> None:
        """Insert a batch in one transaction (executemany): the sampler flushes about once a second."""
        if not rows and not gpu_rows:
            return

        def work(conn: sa.Connection) -> None:
            if rows:
                _insert_many(conn, schema.samples, _SAMPLE_FIELDS, rows)
                # A sample after a run's end (a late flush, a run marked crashed that was alive) voids
                # the totals kept at that end: the run is aggregated live again from then on.
                conn.execute(forget_sample_totals(sorted({row.run_id for row in rows})))
            if gpu_rows:
                _insert_many(conn, schema.gpu_samples, _GPU_FIELDS, gpu_rows)

        self._write(work)

    def add_steps(self, rows: Sequence[StepRow]) -> None:
        if rows:
            self._write(lambda conn: _insert_many(conn, schema.steps, _STEP_FIELDS, rows))

    def samples(self, run_id: int) -> list[SampleRow]:
        return [SampleRow(*row) for row in self._rows(schema.samples, run_id, _SAMPLE_FIELDS)]

    def gpu_samples(self, run_id: int) -> list[GpuSampleRow]:
        return [GpuSampleRow(*row) for row in self._rows(schema.gpu_samples, run_id, _GPU_FIELDS)]

    def steps(self, run_id: int) -> list[StepRow]:
        return [StepRow(*row) for row in self._rows(schema.steps, run_id, _STEP_FIELDS)]

    def _rows(self, table: sa.Table, run_id: int, fields: tuple[str, ...]) -> list[Any]:
        order = table.c.step if table is schema.steps else table.c.t_s
        query = sa.select(*(table.c[f] for f in fields)).where(table.c.run_id == run_id).order_by(order, table.c.id)
        with self._reading() as conn:
            return list(conn.execute(query))

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

        def work(conn: sa.Connection) -> None:
            existing = conn.execute(sa.select(schema.budgets.c.id).where(schema.budgets.c.scope == scope)).first()
            if existing is None:
                conn.execute(schema.budgets.insert().values(scope=scope, created_at_s=now_s, **values))
            else:
                conn.execute(schema.budgets.update().where(schema.budgets.c.id == existing.id).values(**values))

        self._write(work)
        return next(b for b in self.budgets() if b.scope == scope)

    def budgets(self) -> list[BudgetRow]:
        with self._reading() as conn:
            rows = conn.execute(sa.select(schema.budgets).order_by(schema.budgets.c.scope)).mappings().all()
        return [budget_row(row, self.engine.url) for row in rows]

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
        insert = schema.alerts.insert().values(
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
        try:
            return self._write(lambda conn: _inserted_id(conn.execute(insert)))
        except sa.exc.IntegrityError:
            return None

    def set_alert_delivery(self, alert_id: int, delivery: Mapping[str, Any]) -> None:
        self._execute(schema.alerts.update().where(schema.alerts.c.id == alert_id).values(delivery=dict(delivery)))

    def alerts(self, since_s: float | None = None) -> list[AlertRow]:
        query = sa.select(schema.alerts).order_by(schema.alerts.c.fired_at_s)
        if since_s is not None:
            query = query.where(schema.alerts.c.fired_at_s >= since_s)
        with self._reading() as conn:
            return [alert_row(row, self.engine.url) for row in conn.execute(query).mappings()]

    # -- storage applies --------------------------------------------------------------------

    def start_storage_apply(
        self,
        location: str,
        policy_sha256: str,
        started_at_s: float,
        host: str,
        pid: int,
        user: str,
        actions: Sequence[StorageAction],
    ) -> int:
        """Record an apply and every action it plans, as ``planned``, in one transaction; returns its id.

        Written before the first file is touched, so an apply killed halfway leaves its unreached
        actions visibly planned rather than no trace at all.
        """

        def work(conn: sa.Connection) -> int:
            apply_id = _inserted_id(
                conn.execute(
                    schema.storage_applies.insert().values(
                        location=location, policy_sha256=policy_sha256, host=host, pid=pid, user=user,
                        started_at_s=started_at_s, status="running",
                    )
                )
            )  # fmt: skip
            if actions:
                conn.execute(
                    schema.storage_actions.insert(),
                    [
                        {**asdict(action), "apply_id": apply_id, "number": number, "outcome": "planned"}
                        for number, action in enumerate(actions)
                    ],
                )
            return apply_id

        return self._write(work)

    def finish_storage_actions(
        self, apply_id: int, results: Sequence[tuple[int, StorageOutcome, float, str | None]]
    ) -> None:
        """Set ``(number, outcome, done_at_s, error)`` of some of an apply's actions, in one transaction."""
        if not results:
            return
        table = schema.storage_actions
        statement = (
            table.update()
            .where(table.c.apply_id == apply_id, table.c.number == sa.bindparam("b_number"))
            .values(outcome=sa.bindparam("b_outcome"), done_at_s=sa.bindparam("b_done"), error=sa.bindparam("b_error"))
        )
        rows = [
            {"b_number": number, "b_outcome": outcome, "b_done": done_at_s, "b_error": error}
            for number, outcome, done_at_s, error in results
        ]
        self._write(lambda conn: conn.execute(statement, rows))

    def finish_storage_apply(self, apply_id: int, status: str, finished_at_s: float) -> None:
        """Close an apply: ``finished``, or ``interrupted`` when it stopped before its last action."""
        self._execute(
            schema.storage_applies.update()
            .where(schema.storage_applies.c.id == apply_id)
            .values(status=status, finished_at_s=finished_at_s)
        )

    def storage_applies(self, since_s: float | None = None, until_s: float | None = None) -> list[StorageApplyRow]:
        """Applies started in ``[since_s, until_s)``, oldest first."""
        table = schema.storage_applies
        query = sa.select(table).order_by(table.c.started_at_s, table.c.id)
        if since_s is not None:
            query = query.where(table.c.started_at_s >= since_s)
        if until_s is not None:
            query = query.where(table.c.started_at_s < until_s)
        with self._reading() as conn:
            return [StorageApplyRow(**row) for row in conn.execute(query).mappings()]

    def storage_actions(self, apply_id: int) -> list[StorageActionRow]:
        table = schema.storage_actions
        query = sa.select(table).where(table.c.apply_id == apply_id).order_by(table.c.number)
        with self._reading() as conn:
            return [StorageActionRow(**row) for row in conn.execute(query).mappings()]

    def storage_done_totals(self, since_s: float | None, until_s: float) -> dict[str, tuple[int, int, float]]:
        """Per action (delete, archive): files, bytes and $/month saved by actions done in the window, in SQL."""
        table = schema.storage_actions
        query = (
            sa.select(
                table.c.action,
                sa.func.count(),
                sa.func.coalesce(sa.func.sum(table.c.size_bytes), 0),
                sa.func.coalesce(sa.func.sum(table.c.usd_per_month_saved), 0.0),
            )
            .where(table.c.outcome == "done", table.c.done_at_s < until_s)
            .group_by(table.c.action)
        )
        if since_s is not None:
            query = query.where(table.c.done_at_s >= since_s)
        with self._reading() as conn:
            return {str(action): (int(n), int(size), float(usd)) for action, n, size, usd in conn.execute(query)}

    # -- transactions -----------------------------------------------------------------------

    def _run_row(self, row: sa.RowMapping) -> RunRow:
        """The row checked column by column (``ledger.rows``): a damaged one is a ``LedgerError`` naming it."""
        return run_row(row, self.engine.url)

    def _write(self, work: Callable[[sa.Connection], T]) -> T:
        with _unusable_as_ledger_error("cannot write to the ledger", self.engine.url), self._write_lock:
            return write(self.engine, work)

    def _execute(self, statement: sa.Executable) -> None:
        self._write(lambda conn: conn.execute(statement))

    @contextlib.contextmanager
    def _reading(self) -> Iterator[sa.Connection]:
        with _unusable_as_ledger_error("cannot read the ledger", self.engine.url), self.engine.connect() as conn:
            yield conn


@contextlib.contextmanager
def _unusable_as_ledger_error(doing: str, url: sa.URL) -> Iterator[None]:
    """A database that cannot be used (unreachable, locked, a file damaged or replaced while open) is the
    user's ``LedgerError``, so nothing outside ``ledger/`` needs SQLAlchemy's types; a constraint or SQL
    error (IntegrityError, ProgrammingError) is a bug in computewise and stays what it is."""
    try:
        yield
    except (sa.exc.IntegrityError, sa.exc.ProgrammingError):
        raise
    except sa.exc.DatabaseError as exc:  # OperationalError included
        raise ledger_error(doing, url, exc) from exc


def _keep_sample_totals(conn: sa.Connection, run_ids: Sequence[int]) -> None:
    """Replace the kept sample totals of runs that have just ended (``aggregates.keep_sample_totals``)."""
    for start in range(0, len(run_ids), _IDS_PER_QUERY):
        chunk = run_ids[start : start + _IDS_PER_QUERY]
        conn.execute(forget_sample_totals(chunk))
        conn.execute(keep_sample_totals(chunk))


def _inserted_id(result: sa.CursorResult[Any]) -> int:
    key = result.inserted_primary_key
    if key is None:
        raise RuntimeError("the database returned no primary key for an insert")
    return int(key[0])


def _insert_many(conn: sa.Connection, table: sa.Table, fields: tuple[str, ...], rows: Sequence[Any]) -> None:
    """One ``executemany`` of plain tuples straight to the driver: the hot path of every monitored run.

    SQLAlchemy's per-row parameter processing costs about twice the insert itself, and these columns
    (numbers and booleans) need no conversion that the drivers do not already do.
    """
    conn.exec_driver_sql(_insert_sql(conn.dialect, table, fields), list(map(attrgetter(*fields), rows)))


@lru_cache(maxsize=64)  # a few tables x the dialects of the open engines
def _insert_sql(dialect: sa.Dialect, table: sa.Table, fields: tuple[str, ...]) -> str:
    quote = dialect.identifier_preparer.quote
    marker = "?" if dialect.paramstyle == "qmark" else "%s"  # sqlite3 | psycopg (format and pyformat)
    return (
        f"INSERT INTO {quote(table.name)} ({', '.join(quote(f) for f in fields)}) "
        f"VALUES ({', '.join(marker for _ in fields)})"
    )


def _process_alive(pid: int, started_at_s: float) -> bool:
    """Whether ``pid`` is still the process that started the run (not a zombie, not a reused number)."""
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        return bool(process.create_time() <= started_at_s + _PID_CREATE_SLACK_S)
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True  # it exists and belongs to someone else; assume it is still ours
