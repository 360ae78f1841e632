"""Model runners: real artifacts from ``computewise optimize``, entry points and echo; validation names the field."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from computewise.errors import InputError, InvalidInput, ModelConfigError
from computewise.optimize.artifact import load_artifact
from computewise.optimize.manifest import ArtifactManifest, TensorSignature
from computewise.serve.runners import ArtifactRunner, load_runner

pytest.importorskip("onnxruntime")

_EXPORTED_MANIFEST = Path(__file__).parents[1] / "optimize" / "data" / "manifest-onnx.json"


def _invalid(runner: Any, item: Any) -> InvalidInput:
    with pytest.raises(InvalidInput) as caught:
        runner.validate(item)
    return caught.value


# -- text: MiniLM ---------------------------------------------------------------------------------


@pytest.mark.torch
def test_text_artifact_embeds_each_sentence_as_it_would_alone(minilm_artifact: Path, sentences: list[str]) -> None:
    runner = load_runner(str(minilm_artifact), threads=1)
    assert (runner.kind, runner.name) == ("text", minilm_artifact.name)
    mixed = [sentences[0], sentences[8], sentences[6]]  # 17, 55 and 31 tokens: padded to 55 together
    together = runner.run([runner.validate(text) for text in mixed])
    alone = [runner.run([text])[0] for text in mixed]
    assert len(together) == 3 and all(len(vector) == 384 for vector in together)
    assert all(isinstance(value, float) for value in together[0])
    np.testing.assert_allclose(np.array(together), np.array(alone), atol=1e-4)  # padding does not leak
    json.dumps(together)  # JSON-ready as it is
    described = runner.describe()
    assert described["variant"] == "ort-all" and described["kind"] == "text" and described["task"] == "embedding"


@pytest.mark.torch
def test_text_length_is_the_token_count_after_truncation(minilm_artifact: Path) -> None:
    runner = load_runner(str(minilm_artifact), name="minilm", threads=1)
    assert runner.name == "minilm"
    assert runner.length("hello world") == 4  # [CLS] hello world [SEP]
    max_tokens = json.loads((minilm_artifact / "manifest.json").read_text())["max_length"] or 512
    assert runner.length("word " * 5000) == max_tokens


@pytest.mark.torch
@pytest.mark.parametrize(
    ("item", "problem"),
    [
        (5, "expected a string, got int"),
        (["a sentence"], "expected a string, got list"),
        (None, "expected a string, got NoneType"),
        ("", "non-empty"),
        ("   \n", "non-empty"),
        ("bad \ud800 surrogate", "not valid Unicode"),
    ],
)
def test_text_validation_refuses_what_is_not_text(minilm_artifact: Path, item: Any, problem: str) -> None:
    runner = load_runner(str(minilm_artifact), threads=1)
    error = _invalid(runner, item)
    assert problem in error.message and error.field == ""
    assert runner.validate("  fine  ") == "  fine  "


# -- tensors: digits and a two-input graph --------------------------------------------------------


@pytest.mark.torch
def test_tensor_artifact_classifies_digits_like_the_artifact(digits_artifact: Path) -> None:
    from examples.digits import _split  # the held-out images

    runner = load_runner(str(digits_artifact), threads=1)
    assert runner.kind == "tensor"
    images = _split()[1][:5]
    items = [runner.validate(image.tolist()) for image in images]
    logits = runner.run(items)
    assert np.array(logits).shape == (5, 10)
    expected = load_artifact(digits_artifact).predict({"input_0": images})
    np.testing.assert_allclose(np.array(logits), expected, rtol=1e-5, atol=1e-5)
    assert runner.length(items[0]) == 1


@pytest.mark.torch
@pytest.mark.parametrize(
    ("item", "field", "problem"),
    [
        ([0.5] * 63, "", "expected 64 elements (shape [64]), got 63"),
        ([0.5] * 65, "", "got 65"),
        ("0.5", "", "expected a list of 64"),
        ([0.5] * 3 + ["x"] + [0.5] * 60, "[3]", "expected a number, got str"),
        ([0.5] * 10 + [True] + [0.5] * 53, "[10]", "expected a number, got bool"),
        ([[0.5]] + [0.5] * 63, "[0]", "expected a number, got list"),
        ([0.5] * 63 + [1e39], "[63]", "out of the model's range"),
        ([0.5] * 63 + [float("inf")], "[63]", "out of the model's range"),
    ],
)
def test_tensor_validation_names_the_element(digits_artifact: Path, item: Any, field: str, problem: str) -> None:
    runner = load_runner(str(digits_artifact), threads=1)
    error = _invalid(runner, item)
    assert error.field == field
    assert problem in error.message
    assert runner.validate([0] * 32 + [1.0] * 32) == [0] * 32 + [1.0] * 32  # integers are numbers too


def _two_input_artifact(directory: Path) -> Path:
    """A real ONNX graph ``concat(a, float(ids))`` with inputs a: float[batch, 2], ids: int64[batch, 3]."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [
            helper.make_node("Cast", ["ids"], ["ids_float"], to=TensorProto.FLOAT),
            helper.make_node("Concat", ["a", "ids_float"], ["output"], axis=1),
        ],
        "two_inputs",
        [
            helper.make_tensor_value_info("a", TensorProto.FLOAT, ["batch", 2]),
            helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", 3]),
        ],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", 5])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    directory.mkdir()
    onnx.save(model, str(directory / "model.onnx"))
    # every other key as an export writes it
    exported = ArtifactManifest.from_dict(json.loads(_EXPORTED_MANIFEST.read_text()), str(_EXPORTED_MANIFEST))
    manifest = replace(
        exported,
        variant="hand-made",
        task="regressor",
        sha256=hashlib.sha256((directory / "model.onnx").read_bytes()).hexdigest(),
        inputs=(
            TensorSignature("a", "tensor(float)", ("batch", 2)),
            TensorSignature("ids", "tensor(int64)", ("batch", 3)),
        ),
        outputs=(TensorSignature("output", "tensor(float)", ("batch", 5)),),
    )
    (directory / "manifest.json").write_text(json.dumps(manifest.to_dict()))
    return directory


def test_several_graph_inputs_come_as_one_object_per_item(tmp_path: Path) -> None:
    runner = load_runner(str(_two_input_artifact(tmp_path / "two")))
    assert isinstance(runner, ArtifactRunner) and runner.kind == "tensor"
    items = [runner.validate({"a": [0.5, 1.5], "ids": [1, 2, 3]}), runner.validate({"a": [-1, 0], "ids": [7, 8, 9]})]
    assert runner.run(items) == [[0.5, 1.5, 1.0, 2.0, 3.0], [-1.0, 0.0, 7.0, 8.0, 9.0]]
    assert "expected an object" in _invalid(runner, [0.5, 1.5]).message
    missing = _invalid(runner, {"a": [0.5, 1.5]})
    assert (missing.field, missing.message) == ("ids", "missing model input 'ids'")
    unknown = _invalid(runner, {"a": [0.5, 1.5], "ids": [1, 2, 3], "extra": 1})
    assert unknown.field == "extra"
    fractional = _invalid(runner, {"a": [0.5, 1.5], "ids": [1, 2.5, 3]})
    assert (fractional.field, fractional.message) == ("ids[1]", "expected an integer, got 2.5")
    huge = _invalid(runner, {"a": [0.5, 1.5], "ids": [1, 2**64, 3]})
    assert huge.field == "ids[1]" and "out of the model's range" in huge.message


# -- entry points, echo, bad targets --------------------------------------------------------------


def test_entry_point_factory_is_called_once_and_serves_lists(make_module: Callable[[str, str], str]) -> None:
    name = make_module(
        "square_model",
        """
        LOADS = []

        def make():
            LOADS.append(1)
            return lambda inputs: [x * x for x in inputs]
        """,
    )
    runner = load_runner(f"{name}:make")
    assert (runner.kind, runner.name) == ("tensor", "square_model")
    assert runner.validate(3) == 3 and runner.length(3) == 1
    assert runner.run([1, 2, 3]) == [1, 4, 9]
    assert runner.run([4]) == [16]
    import square_model  # type: ignore[import-not-found]

    assert square_model.LOADS == [1]
    assert runner.describe() == {"name": "square_model", "kind": "tensor", "entry_point": "square_model:make"}


def test_entry_point_mistakes_are_named(make_module: Callable[[str, str], str]) -> None:
    name = make_module(
        "broken_models",
        """
        def not_callable():
            return 42

        def short():
            return lambda inputs: inputs[:-1]
        """,
    )
    with pytest.raises(ModelConfigError, match="returned int, not a callable"):
        load_runner(f"{name}:not_callable")
    with pytest.raises(ModelConfigError, match="cannot import"):
        load_runner(f"{name}:missing")
    with pytest.raises(ModelConfigError, match="cannot import"):
        load_runner("no_such_module_anywhere:make")
    with pytest.raises(ModelConfigError, match="returned 1 outputs for 2 inputs"):
        load_runner(f"{name}:short").run([1, 2])


def test_echo_returns_its_inputs() -> None:
    runner = load_runner("echo")
    assert (runner.kind, runner.name) == ("echo", "echo")
    payload = [{"any": ["json", 1]}, "text", 3.5]
    assert runner.run([runner.validate(item) for item in payload]) == payload


def test_a_target_that_is_nothing_servable_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="neither an artifact directory"):
        load_runner(str(tmp_path / "missing"))
    with pytest.raises(ModelConfigError, match="not a computewise artifact"):
        load_runner(str(tmp_path))
