"""What variant builders share: the model, the hardware, a scratch directory and the ONNX exports.

The ONNX export and the fused graph are made once, on first use, and reused by every ONNX Runtime
variant. ``export_doctor`` lives here too because it decides which export the others start from:
when the default exporter's graph lets ONNX Runtime fuse no attention, the model is re-exported
the way that does (TorchScript exporter, eager attention), and the report says so.
"""

from __future__ import annotations

import contextlib
import copy
import io
import logging
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from computewise.errors import ComputewiseError, VariantSkipped
from computewise.optimize.feeds import Batch, Feed
from computewise.optimize.predictors import predict_all
from computewise.optimize.source import ModelSource
from computewise.specs.codec import Jsonable
from computewise.system.hardware import Hardware

__all__ = ["Built", "Doctor", "DynamicInt8", "Workspace", "first_line", "quiet_tools"]

# Operators that ONNX Runtime's transformer optimizer emits when it recognises a pattern.
FUSED_OPERATORS = (
    "Attention",
    "MultiHeadAttention",
    "EmbedLayerNormalization",
    "SkipLayerNormalization",
    "BiasGelu",
    "FastGelu",
    "Gelu",
    "LayerNormalization",
    "GemmFastGelu",
)


@dataclass(frozen=True)
class DynamicInt8:
    """One setting of ONNX Runtime's dynamic quantization."""

    signed_weights: bool
    per_channel: bool
    reduce_range: bool = False

    @property
    def label(self) -> str:
        text = f"{'s8' if self.signed_weights else 'u8'} weights, {'per-channel' if self.per_channel else 'per-tensor'}"
        return text + (", reduce_range" if self.reduce_range else "")


@dataclass
class Built:
    """A built variant: how to run it, and what would be shipped."""

    predictor: Callable[[Batch], np.ndarray]
    recipe: list[str]
    format: str  # "onnx" | "torchscript" (a saved program) | "torch" (an eager module, never exported)
    model_file: Path | None = None
    providers: tuple[str, ...] = ()
    graph_level: str | None = None
    size_bytes: int = 0
    kept_fp32: list[str] | None = None
    torch_recipe: dict[str, Any] = field(default_factory=dict)
    # for dynamic INT8: the FP32 graph, the setting and the steps that made it, so that
    # selective precision can re-quantize the same graph with some layers left out
    quantized_from: tuple[Path, DynamicInt8, list[str]] | None = None
    # why this variant has no file ``computewise serve`` could load; such a variant is never chosen
    export_blocker: str | None = None
    # a TorchScript program's inputs, in the order (or by the names) it was traced with
    program_inputs: tuple[str, ...] = ()
    program_positional: bool = False

    @property
    def exportable(self) -> bool:
        return self.export_blocker is None and self.model_file is not None

    def reopen(self, threads: int) -> Callable[[Batch], np.ndarray]:
        """A fresh predictor on the saved file, for timing again after the first one was released."""
        from computewise.optimize.predictors import OrtPredictor, ProgramPredictor, ort_session

        if self.model_file is None:
            raise ComputewiseError("this variant has no saved file to reopen")
        if self.format == "onnx":
            return OrtPredictor(ort_session(str(self.model_file), self.providers, threads, self.graph_level or "all"))
        device = str(self.torch_recipe.get("device", "cpu"))
        return ProgramPredictor(str(self.model_file), self.program_inputs, self.program_positional, device)


@dataclass
class Doctor(Jsonable):
    """What the export looked like to ONNX Runtime."""

    exporter: str = ""
    fused_operators: dict[str, int] = field(default_factory=dict)
    attention_fused: bool | None = None
    notes: list[str] = field(default_factory=list)


class Workspace:
    """Per-search state that builders share; every file goes under ``directory``."""

    def __init__(
        self, source: ModelSource, hardware: Hardware, directory: Path, calibration: Feed, batch_size: int
    ) -> None:
        self.source = source
        self.hardware = hardware
        self.directory = directory
        self.calibration = calibration
        self.batch_size = batch_size
        self.doctor = Doctor()
        self._exported: Path | None = None
        self._export_error: Exception | None = None
        self._fused: Path | None = None
        self._fusion_tried = False
        self._calibration_reference: np.ndarray | None = None
        self.baseline_predictor: Callable[[Batch], np.ndarray] | None = None
        self._files = 0

    def path(self, name: str) -> Path:
        return self.directory / name

    def fresh_path(self, stem: str, suffix: str) -> Path:
        """A file name under the scratch directory that no earlier variant used."""
        self._files += 1
        return self.path(f"{stem}-{self._files}{suffix}")

    def fresh_module(self) -> Any:
        """A deep copy of the FP32 model, safe to quantize or prune in place."""
        if self.source.module is None:
            raise VariantSkipped("the model is an ONNX file: PyTorch variants need the PyTorch model")
        return copy.deepcopy(self.source.module)

    def calibration_reference(self) -> np.ndarray:
        """The FP32 baseline's outputs on the calibration examples (for sensitivity analysis)."""
        if self._calibration_reference is None:
            if self.baseline_predictor is None:
                raise ComputewiseError("the baseline must be measured before any other variant")
            self._calibration_reference = predict_all(self.baseline_predictor, self.calibration, self.batch_size)
        return self._calibration_reference

    # ---- ONNX export -------------------------------------------------------------------------

    def exported(self) -> Path:
        """The model as ONNX: the user's file, or our export with dynamic batch and sequence axes."""
        if self.source.onnx_path is not None:
            self.doctor.exporter = "none: the user's ONNX file"
            return self.source.onnx_path
        if self._export_error is not None:  # failed once: every ONNX variant fails with the same reason
            raise self._export_error
        if self._exported is None:
            try:
                if self.source.fusion:
                    self._exported = self._export_for_fusion()
                else:
                    self.doctor.exporter = "torchscript"
                    self.doctor.notes.append("no attention to fuse in this architecture")
                    self._exported = self.export_module(self.fresh_module(), self.path("model.onnx"), dynamo=False)
            except Exception as error:
                self._export_error = error
                raise
        return self._exported

    def export_module(self, module: Any, target: Path, dynamo: bool) -> Path:
        """Export ``module`` with every input's first axis (and text's second) dynamic."""
        import torch

        example = self.source.feed.batch(range(min(2, len(self.source.feed))))
        tensors = tuple(torch.from_numpy(array) for array in example.values())
        names = list(example)
        text = self.source.is_text
        axes = {name: ({0: "batch", 1: "sequence"} if text else {0: "batch"}) for name in names}
        options: dict[str, Any]
        if dynamo:
            batch, sequence = torch.export.Dim("batch"), torch.export.Dim("sequence")
            options = {"dynamic_shapes": tuple({0: batch, 1: sequence} if text else {0: batch} for _ in names)}
        else:
            options = {"dynamic_axes": axes | {"output": {0: "batch"}}, "opset_version": 17}
        with quiet_tools():
            torch.onnx.export(
                module, tensors, str(target), input_names=names, output_names=["output"], dynamo=dynamo, **options
            )
        return target

    def _export_for_fusion(self) -> Path:
        """Export, fuse, count; re-export with the TorchScript exporter when attention did not fuse."""
        default = self.path("model-dynamo.onnx")
        try:
            self.export_module(self.fresh_module(), default, dynamo=True)
            counts = self.fuse(default, self.path("model-dynamo-fused.onnx"))
        except Exception as error:  # exporters and the optimizer raise many types; all mean "try the other way"
            counts = None
            self.doctor.notes.append(f"the default (dynamo) exporter failed: {first_line(error)}")
        if counts is not None and counts.get("Attention", 0) + counts.get("MultiHeadAttention", 0) > 0:
            self.doctor.exporter = "dynamo"
            self._fused = self.path("model-dynamo-fused.onnx")
            return default
        if counts is not None:
            self.doctor.notes.append(
                "the default (dynamo) exporter's graph let ONNX Runtime fuse no attention "
                f"(fused: {_counts_text(counts)}); re-exported with the TorchScript exporter and eager attention"
            )
        plain = self.export_module(self._export_copy(), self.path("model.onnx"), dynamo=False)
        self.doctor.exporter = "torchscript (eager attention)"
        return plain

    def _export_copy(self) -> Any:
        builder = self.source.export_module
        return builder() if builder is not None else self.fresh_module()

    def fused(self) -> Path | None:
        """The transformer-fused graph, or None when the architecture has no fusions we know."""
        exported = self.exported()
        if self._fused is None and not self._fusion_tried and self.source.fusion is not None:
            self._fusion_tried = True
            target = self.path("model-fused.onnx")
            try:
                counts = self.fuse(exported, target)
            except Exception as error:  # the optimizer's failures are many and undocumented
                self.doctor.notes.append(f"ONNX Runtime's transformer optimizer failed: {first_line(error)}")
                return None
            self.doctor.fused_operators = counts
            self.doctor.attention_fused = counts.get("Attention", 0) + counts.get("MultiHeadAttention", 0) > 0
            if not self.doctor.attention_fused:
                self.doctor.notes.append("attention was not fused: expect little gain from the fused graph")
            self._fused = target
        elif self._fused is not None and not self.doctor.fused_operators:
            self.doctor.fused_operators = _fused_counts(self._fused)
            self.doctor.attention_fused = self.doctor.fused_operators.get("Attention", 0) > 0
        return self._fused

    def fuse(self, model: Path, target: Path) -> dict[str, int]:
        """Run ONNX Runtime's transformer optimizer; the saved graph must load in a session."""
        from onnxruntime.transformers.optimizer import optimize_model

        from computewise.optimize.predictors import ort_session

        hint = self.source.fusion
        if hint is None:
            raise VariantSkipped("no transformer fusions are known for this architecture")
        with quiet_tools():
            optimized = optimize_model(
                str(model), model_type=hint.model_type, num_heads=hint.num_heads, hidden_size=hint.hidden_size
            )
            optimized.save_model_to_file(str(target))
        ort_session(str(target), ["CPUExecutionProvider"], threads=1)  # an invalid graph fails here, not later
        return _fused_counts(target)


@contextlib.contextmanager
def quiet_tools() -> Iterator[None]:
    """Exporters and quantizers print, warn and log as they go (per missing torchvision op, "consider
    pre-processing"...); the report says what matters, so their chatter is held back while they run."""
    loggers = [logging.getLogger(), logging.getLogger("torch.onnx")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def _fused_counts(path: Path) -> dict[str, int]:
    import onnx

    counts = Counter(node.op_type for node in onnx.load(str(path)).graph.node)
    return {op: counts[op] for op in FUSED_OPERATORS if counts[op]}


def _counts_text(counts: dict[str, int]) -> str:
    return ", ".join(f"{count} {op}" for op, count in counts.items() if count) or "nothing"


def first_line(error: BaseException) -> str:
    """An error as one short line for a variant's reason: its type and the first line of its message."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0][:300]}" if text else type(error).__name__
