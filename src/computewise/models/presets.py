"""Well-known models by name, from ``models/data/presets.csv``.

Every row carries its source (the Hugging Face config.json or the paper) and the date it was
read; ``params`` is the exact count the shape gives under its family's conventions
(``computewise.models.shape``), which the tests check against the published figures. CNN rows
have no transformer formula; they carry traced FLOPs and activation bytes instead.

Names match loosely: case, ``-``, ``_`` and spaces are ignored, so ``Llama_2 7B`` finds
``llama-2-7b``. Hugging Face repository ids are aliases.
"""

from __future__ import annotations

import csv
import datetime
import os
from dataclasses import dataclass, fields
from functools import cache
from typing import Any, get_args

from computewise.errors import CatalogError, UnknownNameError
from computewise.models.hf_config import MODEL_TYPES
from computewise.models.shape import FAMILIES
from computewise.specs.model import Architecture, ModelSpec, TracedKernels, TracedStats

__all__ = ["PRESETS_FILE", "Preset", "normalize_name", "preset", "preset_entries", "preset_names"]

PRESETS_FILE = "presets.csv"
_ARCHITECTURES: dict[str, Architecture] = {name: name for name in get_args(Architecture)}
_PRESET_HINT = "give a preset name, a path to a Hugging Face config.json, or a parameter count such as 7.5B"
# A traced network's kernel figures, one column per field of TracedKernels: counts are whole, bytes positive.
_KERNEL_COLUMNS = tuple(column.name for column in fields(TracedKernels))
_COLUMNS = (
    "name",
    "aliases",
    "family",
    "model_type",
    "architecture",
    "params",
    "layers",
    "hidden_size",
    "heads",
    "kv_heads",
    "ffn_size",
    "vocab_size",
    "tied_embeddings",
    "gated_ffn",
    "activation",
    "experts",
    "active_experts",
    "sliding_window",
    "max_seq_len",
    "head_dim",
    "decoder_layers",
    "image_size",
    "patch_size",
    "forward_flops_per_sample",
    "activation_bytes_per_sample",
    *_KERNEL_COLUMNS,
    "source",
    "retrieved",
    "notes",
)


@dataclass(frozen=True)
class Preset:
    """One row of presets.csv: the spec, plus what a ModelSpec has no field for.

    ``family`` is a key of ``shape.FAMILIES`` ("" for CNNs, which have no shape formula).
    """

    spec: ModelSpec
    family: str
    aliases: tuple[str, ...]
    retrieved: datetime.date


def normalize_name(text: str) -> str:
    """The form names are compared in: lower case without ``-``, ``_`` or spaces."""
    return "".join(ch for ch in text.lower() if ch not in "-_ \t")


def preset(name: str) -> ModelSpec:
    """The preset called ``name`` (or one of its aliases); UnknownNameError says what is close."""
    entry = _by_key().get(normalize_name(name))
    if entry is None:
        names = preset_names()
        raise UnknownNameError("model", name, names, hint=f"{_PRESET_HINT}; presets: {', '.join(names)}")
    return entry.spec


def preset_names() -> tuple[str, ...]:
    """Canonical preset names, sorted."""
    return tuple(sorted(entry.spec.name for entry in preset_entries()))


@cache
def preset_entries() -> tuple[Preset, ...]:
    """All rows of presets.csv, validated; a bad cell is a CatalogError naming line and column."""
    # A plain file next to this module: package data is installed as real files (pyproject).
    with open(os.path.join(os.path.dirname(__file__), "data", PRESETS_FILE), encoding="utf-8") as file:
        return _parse(file.read(), PRESETS_FILE)


@cache
def _by_key() -> dict[str, Preset]:
    table: dict[str, Preset] = {}
    for entry in preset_entries():
        for name in (entry.spec.name, *entry.aliases):
            table[normalize_name(name)] = entry
    return table


class _Row:
    """Typed reads of one CSV row; errors name the file, line and column."""

    def __init__(self, path: str, line: int, cells: dict[str, str]) -> None:
        self.path = path
        self.line = line
        self.cells = cells

    def error(self, column: str, problem: str) -> CatalogError:
        return CatalogError(self.path, self.line, column, problem, "fix the cell in the presets file")

    def text(self, column: str, *, required: bool = True) -> str:
        value = (self.cells.get(column) or "").strip()
        if required and not value:
            raise self.error(column, "is empty")
        return value

    def integer(self, column: str, *, minimum: int = 0) -> int:
        value = self.text(column)
        if not value.isdigit() or int(value) < minimum:
            raise self.error(column, f"expected a whole number >= {minimum}, got {value!r}")
        return int(value)

    def optional_integer(self, column: str) -> int | None:
        return self.integer(column, minimum=1) if self.text(column, required=False) else None

    def optional_number(self, column: str) -> float | None:
        value = self.text(column, required=False)
        if not value:
            return None
        try:
            number = float(value)
        except ValueError:
            number = -1.0
        if not number > 0:
            raise self.error(column, f"expected a positive number, got {value!r}")
        return number

    def number(self, column: str) -> float:
        value = self.optional_number(column)
        if value is None:
            raise self.error(column, "is empty")
        return value

    def flag(self, column: str) -> bool:
        value = self.text(column).lower()
        if value not in ("true", "false"):
            raise self.error(column, f"expected true or false, got {value!r}")
        return value == "true"


def _parse(text: str, path: str) -> tuple[Preset, ...]:
    reader = csv.DictReader(text.splitlines())
    missing = [column for column in _COLUMNS if column not in (reader.fieldnames or ())]
    if missing:
        raise CatalogError(path, 1, missing[0], "column missing from the header")
    entries: list[Preset] = []
    seen: dict[str, int] = {}
    for cells in reader:
        row = _Row(path, reader.line_num, cells)
        entry = _entry(row)
        for name in (entry.spec.name, *entry.aliases):
            key = normalize_name(name)
            if key in seen:
                raise row.error("aliases", f"{name!r} is already a name on line {seen[key]}")
            seen[key] = row.line
        entries.append(entry)
    return tuple(entries)


def _traced_kernels(row: _Row) -> TracedKernels | None:
    """A traced network's kernel counts and bytes (``computewise.models.trace``); all nine or none."""
    given = [column for column in _KERNEL_COLUMNS if row.text(column, required=False)]
    if not given:
        return None
    if len(given) < len(_KERNEL_COLUMNS):
        missing = next(column for column in _KERNEL_COLUMNS if column not in given)
        raise row.error(missing, "give all nine traced kernel figures or none")
    values: dict[str, Any] = {
        column.name: row.integer(column.name, minimum=0 if column.name == "convolutions" else 1)
        if column.type == "int"
        else row.number(column.name)
        for column in fields(TracedKernels)
    }
    return TracedKernels(**values)


def _entry(row: _Row) -> Preset:
    architecture = _ARCHITECTURES.get(row.text("architecture"))
    if architecture is None:
        raise row.error("architecture", f"unknown architecture {row.text('architecture')!r}")
    family = row.text("family", required=architecture != "cnn")
    if family and family not in FAMILIES:
        raise row.error("family", f"unknown family {family!r}; known: {', '.join(sorted(FAMILIES))}")
    model_type = row.text("model_type", required=False)
    if model_type and model_type not in MODEL_TYPES:
        raise row.error("model_type", f"unknown model_type {model_type!r}; known: {', '.join(sorted(MODEL_TYPES))}")
    try:
        retrieved = datetime.date.fromisoformat(row.text("retrieved"))
    except ValueError as error:
        raise row.error("retrieved", "expected an ISO date such as 2024-05-01") from error

    flops = row.optional_number("forward_flops_per_sample")
    activation_bytes = row.optional_number("activation_bytes_per_sample")
    if (flops is None) != (activation_bytes is None):
        raise row.error("activation_bytes_per_sample", "give both traced figures or neither")
    params = row.integer("params", minimum=1)
    traced = None
    if flops is not None and activation_bytes is not None:
        # Traced figures in this file are fp32 (4 bytes per parameter and activation element).
        traced = TracedStats(
            flops, activation_bytes, param_bytes=4 * params, traced_dtype_bytes=4, kernels=_traced_kernels(row)
        )
    elif row.text("eval_kernels", required=False):
        raise row.error("eval_kernels", "kernel counts need the traced FLOPs and activation bytes too")

    notes = row.text("notes", required=False)
    spec = ModelSpec(
        name=row.text("name"),
        params=params,
        architecture=architecture,
        layers=row.integer("layers"),
        hidden_size=row.integer("hidden_size"),
        heads=row.integer("heads"),
        kv_heads=row.integer("kv_heads"),
        ffn_size=row.integer("ffn_size"),
        vocab_size=row.integer("vocab_size"),
        tied_embeddings=row.flag("tied_embeddings"),
        gated_ffn=row.flag("gated_ffn"),
        activation=row.text("activation", required=False),
        experts=row.integer("experts", minimum=1),
        active_experts=row.integer("active_experts", minimum=1),
        sliding_window=row.optional_integer("sliding_window"),
        max_seq_len=row.integer("max_seq_len"),
        head_dim=row.integer("head_dim"),
        decoder_layers=row.integer("decoder_layers"),
        image_size=row.integer("image_size"),
        patch_size=row.integer("patch_size"),
        traced=traced,
        source=row.text("source"),
        model_type=model_type,
        notes=(notes,) if notes else (),
    )
    if spec.active_experts > spec.experts:
        raise row.error("active_experts", f"{spec.active_experts} exceeds experts ({spec.experts})")
    aliases = tuple(alias.strip() for alias in row.text("aliases", required=False).split(";") if alias.strip())
    return Preset(spec=spec, family=family, aliases=aliases, retrieved=retrieved)
