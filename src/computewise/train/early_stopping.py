"""Early stopping on a validation metric: stop after ``patience`` evaluations without improvement.

Its state (the best value and the count of evaluations since) is part of every checkpoint: a run
preempted two evaluations into a patience of three must stop after one more bad evaluation when
resumed, exactly as the uninterrupted run would.
"""

from __future__ import annotations

import math
from typing import Any

from computewise.errors import ConfigError

__all__ = ["EarlyStopping"]


class EarlyStopping:
    """``update(metric)`` after each evaluation; True means stop.

    An improvement must beat the best so far by more than ``min_delta`` (lower is better unless
    ``higher_is_better``), so noise around a plateau does not keep training alive. A NaN or
    infinite metric is never an improvement: a diverged run runs out of patience.
    """

    def __init__(self, patience: int, min_delta: float = 0.0, higher_is_better: bool = False) -> None:
        if patience < 1:
            raise ConfigError(
                f"early stopping patience must be >= 1 evaluation, got {patience}",
                "patience counts evaluations without improvement before stopping, e.g. patience=3",
            )
        if not min_delta >= 0:
            raise ConfigError(
                f"early stopping min_delta must be >= 0, got {min_delta}",
                "give the smallest change that counts as an improvement, as a positive number",
            )
        self.patience = patience
        self.min_delta = float(min_delta)
        self.higher_is_better = higher_is_better
        self.best: float | None = None
        self.evaluations_without_improvement = 0
        self.improved = False

    def update(self, metric: float) -> bool:
        """Record one evaluation's metric; True when patience has run out."""
        value = float(metric)
        if not math.isfinite(value):
            self.improved = False
        elif self.best is None:
            self.improved = True
        elif self.higher_is_better:
            self.improved = value > self.best + self.min_delta
        else:
            self.improved = value < self.best - self.min_delta
        if self.improved:
            self.best = value
            self.evaluations_without_improvement = 0
        else:
            self.evaluations_without_improvement += 1
        return self.should_stop

    @property
    def should_stop(self) -> bool:
        return self.evaluations_without_improvement >= self.patience

    def state_dict(self) -> dict[str, Any]:
        return {
            "patience": self.patience,
            "min_delta": self.min_delta,
            "higher_is_better": self.higher_is_better,
            "best": self.best,
            "evaluations_without_improvement": self.evaluations_without_improvement,
            "improved": self.improved,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the progress (best and count); the settings stay this object's own.

        A resumed run may be given a different patience on purpose; the count carries over.
        """
        best = state["best"]
        self.best = None if best is None else float(best)
        self.evaluations_without_improvement = int(state["evaluations_without_improvement"])
        self.improved = bool(state["improved"])
