"""transformers' MLP activations that are Python compositions of ops: what they keep and what they launch.

A fused activation (``F.gelu``, ``F.silu``, Megatron's bias-GeLU) is one kernel that keeps its input
for the backward. Some of transformers' activation modules (``transformers/activations.py``) are
several PyTorch ops instead, each a kernel over the MLP's width and each keeping what its own
backward needs. Under ``--framework transformers`` (and LoRA, whose frozen MLPs run the same
modules) the step pays for every one of them:

- ``gelu_new`` (GPT-2, GPT-J, GPT-Neo, CodeGen, Phi-2): ``0.5*x*(1 + tanh(c*(x + 0.044715*pow(x, 3))))``.
  CUDA's autocast runs ``pow`` in fp32 (it is on autocast's fp32 list), so ``pow`` keeps an fp32 copy
  of x, ``tanh`` its fp32 output, and the last product ``0.5*x`` (in place of x) and the fp32
  ``1 + tanh``: three fp32 tensors more than a fused GELU keeps, with or without autocast. Forward:
  the cast to fp32, eight ops and the cast back to 16 bits for the down projection.
- ``gelu_fast``: ``0.5*x*(1 + tanh(x*0.798*(1 + 0.044715*x*x)))``; no op leaves the input's width.
  The two inner products keep both factors each, ``tanh`` its output, the last product both: six
  tensors more. Nine ops.
- ``quick_gelu``: ``x*sigmoid(1.702*x)``; the product keeps the sigmoid's output beside x: one more.
  Three ops.

Checked against transformers' own GPT-2 module with each of the three, replayed on the CPU as CUDA
allocates (``benchmarks/replay_families.py``): the saved bytes match within 0.3 %.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from computewise.estimate.arrays import FloatArray, col
from computewise.specs import ModelSpec

__all__ = ["ActivationTraffic", "composite_activation_bytes", "composite_activation_traffic"]

_FP32 = 4.0


@dataclass(frozen=True)
class _Composite:
    """One composed activation, per element of the MLP's width, beyond a fused kernel's."""

    saved_fp32_tensors: float  # kept for the backward at 4 bytes
    saved_tensors: float  # kept for the backward at the input's width
    kernels_16: float  # forward kernels more, under 16-bit autocast (casts included)
    kernels_32: float  # forward kernels more, in fp32
    bytes_moved: float  # forward HBM bytes more, fixed part
    bytes_per_width_16: float  # forward HBM bytes more per byte of the input's width, under autocast
    bytes_per_width_32: float


_COMPOSITES: dict[str, _Composite] = {
    # Autocast: cast (a + 4), pow 8, mul 8, add (a + 8), mul 8, tanh 8, add 8, 0.5*x 2a, product (a + 8),
    # cast back (4 + a) = 64 + 6a against a fused GELU's 2a; in fp32 no casts: 72 against 8.
    "gelu_new": _Composite(3.0, 0.0, 9.0, 7.0, 64.0, 4.0, 0.0),
    # Nine ops of 2 or 3 tensors at the input's width: 21a against 2a.
    "gelu_fast": _Composite(0.0, 6.0, 8.0, 8.0, 0.0, 19.0, 19.0),
    # 1.702*x 2a, sigmoid 2a, product 3a: 7a against 2a.
    "quick_gelu": _Composite(0.0, 1.0, 2.0, 2.0, 0.0, 5.0, 5.0),
}
_FUSED = _Composite(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)


@dataclass(frozen=True)
class ActivationTraffic:
    """Forward kernels and HBM bytes per MLP element a composed activation adds to a fused one."""

    kernels: FloatArray
    bytes_per_element: FloatArray


def _composite(model: ModelSpec) -> _Composite:
    return _COMPOSITES.get(model.activation, _FUSED)


def composite_activation_bytes(model: ModelSpec, act_bytes: FloatArray) -> FloatArray:
    """Bytes per MLP element a Hugging Face module's composed activation keeps beyond a fused kernel."""
    c = _composite(model)
    return c.saved_fp32_tensors * _FP32 + c.saved_tensors * col(act_bytes)


def composite_activation_traffic(model: ModelSpec, act_bytes: FloatArray) -> ActivationTraffic:
    """What a composed activation's forward launches and moves beyond a fused kernel's, per MLP element."""
    c = _composite(model)
    act = col(act_bytes)
    autocast = act < _FP32
    return ActivationTraffic(
        kernels=np.where(autocast, c.kernels_16, c.kernels_32),
        bytes_per_element=c.bytes_moved + act * np.where(autocast, c.bytes_per_width_16, c.bytes_per_width_32),
    )
