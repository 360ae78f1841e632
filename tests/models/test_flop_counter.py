"""The FLOP formulas by hand, and the counter against torch.utils.flop_counter."""

from __future__ import annotations

from typing import Any

import pytest

from computewise.models.flop_counter import (
    FlopTally,
    bmm_flops,
    conv_backward_flops,
    conv_flops,
    mm_flops,
    sdpa_backward_flops,
    sdpa_flops,
)


def test_matmul_formulas_count_two_flops_per_multiply_add() -> None:
    assert mm_flops((3, 5), (5, 7)) == 2 * 3 * 5 * 7
    assert bmm_flops((4, 3, 5), (4, 5, 7)) == 2 * 4 * 3 * 5 * 7


def test_convolution_formula_handles_groups_and_transposition() -> None:
    # 3x3 conv, 16 -> 32 channels, groups=4: each output channel sees 16/4 input channels.
    assert conv_flops((2, 16, 8, 8), (32, 4, 3, 3), (2, 32, 8, 8), transposed=False) == 2 * 2 * 64 * 32 * 4 * 9
    # Transposed: every *input* point meets the whole filter.
    assert conv_flops((2, 32, 8, 8), (32, 8, 2, 2), (2, 8, 16, 16), transposed=True) == 2 * 2 * 64 * 32 * 8 * 4


def test_attention_formulas() -> None:
    q = (2, 8, 128, 64)
    kv = (2, 2, 128, 64)  # grouped-query: K/V heads are shared, the work follows the query heads
    assert sdpa_flops(q, kv, kv) == 2 * (2 * 2 * 8 * 128 * 128 * 64)
    assert sdpa_backward_flops(q, q, kv, kv) == 2 * sdpa_flops(q, kv, kv)


def test_causal_aware_total_halves_only_the_causal_attention() -> None:
    tally = FlopTally(total_flops=1000, attention_flops=400, causal_attention_flops=300)
    assert tally.causal_aware_flops == 850


torch_only = pytest.mark.torch


@torch_only
@pytest.mark.parametrize(
    ("x", "w", "stride", "groups", "transposed"),
    [
        ((2, 8, 15, 15), (16, 8, 3, 3), 1, 1, False),
        ((2, 8, 15, 15), (16, 2, 5, 5), 2, 4, False),
        ((1, 4, 9), (4, 1, 3), 1, 4, False),
        ((2, 8, 7, 7), (8, 4, 3, 3), 2, 1, True),
    ],
)
def test_convolution_forward_and_backward_match_torch(
    x: tuple[int, ...], w: tuple[int, ...], stride: int, groups: int, transposed: bool
) -> None:
    torch = pytest.importorskip("torch")
    from torch.utils import flop_counter as reference
    from torch.utils.flop_counter import FlopCounterMode

    inputs = torch.randn(*x, requires_grad=True)
    weight = torch.randn(*w, requires_grad=True)
    if transposed:
        out = torch.nn.functional.conv_transpose2d(inputs, weight, stride=stride, groups=groups)
    elif len(x) == 3:
        out = torch.nn.functional.conv1d(inputs, weight, stride=stride, groups=groups)
    else:
        out = torch.nn.functional.conv2d(inputs, weight, stride=stride, groups=groups)
    shapes: Any = (list(x), list(w), list(out.shape))
    assert conv_flops(*shapes, transposed=transposed) == reference.conv_flop_count(*shapes, transposed=transposed)
    with FlopCounterMode(display=False) as backward:
        out.sum().backward()
    assert conv_backward_flops(out.shape, x, w, x, w, transposed=transposed) == backward.get_total_flops()


@torch_only
def test_counter_total_equals_flop_counter_mode_forward_and_backward() -> None:
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    from computewise.models.flop_counter import FlopCounter

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Flatten(),
        torch.nn.Linear(8 * 8 * 8, 10),
    )
    attention = torch.nn.MultiheadAttention(16, 4, batch_first=True)
    images, sequence = torch.randn(2, 3, 8, 8), torch.randn(2, 5, 16)

    def run() -> Any:
        return model(images).sum() + attention(sequence, sequence, sequence)[0].sum()

    with FlopCounterMode(display=False) as theirs_forward:
        loss = run()
    with FlopCounterMode(display=False) as theirs_backward:
        loss.backward()
    with FlopCounter() as ours_forward:
        loss = run()
    with FlopCounter() as ours_backward:
        loss.backward()

    assert ours_forward.tally.total_flops == theirs_forward.get_total_flops()
    assert ours_backward.tally.total_flops == theirs_backward.get_total_flops()
    assert ours_forward.tally.attention_flops == 2 * (2 * 2 * 4 * 5 * 5 * 4)
    assert ours_forward.tally.causal_attention_flops == 0


@torch_only
def test_fused_cpu_attention_is_counted_where_torch_counts_nothing() -> None:
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    from computewise.models.flop_counter import FlopCounter

    q = torch.randn(2, 4, 32, 16)
    with FlopCounterMode(display=False) as theirs:
        torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
    with FlopCounter() as ours:
        torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)

    # torch 2.13 has no formula for _scaled_dot_product_flash_attention_for_cpu.
    assert theirs.get_total_flops() in (0, sdpa_flops(q.shape, q.shape, q.shape))
    assert ours.tally.total_flops == sdpa_flops(q.shape, q.shape, q.shape)
    assert ours.tally.causal_aware_flops == ours.tally.total_flops / 2
