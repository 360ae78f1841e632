"""estimate.bottleneck: the advice names a change the step has not made yet."""

from __future__ import annotations

import pytest

from computewise.estimate.bottleneck import bottleneck

SYNC_BOUND = {"compute": 1.0, "data_parallel": 3.0}


@pytest.mark.parametrize(("zero", "suggests_zero_1"), [(0, True), (1, False), (2, False), (3, True)])
def test_the_gradient_sync_advice_suggests_zero_1_only_where_the_step_does_not_run_it(
    zero: int, suggests_zero_1: bool
) -> None:
    found = bottleneck(SYNC_BOUND, 0.5, zero)
    assert found.part == "data_parallel" and found.share == pytest.approx(0.75)
    assert ("--zero 1" in found.advice) is suggests_zero_1
    assert "faster network" in found.advice and "global batch" in found.advice


def test_arithmetic_is_the_answer_when_nothing_else_takes_a_tenth() -> None:
    found = bottleneck({"compute": 10.0, "data_parallel": 0.5}, 0.42, 3)
    assert found.part == "compute" and "42% of peak" in found.advice
