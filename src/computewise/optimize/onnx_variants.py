"""ONNX Runtime variants: graph-optimization levels, transformer fusion, INT8 (dynamic and static).

Quantized variants start from the best FP32 graph: the transformer-fused one where the
architecture allows, the plain export elsewhere. ``ort_default_int8`` is the exception on purpose:
it is ONNX Runtime's dynamic quantization applied the way its README shows (plain export, default
settings), printed beside the chosen variant so the user sees what the defaults would have cost.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from computewise.errors import VariantSkipped
from computewise.optimize.feeds import Feed, batches_of
from computewise.optimize.predictors import OrtPredictor, ort_session
from computewise.optimize.workspace import Built, DynamicInt8, Workspace, quiet_tools
from computewise.system.hardware import EXECUTION_PROVIDERS

__all__ = [
    "build_dynamic_int8",
    "build_fused",
    "build_graph_level",
    "build_ort_default_int8",
    "build_provider",
    "build_pruned_int8",
    "build_static_int8",
    "onnx_built",
    "quantizable_nodes",
    "quantize_dynamic_file",
]

CPU = ("CPUExecutionProvider",)


def onnx_built(
    workspace: Workspace,
    path: Path,
    recipe: list[str],
    level: str = "all",
    providers: tuple[str, ...] = CPU,
    **extra: Any,
) -> Built:
    """A session on ``path`` wrapped as a built variant."""
    session = ort_session(str(path), providers, workspace.hardware.threads, level)
    return Built(
        predictor=OrtPredictor(session),
        recipe=recipe,
        format="onnx",
        model_file=path,
        providers=providers,
        graph_level=level,
        size_bytes=path.stat().st_size,
        **extra,
    )


def _export_step(workspace: Workspace) -> str:
    if workspace.source.onnx_path is not None:
        return f"the user's ONNX file {workspace.source.onnx_path.name}"
    return f"ONNX export ({workspace.doctor.exporter or 'torchscript'} exporter)"


def build_graph_level(workspace: Workspace, level: str) -> Built:
    path = workspace.exported()
    return onnx_built(workspace, path, [_export_step(workspace), f"ONNX Runtime, graph optimization '{level}'"], level)


def build_fused(workspace: Workspace) -> Built:
    fused = workspace.fused()
    if fused is None:
        raise VariantSkipped("no transformer fusions are known for this architecture")
    ops = ", ".join(f"{count} {op}" for op, count in workspace.doctor.fused_operators.items()) or "none"
    return onnx_built(workspace, fused, [_export_step(workspace), f"transformer fusion ({ops})"])


def _best_fp32_graph(workspace: Workspace) -> tuple[Path, list[str]]:
    fused = workspace.fused()
    if fused is not None:
        return fused, [_export_step(workspace), "transformer fusion"]
    return workspace.exported(), [_export_step(workspace)]


def quantize_dynamic_file(
    source: Path, target: Path, setting: DynamicInt8, include: list[str] | None = None, exclude: list[str] | None = None
) -> Path:
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with quiet_tools():
        quantize_dynamic(
            str(source),
            str(target),
            per_channel=setting.per_channel,
            reduce_range=setting.reduce_range,
            weight_type=QuantType.QInt8 if setting.signed_weights else QuantType.QUInt8,
            nodes_to_quantize=include,
            nodes_to_exclude=exclude,
            # fused contrib operators carry no inferred types; their outputs are FP32 activations
            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
        )
    return target


def build_dynamic_int8(workspace: Workspace, setting: DynamicInt8, name: str) -> Built:
    base, steps = _best_fp32_graph(workspace)
    return _dynamic(workspace, base, steps, setting, name)


def _dynamic(
    workspace: Workspace, base: Path, steps: list[str], setting: DynamicInt8, name: str, label: str | None = None
) -> Built:
    path = quantize_dynamic_file(base, workspace.path(f"{name}.onnx"), setting)
    recipe = [*steps, f"ONNX Runtime dynamic INT8 ({label or setting.label})"]
    return onnx_built(workspace, path, recipe, quantized_from=(base, setting, steps))


def build_ort_default_int8(workspace: Workspace, name: str) -> Built:
    setting = DynamicInt8(signed_weights=True, per_channel=False)
    return _dynamic(workspace, workspace.exported(), [_export_step(workspace)], setting, name, "default settings")


def quantizable_nodes(path: Path) -> list[str]:
    """Nodes dynamic quantization would turn into integer kernels: matrix products with constant weights."""
    import onnx

    graph = onnx.load(str(path)).graph
    constants = {item.name for item in graph.initializer}
    return [
        node.name
        for node in graph.node
        if node.op_type in ("MatMul", "Gemm", "Attention") and len(node.input) > 1 and node.input[1] in constants
    ]


class _Calibration:
    """ONNX Runtime's CalibrationDataReader over the calibration examples, in equal-shaped batches.

    The histogram calibrators (entropy, percentile) stack every batch's activations into one array,
    so every batch must have the same shape: the remainder batch is dropped and sequences are padded
    to the longest calibration example (masked, so the padding does not move the statistics much).
    """

    def __init__(self, feed: Feed, names: list[str], batch_size: int) -> None:
        size = min(batch_size, len(feed))
        batches = [feed.batch(indices) for indices in batches_of(feed, size, by_length=True)]
        batches = [batch for batch in batches if len(next(iter(batch.values()))) == size]
        longest = max(batch[names[0]].shape[1] if batch[names[0]].ndim > 1 else 0 for batch in batches)
        self._batches: Iterator[dict[str, Any]] = iter(
            {name: _pad_to(batch[name], longest) for name in names} for batch in batches
        )

    def get_next(self) -> dict[str, Any] | None:
        return next(self._batches, None)


def _pad_to(array: Any, length: int) -> Any:
    import numpy as np

    if array.ndim < 2 or array.dtype.kind not in "iu" or array.shape[1] >= length:
        return array
    return np.pad(array, [(0, 0), (0, length - array.shape[1])] + [(0, 0)] * (array.ndim - 2))


def build_static_int8(workspace: Workspace, method: str, name: str) -> Built:
    """QDQ static INT8 calibrated on the user's data (MinMax, Entropy or Percentile)."""
    import onnx
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    base = workspace.exported()
    names = [item.name for item in onnx.load(str(base)).graph.input]
    target = workspace.path(f"{name}.onnx")
    with quiet_tools():  # the calibrators print their progress; the search has its own bar
        quantize_static(
            str(base),
            str(target),
            _Calibration(workspace.calibration, names, batch_size=8),
            quant_format=QuantFormat.QDQ,
            per_channel=True,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            op_types_to_quantize=["MatMul", "Gemm"],
            calibrate_method={
                "minmax": CalibrationMethod.MinMax,
                "entropy": CalibrationMethod.Entropy,
                "percentile": CalibrationMethod.Percentile,
            }[method],
            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
        )
    recipe = [
        _export_step(workspace),
        f"ONNX Runtime static INT8 (QDQ, {method} calibration on {len(workspace.calibration)} examples)",
    ]
    return onnx_built(workspace, target, recipe)


def build_pruned_int8(workspace: Workspace, sparsity: float, setting: DynamicInt8, name: str) -> Built:
    """Structured pruning, then the same export, fusion and dynamic INT8 as the unpruned winner."""
    from computewise.optimize.torch_variants import prune_ffn_neurons

    module = workspace.source.export_module() if workspace.source.export_module else workspace.fresh_module()
    blocks = prune_ffn_neurons(module, sparsity)
    exported = workspace.export_module(module, workspace.path(f"{name}-fp32.onnx"), dynamo=False)
    steps = [
        f"structured pruning: {sparsity:.0%} of the hidden neurons of {blocks} feed-forward blocks removed",
        "ONNX export (torchscript exporter)",
    ]
    base = exported
    if workspace.source.fusion is not None:
        base = workspace.path(f"{name}-fused.onnx")
        workspace.fuse(exported, base)
        steps.append("transformer fusion")
    return _dynamic(workspace, base, steps, setting, name)


def build_provider(workspace: Workspace, provider: str, half: bool) -> Built:
    """The best FP32 graph (optionally in FP16) on an accelerated execution provider."""
    if provider not in workspace.hardware.providers:
        raise VariantSkipped(f"{provider} is not available: it needs {EXECUTION_PROVIDERS[provider]}")
    base, steps = _best_fp32_graph(workspace)
    if half:
        import onnx
        from onnxruntime.transformers.float16 import convert_float_to_float16

        target = workspace.path(f"{provider}-fp16.onnx")
        onnx.save(convert_float_to_float16(onnx.load(str(base)), keep_io_types=True), str(target))
        base, steps = target, [*steps, "FP16 weights and math (inputs and outputs stay FP32)"]
    return onnx_built(workspace, base, [*steps, f"ONNX Runtime on {provider}"], providers=(provider, *CPU))
