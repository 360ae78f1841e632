"""The exported variant's ``manifest.json``, as a type: written and read by ``specs.codec``.

``write_artifact`` builds an ``ArtifactManifest`` and ``load_artifact`` reads one back, every field
checked, so a manifest edited by hand or cut short is refused naming the field and the file instead
of failing later inside ``serve``; ``docs/schemas/artifact-manifest.schema.json`` is generated from
these classes. One class holds both formats: the keys only an ONNX graph has (``providers``,
``graph_optimization_level``, ``outputs``) and those only a TorchScript program has (``dtype``,
``device``, ``torch_recipe``, ``positional``) are left out where empty, in the one order that gives
each format the keys, in the order, it has always had. Keys a manifest written before they existed
lacks read as their defaults.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from computewise.optimize.bench import BatchSpeed
from computewise.optimize.summary import MAX_DROP_DESCRIPTION, WORST_DESCRIPTION, HardwareLine, Speedup
from computewise.specs.codec import Document, Jsonable, json_field

__all__ = ["MANIFEST_VERSION", "ArtifactManifest", "ManifestQuality", "TensorSignature"]

MANIFEST_VERSION = 1


@dataclass(frozen=True)
class TensorSignature(Jsonable):
    """One model input or output as both formats describe it, so ``serve`` checks requests the same way."""

    json_description: ClassVar[str] = "One model input or output."

    name: str
    dtype: str = field(metadata=json_field(description="The element type as ONNX spells it, e.g. tensor(float)."))
    shape: tuple[int | str | None, ...] = field(
        metadata=json_field(description="Axis sizes, batch first; a name (batch, sequence) or null for a free axis.")
    )


@dataclass(frozen=True)
class ManifestQuality(Jsonable):
    """The exported variant's grade against the FP32 baseline, and the budget it was held to."""

    json_description: ClassVar[str] = "The variant's quality, the baseline's and the budget."

    metric: str
    value: float | None
    worst: float | None = field(metadata=json_field(description=WORST_DESCRIPTION))
    baseline: float | None
    max_drop: str = field(metadata=json_field(description=MAX_DROP_DESCRIPTION))


@dataclass(frozen=True, kw_only=True)
class ArtifactManifest(Jsonable):
    """What ``optimize MODEL --out DIR`` exported and how to run it: ``load_artifact`` checks the model file
    against ``sha256`` and runs it as ``format`` and the format's keys say."""

    json_document: ClassVar[Document] = Document(
        "artifact-manifest",
        "optimize MODEL --out DIR: manifest.json",
        "The exported variant's manifest (optimize.artifact), checked by load_artifact before `serve` loads the model.",
    )
    # each format's own keys, which the fields can only mark as optional
    json_constraints: ClassVar[Mapping[str, object]] = {
        "allOf": [
            {
                "if": {"properties": {"format": {"const": "onnx"}}},
                "then": {"required": ["providers", "graph_optimization_level", "outputs"]},
            },
            {
                "if": {"properties": {"format": {"const": "torchscript"}}},
                "then": {"required": ["dtype", "device", "torch_recipe", "positional"]},
            },
        ]
    }

    manifest_version: int = field(
        metadata=json_field(
            const=MANIFEST_VERSION,
            description="The manifest's own version, older than schema_version and kept for readers of it.",
        )
    )
    variant: str
    # a str, not a Literal: load_artifact refuses an older "torch" recipe artifact with how to re-export it
    format: str = field(metadata=json_field(enum=["onnx", "torchscript"], description="How the model file runs."))
    task: str
    source: str = field(metadata=json_field(description="The model optimized: an absolute path where it is one."))
    recipe: tuple[str, ...] = field(
        default=(), metadata=json_field(description="What was done to the model, step by step.")
    )
    kept_fp32: tuple[str, ...] | None = field(
        default=None, metadata=json_field(description="Layers kept in FP32 (selective precision).")
    )
    quality: ManifestQuality
    meets_budget: bool
    forced: bool = field(metadata=json_field(description="Exported although no variant met the quality budget."))
    batch_invariant: bool | None = field(
        default=None,
        metadata=json_field(description="Whether an input's output is the same in any batch; null: not measured."),
    )
    batching: Literal["length-sorted", "arrival"] = "arrival"
    speeds: tuple[BatchSpeed, ...] = ()
    speedup: Speedup | None = None
    hardware: HardwareLine
    created_by: dict[str, str] = field(metadata=json_field(description="Versions of computewise and its runtimes."))
    created_at: str = field(metadata=json_field(description="UTC, ISO 8601."))
    tokenizer: str | None = field(
        default=None, metadata=json_field(description="The tokenizer's folder in the artifact; null: no text model.")
    )
    max_length: int | None = None
    file: str = field(metadata=json_field(description="The model file, relative to the artifact's folder."))
    sha256: str = field(metadata=json_field(pattern="^[0-9a-f]{64}$", description="The model file's SHA-256."))
    providers: tuple[str, ...] = field(
        default=(), metadata=json_field(omit_empty=True, description="ONNX Runtime execution providers (ONNX).")
    )
    graph_optimization_level: str | None = field(
        default=None, metadata=json_field(omit_empty=True, description="ONNX Runtime's graph level (ONNX).")
    )
    dtype: str | None = field(
        default=None, metadata=json_field(omit_empty=True, description="The program's dtype (TorchScript).")
    )
    device: str | None = field(
        default=None, metadata=json_field(omit_empty=True, description="Where the program ran (TorchScript).")
    )
    torch_recipe: dict[str, Any] = field(
        default_factory=dict,
        metadata=json_field(omit_empty=True, description="The settings the program was built with (TorchScript)."),
    )
    positional: bool | None = field(
        default=None,
        metadata=json_field(
            omit_empty=True, description="Whether the program takes its inputs in order (TorchScript)."
        ),
    )
    inputs: tuple[TensorSignature, ...]
    outputs: tuple[TensorSignature, ...] = field(default=(), metadata=json_field(omit_empty=True))
