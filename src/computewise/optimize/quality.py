"""How good a variant is: agreement with the FP32 baseline, or the user's own metric.

The default needs no labels: a variant is as good as its outputs agree with the FP32 model's on
held-aside inputs (cosine similarity for embeddings, top-1 agreement for classifiers, one minus the
relative error for regressors). For embeddings the worst sentence matters too: a variant whose
mean cosine is 0.99 but which maps one sentence somewhere else is not shipped, so a per-example
floor of ``1 - 3 x max_drop`` (0.97 for a 1 % budget) applies as well.

A user metric is ``fn(predict) -> float``, higher is better; ``predict`` takes the user's raw
inputs (a list of strings, or arrays) and returns the model's outputs as a NumPy array.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from computewise.errors import ComputewiseError, EvaluationError, InputError
from computewise.optimize.feeds import Batch, Feed
from computewise.optimize.predictors import predict_all
from computewise.system.entrypoints import import_entry_point

__all__ = ["DropBudget", "Metric", "Score", "agreement", "load_metric", "metric_loader", "parse_drop"]

# A batch-invariant variant reproduces each example's output within FP32 rounding of padded kernels.
INVARIANCE_COSINE = 0.9999


@dataclass(frozen=True)
class DropBudget:
    """How much quality may be lost: relative to the baseline ("1%") or absolute in metric units ("0.005")."""

    value: float
    relative: bool

    def allowed(self, baseline: float) -> float:
        return self.value * abs(baseline) if self.relative else self.value

    def __str__(self) -> str:
        return f"{self.value * 100:g}%" if self.relative else f"{self.value:g}"


def parse_drop(text: str) -> DropBudget:
    """ "1%" is relative to the baseline score (Intel Neural Compressor's convention), "0.01" absolute."""
    raw = text.strip()
    relative = raw.endswith("%")
    try:
        value = float(raw.rstrip("%")) / (100 if relative else 1)
    except ValueError as error:
        raise InputError(f"--max-drop {text!r} is not a number", "write 1% (relative) or 0.01 (absolute)") from error
    if not 0 <= value < 1 or math.isnan(value):
        raise InputError(f"--max-drop {text!r} is out of range", "give a drop between 0% and 100%")
    return DropBudget(value, relative)


@dataclass(frozen=True)
class Score:
    """A variant's quality: the metric, its worst example where that means something."""

    value: float
    worst: float | None = None


def agreement(task: str, outputs: np.ndarray, reference: np.ndarray) -> Score:
    """Agreement of ``outputs`` with the FP32 ``reference``, one score per example summarised."""
    if outputs.shape != reference.shape:
        raise ComputewiseError(f"variant output shape {outputs.shape} differs from the baseline's {reference.shape}")
    flat, ref = outputs.reshape(len(outputs), -1).astype(np.float64), reference.reshape(len(reference), -1)
    if task == "embedding":
        norms = np.linalg.norm(flat, axis=1) * np.linalg.norm(ref, axis=1)
        cosine = (flat * ref).sum(axis=1) / np.maximum(norms, 1e-12)
        return Score(float(cosine.mean()), float(cosine.min()))
    if task == "classifier":
        return Score(float((flat.argmax(axis=1) == ref.argmax(axis=1)).mean()))
    relative_error = np.abs(flat - ref).mean(axis=1) / np.maximum(np.abs(ref).mean(axis=1), 1e-12)
    return Score(float(1 - relative_error.mean()), float(1 - relative_error.max()))


def _describe(task: str) -> str:
    return {
        "embedding": "mean cosine vs FP32",
        "classifier": "top-1 agreement with FP32",
        "regressor": "1 - relative error vs FP32",
    }[task]


@dataclass(frozen=True)
class Metric:
    """The quality yardstick and the budget: a user function, or agreement with the baseline's outputs."""

    name: str
    task: str
    budget: DropBudget
    user_function: Callable[[Callable[[Any], np.ndarray]], float] | None = None

    @property
    def item_floor(self) -> float | None:
        """The per-example cosine floor for embeddings under the default metric."""
        if self.user_function is None and self.task == "embedding":
            return 1 - 3 * self.budget.allowed(1.0)
        return None

    def score(
        self, predictor: Callable[[Batch], np.ndarray], feed: Feed, reference: np.ndarray, batch_size: int
    ) -> tuple[Score, np.ndarray]:
        """The variant's score on the held-aside ``feed``, and its outputs there."""
        outputs = predict_all(predictor, feed, batch_size)
        if self.user_function is None:
            return agreement(self.task, outputs, reference), outputs

        def predict(inputs: Any) -> np.ndarray:
            return predict_all(predictor, feed.like(inputs), batch_size)

        try:
            value = self.user_function(predict)
        except ComputewiseError:
            raise
        except Exception as error:
            raise EvaluationError(
                f"the eval function {self.name} raised {type(error).__name__}: {error}",
                "fix the function; it is called as fn(predict) and must return a float, higher is better",
            ) from error
        if not isinstance(value, int | float | np.floating) or not math.isfinite(float(value)):
            raise EvaluationError(
                f"the eval function {self.name} returned {value!r}, not a finite number",
                "return a float score, higher is better (accuracy, F1, negative loss...)",
            )
        return Score(float(value)), outputs

    def meets(self, score: Score, baseline: float) -> bool:
        if baseline - score.value > self.budget.allowed(baseline) + 1e-12:
            return False
        floor = self.item_floor
        return floor is None or score.worst is None or score.worst >= floor


def metric_loader(spec: str | None, budget: DropBudget) -> Callable[[str], Metric]:
    """The metric for a task not known yet: the user's function is imported now, before any model is loaded.

    Loading a model can take a minute (an entry point may train it); a misspelled ``--eval`` must be
    refused before that, not after. ``None`` or "agreement" is the built-in default.
    """
    if spec is None or spec == "agreement":
        return lambda task: Metric(_describe(task), task, budget)
    function = import_entry_point(spec, "the eval function", InputError)
    if not callable(function):
        raise InputError(f"{spec} is not callable", "point --eval at a function fn(predict) -> float")
    return lambda task: Metric(spec, task, budget, function)


def load_metric(spec: str | None, task: str, budget: DropBudget) -> Metric:
    """``None`` or "agreement" for the built-in default, else ``package.module:function``."""
    return metric_loader(spec, budget)(task)
