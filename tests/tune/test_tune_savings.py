"""What a tuned configuration is worth: ratios, MFU, the planned run and the break-even point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from computewise.errors import InputError
from computewise.train.config import TrainConfig, load_config, write_config
from computewise.tune.savings import (
    Measured,
    RunSaving,
    TunedConfigFile,
    TuneWorth,
    break_even_hours,
    mfu,
    plan_saving,
    speedup,
    tune_worth,
)

DATA = Path(__file__).parent / "data"


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


def measured(trial: int, step_s: float, config: TrainConfig) -> Measured:
    return Measured(trial, config, step_s, 32 / step_s, 4096 / step_s, 0.8, 2**27, "rss", 1.1e8, 0.12)


TUNED = measured(3, 0.25, TrainConfig(precision="bf16", micro_batch_size=8))
NAIVE = measured(7, 1.0, TrainConfig(precision="fp32", micro_batch_size=32))
LARGEST = measured(5, 0.5, TrainConfig(precision="bf16", micro_batch_size=32))


def test_the_worth_is_computed_once_when_the_result_is_built() -> None:
    # Tuning took 30 min at $2/h: $1. A quarter of the naive step: a 10-hour run takes 2.5 hours.
    worth = tune_worth(TUNED, NAIVE, LARGEST, 2.0, 1800.0, run_hours=10.0)
    assert worth.speedup_vs_baseline == pytest.approx(4.0) and worth.speedup_vs_largest_batch == pytest.approx(2.0)
    assert worth.tuning_cost_usd == pytest.approx(1.0)
    assert worth.plan == RunSaving("run-hours", 10.0, 2.5, 2.0, 1.0)
    assert worth.break_even_hours == pytest.approx(0.5 / 0.75)
    nothing = tune_worth(TUNED, None, None, 2.0, 1800.0, run_hours=10.0)
    assert (nothing.speedup_vs_baseline, nothing.plan, nothing.break_even_hours) == (None, None, None)


def test_the_worth_reads_back_from_its_json() -> None:
    worth = tune_worth(TUNED, NAIVE, None, 2.0, 1800.0, tokens=3.6e9, tokens_per_step=1e5)
    document = json.loads(json.dumps({**worth.to_dict(), "tuning": {"cost_usd": worth.tuning_cost_usd}}))
    assert TuneWorth.from_dict(document) == worth
    assert Measured.from_dict(json.loads(json.dumps(TUNED.to_dict()))) == TUNED
    assert worth.plan is not None and RunSaving.from_dict(worth.plan.to_dict()) == worth.plan


def test_a_worth_without_its_winner_is_refused_by_name() -> None:
    document = {**tune_worth(TUNED, None, None, 2.0, 60.0).to_dict(), "tuning": {"cost_usd": 0.0}, "best": None}
    with pytest.raises(InputError, match="best must be a JSON object"):
        TuneWorth.from_dict(document, "tune.json")


def test_a_tune_out_file_written_before_the_typed_document_reads_and_is_written_alike(tmp_path: Path) -> None:
    """``data/tune-out-before-codec.json`` is what ``tune --out`` wrote when the file was a hand-built dict."""
    old = DATA / "tune-out-before-codec.json"
    document = TunedConfigFile.from_dict(json.loads(old.read_text()), str(old))
    assert document.measured is not None and document.measured.config == document.config == load_config(old)
    write_config(document, tmp_path / "again.json")
    assert (tmp_path / "again.json").read_text() == old.read_text()
