"""The exported variant: one directory with the model, its tokenizer and a manifest, written atomically.

``computewise serve`` loads what this writes, so nothing half-written may ever sit at the target:
the directory is assembled under a hidden sibling name and renamed into place; a previous artifact
is swapped out only after the new one is complete, and a directory that is not an artifact is never
overwritten. The manifest records the SHA-256 of the model file, and ``load_artifact`` refuses a
model that does not match it. The manifest is a typed ``ArtifactManifest`` (``optimize.manifest``),
written and read by ``specs.codec``, so a malformed one is refused naming the field and the file.

Every artifact is self-contained: an ONNX winner carries its graph, a PyTorch winner (BF16 on a
CPU with AMX, say) its TorchScript program in its own dtype, the very file the search timed. Nothing
points back at the source model, so the directory can be moved or copied to another machine and
``computewise serve`` still loads it. A variant with no such file (``torch.compile``) is never
chosen, and exporting it is refused.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from computewise import __version__
from computewise.errors import InputError, MissingExtraError, ModelConfigError
from computewise.optimize.feeds import Batch, TextFeed
from computewise.optimize.manifest import MANIFEST_VERSION, ArtifactManifest, ManifestQuality, TensorSignature
from computewise.optimize.predictors import OrtPredictor, ProgramPredictor, ort_session
from computewise.optimize.search import SearchResult, VariantResult
from computewise.specs.document import require_object
from computewise.system.cpu import usable_cpus

__all__ = ["MANIFEST_NAME", "MANIFEST_VERSION", "Artifact", "load_artifact", "write_artifact"]

MANIFEST_NAME = "manifest.json"
_PROGRAM_FILE = "model.pt"
_ONNX_FILE = "model.onnx"
# NumPy dtypes of the feed as ONNX spells them, so both formats describe their inputs alike
_SIGNATURE_DTYPES = {
    "int64": "tensor(int64)",
    "int32": "tensor(int32)",
    "float32": "tensor(float)",
    "bool": "tensor(bool)",
}
_TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
    "added_tokens.json",
    "spiece.model",
    "sentencepiece.bpe.model",
)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _versions() -> dict[str, str]:
    versions = {"computewise": __version__, "python": platform.python_version()}
    for package in ("onnxruntime", "onnx", "torch", "transformers"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            continue
    return versions


def _signature(model_file: Path) -> tuple[tuple[TensorSignature, ...], tuple[TensorSignature, ...]]:
    session = ort_session(str(model_file), ["CPUExecutionProvider"], threads=1)

    def describe(items: Any) -> tuple[TensorSignature, ...]:
        return tuple(TensorSignature(item.name, item.type, tuple(item.shape)) for item in items)

    return describe(session.get_inputs()), describe(session.get_outputs())


def _program_signature(result: SearchResult, names: tuple[str, ...]) -> tuple[TensorSignature, ...]:
    """A TorchScript program's inputs as the feed makes them: batch axis first, text's sequence axis free."""
    example = result.source.feed.batch([0])
    signature = []
    for name in names:
        array = example[name]
        shape = ("batch", *(["sequence"] if result.source.is_text else [int(size) for size in array.shape[1:]]))
        signature.append(TensorSignature(name, _SIGNATURE_DTYPES.get(str(array.dtype), str(array.dtype)), shape))
    return tuple(signature)


def _source_text(description: str) -> str:
    """The source as an absolute path where it is one, so the manifest says where it came from wherever it goes."""
    path = Path(description)
    return str(path.resolve()) if path.exists() else description


def _manifest(result: SearchResult, variant: VariantResult, staging: Path, forced: bool) -> ArtifactManifest:
    """The model file (and tokenizer) copied into ``staging``, and the manifest that describes them."""
    built = variant.built
    if built is None:
        raise InputError(f"variant {variant.name} was not built, so it cannot be exported")
    if not built.exportable or built.model_file is None:
        raise InputError(
            f"variant {variant.name} cannot be exported: {built.export_blocker or 'it has no model file'}",
            "export another variant (--variants), or keep the FP32 model",
        )
    source = result.source
    summary = result.summary()
    row = summary.variant(variant.name)
    onnx = built.format == "onnx"
    model = staging / (_ONNX_FILE if onnx else _PROGRAM_FILE)
    shutil.copyfile(built.model_file, model)
    inputs, outputs = _signature(model) if onnx else (_program_signature(result, built.program_inputs), ())
    return ArtifactManifest(
        manifest_version=MANIFEST_VERSION,
        variant=variant.name,
        format=built.format,
        task=source.task,
        source=_source_text(source.description),
        recipe=row.recipe,
        kept_fp32=row.kept_fp32,
        quality=ManifestQuality(
            result.metric.name, row.quality, row.quality_worst, result.baseline_quality, str(result.metric.budget)
        ),
        meets_budget=variant.meets_budget,
        forced=forced,
        batch_invariant=variant.batch_invariant,
        batching="length-sorted" if isinstance(source.feed, TextFeed) else "arrival",
        speeds=row.speeds,
        speedup=row.speedup,
        hardware=summary.hardware,
        created_by=_versions(),
        created_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        tokenizer=_copy_tokenizer(source.tokenizer_dir, staging),
        max_length=source.max_length,
        file=model.name,
        sha256=_sha256(model),
        providers=row.providers if onnx else (),
        graph_optimization_level=built.graph_level if onnx else None,
        dtype=None if onnx else built.torch_recipe.get("dtype"),
        device=None if onnx else built.torch_recipe.get("device", "cpu"),
        torch_recipe={} if onnx else built.torch_recipe,
        positional=None if onnx else built.program_positional,
        inputs=inputs,
        outputs=outputs,
    )


def _copy_tokenizer(tokenizer_dir: Path | None, staging: Path) -> str | None:
    """The source's tokenizer files copied into the artifact; their folder's name there, None for no tokenizer."""
    if tokenizer_dir is None:
        return None
    target = staging / "tokenizer"
    target.mkdir()
    for name in _TOKENIZER_FILES:
        if (tokenizer_dir / name).is_file():
            shutil.copyfile(tokenizer_dir / name, target / name)
    return target.name


def write_artifact(result: SearchResult, variant: VariantResult, out: Path, forced: bool = False) -> Path:
    """Export ``variant`` to the directory ``out``, all or nothing."""
    out = out.absolute()
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out} is a file", "give a directory path for the exported model")
    previous = out.is_dir() and any(out.iterdir())
    if previous and not (out / MANIFEST_NAME).is_file():
        raise InputError(
            f"--out {out} holds files that are not a computewise artifact; refusing to overwrite them",
            "give a new or empty directory, or the directory of an earlier export",
        )
    if not out.parent.is_dir():
        raise InputError(f"cannot write {out}: {out.parent} does not exist", f"mkdir -p {out.parent}")
    staging = out.parent / f".{out.name}.partial-{os.urandom(4).hex()}"
    staging.mkdir()
    try:
        manifest = _manifest(result, variant, staging, forced)
        (staging / MANIFEST_NAME).write_text(json.dumps(manifest.to_dict(), indent=2) + "\n")
        _swap_into_place(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return out


def _swap_into_place(staging: Path, out: Path) -> None:
    """Rename the finished directory to ``out``; an old artifact is moved aside first and removed after."""
    if not out.exists():
        os.rename(staging, out)
        return
    if not any(out.iterdir()):
        out.rmdir()
        os.rename(staging, out)
        return
    retired = out.parent / f".{out.name}.old-{os.urandom(4).hex()}"
    os.rename(out, retired)
    os.rename(staging, out)
    shutil.rmtree(retired, ignore_errors=True)


@dataclass
class Artifact:
    """A loaded artifact: its manifest and a predictor over raw inputs (sentences or arrays)."""

    directory: Path
    manifest: ArtifactManifest
    run: Callable[[Batch], Any]  # model inputs by name -> outputs, whatever the runtime
    tokenizer: Any = None

    def batch(self, inputs: Any) -> Batch:
        """Model inputs for a list of sentences (text models) or a dict of arrays."""
        import numpy as np

        if self.tokenizer is None:
            return {name: np.asarray(value) for name, value in inputs.items()}

        encoded = self.tokenizer(
            list(inputs),
            padding="longest",
            truncation=True,
            max_length=self.manifest.max_length or 512,
            return_tensors="np",
        )
        return {name: np.asarray(value, dtype=np.int64) for name, value in encoded.items()}

    def predict(self, inputs: Any) -> Any:
        return self.run(self.batch(inputs))


def load_artifact(directory: str | os.PathLike[str], threads: int | None = None) -> Artifact:
    """Open an exported variant, checking its manifest and the model file's checksum.

    Everything is read from ``directory`` alone: an artifact moved or copied elsewhere loads the same.
    """
    directory = Path(directory)
    manifest_file = directory / MANIFEST_NAME
    try:
        decoded = json.loads(manifest_file.read_text())
    except (OSError, ValueError) as error:
        raise ModelConfigError(
            f"{directory} is not a computewise artifact: {error}",
            "export one with computewise optimize MODEL --out DIR",
        ) from error
    data = require_object(decoded, ArtifactManifest.json_document.title, str(manifest_file))
    if data.get("manifest_version") != MANIFEST_VERSION:
        raise ModelConfigError(
            f"{manifest_file} has manifest version {data.get('manifest_version')!r}, "
            f"this computewise reads {MANIFEST_VERSION}",
            f"re-export it with this version: computewise optimize {data.get('source') or 'MODEL'} --out DIR",
        )
    manifest = ArtifactManifest.from_dict(data, str(manifest_file))
    model_file = directory / manifest.file
    if not model_file.is_file() or _sha256(model_file) != manifest.sha256:
        raise ModelConfigError(
            f"{model_file} is missing or does not match its manifest checksum",
            "re-export the artifact; it was modified or copied incompletely",
        )
    run = _runner(manifest, model_file, threads or usable_cpus())
    tokenizer = None
    if manifest.tokenizer:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(directory / manifest.tokenizer))
    return Artifact(directory, manifest, run, tokenizer)


def _runner(manifest: ArtifactManifest, model_file: Path, threads: int) -> Callable[[Batch], Any]:
    """An ONNX Runtime session or the TorchScript program, on ``threads`` threads."""
    if manifest.format == "onnx":
        import onnxruntime

        available = set(onnxruntime.get_available_providers())
        providers = [p for p in manifest.providers if p in available] or ["CPUExecutionProvider"]
        level = manifest.graph_optimization_level or "all"
        return OrtPredictor(ort_session(str(model_file), providers, threads, level))
    if manifest.format != "torchscript":
        what = "a PyTorch recipe (older computewise), not a model file" if manifest.format == "torch" else ""
        raise ModelConfigError(
            f"{model_file.parent} holds {what or 'a model of format ' + repr(manifest.format)}",
            f"re-export it with this version: computewise optimize {manifest.source} --out DIR",
        )
    try:
        import torch
    except ImportError as error:
        raise MissingExtraError("torch", "optimize", "serving a PyTorch artifact") from error
    torch.set_num_threads(threads)
    device = manifest.device or "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        device = "cpu"  # a GPU export still runs, slower, where there is none
    names = tuple(item.name for item in manifest.inputs)
    types = [item.dtype for item in manifest.inputs]
    return ProgramPredictor(str(model_file), names, bool(manifest.positional), device, types)
