"""The artifact manifest as a type: manifests written before it was one (``data/manifest-*.json``, one per
format, as ``write_artifact`` wrote them) still read, and are written again byte for byte; a manifest with a
field of the wrong type is refused naming the field and the file, by ``computewise serve`` too (exit 2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from computewise.errors import InputError
from computewise.optimize.manifest import ArtifactManifest

DATA = Path(__file__).parent / "data"
ONNX, TORCHSCRIPT = DATA / "manifest-onnx.json", DATA / "manifest-torchscript.json"


@pytest.mark.parametrize("path", [ONNX, TORCHSCRIPT], ids=["onnx", "torchscript"])
def test_a_manifest_written_before_it_was_typed_reads_and_writes_back_byte_for_byte(
    path: Path, json_schema: Callable[[object, str], None]
) -> None:
    text = path.read_text()
    manifest = ArtifactManifest.from_dict(json.loads(text), str(path))
    assert json.dumps(manifest.to_dict(), indent=2) + "\n" == text
    json_schema(manifest.to_dict(), "artifact-manifest")
    assert manifest.inputs[0].name == "input_0" and manifest.inputs[0].shape == ("batch", 64)
    assert manifest.speeds[0].batch_size == 1 and manifest.speedup is not None


def test_each_format_reads_its_own_keys_and_leaves_the_others_empty() -> None:
    onnx = ArtifactManifest.from_dict(json.loads(ONNX.read_text()), str(ONNX))
    assert (onnx.format, onnx.providers, onnx.graph_optimization_level) == ("onnx", ("CPUExecutionProvider",), "all")
    assert onnx.outputs[0].shape == ("batch", 10) and onnx.torch_recipe == {} and onnx.positional is None
    program = ArtifactManifest.from_dict(json.loads(TORCHSCRIPT.read_text()), str(TORCHSCRIPT))
    assert (program.format, program.dtype, program.device) == ("torchscript", "float32", "cpu") and program.positional
    assert program.torch_recipe["quantize"] == "dynamic-int8" and program.outputs == () and program.providers == ()


@pytest.mark.parametrize(
    ("key", "value", "named"),
    [
        ("batch_invariant", "yes", "batch_invariant must be true or false, got 'yes'"),
        ("inputs", [{"name": "input_0", "dtype": "tensor(float)", "shape": ["batch", 6.5]}], "inputs[0].shape[1]"),
        ("quality", {"metric": "accuracy", "value": "0.98"}, "quality.value must be a number, got '0.98'"),
    ],
)
def test_a_wrong_typed_field_is_refused_naming_it_and_the_file(key: str, value: object, named: str) -> None:
    data = json.loads(ONNX.read_text()) | {key: value}
    with pytest.raises(InputError) as refused:
        ArtifactManifest.from_dict(data, str(ONNX))
    assert str(refused.value).startswith(f"{ONNX}: ") and named in str(refused.value)


def test_serve_refuses_an_artifact_whose_manifest_is_malformed(tmp_path: Path) -> None:
    artifact = tmp_path / "artifact"
    artifact.mkdir()
    (artifact / "manifest.json").write_text(json.dumps(json.loads(ONNX.read_text()) | {"sha256": 42}))
    command = [sys.executable, "-m", "computewise.cli.app", "serve", str(artifact), "--port", "0"]
    env = {**os.environ, "COMPUTEWISE_DB": str(tmp_path / "ledger.sqlite"), "COLUMNS": "400"}  # paths unwrapped
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120, check=False)
    stderr = " ".join(done.stderr.split())
    assert done.returncode == 2, done.stderr
    assert f"{artifact / 'manifest.json'}: sha256 must be a string, got 42" in stderr and "Traceback" not in stderr
