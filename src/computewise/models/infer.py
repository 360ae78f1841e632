"""A plausible decoder shape from nothing but a parameter count.

Weights, gradients and optimizer states need only the count, but activations and the KV cache
need layers and hidden size. When the user gives just "7.5B" we borrow the shape a model of
that size would have on the GPT-3 ladder (Brown et al. 2020, "Language Models are Few-Shot
Learners", Table 2.1), interpolated in log-log space between the neighbouring rungs, and say
so in the spec (``shape_inferred=True`` and a note). The count itself is kept exactly.
"""

from __future__ import annotations

import itertools
import math

from computewise.errors import InputError
from computewise.specs.model import ModelSpec
from computewise.units import format_count

__all__ = ["GPT3_LADDER", "from_param_count"]

# (parameters, n_layers, d_model) of the eight GPT-3 models, Brown et al. 2020, Table 2.1.
# 13B's d_model of 5140 is as printed; rounding to a multiple of 128 absorbs it.
GPT3_LADDER: tuple[tuple[float, int, int], ...] = (
    (125e6, 12, 768),
    (350e6, 24, 1024),
    (760e6, 24, 1536),
    (1.3e9, 24, 2048),
    (2.7e9, 32, 2560),
    (6.7e9, 32, 4096),
    (13e9, 40, 5140),
    (175e9, 96, 12288),
)
_HEAD_DIM = 128
_VOCAB_SIZE = 50257  # GPT-2/GPT-3 BPE vocabulary
_SEQ_LEN = 2048  # GPT-3 context


def from_param_count(n: float) -> ModelSpec:
    """A decoder with exactly ``round(n)`` parameters and a GPT-3-like shape for that size.

    Heads are 128 wide and their count is rounded to a multiple of 8 from 24 heads up (of 4 from
    12, of 2 from 4), so tensor parallelism over a node's 2, 4 or 8 GPUs splits the models it is
    used for, as real checkpoints are shaped (Llama 2 70B: 64 heads); the FFN is 4x hidden,
    vocabulary 50257 and context 2048 as in GPT-3. Beyond the ends of the ladder the nearest
    segment is extended, so 1T parameters gets a deeper and wider GPT-3.
    """
    if isinstance(n, bool) or not math.isfinite(n) or n < 1:
        raise InputError(f"a parameter count must be at least 1, got {n!r}", "give a count such as 7.5B or 125M")
    params = round(n)
    layers_f, hidden_f = _interpolate(float(params))
    hidden = _heads(hidden_f / _HEAD_DIM) * _HEAD_DIM
    return ModelSpec(
        name=f"{format_count(params)} params",
        params=params,
        architecture="decoder",
        layers=max(1, round(layers_f * (hidden_f / hidden) ** 2)),  # the count a wider or narrower layer moves
        hidden_size=hidden,
        heads=hidden // _HEAD_DIM,
        kv_heads=hidden // _HEAD_DIM,
        ffn_size=4 * hidden,
        vocab_size=_VOCAB_SIZE,
        tied_embeddings=True,
        max_seq_len=_SEQ_LEN,
        shape_inferred=True,
        source="parameter count",
        notes=(
            "shape inferred from the parameter count by interpolating the GPT-3 ladder "
            "(Brown et al. 2020, Table 2.1); activation and KV-cache figures are estimates, "
            "give a preset or a config.json for exact ones",
        ),
    )


def _heads(heads_f: float) -> int:
    """The nearest count to ``heads_f`` that a node's tensor-parallel degrees divide, within 1/6 of it."""
    step = next(step for step, start in ((8, 24.0), (4, 12.0), (2, 4.0), (1, 0.0)) if heads_f >= start)
    return max(step, round(heads_f / step) * step)


def _interpolate(params: float) -> tuple[float, float]:
    """(layers, d_model) on the log-log line through the two rungs around ``params``."""
    x = math.log(params)
    segments = list(itertools.pairwise(GPT3_LADDER))
    lower, upper = next(
        ((lo, hi) for lo, hi in segments if params <= hi[0]),
        segments[-1],
    )
    t = (x - math.log(lower[0])) / (math.log(upper[0]) - math.log(lower[0]))

    def along(low: int, high: int) -> float:
        return math.exp(math.log(low) + t * (math.log(high) - math.log(low)))

    return along(lower[1], upper[1]), along(lower[2], upper[2])
