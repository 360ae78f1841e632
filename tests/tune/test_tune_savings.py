"""What a tuned configuration is worth: ratios, MFU, the planned run and the break-even point."""

from __future__ import annotations

import pytest

from computewise.tune.savings import break_even_hours, mfu, plan_saving, speedup


def test_speedup_and_mfu() -> None:
    assert speedup(0.5, 1.5) == pytest.approx(3.0)
    # 1e9 forward FLOPs a sample x 3 x 100 samples/s = 3e11 FLOP/s of a 1e12 peak.
    assert mfu(1e9, 100.0, 1e12) == pytest.approx(0.3)
    assert mfu(1e9, 100.0, 0.0) is None


def test_break_even_is_the_run_whose_saving_pays_the_tuning() -> None:
    # Half the step time: a 2-hour naive run saves 1 hour, which a 1-hour tuning costs.
    assert break_even_hours(1.0, 0.5, 3600.0) == pytest.approx(2.0)
    assert break_even_hours(1.0, 1.0, 3600.0) is None
    assert break_even_hours(1.0, 1.2, 3600.0) is None


def test_a_planned_run_in_hours() -> None:
    saving = plan_saving(2.0, 1.0, 4.0, 1.5, run_hours=10.0)
    assert saving is not None and saving.basis == "run-hours"
    assert saving.tuned_hours == pytest.approx(5.0) and saving.saved_hours == pytest.approx(5.0)
    assert saving.saved_usd == pytest.approx(20.0) and saving.net_saved_usd == pytest.approx(18.5)
    assert saving.to_dict()["naive_usd"] == pytest.approx(40.0)


def test_a_planned_run_in_tokens() -> None:
    # 3.6e9 tokens at 1e5 tokens a step, 1 s a step naive: 36,000 steps, 10 hours.
    saving = plan_saving(1.0, 0.25, 2.0, 0.0, tokens=3.6e9, tokens_per_step=1e5)
    assert saving is not None and saving.basis == "tokens"
    assert saving.naive_hours == pytest.approx(10.0) and saving.tuned_hours == pytest.approx(2.5)


def test_no_planned_run_without_its_length() -> None:
    assert plan_saving(1.0, 0.5, 1.0, 0.0) is None
    assert plan_saving(1.0, 0.5, 1.0, 0.0, tokens=1e9, tokens_per_step=None) is None
