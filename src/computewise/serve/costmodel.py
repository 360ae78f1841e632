"""What a batch costs, learned online: ``t(b, L) = c0 + c1*b + c2*b*L + c3*b*b*L`` seconds.

``b`` is the batch size and ``L`` its padded length (tokens of its longest item; 1 for tensor
models). ``c0`` is the fixed cost of a call (kernel launches, thread wake-ups, Python), the part
batching shares out; ``c1`` the per-item cost that does not depend on length; ``c2`` the cost of a
token, padding included, which is what greedy batching of mixed lengths wastes; ``c3`` the extra
cost per token that larger batches pay (activations that no longer fit in cache, memory traffic),
which is what makes batching a loss on some CPUs: measured on the 2-core development VM, MiniLM's
fused ONNX graph ran 4.7 ms per sentence in length-sorted batches of 32 against 3.0 ms one at a
time. Without that term every fit would promise that batching pays, since ``c0`` is shared out.
Four terms are enough to decide the one question the batcher asks (does adding this request lower
the cost per request?) and few enough to fit from a handful of batches.

The fit is a least-squares solution over the most recent observations (a bounded window, so the
model follows a machine whose load changes), weighted by ``1/t`` so that the error is relative:
unweighted, a few 500 ms batches would drown the 2 ms calls that fix ``c0``. Every coefficient is
kept non-negative (the best fit over the subsets of terms whose own fit is non-negative), so the
predicted cost never falls when a batch grows or gets longer, and a prediction is never negative.
"""

from __future__ import annotations

import itertools
from collections import Counter, deque

import numpy as np

__all__ = ["BatchCostModel"]

MIN_OBSERVATIONS = 8
MIN_DISTINCT_SIZES = 2


class BatchCostModel:
    """Online non-negative least squares over the last ``window`` batches, refitted every ``refit_every``."""

    def __init__(self, window: int = 512, refit_every: int = 4) -> None:
        self._observations: deque[tuple[int, int, float]] = deque(maxlen=window)
        self._refit_every = refit_every
        # Kept up to date as observations enter and leave the window: ``ready`` and the prediction
        # before the fit run on every request, so they must not scan the window.
        self._sizes: Counter[int] = Counter()
        self._per_token_sum_s = 0.0
        self._since_fit = 0
        self._seen = 0  # every batch observed, not only those still in the window
        self._coefficients: np.ndarray | None = None

    def observe(self, batch_size: int, padded_length: int, seconds: float) -> None:
        """Record one batch that took ``seconds`` of compute."""
        if batch_size < 1 or padded_length < 1 or not seconds > 0:
            return  # a clock that did not advance says nothing about cost
        if len(self._observations) == self._observations.maxlen:
            old_size, old_length, old_seconds = self._observations[0]
            self._sizes[old_size] -= 1
            if not self._sizes[old_size]:
                del self._sizes[old_size]
            self._per_token_sum_s -= old_seconds / (old_size * old_length)
        self._observations.append((batch_size, padded_length, seconds))
        self._seen += 1
        self._sizes[batch_size] += 1
        self._per_token_sum_s += seconds / (batch_size * padded_length)
        self._since_fit += 1
        if self.ready and (self._coefficients is None or self._since_fit >= self._refit_every):
            self._fit()

    @property
    def ready(self) -> bool:
        """Enough batches of at least two sizes to separate the fixed cost from the per-item cost."""
        return len(self._observations) >= MIN_OBSERVATIONS and len(self._sizes) >= MIN_DISTINCT_SIZES

    @property
    def observations(self) -> int:
        """Batches in the window (at most ``window``)."""
        return len(self._observations)

    @property
    def seen(self) -> int:
        """Batches observed since the start: keeps counting once the window is full."""
        return self._seen

    def predict(self, batch_size: int, padded_length: int) -> float:
        """Predicted seconds for one batch; before the model is ready, seconds per token so far times tokens.

        0.0 with no observations at all.
        """
        if self._coefficients is not None:
            features = np.array([1.0, batch_size, batch_size * padded_length, batch_size**2 * padded_length])
            return max(0.0, float(features @ self._coefficients))
        if not self._observations:
            return 0.0
        per_token_s = max(0.0, self._per_token_sum_s / len(self._observations))  # max: rounding of the running sum
        return per_token_s * batch_size * padded_length

    def _fit(self) -> None:
        data = np.array(self._observations, dtype=np.float64)
        sizes, lengths, seconds = data[:, 0], data[:, 1], data[:, 2]
        weights = 1.0 / seconds
        design = np.column_stack([np.ones_like(sizes), sizes, sizes * lengths, sizes**2 * lengths]) * weights[:, None]
        target = seconds * weights
        best: np.ndarray | None = None
        best_residual = np.inf
        # Non-negative least squares by brute force: 15 subsets of 4 terms cost nothing at this size.
        for count in (4, 3, 2, 1):
            for terms in itertools.combinations(range(4), count):
                solution, *_ = np.linalg.lstsq(design[:, terms], target, rcond=None)
                if np.any(solution < 0):
                    continue
                residual = float(np.sum((design[:, terms] @ solution - target) ** 2))
                if residual < best_residual:
                    coefficients = np.zeros(4)
                    coefficients[list(terms)] = solution
                    best, best_residual = coefficients, residual
        if best is not None:
            self._coefficients = best
            self._since_fit = 0
