"""The ledger's read-only view queries (``ledger.queries``) on SQLite and PostgreSQL, checked against Python.

Each SQL answer is compared with the same question answered in the test over the full rows
(``Ledger.runs``, ``Ledger.samples``): a filter as a Python predicate, a sort as ``sorted`` of
``price_run``'s figures, a bucket as the mean of the samples that fall in it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from computewise.account.totals import price_runs
from computewise.ledger import GpuSampleRow, Ledger, NewRun, RunRow, RunStatus, SampleRow
from computewise.ledger.queries import RUN_SORTS, RunFilter

T0 = 1_742_000_000.0
H = 3600.0


def _fill(ledger: Ledger, new_run: Callable[..., NewRun]) -> list[int]:
    """Twelve runs: three teams, four kinds of ending, two still running, one resubmitted twice."""
    ids = []
    for i in range(12):
        price = new_run().price
        run = new_run(
            command=f"python train_{i}.py --lr {i}" if i % 3 else f"python eval_{i}.py",
            tags={"team": ("nlp", "vision", "Speech")[i % 3], **({"project": "x_y%"} if i % 4 == 0 else {})},
            kind=("command", "track")[i % 2],
            started_at_s=T0 + i * H,
            price=type(price)(**{**price.to_dict(), "hourly_usd": 1.0 + (7 * i) % 5}),
        )
        run_id = ledger.start_run(run)
        ids.append(run_id)
        if i in (3, 7):
            continue  # still running
        endings: tuple[RunStatus, ...] = ("succeeded", "failed", "crashed")
        status = endings[i % 3]
        ledger.finish_run(run_id, status, T0 + i * H + (i % 5 + 1) * 600.0, exit_code=0)
    ledger.start_attempt(ids[5], 1, "ray", "job-a", T0 + 5 * H)
    ledger.finish_attempt(ids[5], 1, "preempted", T0 + 5 * H + 100.0, 1)
    ledger.start_attempt(ids[5], 2, "ray", "job-b", T0 + 5 * H + 900.0)
    ledger.finish_attempt(ids[5], 2, "succeeded", T0 + 5 * H + 1000.0, 0)
    return ids


def _matches(run: RunRow, where: RunFilter) -> bool:
    text = (where.text or "").lower()
    in_text = not text or text in run.command.lower() or any(text in f"{k}={v}".lower() for k, v in run.tags.items())
    return (
        in_text
        and all(run.tags.get(k) == v for k, v in where.tags.items())
        and where.status in (None, run.status)
        and where.kind in (None, run.kind)
        and (where.since_s is None or run.started_at_s >= where.since_s)
        and (where.until_s is None or run.started_at_s < where.until_s)
    )


def test_filters_sorts_and_pages_agree_with_python(ledger: Ledger, new_run: Callable[..., NewRun]) -> None:
    _fill(ledger, new_run)
    now_s = T0 + 20 * H
    everything = ledger.runs(limit=None)
    filters = [
        RunFilter(),
        RunFilter(tags={"team": "nlp"}),
        RunFilter(text="TRAIN"),
        RunFilter(text="speech"),  # a tag value, matched case-insensitively
        RunFilter(text="x_y%"),  # LIKE wildcards are plain characters here
        RunFilter(text="_"),
        RunFilter(status="running"),
        RunFilter(kind="track", tags={"team": "vision"}),
        RunFilter(since_s=T0 + 2 * H, until_s=T0 + 6 * H),
        RunFilter(text="nothing like this"),
    ]
    for where in filters:
        expected = [run.id for run in everything if _matches(run, where)]
        found = ledger.runs_page(where, "started", True, now_s, 0, None)
        assert [run.id for run in found] == expected, where  # Ledger.runs is newest first, like the default sort
        assert ledger.count_runs(where) == len(expected)

    costs = {cost.run_id: cost for cost in price_runs(ledger, everything, now_s)}
    by_key: dict[str, Callable[[RunRow], Any]] = {
        "started": lambda run: run.started_at_s,
        "cost": lambda run: costs[run.id].cost_usd,
        "duration": lambda run: costs[run.id].duration_s,
        "name": lambda run: run.command,
        "status": lambda run: run.status,
    }
    for sort in RUN_SORTS:
        for descending in (True, False):
            ranked = sorted(everything, key=lambda run: run.id, reverse=descending)
            ranked.sort(key=by_key[sort], reverse=descending)  # stable: ties keep the id order
            got = [run.id for run in ledger.runs_page(RunFilter(), sort, descending, now_s, 0, None)]
            assert got == [run.id for run in ranked], (sort, descending)
            pages = [ledger.runs_page(RunFilter(), sort, descending, now_s, k * 5, 5) for k in range(3)]
            assert [run.id for page in pages for run in page] == got


def test_buckets_average_what_falls_in_them(
    ledger: Ledger, new_run: Callable[..., NewRun], sample_rows: Callable[[int, float, int], list[SampleRow]]
) -> None:
    run_id = ledger.start_run(new_run(started_at_s=T0))
    samples = sample_rows(run_id, T0 + 1.0, 1234)
    gpu_rows = [
        GpuSampleRow(
            run_id, s.t_s, gpu, 10.0 * gpu + i % 9, 1400.0, 1_000_000 * (i + gpu), 300.0, None, None, None, None
        )
        for i, s in enumerate(samples)
        for gpu in range(2)
    ]
    ledger.add_samples(samples, gpu_rows)
    count, first_s, last_s = ledger.sample_span(run_id)
    assert (count, first_s, last_s) == (1234, T0 + 1.0, T0 + 1234.0)
    width_s = 7.0
    buckets = ledger.sample_buckets(run_id, T0 + 1.0, width_s)
    expected: dict[int, list[SampleRow]] = {}
    for s in samples:
        expected.setdefault(math.floor((s.t_s - T0 - 1.0) / width_s), []).append(s)
    assert len(buckets) == len(expected) == math.ceil(1234 / 7)
    for bucket, (_, members) in zip(buckets, sorted(expected.items()), strict=True):
        assert bucket.samples == len(members)
        assert math.isclose(bucket.t_s, sum(s.t_s for s in members) / len(members))
        assert math.isclose(bucket.cpu_percent, sum(s.cpu_percent for s in members) / len(members))
        assert bucket.rss_bytes == max(s.rss_bytes for s in members)
        assert math.isclose(bucket.energy_j, sum(s.energy_j for s in members))
        assert math.isclose(bucket.sampled_s, len(members))
    per_gpu = ledger.gpu_buckets(run_id, T0 + 1.0, width_s)
    assert {g.gpu_index for g in per_gpu} == {0, 1}
    gpu1 = [g for g in per_gpu if g.gpu_index == 1]
    first = [r for r in gpu_rows if r.gpu_index == 1 and r.t_s < T0 + 1.0 + width_s]
    assert len(gpu1) == len(buckets)
    assert math.isclose(gpu1[0].utilization_pct or 0.0, sum(r.utilization_pct or 0.0 for r in first) / len(first))
    assert gpu1[0].memory_used_bytes == max(r.memory_used_bytes or 0 for r in first)


def test_tag_keys_and_finished_runs(ledger: Ledger, new_run: Callable[..., NewRun]) -> None:
    ids = _fill(ledger, new_run)
    assert ledger.tag_key_counts() == [("team", 12), ("project", 3)]
    assert ledger.finished_run_ids(ids) == set(ids) - {ids[3], ids[7]}
    assert ledger.sample_span(ids[0]) == (0, None, None)
