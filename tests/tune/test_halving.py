"""Successive halving: the rung plan, promotion of the fastest, failures never promoted."""

from __future__ import annotations

import pytest

from computewise.tune.halving import Rung, plan_rungs, successive_halving


def test_rungs_grow_by_eta_and_shrink_the_field_by_eta() -> None:
    rungs = plan_rungs(27, 27, 3, 3)
    assert [(r.steps, r.candidates) for r in rungs] == [(3, 27), (9, 9), (27, 3)]
    assert [(r.steps, r.candidates) for r in plan_rungs(100, 64, 4, 2)] == [(4, 100), (16, 25), (64, 7)]


def test_the_top_rung_always_has_the_asked_steps() -> None:
    for candidates in (1, 2, 5, 9, 40, 200):
        assert plan_rungs(candidates, 27, 3, 3)[-1].steps == 27


def test_few_candidates_or_short_trials_mean_fewer_rungs() -> None:
    assert plan_rungs(1, 27, 3, 3) == (Rung(0, 27, 1),)
    assert len(plan_rungs(2, 27, 3, 3)) == 1  # a second rung would hold a single candidate of two
    assert len(plan_rungs(40, 5, 3, 3)) == 1  # 3 x 3 steps would exceed the top rung
    assert [r.steps for r in plan_rungs(40, 10, 3, 3)] == [3, 10]


def test_bad_plans_are_programming_errors() -> None:
    with pytest.raises(ValueError, match="bad halving plan"):
        plan_rungs(0, 27, 3, 3)
    with pytest.raises(ValueError, match="bad halving plan"):
        plan_rungs(5, 27, 1, 3)


def test_the_fastest_survive_and_are_measured_longer() -> None:
    speeds = [5.0, 1.0, 3.0, 2.0, 4.0, 9.0, 8.0, 7.0, 6.0]
    seen: list[tuple[int, int]] = []

    def evaluate(index: int, rung: Rung) -> float:
        seen.append((index, rung.steps))
        return speeds[index]

    outcome = successive_halving(len(speeds), plan_rungs(9, 27, 3, 3), evaluate)
    assert outcome.ranking == [1]
    assert sorted(i for i, steps in seen if steps == 9) == [1, 2, 3]
    assert outcome.rung_reached(1) == 2 and outcome.rung_reached(3) == 1 and outcome.rung_reached(0) == 0
    assert len(seen) == 9 + 3 + 1


def test_failures_are_never_promoted_and_the_search_goes_on() -> None:
    def evaluate(index: int, rung: Rung) -> float | None:
        return None if index in (0, 1) else float(index)

    outcome = successive_halving(6, plan_rungs(6, 9, 3, 3), evaluate)
    assert outcome.scores[0] == {0: None}
    assert outcome.ranking == [2, 3]


def test_a_noisy_rung_is_corrected_by_the_longer_one() -> None:
    short = {0: 1.0, 1: 1.1, 2: 2.0, 3: 2.1, 4: 3.0, 5: 3.1}
    long = {0: 1.2, 1: 1.05}  # candidate 1 was unlucky in the short rung

    def evaluate(index: int, rung: Rung) -> float:
        return short[index] if rung.index == 0 else long[index]

    outcome = successive_halving(6, plan_rungs(6, 9, 3, 3), evaluate)
    assert outcome.ranking == [1, 0]


def test_when_every_candidate_fails_nothing_is_ranked() -> None:
    outcome = successive_halving(4, plan_rungs(4, 9, 3, 3), lambda index, rung: None)
    assert outcome.ranking == [] and len(outcome.scores) == 4
