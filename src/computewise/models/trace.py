"""Measure a real ``nn.Module`` without running it: a forward and backward pass on the meta device.

Formulas cover transformers; anything else (a CNN, an unusual block) needs the module itself.
We swap every parameter and buffer for a meta tensor of the same shape and dtype
(``torch.func.functional_call``), feed meta inputs of the example's shapes, and run forward
and backward of a scalar loss. Meta tensors carry shapes but no data, so a 70B model traces
on a laptop, and the module the user passed is never moved, copied or changed.

What we read from the trace:

- parameters and their bytes, each tensor once (tied embeddings count once);
- forward FLOPs from our operator-level counter (``computewise.models.flop_counter``), both in
  the PyTorch convention and causal-aware;
- activation memory: the bytes of every tensor autograd saves for backward, seen through
  ``saved_tensors_hooks``, deduplicated by storage so that views and tensors saved twice
  count once. Parameters and buffers are excluded (they are weights, not activations); the
  example inputs are included when autograd saves them, since they stay alive until backward.

The trace runs in training mode (dropout masks and batch-norm statistics are saved as in a
training step); the module's own train/eval flags are restored afterwards.

``F.scaled_dot_product_attention`` is traced through the fused kernel PyTorch runs on a real
CPU (``_scaled_dot_product_flash_attention_for_cpu``), which saves q, k, v, the output and the
log-sum-exp, as FlashAttention does on a GPU. Left alone, the meta device would take the math
kernel and save the whole attention matrix: an O(seq^2) overestimate of activation memory.
Attention written by hand (``q @ k.transpose``, softmax) is traced as written.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass, replace
from typing import Any

from computewise.errors import MissingExtraError, ModelConfigError
from computewise.models.flop_counter import FlopCounter, FlopTally, storage_key
from computewise.models.hf_config import from_hf_config
from computewise.specs.model import Architecture, ModelSpec, TracedKernels, TracedStats

__all__ = ["TraceMeasurement", "measure_module", "trace_module"]

# What a module that a meta-device trace cannot follow raises (a data-dependent step, inputs it does not take).
_TRACE_ERRORS = (RuntimeError, NotImplementedError, TypeError, ValueError)
_TRACE_HINT = (
    "pass example inputs the module accepts (a tensor, a tuple of positional inputs or a dict "
    "of keyword inputs), and keep the forward free of data-dependent steps (.item(), .tolist(), "
    "boolean masks with unknown counts), which a meta-device trace cannot follow"
)


@dataclass(frozen=True)
class TraceMeasurement:
    """What one meta-device trace measured, for the whole example batch.

    ``forward_flops`` follows the PyTorch convention (``torch.utils.flop_counter``: 2*M*N*K per
    matmul, causal attention counted in full); ``forward_flops_causal_aware`` halves the causal
    part of ``attention_flops``. ``backward_flops`` is in the PyTorch convention, 0 when
    nothing required a gradient.
    """

    module_name: str
    batch_size: int
    params: int
    param_bytes: int
    dtype_bytes: int
    forward_flops: int
    forward_flops_causal_aware: float
    attention_flops: int
    causal_attention_flops: int
    backward_flops: int
    activation_bytes: int
    has_convolutions: bool
    kernels: TracedKernels | None = None  # None: not measured (asked not to, or the module would not re-run)


def trace_module(module: Any, example_inputs: Any, *, causal: bool | None = None) -> ModelSpec:
    """A ModelSpec for ``module`` with exact parameters and a ``TracedStats`` per sample.

    ``traced.forward_flops_per_sample`` is the causal-aware figure (what a causal attention
    kernel computes); the PyTorch-convention figure is in ``notes``. ``causal`` as in
    ``FlopCounter``: None trusts each attention call's ``is_causal`` flag.
    """
    config_dict = getattr(getattr(module, "config", None), "to_dict", None)
    # A module with a Hugging Face config is timed by the transformer formulas: its kernels need no trace.
    measured = measure_module(module, example_inputs, causal=causal, kernels=not callable(config_dict))
    batch = measured.batch_size
    traced = TracedStats(
        forward_flops_per_sample=measured.forward_flops_causal_aware / batch,
        activation_bytes_per_sample=measured.activation_bytes / batch,
        param_bytes=measured.param_bytes,
        traced_dtype_bytes=measured.dtype_bytes,
        kernels=measured.kernels,
    )
    notes = [
        f"traced on the meta device with batch {batch}, training mode",
        f"forward FLOPs per sample: {measured.forward_flops / batch:.6g} in the PyTorch convention "
        f"(causal attention in full), {measured.forward_flops_causal_aware / batch:.6g} causal-aware",
        f"backward FLOPs per sample: {measured.backward_flops / batch:.6g} (PyTorch convention)",
    ]
    if measured.kernels is None and not callable(config_dict):
        notes.append(
            "the kernels of an eager step were not counted (the module did not run at batch 1 and 2), so its "
            "time is its FLOPs at the large-GEMM rate: a lower bound"
        )
    architecture: Architecture = "cnn" if measured.has_convolutions else "generic"
    spec = ModelSpec(name=measured.module_name, params=measured.params, architecture=architecture)
    if callable(config_dict):
        try:
            spec = from_hf_config(config_dict())
        except ModelConfigError as error:
            notes.append(f"shape fields left empty: the module's config could not be read ({error.message})")
    return replace(
        spec,
        name=measured.module_name,
        params=measured.params,
        traced=traced,
        source=f"traced: {measured.module_name}",
        notes=(*spec.notes, *notes),
    )


def measure_module(
    module: Any, example_inputs: Any, *, causal: bool | None = None, kernels: bool = False
) -> TraceMeasurement:
    """Trace ``module`` on the meta device with inputs shaped like ``example_inputs``.

    ``example_inputs`` is one tensor, a tuple/list of positional inputs, or a dict of keyword
    inputs; tensors nested in them are replaced by meta tensors, other values pass through.
    The batch size is the first dimension of the first tensor input. ``kernels``: also count the
    kernels an eager step launches and the bytes they move (``_measure_kernels``: six more meta passes,
    so only where a time model will use them).
    """
    try:
        import torch
    except ImportError as error:
        raise MissingExtraError("torch", "torch", "tracing an nn.Module") from error

    if not isinstance(module, torch.nn.Module):
        raise ModelConfigError(
            f"cannot trace a {type(module).__name__}: it is not a torch.nn.Module",
            "pass the model object itself, e.g. trace_module(model, torch.zeros(8, 512, dtype=torch.long))",
        )
    name = type(module).__name__
    parameters = dict(module.named_parameters())  # unique tensors: tied weights appear once
    params = sum(p.numel() for p in parameters.values())
    param_bytes = sum(p.numel() * p.element_size() for p in parameters.values())

    def to_meta(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            meta = torch.empty_like(value, device="meta")
            return meta.requires_grad_(value.requires_grad) if meta.is_floating_point() else meta
        if isinstance(value, Mapping):
            return {key: to_meta(item) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return type(value)(to_meta(item) for item in value)
        return value

    if isinstance(example_inputs, Mapping):
        args: tuple[Any, ...] = ()
        kwargs: dict[str, Any] = dict(to_meta(dict(example_inputs)))
    else:
        args = to_meta(tuple(example_inputs) if isinstance(example_inputs, list | tuple) else (example_inputs,))
        kwargs = {}
    first = next(_tensors((args, kwargs)), None)
    if first is None:
        raise ModelConfigError(f"cannot trace {name}: the example inputs hold no tensor", _TRACE_HINT)
    batch_size = int(first.shape[0]) if first.dim() > 0 and first.shape[0] > 0 else 1

    weights = {key: to_meta(value) for key, value in parameters.items()}
    weights.update({key: to_meta(value) for key, value in module.named_buffers()})
    weight_storages = frozenset(storage_key(tensor) for tensor in weights.values())
    saved_bytes: dict[int, int] = {}

    def pack(tensor: Any) -> Any:
        key = storage_key(tensor)
        if key not in weight_storages:
            saved_bytes.setdefault(key, int(tensor.untyped_storage().nbytes()))
        return tensor

    def unpack(tensor: Any) -> Any:
        return tensor

    training_flags = [(submodule, submodule.training) for submodule in module.modules()]
    forward, backward = FlopCounter(causal=causal), FlopCounter()
    launched = None
    try:
        try:
            _training_step(
                torch,
                module,
                weights,
                (args, kwargs),
                forward,
                backward,
                torch.autograd.graph.saved_tensors_hooks(pack, unpack),
            )
        except _TRACE_ERRORS as error:
            raise ModelConfigError(f"cannot trace {name} on the meta device: {error}", _TRACE_HINT) from error
        if kernels:
            launched = _measure_kernels(torch, module, weights, weight_storages, (args, kwargs), batch_size)
    finally:
        for submodule, flag in training_flags:
            submodule.training = flag
    return TraceMeasurement(
        module_name=name,
        batch_size=batch_size,
        params=params,
        param_bytes=param_bytes,
        dtype_bytes=_dominant_element_size(parameters.values(), default=first.element_size()),
        forward_flops=forward.tally.total_flops,
        forward_flops_causal_aware=forward.tally.causal_aware_flops,
        attention_flops=forward.tally.attention_flops,
        causal_attention_flops=forward.tally.causal_attention_flops,
        backward_flops=backward.tally.total_flops,
        activation_bytes=sum(saved_bytes.values()),
        has_convolutions=any(isinstance(m, torch.nn.modules.conv._ConvNd) for m in module.modules()),
        kernels=launched,
    )


_Inputs = tuple[tuple[Any, ...], dict[str, Any]]  # positional and keyword inputs of a module


def _training_step(
    torch: Any,
    module: Any,
    weights: dict[str, Any],
    inputs: _Inputs,
    forward: FlopCounter,
    backward: FlopCounter,
    *hooks: AbstractContextManager[Any],
) -> None:
    """A training forward on meta tensors counted by ``forward`` (inside ``hooks``), and the backward of the sum
    of its floating outputs counted by ``backward``; the weights' gradients are left unset, as a step starts."""
    from torch.func import functional_call

    args, kwargs = inputs
    for tensor in weights.values():
        tensor.grad = None  # as zero_grad(set_to_none=True) leaves them
    module.train()
    with ExitStack() as stack:
        for context in (torch.enable_grad(), torch.device("meta"), *hooks, _fused_attention(torch), forward):
            stack.enter_context(context)
        output = functional_call(module, weights, args, kwargs, tie_weights=True, strict=False)
    losses = [t.float().sum() for t in _tensors(output) if t.is_floating_point() and t.requires_grad]
    with backward:
        if losses:
            sum(losses[1:], losses[0]).backward()


def _measure_kernels(
    torch: Any, module: Any, weights: dict[str, Any], fixed: frozenset[int], inputs: _Inputs, batch_size: int
) -> TracedKernels | None:
    """Kernels and bytes of an eager inference forward and of a training step, per sample.

    Bytes per sample are the difference between a step at batch 2 and one at batch 1, so that what
    does not grow with the batch (weights, their gradients, batch-norm statistics) drops out. None
    when the module does not run at batch 1 or 2 (an input whose shape is fixed): the estimate then
    times the step by its FLOPs alone.
    """
    from torch.func import functional_call

    def step(batch: int) -> tuple[FlopTally, FlopTally, FlopTally]:
        args, kwargs = _with_batch(torch, inputs, batch_size, batch)
        module.eval()
        with (
            torch.no_grad(),
            torch.device("meta"),
            _fused_attention(torch),
            FlopCounter(fixed_storages=fixed) as infer,
        ):
            for tensor in _tensors((args, kwargs)):
                infer.hold(tensor)  # the inputs stay alive through the forward
            functional_call(module, weights, args, kwargs, tie_weights=True, strict=False)
        forward, backward = FlopCounter(fixed_storages=fixed), FlopCounter(fixed_storages=fixed)
        _training_step(torch, module, weights, (args, kwargs), forward, backward)
        return infer.tally, forward.tally, backward.tally

    try:
        one, two = step(1), step(2)
    except _TRACE_ERRORS:
        return None  # the module runs at its example's batch only; trace_module says so in the spec's notes
    (infer1, forward1, backward1), (infer2, forward2, backward2) = one, two
    return TracedKernels(
        eval_kernels=infer1.kernels,
        train_forward_kernels=forward1.kernels,
        train_backward_kernels=backward1.kernels,
        convolutions=infer1.convolutions,
        eval_gemm_bytes_per_sample=float(infer2.gemm_bytes - infer1.gemm_bytes),
        eval_other_bytes_per_sample=float(infer2.other_bytes - infer1.other_bytes),
        eval_peak_bytes_per_sample=float(infer2.peak_live_bytes - infer1.peak_live_bytes),
        train_gemm_bytes_per_sample=float(
            forward2.gemm_bytes + backward2.gemm_bytes - forward1.gemm_bytes - backward1.gemm_bytes
        ),
        train_other_bytes_per_sample=float(
            forward2.other_bytes + backward2.other_bytes - forward1.other_bytes - backward1.other_bytes
        ),
    )


def _with_batch(torch: Any, inputs: _Inputs, batch_size: int, batch: int) -> _Inputs:
    """The meta inputs with every tensor whose first dimension is the batch resized to ``batch``."""

    def resize(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            if value.dim() == 0 or value.shape[0] != batch_size:
                return value
            resized = torch.empty((batch, *value.shape[1:]), dtype=value.dtype, device="meta")
            return resized.requires_grad_(value.requires_grad) if resized.is_floating_point() else resized
        if isinstance(value, Mapping):
            return {key: resize(item) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return type(value)(resize(item) for item in value)
        return value

    args, kwargs = inputs
    return resize(args), resize(kwargs)


def _fused_attention(torch: Any) -> Any:
    """A function mode running F.scaled_dot_product_attention through the fused CPU kernel.

    Grouped-query attention repeats K and V to the query heads first, as the math kernel does;
    that keeps the kernel's requirements while saving only O(seq) per head.
    """
    from torch.overrides import TorchFunctionMode

    sdpa = torch.nn.functional.scaled_dot_product_attention
    fused = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")

    class FusedAttention(TorchFunctionMode):
        def __torch_function__(
            self,
            func: Any,
            types: Any,
            args: tuple[Any, ...] = (),
            kwargs: Mapping[str, Any] | None = None,
        ) -> Any:
            kwargs = kwargs or {}
            if func is not sdpa:
                return func(*args, **kwargs)
            bound = {**dict(zip(names, args, strict=False)), **kwargs}
            query, key, value = bound["query"], bound["key"], bound["value"]
            if query.dim() != 4 or key.dim() != 4 or query.shape[1] % key.shape[1]:
                return func(*args, **kwargs)
            groups = query.shape[1] // key.shape[1]
            if groups > 1:
                key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
            output, _ = fused(
                query,
                key,
                value,
                float(bound.get("dropout_p", 0.0)),
                bool(bound.get("is_causal", False)),
                attn_mask=bound.get("attn_mask"),
                scale=bound.get("scale"),
            )
            return output

    return FusedAttention()


def _tensors(value: Any) -> Iterator[Any]:
    """Tensors nested in tuples, lists and dicts (Hugging Face outputs are dicts), in order."""
    import torch

    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _tensors(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _tensors(item)


def _dominant_element_size(parameters: Any, *, default: int) -> int:
    """Bytes per element of the dtype holding most parameters (the traced precision)."""
    numel_by_size: dict[int, int] = {}
    for p in parameters:
        if p.is_floating_point():
            numel_by_size[p.element_size()] = numel_by_size.get(p.element_size(), 0) + p.numel()
    if not numel_by_size:
        return default
    return max(numel_by_size, key=lambda size: numel_by_size[size])
