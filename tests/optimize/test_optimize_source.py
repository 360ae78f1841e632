"""MODEL as users give it, good and bad: every malformed input must stop with a ModelConfigError or
InputError (exit 2 and a fix) before any variant is built, never with a library's traceback."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from computewise.errors import InputError, ModelConfigError
from computewise.optimize.feeds import TensorFeed, TextFeed
from computewise.optimize.source import ModelSource, load_source

MakeModule = Callable[[str, str], str]
SENTENCES = Path(__file__).resolve().parents[2] / "examples" / "sentences.txt"
# everything of the MiniLM directory but its weights
MINILM_FILES = (
    "config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.txt",
    "special_tokens_map.json",
    "modules.json",
    "sentence_bert_config.json",
)


def _minilm_without_weights(minilm_dir: Path, target: Path) -> Path:
    target.mkdir()
    for name in MINILM_FILES:
        shutil.copy(minilm_dir / name, target / name)
    shutil.copytree(minilm_dir / "1_Pooling", target / "1_Pooling")
    return target


# -- what kind of model ------------------------------------------------------------------------


def test_unknown_task_is_an_input_error() -> None:
    with pytest.raises(InputError, match="unknown task 'ranking'"):
        load_source("anything", None, "ranking")


def test_a_name_that_is_nothing_we_know_is_a_model_config_error(tmp_path: Path) -> None:
    with pytest.raises(ModelConfigError, match="cannot tell what model"):
        load_source(str(tmp_path / "model.bin"), None, None)


def test_a_missing_onnx_file_is_a_model_config_error(tmp_path: Path) -> None:
    with pytest.raises(ModelConfigError, match="does not exist"):
        load_source(str(tmp_path / "model.onnx"), None, None)


# -- Hugging Face directories ------------------------------------------------------------------


def test_a_directory_without_config_json_is_not_a_hugging_face_model(tmp_path: Path) -> None:
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    with pytest.raises(ModelConfigError, match=r"has no config\.json"):
        load_source(str(tmp_path), SENTENCES, None)


def test_a_config_json_that_is_not_json(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{'model_type': 'bert',")
    with pytest.raises(ModelConfigError, match=r"config\.json is not valid JSON"):
        load_source(str(tmp_path), SENTENCES, None)


def test_a_text_model_needs_sample_sentences(minilm_dir: Path) -> None:
    with pytest.raises(InputError, match="is a text model and needs sample sentences") as caught:
        load_source(str(minilm_dir), None, None)
    assert "--inputs sentences.txt" in str(caught.value.hint)


def test_a_text_model_with_too_few_sentences(minilm_dir: Path, tmp_path: Path) -> None:
    few = tmp_path / "few.txt"
    few.write_text("one sentence\nand another\n")
    with pytest.raises(InputError, match="holds 2 sentences"):
        load_source(str(minilm_dir), few, None)


@pytest.mark.torch
def test_a_directory_without_weights_is_a_model_config_error(minilm_dir: Path, tmp_path: Path) -> None:
    model = _minilm_without_weights(minilm_dir, tmp_path / "minilm")
    with pytest.raises(ModelConfigError, match="cannot load the model"):
        load_source(str(model), SENTENCES, None)


@pytest.mark.torch
@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_corrupt_weights_are_a_model_config_error(minilm_dir: Path, tmp_path: Path, damage: str) -> None:
    model = _minilm_without_weights(minilm_dir, tmp_path / "minilm")
    weights = (minilm_dir / "model.safetensors").read_bytes()
    (model / "model.safetensors").write_bytes(b"not a safetensors file" if damage == "garbage" else weights[:1_000_000])
    with pytest.raises(ModelConfigError, match="cannot load the model"):
        load_source(str(model), SENTENCES, None)


@pytest.mark.torch
def test_minilm_is_an_embedding_model_with_fusable_attention(minilm_source: ModelSource, minilm_dir: Path) -> None:
    assert minilm_source.kind == "hf"
    assert minilm_source.task == "embedding"
    assert minilm_source.is_text
    assert isinstance(minilm_source.feed, TextFeed)
    assert minilm_source.fusion is not None
    assert (minilm_source.fusion.model_type, minilm_source.fusion.num_heads, minilm_source.fusion.hidden_size) == (
        "bert",
        12,
        384,
    )
    assert minilm_source.max_length == 256  # sentence_bert_config.json's max_seq_length
    assert minilm_source.tokenizer_dir == minilm_dir
    assert minilm_source.notes == ["embedding = mean pooling + L2 normalize"]
    assert minilm_source.module is not None and not minilm_source.module.training


@pytest.mark.torch
def test_max_length_truncates_long_sentences(minilm_dir: Path) -> None:
    source = load_source(str(minilm_dir), SENTENCES, "embedding", max_length=8)
    assert source.max_length == 8
    assert source.feed.lengths().max() == 8


# -- entry points ------------------------------------------------------------------------------


@pytest.mark.torch
def test_digits_entry_point_is_a_classifier(digits_source: ModelSource) -> None:
    assert digits_source.kind == "entry-point"
    assert digits_source.task == "classifier"
    assert digits_source.positional
    assert isinstance(digits_source.feed, TensorFeed)
    assert digits_source.feed.input_names == ("input_0",)
    assert digits_source.feed.arrays["input_0"].shape == (540, 64)
    assert digits_source.onnx_path is None and digits_source.fusion is None


@pytest.mark.torch
@pytest.mark.parametrize(
    ("body", "task"),
    [
        ("torch.nn.Linear(4, 1)", "regressor"),
        ("torch.nn.Sequential(torch.nn.Linear(4, 5), Normalize())", "embedding"),
        ("torch.nn.Linear(4, 5)", "classifier"),
    ],
)
def test_task_is_guessed_from_the_outputs(make_module: MakeModule, body: str, task: str) -> None:
    name = make_module(
        f"optimize_source_guess_{task}",
        f"""
        import torch

        class Normalize(torch.nn.Module):
            def forward(self, x):
                return torch.nn.functional.normalize(x, dim=-1)

        def model():
            torch.manual_seed(0)
            return {body}, torch.randn(16, 4)
        """,
    )
    assert load_source(f"{name}:model", None, None).task == task


@pytest.mark.torch
def test_keyword_inputs_keep_their_names(make_module: MakeModule) -> None:
    name = make_module(
        "optimize_source_keywords",
        """
        import torch

        class Sum(torch.nn.Module):
            def forward(self, left, right):
                return torch.stack([left.sum(-1), right.sum(-1)], dim=-1)

        def model():
            return Sum(), {"left": torch.ones(10, 3), "right": torch.zeros(10, 2)}
        """,
    )
    source = load_source(f"{name}:model", None, "classifier")
    assert not source.positional
    assert source.feed.input_names == ("left", "right")


@pytest.mark.torch
@pytest.mark.parametrize(
    ("tag", "returned", "problem"),
    [
        ("string", '"a model"', "must return \\(nn.Module, example_inputs\\), got str"),
        ("module_only", "torch.nn.Linear(4, 2)", "got Linear"),
        ("swapped", "(torch.randn(8, 4), torch.nn.Linear(4, 2))", "got tuple"),
        ("lists", "(torch.nn.Linear(4, 2), [[0.0] * 4] * 8)", "example inputs that are not tensors"),
        ("empty", "(torch.nn.Linear(4, 2), {})", "example inputs that are not tensors"),
    ],
)
def test_an_entry_point_returning_the_wrong_thing(
    make_module: MakeModule, tag: str, returned: str, problem: str
) -> None:
    name = make_module(
        f"optimize_source_wrong_{tag}",
        f"""
        import torch

        def model():
            return {returned}
        """,
    )
    with pytest.raises(ModelConfigError, match=problem):
        load_source(f"{name}:model", None, None)


@pytest.mark.torch
def test_an_entry_point_that_cannot_be_imported() -> None:
    with pytest.raises(ModelConfigError, match=r"cannot import the model optimize_no_such_package\.models:build"):
        load_source("optimize_no_such_package.models:build", None, None)


@pytest.mark.torch
def test_an_entry_point_with_too_few_examples(make_module: MakeModule) -> None:
    name = make_module(
        "optimize_source_few",
        """
        import torch

        def model():
            return torch.nn.Linear(4, 2), torch.randn(4, 4)
        """,
    )
    with pytest.raises(InputError, match="gives 4 examples; the search needs at least 8"):
        load_source(f"{name}:model", None, None)


@pytest.mark.torch
def test_entry_point_inputs_from_an_npz_must_be_named_after_the_models(make_module: MakeModule, tmp_path: Path) -> None:
    name = make_module(
        "optimize_source_npz",
        """
        import torch

        def model():
            return torch.nn.Linear(4, 2), torch.randn(8, 4)
        """,
    )
    good, bad = tmp_path / "good.npz", tmp_path / "bad.npz"
    np.savez(good, input_0=np.ones((12, 4), dtype=np.float32))
    np.savez(bad, images=np.ones((12, 4), dtype=np.float32))
    assert len(load_source(f"{name}:model", good, "classifier").feed) == 12
    with pytest.raises(ModelConfigError, match=r"hold arrays \['images'\], the model takes \['input_0'\]"):
        load_source(f"{name}:model", bad, "classifier")


# -- ONNX files --------------------------------------------------------------------------------


def test_a_garbage_onnx_file_is_a_model_config_error(tmp_path: Path) -> None:
    pytest.importorskip("onnx")
    path = tmp_path / "model.onnx"
    path.write_bytes(b"\x08\x07garbage, not a protobuf" * 10)
    inputs = tmp_path / "inputs.npz"
    np.savez(inputs, x=np.zeros((8, 4), dtype=np.float32))  # a missing file would be refused first
    with pytest.raises(ModelConfigError, match="cannot read ONNX model"):
        load_source(str(path), inputs, None)


def test_an_onnx_file_needs_inputs_named_after_its_graph(linear_onnx: Path, tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"pass --inputs examples\.npz with arrays named x"):
        load_source(str(linear_onnx), None, None)
    wrong = tmp_path / "wrong.npz"
    np.savez(wrong, input_ids=np.ones((10, 4), dtype=np.float32))
    with pytest.raises(ModelConfigError, match=r"hold arrays \['input_ids'\], the model takes \['x'\]"):
        load_source(str(linear_onnx), wrong, None)
    text = tmp_path / "sentences.txt"
    text.write_text("a sentence\n" * 10)
    with pytest.raises(InputError, match=r"must be an \.npz"):  # no tokenizer beside the file
        load_source(str(linear_onnx), text, None)


def test_an_unreadable_npz_is_an_input_error(linear_onnx: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken.npz"
    broken.write_bytes(b"PK not really a zip")
    with pytest.raises(InputError, match="cannot read inputs"):
        load_source(str(linear_onnx), broken, None)


def test_an_onnx_file_with_matching_inputs_gets_its_task_from_onnx_runtime(linear_onnx: Path, tmp_path: Path) -> None:
    inputs = tmp_path / "inputs.npz"
    np.savez(inputs, x=np.random.default_rng(0).normal(size=(12, 4)).astype(np.float32))
    source = load_source(str(linear_onnx), inputs, None)
    assert (source.kind, source.task, source.onnx_path, source.module) == ("onnx", "classifier", linear_onnx, None)
    assert len(source.feed) == 12
    assert load_source(str(linear_onnx), inputs, "regressor").task == "regressor"
