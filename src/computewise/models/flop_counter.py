"""Count FLOPs at the operator level, with attention made visible.

``torch.utils.flop_counter.FlopCounterMode`` counts matmuls and convolutions but cannot tell
attention from the rest, so it cannot halve causal attention (a causal kernel such as
FlashAttention skips the masked half of QK^T and PV), and in torch 2.13 it counts nothing for
``_scaled_dot_product_flash_attention_for_cpu``, the kernel CPU attention runs. This counter
uses the same formulas (2*M*N*K per matmul, convolutions as in ``conv_flop_count``, fused
attention as two batched matmuls) so its total matches ``FlopCounterMode`` wherever that one
sees the ops, and it also keeps the attention share and its causal part.

Attention is recognised in two ways: a fused ``_scaled_dot_product_*_attention`` operator (its
``is_causal`` argument says whether it is causal), and everything run inside a call of
``F.scaled_dot_product_attention`` or ``F.multi_head_attention_forward`` (their batched
matmuls), seen by a ``TorchFunctionMode``. Hand-written attention (``q @ k.transpose``,
softmax, ``@ v``) counts in the total but not as attention.

torch is imported inside functions only, so importing this module stays free.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from math import prod
from types import TracebackType
from typing import Any, Literal

from computewise.errors import MissingExtraError

__all__ = [
    "FlopCounter",
    "FlopTally",
    "bmm_flops",
    "conv_backward_flops",
    "conv_flops",
    "mm_flops",
    "sdpa_backward_flops",
    "sdpa_flops",
    "storage_key",
]

Shape = Sequence[int]
AttentionKind = Literal["sdpa", "mha"]


def mm_flops(a_shape: Shape, b_shape: Shape) -> int:
    """(M, K) @ (K, N): M*N*K multiply-adds, two FLOPs each (the convention of every MFU figure)."""
    m, k = a_shape
    _, n = b_shape
    return 2 * m * n * k


def bmm_flops(a_shape: Shape, b_shape: Shape) -> int:
    """(B, M, K) @ (B, K, N): B independent matmuls."""
    b, m, k = a_shape
    return 2 * b * m * b_shape[2] * k


def conv_flops(x_shape: Shape, w_shape: Shape, out_shape: Shape, *, transposed: bool) -> int:
    """Every output point (input point when transposed) meets the whole filter of one group.

    ``w_shape[1]`` is already the channels per group, so grouped and depthwise convolutions
    come out right without knowing ``groups``. Bias additions are not counted.
    """
    spatial = (x_shape if transposed else out_shape)[2:]
    return 2 * x_shape[0] * prod(spatial) * prod(w_shape)


def conv_backward_flops(
    grad_out_shape: Shape,
    x_shape: Shape,
    w_shape: Shape,
    grad_input_shape: Shape | None,
    grad_weight_shape: Shape | None,
    *,
    transposed: bool,
) -> int:
    """Gradient of the input is a transposed convolution, of the weight a convolution."""

    def swap(shape: Shape) -> list[int]:
        return [shape[1], shape[0], *shape[2:]]

    flops = 0
    if grad_input_shape is not None:
        flops += conv_flops(grad_out_shape, w_shape, grad_input_shape, transposed=not transposed)
    if grad_weight_shape is not None:
        first, second = (grad_out_shape, x_shape) if transposed else (x_shape, grad_out_shape)
        flops += conv_flops(swap(first), swap(second), swap(grad_weight_shape), transposed=False)
    return flops


def sdpa_flops(q_shape: Shape, k_shape: Shape, v_shape: Shape) -> int:
    """QK^T and PV as two batched matmuls over (batch x query heads); GQA shares K/V heads."""
    b, heads, s_q, d_qk = q_shape
    s_k = k_shape[-2]
    d_v = v_shape[-1]
    return 2 * b * heads * s_q * s_k * (d_qk + d_v)


def sdpa_backward_flops(grad_out_shape: Shape, q_shape: Shape, k_shape: Shape, v_shape: Shape) -> int:
    """dV, dP, dQ and dK: four batched matmuls, twice the forward."""
    b, heads, s_q, d_qk = q_shape
    s_k = k_shape[-2]
    d_v = v_shape[-1]
    return 2 * b * heads * s_q * s_k * (2 * d_v + 2 * d_qk)


@dataclass
class FlopTally:
    """FLOPs counted so far. ``attention_flops`` and ``causal_attention_flops`` are parts of
    ``total_flops``: the total is the PyTorch convention, causal attention counted in full."""

    total_flops: int = 0
    attention_flops: int = 0
    causal_attention_flops: int = 0
    # Every kernel the ops launch (views and bare allocations launch none), and the bytes of the tensors
    # each reads and writes, those of the counter's ``fixed_storages`` (weights) left out: in kernels
    # with FLOPs ("gemm": matmuls, convolutions, attention) and in the rest.
    kernels: int = 0
    convolutions: int = 0
    gemm_bytes: int = 0
    other_bytes: int = 0
    # Bytes of the tensors the kernels made that are still referenced, and their most at any moment: the
    # activations an inference forward holds at once (each freed when Python drops its last reference).
    live_bytes: int = 0
    peak_live_bytes: int = 0

    @property
    def causal_aware_flops(self) -> float:
        """The total with causal attention halved: what a causal kernel actually computes."""
        return self.total_flops - self.causal_attention_flops / 2


@dataclass(frozen=True)
class _AttentionCall:
    kind: AttentionKind
    causal: bool


class FlopCounter:
    """Context manager counting the FLOPs of every torch operator run inside it.

    ``causal`` decides which recognised attention is causal: None trusts each call's
    ``is_causal`` flag, True treats all of it as causal (an explicit causal mask hides the
    flag), False none of it.
    """

    def __init__(self, *, causal: bool | None = None, fixed_storages: frozenset[int] = frozenset()) -> None:
        self.causal = causal
        self.fixed_storages = fixed_storages
        self.tally = FlopTally()
        self._calls: list[_AttentionCall] = []
        self._stack: ExitStack | None = None

    def __enter__(self) -> FlopCounter:
        function_mode, dispatch_mode = _make_modes(self)
        with ExitStack() as stack:
            stack.enter_context(function_mode)
            stack.enter_context(dispatch_mode)
            self._stack = stack.pop_all()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._stack is not None:
            self._stack.__exit__(exc_type, exc, traceback)
            self._stack = None

    def _enter_call(self, kind: AttentionKind, causal_flag: bool) -> None:
        self._calls.append(_AttentionCall(kind, causal_flag))

    def _leave_call(self) -> None:
        self._calls.pop()

    def _record_kernel(self, tensors_in: Sequence[Any], tensors_out: Sequence[Any], *, gemm: bool, conv: bool) -> None:
        """One launched kernel: the bytes it reads and writes (an in-place op reads and writes its tensor)."""
        moved = _bytes(tensors_in, self.fixed_storages) + _bytes(tensors_out, self.fixed_storages)
        self._hold(tensors_in, tensors_out)
        self.tally.kernels += 1
        self.tally.convolutions += int(conv)
        if gemm:
            self.tally.gemm_bytes += moved
        else:
            self.tally.other_bytes += moved

    def hold(self, tensor: Any) -> None:
        """Count ``tensor`` as live until it is freed: a tensor made outside the counter (an input)."""
        tally = self.tally

        def release(size: int = tensor.numel() * tensor.element_size()) -> None:
            tally.live_bytes -= size

        tally.live_bytes += tensor.numel() * tensor.element_size()
        tally.peak_live_bytes = max(tally.peak_live_bytes, tally.live_bytes)
        weakref.finalize(tensor, release)

    def _hold(self, tensors_in: Sequence[Any], tensors_out: Sequence[Any]) -> None:
        """A kernel's new outputs are live until freed; an in-place result or a weight's update is not new memory."""
        existing = {storage_key(tensor) for tensor in tensors_in} | self.fixed_storages
        for tensor in tensors_out:
            key = storage_key(tensor)
            if key not in existing:
                existing.add(key)
                self.hold(tensor)

    def _record(self, flops: int, *, is_batched_matmul: bool, fused_causal: bool | None) -> None:
        """Add one operator's FLOPs; ``fused_causal`` is set for a fused attention operator."""
        self.tally.total_flops += flops
        call = self._calls[-1] if self._calls else None
        if fused_causal is not None:
            causal_flag = call.causal if call is not None else fused_causal
        elif call is not None and (call.kind == "sdpa" or is_batched_matmul):
            causal_flag = call.causal
        else:
            return
        self.tally.attention_flops += flops
        is_causal = causal_flag if self.causal is None else self.causal
        if is_causal:
            self.tally.causal_attention_flops += flops


def storage_key(tensor: Any) -> int:
    """Identity of a tensor's storage; meta tensors have no data pointer, but a storage object."""
    return int(tensor.untyped_storage()._cdata)


def _bytes(tensors: Sequence[Any], fixed_storages: frozenset[int]) -> int:
    """Bytes of distinct tensors (by object) outside ``fixed_storages``."""
    seen: set[int] = set()
    total = 0
    for tensor in tensors:
        if id(tensor) in seen or storage_key(tensor) in fixed_storages:
            continue
        seen.add(id(tensor))
        total += tensor.numel() * tensor.element_size()
    return total


def _shape(value: Any) -> list[int]:
    return [int(size) for size in value.shape]


def _bind(func: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Arguments of an aten operator by their schema names (positions differ between kernels)."""
    names = [argument.name for argument in func._schema.arguments]
    bound = dict(zip(names, args, strict=False))
    bound.update(kwargs)
    return bound


Formula = Callable[[dict[str, Any], Any], int]


def _formulas(torch: Any) -> tuple[dict[Any, Formula], set[Any], set[Any]]:
    """Formulas by operator packet, plus the fused attention packets and the batched matmuls."""
    aten = torch.ops.aten

    def mm(bound: dict[str, Any], out: Any) -> int:
        return mm_flops(_shape(bound["self"]), _shape(bound["mat2"]))

    def addmm(bound: dict[str, Any], out: Any) -> int:
        return mm_flops(_shape(bound["mat1"]), _shape(bound["mat2"]))

    def scaled_mm(bound: dict[str, Any], out: Any) -> int:
        return mm_flops(_shape(bound["self"]), _shape(bound["mat2"]))

    def bmm(bound: dict[str, Any], out: Any) -> int:
        return bmm_flops(_shape(bound["self"]), _shape(bound["mat2"]))

    def baddbmm(bound: dict[str, Any], out: Any) -> int:
        return bmm_flops(_shape(bound["batch1"]), _shape(bound["batch2"]))

    def conv(bound: dict[str, Any], out: Any) -> int:
        x = bound["input"] if "input" in bound else bound["self"]
        transposed = bool(bound.get("transposed", False))
        return conv_flops(_shape(x), _shape(bound["weight"]), _shape(out), transposed=transposed)

    def conv_backward(bound: dict[str, Any], out: Any) -> int:
        grad_input, grad_weight, _ = out
        mask = bound["output_mask"]
        return conv_backward_flops(
            _shape(bound["grad_output"]),
            _shape(bound["input"]),
            _shape(bound["weight"]),
            _shape(grad_input) if mask[0] else None,
            _shape(grad_weight) if mask[1] else None,
            transposed=bool(bound["transposed"]),
        )

    def sdpa(bound: dict[str, Any], out: Any) -> int:
        return sdpa_flops(_shape(bound["query"]), _shape(bound["key"]), _shape(bound["value"]))

    def sdpa_backward(bound: dict[str, Any], out: Any) -> int:
        grad_out = bound["grad_out"] if "grad_out" in bound else bound["grad_out_"]
        return sdpa_backward_flops(
            _shape(grad_out), _shape(bound["query"]), _shape(bound["key"]), _shape(bound["value"])
        )

    fused = {
        aten._scaled_dot_product_efficient_attention,
        aten._scaled_dot_product_flash_attention,
        aten._scaled_dot_product_flash_attention_for_cpu,
        aten._scaled_dot_product_cudnn_attention,
    }
    fused_backward = {
        aten._scaled_dot_product_efficient_attention_backward,
        aten._scaled_dot_product_flash_attention_backward,
        aten._scaled_dot_product_flash_attention_for_cpu_backward,
        aten._scaled_dot_product_cudnn_attention_backward,
    }
    formulas: dict[Any, Formula] = {
        aten.mm: mm,
        aten.addmm: addmm,
        aten._scaled_mm: scaled_mm,
        aten.bmm: bmm,
        aten.baddbmm: baddbmm,
        aten.convolution: conv,
        aten._convolution: conv,
        aten.cudnn_convolution: conv,
        aten.convolution_overrideable: conv,
        aten.convolution_backward: conv_backward,
    }
    formulas.update(dict.fromkeys(fused, sdpa))
    formulas.update(dict.fromkeys(fused_backward, sdpa_backward))
    return formulas, fused | fused_backward, {aten.bmm, aten.baddbmm}


# A mode's handler: the mode, the operator, its positional and its keyword arguments.
_Handler = Callable[[Any, Any, Sequence[Any], Mapping[str, Any]], Any]


def _mode_hook(handle: _Handler) -> Callable[..., Any]:
    """A torch mode's hook that calls ``handle``. Torch calls ``__torch_function__`` and ``__torch_dispatch__``
    alike, as ``(func, types, args=(), kwargs=None)``: that signature is written once, here; the handlers
    read no ``types`` and get the keyword arguments as a mapping, never None."""

    def hook(
        mode: Any, func: Any, types: Sequence[type], args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None
    ) -> Any:
        return handle(mode, func, args, kwargs or {})

    return hook


def _make_modes(counter: FlopCounter) -> tuple[Any, Any]:
    """Build the torch modes (classes live here so that torch is imported only when counting)."""
    try:
        import torch
        from torch.overrides import TorchFunctionMode
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils._pytree import tree_leaves
    except ImportError as error:
        raise MissingExtraError("torch", "torch", "counting FLOPs of torch operators") from error

    formulas, fused, batched = _formulas(torch)
    aten = torch.ops.aten
    convolutions = {aten.convolution, aten._convolution, aten.cudnn_convolution, aten.convolution_overrideable}
    # Operators that launch no kernel although they are not views: a bare allocation.
    no_kernel = {
        aten.empty,
        aten.empty_like,
        aten.empty_strided,
        aten.new_empty,
        aten.new_empty_strided,
        aten.lift_fresh,
    }
    attention_functions: dict[Any, AttentionKind] = {
        torch.nn.functional.scaled_dot_product_attention: "sdpa",
        torch.nn.functional.multi_head_attention_forward: "mha",
    }
    # FlopCounterMode never decomposes prim.device (it has no decomposition); neither do we.
    passthrough = {torch.ops.prim.device.default}

    def attention_span(mode: Any, func: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        """Marks the span of each attention call so the dispatch mode can attribute its ops."""
        kind = attention_functions.get(func)
        if kind is None:
            return func(*args, **kwargs)
        position = 5 if kind == "sdpa" else 24  # is_causal in each function's signature
        flag = kwargs.get("is_causal", args[position] if len(args) > position else False)
        counter._enter_call(kind, bool(flag))
        try:
            return func(*args, **kwargs)
        finally:
            counter._leave_call()

    def launch(func: Any, args: Sequence[Any], kwargs: Mapping[str, Any], *, gemm: bool) -> Any:
        """Runs an operator that has a kernel of its own, and counts that kernel unless it is a view."""
        out = func(*args, **kwargs)
        packet = func._overloadpacket
        if not func.is_view and packet not in no_kernel and func not in passthrough:
            tensors = [leaf for leaf in tree_leaves((args, dict(kwargs))) if isinstance(leaf, torch.Tensor)]
            produced = [leaf for leaf in tree_leaves(out) if isinstance(leaf, torch.Tensor)]
            counter._record_kernel(tensors, produced, gemm=gemm, conv=packet in convolutions)
        return out

    def count(mode: Any, func: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        """Counts each operator once, after decomposing composite ones as FlopCounterMode does."""
        packet = func._overloadpacket
        formula = formulas.get(packet)
        if formula is None:
            if func not in passthrough:
                with mode:
                    decomposed = func.decompose(*args, **kwargs)
                if decomposed is not NotImplemented:
                    return decomposed
            return launch(func, args, kwargs, gemm=False)
        out = launch(func, args, kwargs, gemm=True)
        bound = _bind(func, args, kwargs)
        fused_causal = bool(bound.get("is_causal", False)) if packet in fused else None
        counter._record(formula(bound, out), is_batched_matmul=packet in batched, fused_causal=fused_causal)
        return out

    class AttentionCalls(TorchFunctionMode):
        __torch_function__ = _mode_hook(attention_span)

    class CountFlops(TorchDispatchMode):  # type: ignore[no-untyped-call]  # torch leaves it untyped
        __torch_dispatch__ = _mode_hook(count)

    return AttentionCalls(), CountFlops()  # type: ignore[no-untyped-call]
