"""The exported variant: one directory with the model, its tokenizer and a manifest, written atomically.

``computewise serve`` loads what this writes, so nothing half-written may ever sit at the target:
the directory is assembled under a hidden sibling name and renamed into place; a previous artifact
is swapped out only after the new one is complete, and a directory that is not an artifact is never
overwritten. The manifest records the SHA-256 of the model file, and ``load_artifact`` refuses a
model that does not match it.

A PyTorch winner (BF16 on a GPU, say) is exported as a recipe: the source model and the settings
that rebuild it; ONNX winners carry the graph itself.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from computewise import __version__
from computewise.errors import InputError, ModelConfigError
from computewise.optimize.feeds import Batch, TextFeed
from computewise.optimize.predictors import OrtPredictor, ort_session
from computewise.optimize.search import SearchResult, VariantResult

__all__ = ["MANIFEST_NAME", "MANIFEST_VERSION", "Artifact", "load_artifact", "write_artifact"]

MANIFEST_NAME = "manifest.json"
MANIFEST_VERSION = 1
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


def _signature(model_file: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    session = ort_session(str(model_file), ["CPUExecutionProvider"], threads=1)

    def describe(items: Any) -> list[dict[str, Any]]:
        return [{"name": item.name, "dtype": item.type, "shape": list(item.shape)} for item in items]

    return describe(session.get_inputs()), describe(session.get_outputs())


def _manifest(result: SearchResult, variant: VariantResult, staging: Path, forced: bool) -> dict[str, Any]:
    built = variant.built
    if built is None:
        raise InputError(f"variant {variant.name} was not built, so it cannot be exported")
    source = result.source
    summary = result.to_dict()
    row = next(v for v in summary["variants"] if v["name"] == variant.name)
    manifest: dict[str, Any] = {
        "manifest_version": MANIFEST_VERSION,
        "variant": variant.name,
        "format": built.format,
        "task": source.task,
        "source": source.description,
        "recipe": built.recipe,
        "kept_fp32": built.kept_fp32,
        "quality": {
            "metric": result.metric.name,
            "value": row["quality"],
            "worst": row["quality_worst"],
            "baseline": result.baseline_quality,
            "max_drop": str(result.metric.budget),
        },
        "meets_budget": variant.meets_budget,
        "forced": forced,
        "batch_invariant": variant.batch_invariant,
        "batching": "length-sorted" if isinstance(source.feed, TextFeed) else "arrival",
        "speeds": row["speeds"],
        "speedup": row["speedup"],
        "hardware": result.hardware.to_dict(),
        "created_by": _versions(),
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "tokenizer": None,
        "max_length": source.max_length,
    }
    if built.format == "onnx":
        if built.model_file is None:
            raise InputError(f"variant {variant.name} has no model file to export")
        shutil.copyfile(built.model_file, staging / "model.onnx")
        inputs, outputs = _signature(staging / "model.onnx")
        manifest |= {
            "file": "model.onnx",
            "sha256": _sha256(staging / "model.onnx"),
            "providers": list(built.providers),
            "graph_optimization_level": built.graph_level,
            "inputs": inputs,
            "outputs": outputs,
        }
    else:
        manifest |= {"torch_recipe": built.torch_recipe, "positional": source.positional}
    if source.tokenizer_dir is not None:
        target = staging / "tokenizer"
        target.mkdir()
        for name in _TOKENIZER_FILES:
            if (source.tokenizer_dir / name).is_file():
                shutil.copyfile(source.tokenizer_dir / name, target / name)
        manifest["tokenizer"] = "tokenizer"
    return manifest


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
        (staging / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n")
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
    manifest: dict[str, Any]
    session: Any
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
            max_length=self.manifest.get("max_length") or 512,
            return_tensors="np",
        )
        return {name: np.asarray(value, dtype=np.int64) for name, value in encoded.items()}

    def predict(self, inputs: Any) -> Any:
        return OrtPredictor(self.session)(self.batch(inputs))


def load_artifact(directory: Path, threads: int | None = None) -> Artifact:
    """Open an exported variant, checking its manifest and the model file's checksum."""
    manifest_file = directory / MANIFEST_NAME
    try:
        manifest = json.loads(manifest_file.read_text())
    except (OSError, ValueError) as error:
        raise ModelConfigError(
            f"{directory} is not a computewise artifact: {error}",
            "export one with computewise optimize MODEL --out DIR",
        ) from error
    if manifest.get("manifest_version") != MANIFEST_VERSION:
        raise ModelConfigError(
            f"{manifest_file} has manifest version {manifest.get('manifest_version')!r}, "
            f"this computewise reads {MANIFEST_VERSION}",
            "re-export with this version",
        )
    if manifest.get("format") != "onnx":
        raise ModelConfigError(
            f"{directory} holds a PyTorch recipe ({manifest.get('variant')}), not a model file",
            f"rebuild it from its source {manifest.get('source')}",
        )
    model_file = directory / str(manifest["file"])
    if not model_file.is_file() or _sha256(model_file) != manifest.get("sha256"):
        raise ModelConfigError(
            f"{model_file} is missing or does not match its manifest checksum",
            "re-export the artifact; it was modified or copied incompletely",
        )
    import onnxruntime

    available = set(onnxruntime.get_available_providers())
    providers = [p for p in manifest.get("providers", []) if p in available] or ["CPUExecutionProvider"]
    session = ort_session(
        str(model_file), providers, threads or (os.cpu_count() or 1), manifest.get("graph_optimization_level") or "all"
    )
    tokenizer = None
    if manifest.get("tokenizer"):
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(directory / manifest["tokenizer"]))
    return Artifact(directory, manifest, session, tokenizer)
