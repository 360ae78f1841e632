"""EarlyStopping's rule (patience, min_delta, direction, NaN) and its survival across a preemption in fit()."""

from __future__ import annotations

import math
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from computewise.errors import ConfigError
from computewise.train.early_stopping import EarlyStopping


def test_it_stops_after_patience_evaluations_without_improvement() -> None:
    stopper = EarlyStopping(patience=2)
    assert [stopper.update(m) for m in [1.0, 0.8, 0.9, 0.85]] == [False, False, False, True]
    assert stopper.best == 0.8 and stopper.evaluations_without_improvement == 2


def test_an_improvement_resets_the_count() -> None:
    stopper = EarlyStopping(patience=2)
    assert [stopper.update(m) for m in [1.0, 1.1, 0.9, 1.2, 1.3]] == [False, False, False, False, True]
    assert stopper.best == 0.9


def test_min_delta_ignores_improvements_smaller_than_it() -> None:
    stopper = EarlyStopping(patience=2, min_delta=0.1)
    assert [stopper.update(m) for m in [1.0, 0.95, 0.92]] == [False, False, True]
    assert stopper.best == 1.0
    stopper = EarlyStopping(patience=1, min_delta=0.1)
    stopper.update(1.0)
    assert not stopper.update(0.85) and stopper.improved and stopper.best == 0.85


def test_higher_is_better_flips_the_direction() -> None:
    stopper = EarlyStopping(patience=1, higher_is_better=True)
    assert not stopper.update(0.7)
    assert not stopper.update(0.8) and stopper.improved
    assert stopper.update(0.75) and not stopper.improved


def test_a_nan_or_infinite_metric_is_never_an_improvement() -> None:
    stopper = EarlyStopping(patience=2)
    assert not stopper.update(math.nan) and stopper.best is None
    assert stopper.update(math.inf)


def test_its_state_carries_over_to_a_new_object() -> None:
    first = EarlyStopping(patience=3)
    for metric in [1.0, 0.5, 0.6, 0.7]:
        first.update(metric)
    second = EarlyStopping(patience=3)
    second.load_state_dict(first.state_dict())
    assert second.best == 0.5 and second.evaluations_without_improvement == 2
    assert second.update(0.9)  # the third evaluation without improvement


@pytest.mark.parametrize(("patience", "min_delta", "fragment"), [(0, 0.0, "patience"), (2, -0.1, "min_delta")])
def test_bad_settings_are_refused_with_a_fix(patience: int, min_delta: float, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment) as raised:
        EarlyStopping(patience=patience, min_delta=min_delta)
    assert raised.value.hint


# -- inside fit() ---------------------------------------------------------------------------------


@pytest.mark.torch
def test_fit_stops_early_at_the_same_step_whether_or_not_it_was_preempted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """lr=0 keeps the validation loss flat: evaluations at steps 2 (best), 4 and 6 (no improvement) stop at 6.

    The preempted run is killed at step 5, after one evaluation without improvement; if the count
    were lost on resume, the resumed run would only stop at step 10.
    """
    pytest.importorskip("torch")
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2]))  # examples/ from the repository root
    from examples.tiny_gpt import setup

    from computewise.train.fit import fit
    from computewise.train.preemption import PREEMPTED_EXIT_CODE, Preempted

    config = {"lr": 0.0, "samples": 128, "eval_samples": 16, "global_batch": 8}

    def run(directory: Path, on_step: Callable[[int, float], None] | None = None) -> Any:
        return fit(
            setup(config),
            max_steps=20,
            checkpoint_dir=directory,
            eval_every_steps=2,
            early_stopping=EarlyStopping(patience=2),
            track=False,
            on_step=on_step,
        )

    straight = run(tmp_path / "straight")
    assert straight.stopped == "early_stopping" and straight.final_step == 6

    def preempt_at_5(step: int, loss: float) -> None:
        if step == 5:
            os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(Preempted) as raised:
        run(tmp_path / "preempted", preempt_at_5)
    assert raised.value.code == PREEMPTED_EXIT_CODE and raised.value.result.final_step == 5

    resumed = run(tmp_path / "preempted")
    assert resumed.start_step == 5 and resumed.stopped == "early_stopping" and resumed.final_step == 6
    assert resumed.best_metric == straight.best_metric
    assert raised.value.result.losses + resumed.losses == straight.losses
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # the guard put the default handler back
