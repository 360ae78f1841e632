"""The exported artifact: complete or absent, checked on load, never written over foreign files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("torch")

from computewise.errors import InputError, ModelConfigError
from computewise.optimize import artifact as artifact_module
from computewise.optimize.artifact import load_artifact, write_artifact
from computewise.optimize.quality import load_metric, parse_drop
from computewise.optimize.search import SearchOptions, SearchResult, run_search
from computewise.optimize.source import load_source

pytestmark = pytest.mark.torch

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def search(tmp_path_factory: pytest.TempPathFactory) -> SearchResult:
    import sys

    sys.path.insert(0, str(ROOT))
    source = load_source("examples.digits:classifier", None, None)
    metric = load_metric("examples.digits:accuracy", source.task, parse_drop("1%"))
    options = SearchOptions(only=("ort-int8-s8-tensor", "pytorch-int8-dynamic"), bench_items=64)
    return run_search(source, metric, options, tmp_path_factory.mktemp("digits-search"))


def test_export_then_load_predicts_what_was_graded(search: SearchResult, tmp_path: Path) -> None:
    from examples.digits import _split  # the held-out images the metric graded

    variant = search.variant("ort-int8-s8-tensor")
    out = write_artifact(search, variant, tmp_path / "model")
    loaded = load_artifact(out)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["format"] == "onnx" and manifest["recipe"] == variant.recipe
    _x_train, x_test, _y_train, y_test = _split()
    accuracy = float((loaded.predict({"input_0": x_test}).argmax(axis=1) == y_test).mean())
    assert variant.quality is not None and accuracy == pytest.approx(variant.quality.value, abs=1e-9)


def test_re_export_replaces_an_earlier_artifact_and_leaves_no_staging(search: SearchResult, tmp_path: Path) -> None:
    out = tmp_path / "model"
    write_artifact(search, search.variant("ort-int8-s8-tensor"), out)
    write_artifact(search, search.variant("ort-int8-s8-tensor"), out, forced=True)
    assert json.loads((out / "manifest.json").read_text())["forced"] is True
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_foreign_directory_is_never_overwritten(search: SearchResult, tmp_path: Path) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    with pytest.raises(InputError, match="not a computewise artifact"):
        write_artifact(search, search.variant("ort-int8-s8-tensor"), out)
    assert [p.name for p in out.iterdir()] == ["notes.txt"]


def test_interrupted_export_leaves_nothing(
    search: SearchResult, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(model_file: Path) -> None:
        raise KeyboardInterrupt  # Ctrl-C after the model file was copied, before the manifest

    monkeypatch.setattr(artifact_module, "_signature", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_artifact(search, search.variant("ort-int8-s8-tensor"), tmp_path / "model")
    assert list(tmp_path.iterdir()) == []


def test_a_modified_model_file_is_refused(search: SearchResult, tmp_path: Path) -> None:
    out = write_artifact(search, search.variant("ort-int8-s8-tensor"), tmp_path / "model")
    with (out / "model.onnx").open("ab") as file:
        file.write(b"\0")
    with pytest.raises(ModelConfigError, match="checksum"):
        load_artifact(out)


def test_a_pytorch_winner_is_exported_as_a_recipe(search: SearchResult, tmp_path: Path) -> None:
    out = write_artifact(search, search.variant("pytorch-int8-dynamic"), tmp_path / "model")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["format"] == "torch" and manifest["torch_recipe"]["quantize"] == "dynamic-int8"
    with pytest.raises(ModelConfigError, match="PyTorch recipe"):
        load_artifact(out)
    assert np.isfinite(manifest["quality"]["value"])
