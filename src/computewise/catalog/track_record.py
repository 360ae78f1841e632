"""How far the estimators have been from measured runs, by kind of run: ``track_record.csv``.

Every estimate says how much to trust it: the median and worst |error| of its time and memory over
the measured runs of the same kind (one GPU, one node, many nodes; training or inference), from
the project's own validation. The file is generated, not typed: ``python
benchmarks/replay_measured.py --track-record src/computewise/catalog/data/track_record.csv``
recomputes it from the real H100 runs (``benchmarks/data/measured``) and the published runs
(``benchmarks/data/published_training_runs.csv``) on the rows not used for fitting, and
``tests/benchmarks/test_replay_measured.py`` fails when the file no longer matches the estimators.
A kind of run with no measured row has no line: it is said to be unmeasured, never given a guess.

Figure ``fits`` is a one-sided check of memory, not an error band: every published run ran, so its
layout fit on its devices. Its ``rows`` are the published layouts of that kind and both error columns
the share of them the estimate would not let run (``benchmarks/accuracy.py``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from computewise.catalog.loader import _Cells, _numbered_records
from computewise.errors import CatalogError

__all__ = ["COLUMNS", "SCOPES", "Figure", "Kind", "Scope", "TrackRecord", "load_track_record", "scope_for"]

Scope = Literal["single-gpu", "one-node", "many-nodes", "mixture-of-experts", "cloud-tpu"]
SCOPES: tuple[Scope, ...] = ("single-gpu", "one-node", "many-nodes", "mixture-of-experts", "cloud-tpu")
Kind = Literal["train", "infer"]
Figure = Literal["time", "memory", "fits"]
FIGURES: tuple[Figure, ...] = ("time", "memory", "fits")
COLUMNS = ("scope", "kind", "figure", "rows", "median_abs_error", "worst_abs_error", "source")
_BUNDLED = Path(__file__).resolve().parent / "data" / "track_record.csv"


@dataclass(frozen=True)
class TrackRecord:
    """One figure's errors over the measured runs of one kind."""

    scope: Scope
    kind: Kind
    figure: Figure
    rows: int
    median_abs_error: float
    worst_abs_error: float
    source: str


def scope_for(gpus: int, devices_per_node: int, experts: int = 1, accelerator_kind: str = "gpu") -> Scope:
    """The kind of run a job of ``gpus`` devices is: on one device, within one node, or across nodes. A
    mixture-of-experts model (``experts`` > 1) is a kind of its own at any size: its runs spend time on
    routing and on exchanging tokens, which the dense runs behind the other bands never did. So is a job on
    Cloud TPU chips (``accelerator_kind`` "tpu"): XLA's compiled step on a slice's torus, not GPU kernels."""
    if experts > 1:
        return "mixture-of-experts"
    if accelerator_kind == "tpu":
        return "cloud-tpu"
    if gpus <= 1:
        return "single-gpu"
    return "one-node" if gpus <= max(devices_per_node, 1) else "many-nodes"


def _record(cells: _Cells) -> TrackRecord:
    scope, kind, figure = cells.text("scope"), cells.text("kind"), cells.text("figure")
    if scope not in SCOPES or kind not in ("train", "infer") or figure not in FIGURES:
        raise cells.error("scope", f"unknown kind of run {scope}/{kind}/{figure}", f"scope is one of {SCOPES}")
    return TrackRecord(
        scope=scope,
        kind=kind,  # type: ignore[arg-type]
        figure=figure,
        rows=cells.whole("rows"),
        median_abs_error=cells.number("median_abs_error"),
        worst_abs_error=cells.number("worst_abs_error"),
        source=cells.text("source"),
    )


@functools.cache
def load_track_record(path: Path = _BUNDLED) -> dict[tuple[Scope, Kind, Figure], TrackRecord]:
    """The bundled track record by (scope, kind, figure)."""
    records = _numbered_records(path.read_text(encoding="utf-8"))
    header = next(records, None)
    if header is None or tuple(header[1]) != COLUMNS:
        raise CatalogError(str(path), 1, "header", f"must be {','.join(COLUMNS)}", "regenerate it (module docstring)")
    found = {}
    for line, cells in records:
        record = _record(_Cells(str(path), line, dict(zip(COLUMNS, cells, strict=True))))
        found[(record.scope, record.kind, record.figure)] = record
    return found
