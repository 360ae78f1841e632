"""The composed activations' table (``estimate.activations``) against transformers' own modules, run here.

Each of transformers' activations runs on a real fp32 tensor; the ops it launches and the bytes they
read and write are counted by a dispatch mode, the tensors it keeps for the backward by autograd's
saved-tensor hooks, and both are compared with a fused GELU counted the same way. fp32 is what the CPU
runs exactly as CUDA does (under CUDA's 16-bit autocast ``pow`` alone moves to fp32, which the CPU
replay in ``benchmarks/replay_families.py`` covers).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from computewise.estimate.activations import composite_activation_bytes, composite_activation_traffic
from computewise.estimate.arrays import col
from computewise.specs import ModelSpec

torch = pytest.importorskip("torch")
activations = pytest.importorskip("transformers.activations")
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

ELEMENTS = 4096
FP32 = 4.0


class _Traffic(TorchDispatchMode):  # type: ignore[no-untyped-call]  # torch leaves it untyped
    """Counts the ops that run and the tensor bytes each reads and writes."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.ops = 0
        self.bytes = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        tensors = [a for a in (*args, out) if isinstance(a, torch.Tensor)]
        self.ops += 1
        self.bytes += sum(t.numel() * t.element_size() for t in tensors)
        return out


def _measure(activation: Callable[[Any], Any]) -> tuple[int, float, float]:
    """(forward ops, forward bytes per element, saved bytes per element) of one activation."""
    x = torch.randn(ELEMENTS, requires_grad=True)
    saved: dict[int, int] = {}

    def keep(tensor: Any) -> Any:
        saved[tensor.untyped_storage().data_ptr()] = tensor.numel() * tensor.element_size()
        return tensor

    traffic = _Traffic()
    with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t), traffic:
        activation(x)
    return traffic.ops, traffic.bytes / ELEMENTS, sum(saved.values()) / ELEMENTS


@pytest.mark.parametrize("name", ["gelu_new", "gelu_fast", "quick_gelu"])
def test_the_table_is_what_transformers_modules_do(name: str) -> None:
    fused_ops, fused_bytes, fused_saved = _measure(torch.nn.functional.gelu)
    ops, moved, saved = _measure(activations.ACT2FN[name])
    model = ModelSpec(name="m", params=1, activation=name)
    traffic = composite_activation_traffic(model, col(FP32))
    assert ops - fused_ops == float(traffic.kernels)
    assert moved - fused_bytes == pytest.approx(float(traffic.bytes_per_element))
    assert saved - fused_saved == pytest.approx(float(composite_activation_bytes(model, col(FP32))))


@pytest.mark.parametrize("name", ["gelu", "gelu_pytorch_tanh", "silu", "relu", ""])
def test_fused_activations_add_nothing(name: str) -> None:
    model = ModelSpec(name="m", params=1, activation=name)
    assert float(composite_activation_bytes(model, col(2.0))) == 0.0
    assert float(composite_activation_traffic(model, col(2.0)).kernels) == 0.0
