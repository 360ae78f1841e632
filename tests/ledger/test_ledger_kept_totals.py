"""Sample totals kept when a run ends (revision 0005): equal to the live aggregate, dropped by a late sample.

``Ledger.run_totals`` prices a finished run from the row ``finish_run`` or ``mark_crashed`` kept, so
these tests compare that row with the live ``GROUP BY`` over the same samples (the figures every
report and the dashboard price from) and with a sum taken in Python, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Callable

import sqlalchemy as sa
from alembic import command

from computewise.ledger import Ledger, NewRun, RunTotals, SampleRow, schema
from computewise.ledger.aggregates import sample_totals_query
from computewise.ledger.connect import open_engine, write
from computewise.ledger.migrate import alembic_config

MakeRun = Callable[..., NewRun]
MakeSamples = Callable[[int, float, int], list[SampleRow]]


def _kept(ledger: Ledger) -> dict[int, RunTotals]:
    with ledger.engine.connect() as conn:
        rows = conn.execute(sa.select(schema.run_sample_totals)).mappings().all()
    return {row["run_id"]: RunTotals.from_rows(row["run_id"], row, None) for row in rows}


def _live(conn: sa.Connection, run_id: int) -> RunTotals:
    """The aggregate over the run's samples now, as ``run_totals`` computes it for a run without a kept row."""
    row = conn.execute(sample_totals_query([run_id])).mappings().first()
    return RunTotals.from_rows(run_id, row, None)


def _close(a: RunTotals, b: RunTotals) -> bool:
    for name in RunTotals.__dataclass_fields__:
        x, y = getattr(a, name), getattr(b, name)
        if isinstance(x, float) and isinstance(y, float):
            if abs(x - y) > 1e-9 * max(1.0, abs(y)):
                return False
        elif x != y or type(x) is not type(y):
            return False
    return True


def _varied(run_id: int, start_s: float, sample_rows: MakeSamples) -> list[SampleRow]:
    rows = sample_rows(run_id, start_s, 5)
    rows[1] = dataclasses.replace(rows[1], idle=True, interval_s=2.5, cpu_percent=3.0)
    rows[2] = dataclasses.replace(rows[2], gpu_util_pct=None, gpu_memory_used_bytes=None, energy_measured=False)
    return rows


def test_finish_keeps_the_live_totals_and_a_late_sample_drops_them(
    ledger: Ledger, new_run: MakeRun, sample_rows: MakeSamples
) -> None:
    started = new_run()
    run_id = ledger.start_run(started)
    rows = _varied(run_id, started.started_at_s + 1, sample_rows)
    ledger.add_samples(rows)
    running_totals = ledger.run_totals([run_id])[run_id]
    assert _kept(ledger) == {}  # a running run is aggregated live

    ledger.finish_run(run_id, "succeeded", started.started_at_s + 10, exit_code=0)

    kept = _kept(ledger)
    assert list(kept) == [run_id]
    assert _close(kept[run_id], running_totals)
    assert kept[run_id].sample_count == 5 and kept[run_id].energy_measured is False
    assert abs(kept[run_id].idle_s - 2.5) < 1e-9
    assert _close(ledger.run_totals([run_id])[run_id], running_totals)

    late = sample_rows(run_id, started.started_at_s + 20, 2)
    ledger.add_samples(late)
    assert _kept(ledger) == {}
    after = ledger.run_totals([run_id])[run_id]
    assert after.sample_count == 7 and after.last_sample_t_s == late[-1].t_s

    ledger.finish_run(run_id, "succeeded", started.started_at_s + 30, exit_code=0)  # ending again replaces the row
    assert _close(_kept(ledger)[run_id], after)


def test_a_run_ended_without_samples_keeps_nothing_and_prices_as_zeros(ledger: Ledger, new_run: MakeRun) -> None:
    started = new_run()
    run_id = ledger.start_run(started)
    ledger.finish_run(run_id, "failed", started.started_at_s + 1, exit_code=1)
    assert _kept(ledger) == {}
    assert ledger.run_totals([run_id])[run_id] == RunTotals(run_id)


def test_a_run_marked_crashed_keeps_its_totals(ledger: Ledger, new_run: MakeRun, sample_rows: MakeSamples) -> None:
    """A run on another host whose monitor fell silent long ago is marked crashed, with its totals kept."""
    started = new_run(host="elsewhere", started_at_s=1.7e9)
    run_id = ledger.start_run(started)
    ledger.add_samples(sample_rows(run_id, 1.7e9 + 1, 3))
    assert ledger.mark_crashed(1.7e9 + 86_400, socket.gethostname()) == [run_id]
    kept = _kept(ledger)
    assert list(kept) == [run_id] and kept[run_id].sample_count == 3
    assert ledger.run(run_id).status == "crashed"


def test_upgrading_to_0005_keeps_the_totals_of_runs_already_ended(ledger_url: str, sample_rows: MakeSamples) -> None:
    engine, _ = open_engine(ledger_url)
    write(engine, lambda conn: command.upgrade(alembic_config(conn), "0004"))
    run = {
        "kind": "command", "command": "python train.py", "argv": ["python", "train.py"], "tags": {}, "host": "h",
        "pid": 1, "user": "ann", "cwd": "/", "started_at_s": 1.7e9, "heartbeat_at_s": 1.7e9, "interval_s": 1.0,
        "hourly_usd": 2.0, "price": {"hourly_usd": 2.0, "source": "s", "explanation": "e", "assumed": False,
                                     "carbon_g_per_kwh": 475.0, "carbon_source": "", "pue": 1.0},
    }  # fmt: skip
    with engine.begin() as conn:
        conn.execute(schema.runs.insert(), [
            {**run, "id": 1, "status": "succeeded", "ended_at_s": 1.7e9 + 60},
            {**run, "id": 2, "status": "running", "ended_at_s": None},
            {**run, "id": 3, "status": "failed", "ended_at_s": 1.7e9 + 5},  # no samples
        ])  # fmt: skip
        samples = [*_varied(1, 1.7e9, sample_rows), *sample_rows(2, 1.7e9, 4)]
        conn.execute(schema.samples.insert(), [dataclasses.asdict(row) for row in samples])
    engine.dispose()

    with Ledger.open(ledger_url) as ledger:
        kept = _kept(ledger)
        assert list(kept) == [1]
        with ledger.engine.connect() as conn:
            assert _close(kept[1], _live(conn, 1))
        totals = ledger.run_totals([1, 2, 3])
        assert totals[2].sample_count == 4 and totals[3] == RunTotals(3)
