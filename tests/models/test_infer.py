"""from_param_count: a GPT-3-ladder shape around an exact count."""

from __future__ import annotations

import itertools
import math

import pytest

from computewise.errors import InputError
from computewise.models import from_param_count
from computewise.models.infer import GPT3_LADDER
from computewise.models.shape import FAMILIES, count_params


@pytest.mark.parametrize(("params", "layers", "d_model"), GPT3_LADDER)
def test_ladder_rungs_come_back_as_printed(params: float, layers: int, d_model: int) -> None:
    # Brown et al. 2020, Table 2.1; 13B's d_model 5140 rounds to the nearest multiple of 128.
    spec = from_param_count(params)
    assert spec.layers == layers
    assert spec.hidden_size == round(d_model / 128) * 128


def test_shape_fields_follow_the_gpt3_recipe() -> None:
    spec = from_param_count(7.5e9)
    assert spec.params == 7_500_000_000
    assert spec.shape_inferred
    assert spec.hidden_size % 128 == 0
    assert spec.heads == spec.kv_heads == spec.hidden_size // 128
    assert spec.heads % 8 == 0
    assert spec.ffn_size == 4 * spec.hidden_size
    assert (spec.vocab_size, spec.max_seq_len, spec.architecture) == (50257, 2048, "decoder")
    assert any("inferred" in note for note in spec.notes)


@pytest.mark.parametrize("n", [125e6, 400e6, 3e9, 7.5e9, 30e9, 70e9, 175e9, 1e12])
def test_inferred_shape_holds_about_that_many_parameters(n: float) -> None:
    # The shape is a guess, but a GPT-3-layout model of that shape must be near the count;
    # a 128-wide step of hidden size is up to ~12 % of the count around 400M, less above.
    spec = from_param_count(n)
    assert count_params(spec, FAMILIES["gpt2"]) == pytest.approx(n, rel=0.12 if n < 1e9 else 0.03)


def test_shape_grows_with_the_count() -> None:
    """Wider with the count; a width rounded up to whole groups of heads takes fewer layers, as real families
    do (GPT-3 13B: 40 layers of 5120), so the depth may step back where the width steps up."""
    counts = [10 ** (k / 4) for k in range(24, 53)]
    shapes = [from_param_count(n) for n in counts]
    assert all(a.hidden_size <= b.hidden_size for a, b in itertools.pairwise(shapes))
    sizes = [count_params(s, FAMILIES["gpt2"]) for s in shapes]
    assert all(b >= a for a, b in itertools.pairwise(sizes))


@pytest.mark.parametrize(("n", "heads"), [(1e9, 12), (3e9, 20), (8e9, 32), (30e9, 56), (70e9, 72), (1e12, 176)])
def test_heads_split_over_a_nodes_tensor_parallel_degrees(n: float, heads: int) -> None:
    """From 24 heads up the count is a multiple of 8 (tp 2, 4 and 8 all split it; Llama 2 70B has 64), from
    12 up of 4: "70B" on 8 GPUs with --tp 8 must not fail on a head count the shape made up."""
    spec = from_param_count(n)
    assert spec.heads == heads == spec.hidden_size // 128


def test_count_is_kept_exactly_rounded() -> None:
    assert from_param_count(1.3e9 + 0.4).params == 1_300_000_000
    assert from_param_count(7).params == 7
    assert from_param_count(7).layers >= 1


@pytest.mark.parametrize("n", [0, -5, 0.4, math.nan, math.inf])
def test_non_counts_are_input_errors(n: float) -> None:
    with pytest.raises(InputError):
        from_param_count(n)
