"""The exported artifact: complete or absent, checked on load, never written over foreign files, and
self-contained: every kind of variant the search can choose still serves after its directory moves."""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("torch")

from computewise.errors import InputError, ModelConfigError
from computewise.optimize import artifact as artifact_module
from computewise.optimize.artifact import load_artifact, write_artifact
from computewise.optimize.quality import load_metric, parse_drop
from computewise.optimize.search import SearchOptions, SearchResult, choose, run_search
from computewise.optimize.source import ModelSource
from computewise.serve.runners import load_runner

pytestmark = pytest.mark.torch

# one variant of each kind the search can choose on a CPU: an ONNX graph, and PyTorch saved as TorchScript
EXPORTABLE = ("ort-int8-s8-tensor", "pytorch-int8-dynamic", "pytorch-prune-structured-20")


@pytest.fixture(scope="module")
def search(digits_source: ModelSource, tmp_path_factory: pytest.TempPathFactory) -> SearchResult:
    source = digits_source
    metric = load_metric("examples.digits:accuracy", source.task, parse_drop("1%"))
    options = SearchOptions(only=EXPORTABLE, bench_items=64)
    return run_search(source, metric, options, tmp_path_factory.mktemp("digits-search"))


def test_export_then_load_predicts_what_was_graded(
    search: SearchResult, tmp_path: Path, json_schema: Callable[[object, str], None]
) -> None:
    from examples.digits import _split  # the held-out images the metric graded

    variant = search.variant("ort-int8-s8-tensor")
    out = write_artifact(search, variant, tmp_path / "model")
    loaded = load_artifact(out)
    manifest = json.loads((out / "manifest.json").read_text())
    json_schema(manifest, "artifact-manifest")
    assert manifest["format"] == "onnx" and manifest["recipe"] == variant.recipe and manifest["schema_version"] == 1
    assert loaded.manifest.to_dict() == manifest  # the typed manifest load_artifact read is the one written
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


def _moved(out: Path, elsewhere: Path) -> Path:
    """The artifact directory moved under another directory, the way a user copies it to a server."""
    elsewhere.mkdir()
    return Path(shutil.move(str(out), str(elsewhere / "served")))


@pytest.mark.parametrize("name", EXPORTABLE)
def test_every_choosable_kind_serves_from_wherever_its_directory_moves(
    search: SearchResult, tmp_path: Path, name: str, json_schema: Callable[[object, str], None]
) -> None:
    from examples.digits import _split

    variant = search.variant(name)
    assert variant.status == "ok" and variant.exportable, variant.reason
    moved = _moved(write_artifact(search, variant, tmp_path / "model"), tmp_path / "elsewhere")
    assert not (tmp_path / "model").exists()
    manifest = json.loads((moved / "manifest.json").read_text())
    json_schema(manifest, "artifact-manifest")
    assert manifest["format"] == ("onnx" if name.startswith("ort-") else "torchscript")
    assert manifest["inputs"][0]["name"] == "input_0" and manifest["inputs"][0]["shape"] == ["batch", 64]
    runner = load_runner(str(moved))  # what ``computewise serve DIR`` loads
    _x_train, x_test, _y_train, y_test = _split()
    items = [runner.validate(row) for row in x_test.tolist()]  # JSON lists of floats, as a client sends them
    logits = np.asarray(runner.run(items))
    accuracy = float((logits.argmax(axis=1) == y_test).mean())
    assert variant.quality is not None and accuracy == pytest.approx(variant.quality.value, abs=1e-9)


def test_load_artifact_takes_a_path_or_a_string(search: SearchResult, tmp_path: Path) -> None:
    out = write_artifact(search, search.variant("pytorch-int8-dynamic"), tmp_path / "model")
    images = np.zeros((2, 64), dtype=np.float32)
    by_path, by_text = load_artifact(out), load_artifact(str(out))
    assert np.array_equal(by_path.predict({"input_0": images}), by_text.predict({"input_0": images}))


def test_a_variant_with_no_file_to_serve_is_never_chosen_nor_exported(search: SearchResult, tmp_path: Path) -> None:
    # whether a variant beats the baseline on a busy 2-core machine is chance: replay the search with the
    # baseline untimed, so the fastest variant inside the budget is chosen whatever the timings were
    untimed = [dataclasses.replace(v, speeds=[]) if v.name == "baseline" else v for v in search.variants]
    timed_search = dataclasses.replace(search, variants=untimed)
    chosen = choose(timed_search)
    assert chosen is not None and chosen.built is not None
    # the same measurements, but the winner now has no file serve could load (as torch.compile has none)
    unservable = dataclasses.replace(chosen, built=dataclasses.replace(chosen.built, export_blocker="no file"))
    others = [unservable if v is chosen else v for v in timed_search.variants]
    replayed = dataclasses.replace(timed_search, variants=others)
    assert choose(replayed) is not unservable
    assert replayed.best_speed is not unservable
    with pytest.raises(InputError, match="cannot be exported: no file"):
        write_artifact(replayed, unservable, tmp_path / "model")
    with pytest.raises(InputError, match="cannot be exported"):
        write_artifact(search, search.variant("baseline"), tmp_path / "model")
    assert not (tmp_path / "model").exists()


def test_an_old_recipe_artifact_is_refused_with_how_to_re_export(search: SearchResult, tmp_path: Path) -> None:
    out = write_artifact(search, search.variant("pytorch-int8-dynamic"), tmp_path / "model")
    manifest = json.loads((out / "manifest.json").read_text())
    (out / "manifest.json").write_text(json.dumps(manifest | {"format": "torch"}))
    with pytest.raises(ModelConfigError, match="PyTorch recipe") as refused:
        load_artifact(out)
    assert refused.value.hint is not None and "computewise optimize" in refused.value.hint


def test_a_manifest_from_a_newer_computewise_is_refused_by_its_version(search: SearchResult, tmp_path: Path) -> None:
    out = write_artifact(search, search.variant("pytorch-int8-dynamic"), tmp_path / "model")
    manifest = json.loads((out / "manifest.json").read_text())
    (out / "manifest.json").write_text(json.dumps(manifest | {"schema_version": 2}))
    with pytest.raises(InputError, match="schema_version 2, this computewise reads up to 1") as refused:
        load_artifact(out)
    assert refused.value.hint is not None and "upgrade computewise" in refused.value.hint
