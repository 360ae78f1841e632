"""Selective precision: keep the layers that cost the most accuracy in FP32, quantize the rest.

Intel Neural Compressor's recipe, on ONNX Runtime's dynamic quantization: measure each quantizable
layer's cost alone (quantize only that layer, compare with the FP32 outputs on the calibration
examples), then leave out the worst ones, a few more at a time, until the calibration score meets
the budget. The variant is graded like every other one afterwards, on the held-aside examples, so
the layers are chosen on one set and judged on another.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from computewise.errors import VariantSkipped
from computewise.optimize.onnx_variants import onnx_built, quantizable_nodes, quantize_dynamic_file
from computewise.optimize.predictors import OrtPredictor, ort_session, predict_all
from computewise.optimize.quality import Metric, Score, agreement
from computewise.optimize.workspace import Built, DynamicInt8, Workspace

__all__ = ["build_selective", "rank_layers"]

_SENSITIVITY_EXAMPLES = 64


def _outputs(workspace: Workspace, path: Path, examples: int) -> np.ndarray:
    session = ort_session(str(path), ("CPUExecutionProvider",), workspace.hardware.threads)
    feed = workspace.calibration.subset(range(min(examples, len(workspace.calibration))))
    return predict_all(OrtPredictor(session), feed, workspace.batch_size)


def rank_layers(workspace: Workspace, base: Path, setting: DynamicInt8) -> list[tuple[str, float]]:
    """Each quantizable layer with the output cosine it loses when it alone is quantized, worst first.

    Cosine of the raw outputs is used whatever the task: it is continuous, so it ranks layers even
    where top-1 agreement would not move.
    """
    reference = workspace.calibration_reference()[: min(_SENSITIVITY_EXAMPLES, len(workspace.calibration))]
    costs = []
    probe = workspace.path("sensitivity-probe.onnx")
    for node in quantizable_nodes(base):
        quantize_dynamic_file(base, probe, setting, include=[node])
        score = agreement("embedding", _outputs(workspace, probe, _SENSITIVITY_EXAMPLES), reference)
        costs.append((node, 1.0 - score.value))
    probe.unlink(missing_ok=True)
    return sorted(costs, key=lambda item: item[1], reverse=True)


def _steps(layer_count: int) -> list[int]:
    """How many layers to keep in FP32 at each try: 1, 2, 3, 4, 6, 8, 12, ... (below all of them)."""
    counts, k = [], 1
    while k < layer_count:
        counts.append(k)
        k = k + 1 if k < 4 else int(k * 1.5)
    return counts


def build_selective(
    workspace: Workspace,
    quantized: Built,
    metric: Metric,
    calibration_baseline: float,
    name: str,
    out_of_time: Callable[[], bool],
) -> Built:
    """The quantized variant with its most sensitive layers kept in FP32, just enough to meet the budget."""
    if quantized.quantized_from is None:
        raise VariantSkipped("selective precision needs a dynamically quantized variant")
    base, setting, steps = quantized.quantized_from
    ranking = rank_layers(workspace, base, setting)
    reference = workspace.calibration_reference()
    target = workspace.path(f"{name}.onnx")
    for keep in _steps(len(ranking)):
        if out_of_time():
            raise VariantSkipped(f"time budget reached after trying {keep - 1} layers in FP32")
        kept = [node for node, _cost in ranking[:keep]]
        quantize_dynamic_file(base, target, setting, exclude=kept)
        built = onnx_built(workspace, target, [], kept_fp32=kept)
        score: Score = metric.score(built.predictor, workspace.calibration, reference, workspace.batch_size)[0]
        if metric.meets(score, calibration_baseline):
            built.recipe = [
                *steps,
                f"ONNX Runtime dynamic INT8 ({setting.label}) except the {keep} most sensitive of "
                f"{len(ranking)} layers, kept in FP32 (ranked on {len(workspace.calibration)} calibration examples)",
            ]
            built.quantized_from = quantized.quantized_from
            return built
    raise VariantSkipped(
        f"even with {len(ranking) - 1} of {len(ranking)} layers in FP32 the calibration score misses the budget"
    )
