"""What interruptions added, from attempts and steps shaped like a preempted run of examples/spot_train.py."""

from __future__ import annotations

import pytest

from computewise.account.interruptions import billed_s, interruption_cost
from computewise.ledger import AttemptRow, StepRow

T0 = 1_763_700_000.0
STEP_S = 0.12


def _steps(run_id: int, first: int, last: int, start_s: float) -> list[StepRow]:
    """Steps ``first..last`` of 0.1 s compute + 0.02 s data wait, back to back from ``start_s``."""
    return [
        StepRow(run_id, number, start_s + (index + 1) * STEP_S, 0.02, 0.1)
        for index, number in enumerate(range(first, last + 1))
    ]


def test_a_graceful_preemption_adds_the_restart_and_the_preemption_save() -> None:
    # Attempt 1: 3.5 s start-up, steps 0..9, preempted; saving and exiting took 1.3 s after step 9.
    first_steps = _steps(1, 0, 9, T0 + 3.5)
    first_end = first_steps[-1].t_s + 1.3
    # Attempt 2 starts 2 s later (waiting for a node: not billed), 3.4 s start-up, resumes at step 10.
    second_start = first_end + 2.0
    second_steps = _steps(1, 10, 29, second_start + 3.4)
    attempts = [
        AttemptRow(1, 1, "ray", "job-a", T0, first_end, 75, "preempted"),
        AttemptRow(1, 2, "ray", "job-b", second_start, second_steps[-1].t_s + 0.8, 0, "succeeded"),
    ]
    cost = interruption_cost(attempts, first_steps + second_steps, hourly_usd=3.0, now_s=second_start + 100)
    assert cost.attempts == 2 and cost.interruptions == 1
    assert cost.restart_s == pytest.approx(3.4)
    assert cost.redone_steps == 0
    assert cost.lost_s == pytest.approx(1.3)  # after step 9, which the preemption checkpoint kept
    assert cost.added_s == pytest.approx(4.7)
    assert cost.added_usd == pytest.approx(4.7 * 3.0 / 3600)
    assert cost.billed_s == pytest.approx((first_end - T0) + (second_steps[-1].t_s + 0.8 - second_start))


def test_a_hard_kill_counts_the_steps_done_again_since_the_last_checkpoint() -> None:
    # Killed after step 13 with the last checkpoint at step 10: steps 11..13 are done again.
    first_steps = _steps(1, 0, 13, T0 + 3.5)
    first_end = first_steps[-1].t_s + 0.05
    second_start = first_end + 1.0
    second_steps = _steps(1, 11, 29, second_start + 3.0)
    attempts = [
        AttemptRow(1, 1, "local", "a", T0, first_end, -9, "failed"),
        AttemptRow(1, 2, "local", "b", second_start, second_steps[-1].t_s + 0.5, 0, "succeeded"),
    ]
    cost = interruption_cost(attempts, first_steps + second_steps, hourly_usd=2.0, now_s=second_start + 100)
    assert cost.redone_steps == 3
    assert cost.lost_s == pytest.approx(3 * STEP_S + 0.05)  # steps 11..13 and the moments before the kill
    assert cost.restart_s == pytest.approx(3.0)
    assert cost.added_s == pytest.approx(3.0 + 3 * STEP_S + 0.05)


def test_an_attempt_killed_before_its_first_checkpoint_is_lost_whole() -> None:
    first_steps = _steps(1, 0, 3, T0 + 3.5)
    first_end = first_steps[-1].t_s + 0.1
    second_steps = _steps(1, 0, 9, first_end + 3.2)  # no checkpoint: it starts again from step 0
    attempts = [
        AttemptRow(1, 1, "local", "a", T0, first_end, -9, "failed"),
        AttemptRow(1, 2, "local", "b", first_end, second_steps[-1].t_s + 0.5, 0, "succeeded"),
    ]
    cost = interruption_cost(attempts, first_steps + second_steps, hourly_usd=2.0, now_s=T0 + 100)
    assert cost.lost_s == pytest.approx(first_end - T0)
    assert cost.restart_s == pytest.approx(3.2)
    assert cost.redone_steps == 4


def test_an_uninterrupted_run_adds_nothing() -> None:
    steps = _steps(1, 0, 9, T0 + 3.0)
    attempts = [AttemptRow(1, 1, "local", "a", T0, steps[-1].t_s + 0.5, 0, "succeeded")]
    cost = interruption_cost(attempts, steps, hourly_usd=2.0, now_s=T0 + 100)
    assert cost.interruptions == 0 and cost.added_s == 0 and cost.added_usd == 0


def test_without_steps_the_added_cost_is_unknown_but_the_attempts_are_billed() -> None:
    attempts = [
        AttemptRow(1, 1, "ray", "a", T0, T0 + 60, 75, "preempted"),
        AttemptRow(1, 2, "ray", "b", T0 + 90, None, None, "running"),
    ]
    cost = interruption_cost(attempts, [], hourly_usd=2.0, now_s=T0 + 100)
    assert cost.added_s is None and cost.added_usd is None
    assert cost.interruptions == 1
    assert cost.billed_s == pytest.approx(60 + 10)  # the open attempt runs until now; the 30 s gap is not billed
    assert billed_s(attempts, T0 + 100) == cost.billed_s
