"""``supervise`` on the local engine: a real training job preempted (SIGTERM) or killed (SIGKILL) from outside,
resubmitted, resumed from its checkpoint, ending at the loss of an uninterrupted run, as one ledger run."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from rich.console import Console
from spot_job import SPOT_STEPS, final_loss, spot_command, wait_for_steps

from computewise.ledger import Ledger
from computewise.monitor.summary import summarize
from computewise.report.runs import print_run_summary
from computewise.scale.engine import JobSpec
from computewise.scale.local import LocalEngine
from computewise.scale.supervise import AttemptEvent, SupervisedRun, supervise
from prices import given_price

pytest.importorskip("torch", reason="the spot job trains with torch: pip install 'computewise[torch]'")

PRICE = given_price(3.0)


def _supervise_and_kill(tmp_path: Path, sig: signal.Signals, kill_after_steps: int) -> tuple[SupervisedRun, Ledger]:
    """Run the spot job under ``supervise`` in a thread; send ``sig`` to it once it logged ``kill_after_steps``."""
    pid_file, progress = tmp_path / "pid", tmp_path / "progress"
    spec = JobSpec(name="spot-gpt", command=spot_command(tmp_path / "ckpt", pid_file, progress), max_restarts=1)
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    ledger = Ledger.open(url)
    results: list[SupervisedRun] = []
    events: list[AttemptEvent] = []

    def work() -> None:
        results.append(
            supervise(LocalEngine(tmp_path / "jobs"), spec, ledger, url, PRICE, poll_s=0.1, on_event=events.append)
        )

    thread = threading.Thread(target=work)
    thread.start()
    try:
        wait_for_steps(progress, kill_after_steps)
        os.kill(int(pid_file.read_text(encoding="utf-8")), sig)
    finally:
        thread.join(timeout=300)
    assert results, "supervise did not return"
    assert [e.state for e in events if e.number == 1][:2] == ["submitted", "running"]
    return results[0], ledger


def test_a_preempted_job_is_resubmitted_and_resumes_to_the_same_loss(
    tmp_path: Path, spot_reference_loss: float
) -> None:
    run, ledger = _supervise_and_kill(tmp_path, signal.SIGTERM, kill_after_steps=6)
    assert run.status == "succeeded" and run.exit_code == 0
    assert [(a.outcome, a.exit_code) for a in run.attempts] == [("preempted", 75), ("succeeded", 0)]
    assert final_loss(run.log_tail) == spot_reference_loss

    # One logical run: both attempts' steps are in it, numbered across the resume, none done twice.
    steps = ledger.steps(run.run_id)
    assert sorted(step.step for step in steps) == list(range(SPOT_STEPS))
    assert ledger.run(run.run_id).status == "succeeded"
    assert ledger.run(run.run_id).tags == {"backend": "local", "run_name": "spot-gpt"}

    cost = run.interruption
    assert cost.interruptions == 1 and cost.redone_steps == 0
    assert cost.restart_s is not None and cost.restart_s > 0.5  # a new interpreter, torch, the checkpoint loaded
    assert cost.added_s is not None and cost.added_usd == pytest.approx(cost.added_s * 3.0 / 3600)
    # Billed: the two attempts, not the time between them.
    assert run.cost.duration_s == pytest.approx(cost.billed_s, rel=1e-6)
    assert run.cost.cost_usd == pytest.approx(cost.billed_s * 3.0 / 3600, rel=1e-6)


def test_a_killed_job_is_restarted_and_redoes_only_the_steps_after_its_checkpoint(
    tmp_path: Path, spot_reference_loss: float
) -> None:
    run, ledger = _supervise_and_kill(tmp_path, signal.SIGKILL, kill_after_steps=8)
    assert run.status == "succeeded"
    assert [(a.outcome, a.exit_code) for a in run.attempts] == [("failed", -signal.SIGKILL), ("succeeded", 0)]
    assert final_loss(run.log_tail) == spot_reference_loss
    # The checkpoint after 5 steps was kept, and the steps it holds were written out with it; the steps
    # after it died with the process (SIGKILL leaves no time to write) and were done again.
    second = run.attempts[1]
    resumed = [step for step in ledger.steps(run.run_id) if step.t_s >= second.started_at_s]
    assert min(step.step for step in resumed) == 5
    assert Counter(step.step for step in ledger.steps(run.run_id)).keys() == set(range(SPOT_STEPS))
    cost = run.interruption
    assert cost.lost_s is not None and cost.lost_s >= 3 * 0.05  # at least steps 6..8 of 50 ms sleep each
    assert cost.restart_s is not None and cost.restart_s > 0.5


def test_a_job_that_keeps_failing_stops_after_max_restarts(tmp_path: Path) -> None:
    spec = JobSpec(name="always-fails", command=(sys.executable, "-c", "raise SystemExit(3)"), max_restarts=1)
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    with Ledger.open(url) as ledger:
        run = supervise(LocalEngine(tmp_path / "jobs"), spec, ledger, url, PRICE, poll_s=0.05)
        assert run.status == "failed" and run.exit_code == 3
        assert [a.outcome for a in ledger.attempts(run.run_id)] == ["failed", "failed"]
        assert ledger.run(run.run_id).status == "failed"

        # `computewise runs show` lists the attempts of a resubmitted run.
        summary = summarize(ledger, run.run_id, time.time())
        console = Console(record=True, width=120)
        print_run_summary(summary, console)
        text = console.export_text()
        assert "attempts" in text and text.count("always-fails-") == 2
        assert summary.interruption is not None and summary.interruption.interruptions == 1
