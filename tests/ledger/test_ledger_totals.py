"""``Ledger.run_totals`` on real SQLite and PostgreSQL, checked against sums taken in Python over the same rows."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from computewise.ledger import Ledger, NewRun, RunTotals, SampleRow

MakeRun = Callable[..., NewRun]
MakeSamples = Callable[[int, float, int], list[SampleRow]]


def _mixed_samples(run_id: int, start_s: float, sample_rows: MakeSamples) -> list[SampleRow]:
    """Six samples unlike each other: idle ones, one without a GPU reading, one estimated energy, a short last one."""
    rows = sample_rows(run_id, start_s, 6)
    rows[1] = dataclasses.replace(rows[1], idle=True, gpu_util_pct=0.0, cpu_percent=3.0)
    rows[2] = dataclasses.replace(rows[2], gpu_util_pct=None, gpu_memory_used_bytes=None)
    rows[3] = dataclasses.replace(rows[3], energy_measured=False, energy_j=900.0, rss_bytes=20_000_000_000)
    rows[4] = dataclasses.replace(rows[4], idle=True, interval_s=2.5)
    rows[5] = dataclasses.replace(rows[5], interval_s=0.05, cpu_percent=400.0, gpu_util_pct=10.0)
    return rows


def _expected(run_id: int, rows: list[SampleRow]) -> RunTotals:
    """The same aggregates, summed here one sample at a time (a second implementation, not the SQL)."""
    sampled_s = sum(r.interval_s for r in rows)
    with_gpu = [r for r in rows if r.gpu_util_pct is not None]
    return RunTotals(
        run_id=run_id,
        sample_count=len(rows),
        sampled_s=sampled_s,
        idle_s=sum((r.interval_s for r in rows if r.idle), 0.0),
        cpu_percent_mean=sum(r.cpu_percent * r.interval_s for r in rows) / sampled_s,
        gpu_util_pct_mean=sum((r.gpu_util_pct or 0.0) * r.interval_s for r in with_gpu)
        / sum(r.interval_s for r in with_gpu),
        energy_j=sum(r.energy_j for r in rows),
        energy_measured=all(r.energy_measured for r in rows),
        peak_rss_bytes=max(r.rss_bytes for r in rows),
        peak_gpu_memory_bytes=max(r.gpu_memory_used_bytes or 0 for r in rows),
        last_sample_t_s=max(r.t_s for r in rows),
    )


def _close(actual: RunTotals, expected: RunTotals) -> bool:
    """Equal field by field, floats to 1e-9 relative (the database sums in its own order)."""
    for name in RunTotals.__dataclass_fields__:
        got, want = getattr(actual, name), getattr(expected, name)
        if isinstance(want, float) and isinstance(got, float):
            if abs(got - want) > 1e-9 * max(1.0, abs(want)):
                return False
        elif got != want or type(got) is not type(want):
            return False
    return True


def test_sample_aggregates_match_a_sum_in_python(ledger: Ledger, new_run: MakeRun, sample_rows: MakeSamples) -> None:
    started = new_run()
    run_id = ledger.start_run(started)
    rows = _mixed_samples(run_id, started.started_at_s + 1, sample_rows)
    ledger.add_samples(rows)
    other_id = ledger.start_run(new_run())
    other_rows = sample_rows(other_id, started.started_at_s, 3)
    ledger.add_samples(other_rows)

    totals = ledger.run_totals([run_id, other_id])

    assert _close(totals[run_id], _expected(run_id, rows)), totals[run_id]
    assert _close(totals[other_id], _expected(other_id, other_rows)), totals[other_id]
    assert totals[run_id].energy_measured is False  # one estimated sample makes the run's energy estimated
    assert totals[other_id].energy_measured is True


def test_every_asked_run_gets_an_entry_with_zeros_when_it_has_no_samples(ledger: Ledger, new_run: MakeRun) -> None:
    quiet_id = ledger.start_run(new_run())
    totals = ledger.run_totals([quiet_id, quiet_id, 999_999])
    assert list(totals) == [quiet_id, 999_999]
    assert totals[quiet_id] == RunTotals(quiet_id)
    assert totals[999_999] == RunTotals(999_999)
    assert ledger.run_totals([]) == {}


def test_attempts_are_summed_with_the_open_one_apart(
    ledger: Ledger, new_run: MakeRun, sample_rows: MakeSamples
) -> None:
    started = new_run()
    run_id = ledger.start_run(started)
    t0 = started.started_at_s
    ledger.start_attempt(run_id, 1, "local", "job-1", t0)
    ledger.finish_attempt(run_id, 1, "preempted", t0 + 600.0, 75)
    ledger.start_attempt(run_id, 2, "local", "job-2", t0 + 900.0)
    ledger.finish_attempt(run_id, 2, "preempted", t0 + 1200.0, 75, started_at_s=t0 + 960.0)
    ledger.start_attempt(run_id, 3, "local", "job-3", t0 + 1500.0)
    ledger.add_samples(sample_rows(run_id, t0 + 1, 2))
    never_sampled_id = ledger.start_run(new_run())
    ledger.start_attempt(never_sampled_id, 1, "local", "job-4", t0)

    totals = ledger.run_totals([run_id, never_sampled_id])

    assert totals[run_id].sample_count == 2
    assert totals[run_id].attempt_count == 3
    assert abs(totals[run_id].attempts_closed_s - (600.0 + 240.0)) < 1e-6
    assert totals[run_id].attempt_open_since_s == t0 + 1500.0
    assert totals[never_sampled_id] == RunTotals(
        never_sampled_id, attempt_count=1, attempts_closed_s=0.0, attempt_open_since_s=t0
    )


def test_more_runs_than_a_statement_may_bind_are_asked_in_chunks(
    ledger: Ledger, new_run: MakeRun, sample_rows: MakeSamples
) -> None:
    """70,000 ids exceed the 65,535 parameters psycopg may bind to one statement (and SQLite's default 32,766)."""
    run_id = ledger.start_run(new_run())
    ledger.add_samples(sample_rows(run_id, 0.0, 4))
    asked = [*range(10_000_000, 10_070_000), run_id]
    totals = ledger.run_totals(asked)
    assert len(totals) == len(asked)
    assert totals[run_id].sample_count == 4
    assert totals[10_000_000] == RunTotals(10_000_000)
