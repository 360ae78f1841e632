"""Runs in a real ledger (SQLite file and PostgreSQL): round trips, crash detection, duplicate lookup."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import psutil
import pytest
import sqlalchemy as sa

from computewise.ledger import GpuSampleRow, Ledger, NewRun, RunStatus, SampleRow, StepRow
from computewise.ledger.store import STALE_MIN_S

WRITER = Path(__file__).with_name("ledger_writer.py")
HOST = socket.gethostname()

MakeRun = Callable[..., NewRun]
MakeSamples = Callable[[int, float, int], list[SampleRow]]


def test_a_run_round_trips(ledger: Ledger, new_run: MakeRun, sample_rows: MakeSamples) -> None:
    started = new_run(input_hash="ab" * 32)
    run_id = ledger.start_run(started)
    samples = sample_rows(run_id, started.started_at_s + 1, 5)
    t_s = started.started_at_s + 1
    gpus = [GpuSampleRow(run_id, t_s, i, 90.0, 1410.0, 35_000_000_000, 300.0, 1e5, 1e9, 2e9, None) for i in range(8)]
    ledger.add_samples(samples, gpus)
    ledger.add_steps([StepRow(run_id, step, t_s + step, 0.01, 0.2, 32, 65_536, 1.2e15) for step in range(3)])
    ledger.add_inferences(run_id, 7)
    ledger.finish_run(run_id, "succeeded", started.started_at_s + 6, exit_code=0, summary={"cost_usd": 0.05})

    row = ledger.run(run_id)
    assert (row.status, row.exit_code, row.inferences, row.summary) == ("succeeded", 0, 7, {"cost_usd": 0.05})
    assert (row.tags, row.argv, row.price, row.input_hash) == (started.tags, started.argv, started.price, "ab" * 32)
    assert ledger.samples(run_id) == samples
    assert ledger.gpu_samples(run_id) == gpus
    assert [s.step for s in ledger.steps(run_id)] == [0, 1, 2]
    assert [r.id for r in ledger.runs(tags={"team": "nlp"})] == [run_id]
    assert ledger.runs(tags={"team": "cv"}) == []


def test_a_price_stored_before_keys_were_added_still_reads(ledger: Ledger, new_run: MakeRun) -> None:
    # The price is JSON in the runs table, written by PriceSnapshot.to_dict: keys added since read as their default.
    run_id = ledger.start_run(new_run())
    price = ledger.run(run_id).price
    optional = ("cloud", "instance_type", "pricing", "region", "retrieved")
    older = {key: value for key, value in price.to_dict().items() if key not in optional}
    with ledger.engine.begin() as connection:
        connection.execute(
            sa.text("UPDATE runs SET price = :price WHERE id = :id"), {"price": json.dumps(older), "id": run_id}
        )
    assert ledger.run(run_id).price == replace(price, cloud=None, instance_type=None, pricing=None, region=None)


def test_foreign_keys_are_enforced(ledger: Ledger, sample_rows: MakeSamples) -> None:
    # SQLite leaves them off unless asked on every connection, including the one that just migrated.
    with pytest.raises(sa.exc.IntegrityError):
        ledger.add_samples(sample_rows(424242, time.time(), 1))


def test_the_printable_url_hides_the_password(ledger: Ledger, ledger_url: str) -> None:
    password = sa.make_url(ledger_url).password
    if password:
        assert str(password) not in ledger.url and "***" in ledger.url


def test_budget_alerts_fire_once(ledger: Ledger) -> None:
    budget = ledger.set_budget("team=nlp", 5000.0, (50.0, 90.0), None, None, now_s=1.7e9)
    assert ledger.set_budget("team=nlp", 6000.0, (80.0,), None, None, now_s=1.7e9).id == budget.id
    first = ledger.record_alert("budget", "80 % of May", 1.7e9, "team=nlp", budget.id, None, "2026-05", 80.0)
    again = ledger.record_alert("budget", "80 % of May", 1.7e9 + 60, "team=nlp", budget.id, None, "2026-05", 80.0)
    assert first is not None and again is None
    ledger.set_alert_delivery(first, {"webhook": "sent"})
    assert [a.delivery for a in ledger.alerts(since_s=1.6e9)] == [{"webhook": "sent"}]


# -- crash detection --------------------------------------------------------------------------


def test_a_killed_monitor_marks_its_run_crashed_at_its_last_sample(ledger: Ledger, ledger_url: str) -> None:
    child = subprocess.Popen(
        [sys.executable, str(WRITER), "hang", ledger_url], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line.startswith("ready"), child.communicate(timeout=30)[1]
        run_id = int(line.split()[1])
        assert ledger.mark_crashed(time.time(), HOST) == []  # alive: left running
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()

    assert ledger.mark_crashed(time.time(), HOST) == [run_id]
    run = ledger.run(run_id)
    last_sample_s = ledger.samples(run_id)[-1].t_s
    assert run.status == "crashed"
    assert run.ended_at_s == pytest.approx(last_sample_s)  # the sample came after the last heartbeat
    assert run.error is not None and str(child.pid) in run.error
    assert ledger.mark_crashed(time.time(), HOST) == []  # marked once


def test_an_unreaped_zombie_counts_as_dead(ledger: Ledger, new_run: MakeRun) -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        _wait_for_zombie(child.pid)  # exited, not yet reaped by us: pid_exists() alone says alive
        run_id = ledger.start_run(new_run(pid=child.pid, started_at_s=time.time() - 5))
        assert ledger.mark_crashed(time.time(), HOST) == [run_id]
    finally:
        child.wait(timeout=10)


def _wait_for_zombie(pid: int) -> None:
    deadline_s = time.monotonic() + 10
    while psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline_s
        time.sleep(0.01)


def test_a_reused_pid_does_not_keep_a_run_alive(ledger: Ledger, new_run: MakeRun) -> None:
    # This test process is alive, but it was created long after this (recorded) run started.
    reused = ledger.start_run(new_run(pid=os.getpid(), started_at_s=psutil.Process().create_time() - 3600))
    ours = ledger.start_run(new_run(pid=os.getpid(), started_at_s=time.time()))
    assert ledger.mark_crashed(time.time(), HOST) == [reused]
    assert ledger.run(ours).status == "running"


def test_runs_on_other_hosts_crash_when_their_heartbeats_stop(
    ledger: Ledger, new_run: MakeRun, sample_rows: MakeSamples
) -> None:
    now_s = time.time()
    silent = ledger.start_run(new_run(host="gpu-node-7", pid=1, started_at_s=now_s - 3600))
    ledger.heartbeat(silent, now_s - 600)
    beating = ledger.start_run(new_run(host="gpu-node-8", pid=1, started_at_s=now_s - 3600))
    ledger.heartbeat(beating, now_s - STALE_MIN_S / 2)
    sampling = ledger.start_run(new_run(host="gpu-node-9", pid=1, started_at_s=now_s - 3600))
    ledger.add_samples(sample_rows(sampling, now_s - 30, 10))  # no heartbeat, but samples are life too
    slow = ledger.start_run(new_run(host="gpu-node-10", pid=1, started_at_s=now_s - 3600, interval_s=60.0))
    ledger.heartbeat(slow, now_s - 300)  # 5 intervals of 60 s: not yet stale
    finished = ledger.start_run(new_run(host="gpu-node-11", pid=1, started_at_s=now_s - 7200))
    ledger.finish_run(finished, "failed", now_s - 7000, exit_code=1)

    assert ledger.mark_crashed(now_s, HOST) == [silent]
    assert ledger.run(silent).ended_at_s == pytest.approx(now_s - 600)
    assert ledger.run(finished).status == "failed"
    assert {ledger.run(r).status for r in (beating, sampling, slow)} == {"running"}


# -- duplicate runs ---------------------------------------------------------------------------


def test_recent_successful_run_needs_the_same_command_tags_and_input(ledger: Ledger, new_run: MakeRun) -> None:
    now_s = time.time()

    def finished(status: RunStatus = "succeeded", **fields: object) -> int:
        run_id = ledger.start_run(new_run(**fields))
        ledger.finish_run(run_id, status, now_s, exit_code=0)
        return run_id

    tags = {"team": "nlp", "project": "llama-ft"}
    older = finished(started_at_s=now_s - 7200, input_hash="h1", tags=tags)
    latest = finished(started_at_s=now_s - 600, input_hash="h1", tags=tags)
    finished(started_at_s=now_s - 60, input_hash="h1", tags={"team": "nlp"})  # a subset of the tags
    finished(started_at_s=now_s - 60, input_hash="h1", tags={**tags, "exp": "2"})  # a superset
    finished(started_at_s=now_s - 60, input_hash="h2", tags=tags)
    finished("failed", started_at_s=now_s - 60, input_hash="h1", tags=tags)
    finished(started_at_s=now_s - 60, input_hash="h1", tags=tags, command="python train.py --epochs 4")
    no_hash = finished(started_at_s=now_s - 300, input_hash=None, tags=tags)

    command = "python train.py --epochs 3"
    assert _id(ledger.recent_successful_run(command, tags, "h1", now_s - 3600)) == latest
    assert _id(ledger.recent_successful_run(command, dict(reversed(tags.items())), "h1", now_s - 86400)) == latest
    assert _id(ledger.recent_successful_run(command, tags, None, now_s - 3600)) == no_hash
    assert ledger.recent_successful_run(command, tags, "h1", now_s - 300) is None
    assert ledger.recent_successful_run(command, tags, "h3", now_s - 86400) is None
    assert older != latest


def _id(run: object) -> int | None:
    return getattr(run, "id", None)
