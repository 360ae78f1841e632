"""The batch cost model: recovers t(b, L) = c0 + c1*b + c2*b*L, stays non-negative, follows a changing machine."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from computewise.serve.costmodel import BatchCostModel

# A CPU-like cost: 2 ms per call, 0.1 ms per item, 20 us per token (padding included).
C0, C1, C2 = 2e-3, 1e-4, 2e-5


def _true_s(size: int, length: int) -> float:
    return C0 + C1 * size + C2 * size * length


def _observed(model: BatchCostModel, count: int, rng: np.random.Generator, noise: float = 0.0) -> None:
    for _ in range(count):
        size, length = int(rng.choice([1, 2, 4, 8, 16, 32])), int(rng.integers(5, 80))
        model.observe(size, length, _true_s(size, length) * (1 + noise * rng.standard_normal()))


def test_exact_costs_are_recovered() -> None:
    model = BatchCostModel()
    _observed(model, 40, np.random.default_rng(0))
    assert model.ready
    for size, length in [(1, 10), (8, 30), (32, 128), (64, 16)]:  # (32, 128) and (64, 16): outside what it saw
        assert model.predict(size, length) == pytest.approx(_true_s(size, length), rel=1e-6)


def test_relative_errors_keep_small_batches_right_beside_large_ones() -> None:
    """Unweighted, the 40 ms batches would drown the 2 ms single calls that fix the cost of a call."""
    model = BatchCostModel()
    _observed(model, 300, np.random.default_rng(1), noise=0.1)
    single_s = model.predict(1, 10)
    assert single_s == pytest.approx(_true_s(1, 10), rel=0.15)
    assert model.predict(32, 60) == pytest.approx(_true_s(32, 60), rel=0.15)
    # what the batcher asks: is a batch of 8 similar sentences cheaper per sentence than one alone?
    assert model.predict(8, 10) / 8 < single_s


def test_ready_needs_eight_batches_of_two_sizes() -> None:
    model = BatchCostModel()
    for _ in range(20):
        model.observe(4, 16, 0.01)
    assert not model.ready  # one size cannot separate the cost of a call from the cost of an item
    for _ in range(7):
        model.observe(1, 16, 0.004)
    assert model.ready
    fresh = BatchCostModel()
    for size in (1, 2, 1, 2, 1, 2, 1):
        fresh.observe(size, 10, 0.001 * size)
    assert not fresh.ready and fresh.observations == 7


def test_before_ready_it_scales_seconds_per_token() -> None:
    model = BatchCostModel()
    assert model.predict(8, 20) == 0.0
    model.observe(2, 10, 0.02)  # 1 ms per token
    assert model.predict(4, 5) == pytest.approx(0.02)


def test_predictions_never_fall_below_zero_nor_when_a_batch_grows() -> None:
    """Superlinear cost (t = b^2 ms): the unconstrained fit has a negative cost per call; this one does not."""
    model = BatchCostModel()
    for _ in range(4):
        for size in (1, 2, 4, 8, 16):
            model.observe(size, 1, 1e-3 * size * size)
    assert model.ready
    sizes = range(1, 65)
    predicted = [model.predict(size, 1) for size in sizes]
    assert min(predicted) >= 0
    assert all(later >= earlier for earlier, later in itertools.pairwise(predicted))
    # no fixed cost is found, so batching never looks cheaper per item than running alone
    assert all(model.predict(size, 1) / size >= model.predict(1, 1) * (1 - 1e-9) for size in sizes)


def test_noise_and_nonsense_observations_are_tolerated() -> None:
    model = BatchCostModel()
    model.observe(4, 10, 0.0)  # a clock that did not move
    model.observe(0, 10, 0.1)
    model.observe(4, 10, -1.0)
    assert model.observations == 0
    rng = np.random.default_rng(2)
    for _ in range(200):
        size, length = int(rng.integers(1, 33)), int(rng.integers(1, 100))
        model.observe(size, length, float(rng.exponential(0.01)))  # no structure at all
    assert model.ready
    assert all(model.predict(size, length) >= 0 for size in (1, 7, 32) for length in (1, 50, 512))


def test_the_window_follows_a_machine_that_slows_down() -> None:
    model = BatchCostModel(window=64, refit_every=4)
    rng = np.random.default_rng(3)
    _observed(model, 64, rng)
    assert model.predict(8, 20) == pytest.approx(_true_s(8, 20), rel=1e-6)
    for _ in range(64):  # another tenant arrives: everything takes twice as long
        size, length = int(rng.choice([1, 4, 16])), int(rng.integers(5, 80))
        model.observe(size, length, 2 * _true_s(size, length))
    assert model.predict(8, 20) == pytest.approx(2 * _true_s(8, 20), rel=1e-6)
