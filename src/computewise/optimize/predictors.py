"""Running a built variant: one call per batch, NumPy in and out, whatever the runtime.

Every variant, PyTorch or ONNX Runtime, is wrapped as a ``Predictor`` so that evaluation,
benchmarks and the user's metric see one interface and cannot favour a runtime by accident.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from computewise.optimize.feeds import Batch, Feed, batches_of

__all__ = ["OrtPredictor", "Predictor", "ProgramPredictor", "TorchPredictor", "ort_session", "predict_all"]


class Predictor(Protocol):
    def __call__(self, batch: Batch) -> np.ndarray: ...


@dataclass
class TorchPredictor:
    """An ``nn.Module`` called with keyword (named inputs) or positional (``input_0``...) tensors."""

    module: Any
    positional: bool
    device: str = "cpu"
    autocast_dtype: Any = None

    def __call__(self, batch: Batch) -> np.ndarray:
        import torch

        tensors = {name: torch.from_numpy(np.ascontiguousarray(array)).to(self.device) for name, array in batch.items()}
        with torch.inference_mode():
            if self.autocast_dtype is not None:
                with torch.autocast(self.device.split(":")[0], dtype=self.autocast_dtype):
                    output = self._call(tensors)
            else:
                output = self._call(tensors)
        return np.asarray(output.detach().float().cpu().numpy())

    def _call(self, tensors: dict[str, Any]) -> Any:
        if self.positional:
            return self.module(*tensors.values())
        return self.module(**tensors)


class ProgramPredictor:
    """A saved TorchScript program, loaded from its file and fed its inputs in the order it was traced with.

    The search times this (not the eager module it was traced from), so the speed in the report is
    the speed of the file the artifact ships.
    """

    def __init__(
        self,
        path: str,
        input_names: Sequence[str],
        positional: bool,
        device: str = "cpu",
        input_types: Sequence[str] | None = None,
    ) -> None:
        import torch

        with warnings.catch_warnings():
            # recent torch marks TorchScript deprecated in favour of torch.export; it still loads every program
            # the search saves (dynamic INT8 included), and the warning would only reach serve's users
            warnings.simplefilter("ignore", DeprecationWarning)
            self.program = torch.jit.load(path, map_location=device)  # type: ignore[no-untyped-call]
        self.program.eval()
        self.input_names = tuple(input_names)
        self.positional = positional
        self.device = device
        # inputs that came as JSON (float64, int64 lists) are cast to what the program was traced with
        types: Sequence[str | None] = input_types or [None] * len(self.input_names)
        self._dtypes = [_ORT_DTYPES.get(kind) if kind else None for kind in types]

    def __call__(self, batch: Batch) -> np.ndarray:
        import torch

        tensors = [
            torch.from_numpy(np.ascontiguousarray(batch[name], dtype=dtype)).to(self.device)
            for name, dtype in zip(self.input_names, self._dtypes, strict=True)
        ]
        with torch.inference_mode():
            if self.positional:
                output = self.program(*tensors)
            else:
                output = self.program(**dict(zip(self.input_names, tensors, strict=True)))
        return np.asarray(output.detach().float().cpu().numpy())


def ort_session(path: str, providers: Sequence[str], threads: int, level: str = "all") -> Any:
    """An ONNX Runtime session with ``threads`` intra-op threads at a graph-optimization level."""
    import onnxruntime as ort

    ort.set_default_logger_severity(3)  # errors only: its warnings about unused initializers are not the user's
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = {
        "disabled": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }[level]
    options.log_severity_level = 3
    return ort.InferenceSession(path, options, providers=list(providers))


_ORT_DTYPES = {
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(double)": np.float64,
    "tensor(bool)": np.bool_,
}


class OrtPredictor:
    """An ONNX Runtime session fed only the inputs its graph kept, cast to the types it declares.

    Exporters drop inputs the graph does not use (``token_type_ids`` of a model that ignores it),
    so the feed may carry more than the session takes.
    """

    def __init__(self, session: Any) -> None:
        self.session = session
        self._inputs = [(item.name, _ORT_DTYPES.get(item.type, np.float32)) for item in session.get_inputs()]

    def __call__(self, batch: Batch) -> np.ndarray:
        feed: dict[str, np.ndarray] = {
            name: np.ascontiguousarray(batch[name], dtype=dtype) for name, dtype in self._inputs
        }
        return np.asarray(self.session.run(None, feed)[0], dtype=np.float32)


def predict_all(
    predictor: Callable[[Batch], np.ndarray], feed: Feed, batch_size: int, by_length: bool = True
) -> np.ndarray:
    """Outputs for every example of ``feed`` in its own order, however they were batched."""
    parts: list[np.ndarray] = []
    order: list[int] = []
    for indices in batches_of(feed, batch_size, by_length):
        parts.append(predictor(feed.batch(indices)))
        order.extend(indices)
    stacked = np.concatenate(parts)
    result = np.empty_like(stacked)
    result[np.asarray(order)] = stacked
    return result
