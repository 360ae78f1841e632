"""The quality yardstick: drop budgets, agreement worked out by hand, the embedding floor, user metrics.

User eval functions are real modules written to tmp_path and graded against a real ONNX Runtime
session (a 4 -> 3 MatMul), so ``predict`` goes through the same feed and batching as in a search.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from computewise.errors import ComputewiseError, EvaluationError, InputError
from computewise.optimize.feeds import TensorFeed
from computewise.optimize.predictors import OrtPredictor, ort_session, predict_all
from computewise.optimize.quality import DropBudget, Metric, Score, agreement, load_metric, parse_drop

MakeModule = Callable[[str, str], str]


# -- parse_drop --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value", "relative", "shown"),
    [
        ("1%", 0.01, True, "1%"),
        (" 0.5% ", 0.005, True, "0.5%"),
        ("0%", 0.0, True, "0%"),
        ("0.01", 0.01, False, "0.01"),
        ("0", 0.0, False, "0"),
    ],
)
def test_parse_drop_reads_relative_and_absolute_budgets(text: str, value: float, relative: bool, shown: str) -> None:
    budget = parse_drop(text)
    assert budget.value == pytest.approx(value)
    assert budget.relative is relative
    assert str(budget) == shown


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("abc", "is not a number"),
        ("%", "is not a number"),
        ("150%", "out of range"),
        ("-1", "out of range"),
        ("1", "out of range"),
        ("nan", "out of range"),
        ("100%", "out of range"),
    ],
)
def test_parse_drop_rejects_bad_values(text: str, problem: str) -> None:
    with pytest.raises(InputError, match=problem):
        parse_drop(text)


def test_relative_budget_scales_with_the_baseline_and_absolute_does_not() -> None:
    assert DropBudget(0.01, relative=True).allowed(0.9) == pytest.approx(0.009)
    assert DropBudget(0.01, relative=True).allowed(-2.0) == pytest.approx(0.02)  # a negative loss as the score
    assert DropBudget(0.01, relative=False).allowed(0.9) == 0.01


# -- agreement ---------------------------------------------------------------------------------


def test_embedding_agreement_is_mean_and_worst_cosine() -> None:
    reference = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 2.0]], dtype=np.float32)
    outputs = np.array([[3.0, 0.0], [1.0, 1.0], [0.0, 0.5]], dtype=np.float32)  # cosines 1, 1/sqrt(2), 1
    score = agreement("embedding", outputs, reference)
    assert score.value == pytest.approx((2 + 1 / math.sqrt(2)) / 3)
    assert score.worst == pytest.approx(1 / math.sqrt(2))


def test_embedding_agreement_flattens_each_example() -> None:
    reference = np.ones((2, 2, 3), dtype=np.float32)
    outputs = reference.copy()
    outputs[1] = -1
    score = agreement("embedding", outputs, reference)
    assert (score.value, score.worst) == (pytest.approx(0.0), pytest.approx(-1.0))


def test_classifier_agreement_is_top1_agreement_without_a_worst() -> None:
    reference = np.array([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4]])
    outputs = np.array([[0.0, 5.0], [9.0, 1.0], [2.0, 1.0], [0.7, 0.3]])  # the third flips
    assert agreement("classifier", outputs, reference) == Score(0.75, None)


def test_regressor_agreement_is_one_minus_relative_error() -> None:
    reference = np.array([[1.0], [2.0], [-4.0]])
    outputs = np.array([[1.1], [2.0], [-3.0]])  # relative errors 0.1, 0, 0.25
    score = agreement("regressor", outputs, reference)
    assert score.value == pytest.approx(1 - (0.1 + 0 + 0.25) / 3)
    assert score.worst == pytest.approx(0.75)


def test_agreement_refuses_outputs_of_another_shape() -> None:
    with pytest.raises(ComputewiseError, match=r"variant output shape \(2, 3\) differs from the baseline's \(2, 4\)"):
        agreement("embedding", np.zeros((2, 3)), np.zeros((2, 4)))


# -- Metric.meets ------------------------------------------------------------------------------


def test_relative_budget_is_met_up_to_exactly_the_allowed_drop() -> None:
    metric = Metric("accuracy", "classifier", parse_drop("1%"))
    assert metric.item_floor is None
    assert metric.meets(Score(0.891), baseline=0.9)  # drop 0.009 = 1 % of 0.9
    assert not metric.meets(Score(0.8909), baseline=0.9)
    assert metric.meets(Score(0.95), baseline=0.9)  # better than the baseline


def test_absolute_budget_is_in_metric_units() -> None:
    metric = Metric("f1", "classifier", parse_drop("0.05"))
    assert metric.meets(Score(0.85), baseline=0.9)
    assert not metric.meets(Score(0.84), baseline=0.9)


def test_embeddings_must_also_keep_their_worst_sentence_above_the_floor() -> None:
    metric = load_metric(None, "embedding", parse_drop("1%"))
    assert metric.name == "mean cosine vs FP32"
    assert metric.item_floor == pytest.approx(0.97)
    assert metric.meets(Score(0.995, worst=0.975), baseline=1.0)
    assert not metric.meets(Score(0.995, worst=0.96), baseline=1.0)  # mean fine, one sentence elsewhere
    assert not metric.meets(Score(0.985, worst=0.98), baseline=1.0)  # worst fine, mean too low


def test_floor_follows_the_budget_and_applies_to_the_default_embedding_metric_only() -> None:
    assert load_metric("agreement", "embedding", parse_drop("2%")).item_floor == pytest.approx(0.94)
    assert load_metric(None, "regressor", parse_drop("1%")).item_floor is None
    user = Metric("mine:score", "embedding", parse_drop("1%"), user_function=lambda predict: 1.0)
    assert user.item_floor is None
    assert user.meets(Score(0.995, worst=0.5), baseline=1.0)


# -- user eval functions -----------------------------------------------------------------------

EXAMPLES = np.random.default_rng(0).normal(size=(16, 4)).astype(np.float32)


@pytest.fixture
def predictor(linear_onnx: Path) -> OrtPredictor:
    return OrtPredictor(ort_session(str(linear_onnx), ["CPUExecutionProvider"], threads=1))


def _grade(metric: Metric, predictor: OrtPredictor) -> Score:
    feed = TensorFeed({"x": EXAMPLES})
    reference = predict_all(predictor, feed, 4)
    return metric.score(predictor, feed, reference, 4)[0]


def test_user_eval_function_scores_through_predict(make_module: MakeModule, predictor: OrtPredictor) -> None:
    name = make_module(
        "optimize_quality_eval_good",
        """
        import numpy as np

        def positive_share(predict):
            inputs = np.ones((5, 4), dtype=np.float64)  # the user's own arrays, cast to the model's float32
            outputs = predict(inputs)
            assert outputs.shape == (5, 3) and outputs.dtype == np.float32
            return float((outputs > 0).mean())
        """,
    )
    metric = load_metric(f"{name}:positive_share", "classifier", parse_drop("1%"))
    assert metric.name == f"{name}:positive_share"
    # ones @ weight: column sums of arange(12).reshape(4, 3) / 10 - 0.5 are (1.8, 2.2, 2.6) - 2: two of three > 0
    assert _grade(metric, predictor) == Score(pytest.approx(2 / 3))


def test_user_eval_function_that_raises_is_an_evaluation_error_naming_it(
    make_module: MakeModule, predictor: OrtPredictor
) -> None:
    name = make_module(
        "optimize_quality_eval_raises",
        """
        def broken(predict):
            raise KeyError("labels.csv")
        """,
    )
    metric = load_metric(f"{name}:broken", "classifier", parse_drop("1%"))
    with pytest.raises(EvaluationError, match=f"the eval function {name}:broken raised KeyError") as caught:
        _grade(metric, predictor)
    assert isinstance(caught.value.__cause__, KeyError)
    assert "fn(predict)" in str(caught.value.hint)


def test_user_eval_function_that_feeds_the_wrong_shape_is_an_input_error(
    make_module: MakeModule, predictor: OrtPredictor
) -> None:
    # our own InputError passes through untouched: it already says what to fix
    name = make_module(
        "optimize_quality_eval_shape",
        """
        import numpy as np

        def wrong_width(predict):
            return float(predict(np.zeros((2, 7), dtype=np.float32)).mean())
        """,
    )
    metric = load_metric(f"{name}:wrong_width", "classifier", parse_drop("1%"))
    with pytest.raises(InputError, match=r"example shape \(7,\), the model takes \(4,\)"):
        _grade(metric, predictor)


@pytest.mark.parametrize(
    ("tag", "returned", "shown"),
    [("nan", "float('nan')", "nan"), ("inf", "float('inf')", "inf"), ("str", "'0.9'", "'0.9'")],
)
def test_user_eval_function_must_return_a_finite_number(
    make_module: MakeModule, predictor: OrtPredictor, tag: str, returned: str, shown: str
) -> None:
    name = make_module(
        f"optimize_quality_eval_returns_{tag}",
        f"""
        def score(predict):
            return {returned}
        """,
    )
    metric = load_metric(f"{name}:score", "regressor", parse_drop("1%"))
    with pytest.raises(EvaluationError, match=f"{name}:score returned {shown}, not a finite number"):
        _grade(metric, predictor)


def test_numpy_scalars_are_accepted_as_scores(make_module: MakeModule, predictor: OrtPredictor) -> None:
    name = make_module(
        "optimize_quality_eval_numpy",
        """
        import numpy as np

        def score(predict):
            return np.float32(0.25)
        """,
    )
    assert _grade(load_metric(f"{name}:score", "classifier", parse_drop("1%")), predictor).value == 0.25


def test_default_metric_grades_by_agreement_with_the_reference(predictor: OrtPredictor) -> None:
    feed = TensorFeed({"x": EXAMPLES})
    reference = predict_all(predictor, feed, 4)
    metric = load_metric(None, "classifier", parse_drop("1%"))
    score, outputs = metric.score(predictor, feed, reference, 4)
    assert score == Score(1.0)
    np.testing.assert_array_equal(outputs, EXAMPLES @ (np.arange(12, dtype=np.float32).reshape(4, 3) / 10 - 0.5))
    flipped = metric.score(predictor, feed, -reference, 4)[0]
    assert flipped.value < 0.5


# -- load_metric -------------------------------------------------------------------------------


def test_load_metric_of_a_missing_module_is_an_input_error() -> None:
    with pytest.raises(InputError, match="cannot import the eval function optimize_no_such_module:score"):
        load_metric("optimize_no_such_module:score", "classifier", parse_drop("1%"))


def test_load_metric_of_a_missing_function_is_an_input_error(make_module: MakeModule) -> None:
    name = make_module("optimize_quality_eval_empty", "VALUE = 3\n")
    with pytest.raises(InputError, match="cannot import the eval function"):
        load_metric(f"{name}:score", "classifier", parse_drop("1%"))
    with pytest.raises(InputError, match="is not callable"):
        load_metric(f"{name}:VALUE", "classifier", parse_drop("1%"))


def test_load_metric_needs_module_colon_function() -> None:
    with pytest.raises(InputError, match="is not an entry point"):
        load_metric("just_a_module", "classifier", parse_drop("1%"))


@pytest.mark.parametrize(
    ("task", "name"),
    [
        ("embedding", "mean cosine vs FP32"),
        ("classifier", "top-1 agreement with FP32"),
        ("regressor", "1 - relative error vs FP32"),
    ],
)
def test_default_metric_is_named_after_the_task(task: str, name: str) -> None:
    metric = load_metric(None, task, parse_drop("1%"))
    assert (metric.name, metric.task, metric.user_function) == (name, task, None)
