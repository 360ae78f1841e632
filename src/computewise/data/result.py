"""What ``data bench`` found, as frozen values: ``--json`` prints ``DataBenchResult.to_dict()``.

The layout is described by ``docs/schemas/data-bench.schema.json``; ``from_dict`` reads it back
(a newer ``schema_version`` is refused by name, as every document of computewise).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from computewise.specs.document import (
    SCHEMA_VERSION,
    read_bool,
    read_float,
    read_int,
    read_list,
    read_mapping,
    read_optional_int,
    read_str,
    require_object,
)

__all__ = ["Advice", "DataBenchResult", "Demand", "Measurement", "Verdict"]

_DOCUMENT = "`computewise data bench SOURCE --json`"


@dataclass(frozen=True)
class Measurement:
    """One loader configuration read for a while (or to the end): how fast, how soon, at what CPU cost."""

    workers: int  # 0: the main process
    prefetch: int
    pin_memory: bool
    samples: int
    read_bytes: int  # from storage, or the batches' memory for a user's loader (see DataBenchResult.bytes_kind)
    elapsed_s: float
    first_batch_s: float  # from asking for the iterator to holding the first batch (worker start-up included)
    cpu_main_s: float  # CPU time of this process while it read
    cpu_workers_s: float  # CPU time of the worker processes (0 without workers)
    complete: bool  # the whole dataset was read (else stopped at the time limit)

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def bytes_per_s(self) -> float:
        return self.read_bytes / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def cpu_per_worker_pct(self) -> float:
        """Share of one core each worker kept busy (the main process when there are no workers)."""
        if self.elapsed_s <= 0:
            return 0.0
        if self.workers == 0:
            return 100.0 * self.cpu_main_s / self.elapsed_s
        return 100.0 * self.cpu_workers_s / self.elapsed_s / self.workers

    def to_dict(self) -> dict[str, Any]:
        return {
            "workers": self.workers,
            "prefetch": self.prefetch,
            "pin_memory": self.pin_memory,
            "samples": self.samples,
            "read_bytes": self.read_bytes,
            "elapsed_s": self.elapsed_s,
            "first_batch_s": self.first_batch_s,
            "cpu_main_s": self.cpu_main_s,
            "cpu_workers_s": self.cpu_workers_s,
            "complete": self.complete,
            "samples_per_s": self.samples_per_s,
            "bytes_per_s": self.bytes_per_s,
            "cpu_per_worker_pct": self.cpu_per_worker_pct,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str) -> Measurement:
        return cls(
            workers=read_int(data, "workers", source),
            prefetch=read_int(data, "prefetch", source),
            pin_memory=read_bool(data, "pin_memory", source),
            samples=read_int(data, "samples", source),
            read_bytes=read_int(data, "read_bytes", source),
            elapsed_s=read_float(data, "elapsed_s", source),
            first_batch_s=read_float(data, "first_batch_s", source),
            cpu_main_s=read_float(data, "cpu_main_s", source),
            cpu_workers_s=read_float(data, "cpu_workers_s", source),
            complete=read_bool(data, "complete", source),
        )


@dataclass(frozen=True)
class Demand:
    """How many samples per second the job consumes, and where that figure comes from."""

    samples_per_s: float
    basis: str  # e.g. "8 x h100 training llama-3-8b: 512 samples per 2.1 s step (estimate train)"
    gpus: int | None
    accelerator: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "samples_per_s": self.samples_per_s,
            "basis": self.basis,
            "gpus": self.gpus,
            "accelerator": self.accelerator,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str) -> Demand:
        accelerator = data.get("accelerator")
        return cls(
            samples_per_s=read_float(data, "samples_per_s", source),
            basis=read_str(data, "basis", source),
            gpus=read_optional_int(data, "gpus", source),
            accelerator=accelerator if isinstance(accelerator, str) else None,
        )


@dataclass(frozen=True)
class Verdict:
    """The loader's best measured rate against the demand: input-bound when demand exceeds supply."""

    supply_samples_per_s: float
    demand_samples_per_s: float
    text: str

    @property
    def ratio(self) -> float:
        """Demand over supply: above 1 the GPUs wait on input by that factor."""
        return self.demand_samples_per_s / self.supply_samples_per_s if self.supply_samples_per_s > 0 else float("inf")

    @property
    def input_bound(self) -> bool:
        return self.ratio > 1.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "supply_samples_per_s": self.supply_samples_per_s,
            "demand_samples_per_s": self.demand_samples_per_s,
            "ratio": self.ratio,
            "input_bound": self.input_bound,
            "text": self.text,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str) -> Verdict:
        return cls(
            supply_samples_per_s=read_float(data, "supply_samples_per_s", source),
            demand_samples_per_s=read_float(data, "demand_samples_per_s", source),
            text=read_str(data, "text", source),
        )


@dataclass(frozen=True)
class Advice:
    """One change to try, and the measurement (or arithmetic on measurements) behind it."""

    change: str
    evidence: str
    measured: bool  # False: reasoned from the figures, not measured by running the change

    def to_dict(self) -> dict[str, Any]:
        return {"change": self.change, "evidence": self.evidence, "measured": self.measured}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str) -> Advice:
        return cls(
            change=read_str(data, "change", source),
            evidence=read_str(data, "evidence", source),
            measured=read_bool(data, "measured", source),
        )


@dataclass(frozen=True)
class DataBenchResult:
    """Everything ``data bench`` measured about one source, and what it means for the job."""

    source: str
    format: str  # parquet | csv | jsonl | npy | tar | images | entry-point
    sample: str  # what one sample is, in words
    files: int
    total_bytes: int
    rows_known: int | None  # from metadata, before reading (Parquet, .npy, images)
    loader: str  # "torch DataLoader", "plain iterator", or the entry point
    bytes_kind: str  # "read from storage" or "in the batches' arrays"
    cpu: str
    usable_cpus: int
    measurements: tuple[Measurement, ...]
    demand: Demand | None
    verdict: Verdict | None
    advice: tuple[Advice, ...]
    notes: tuple[str, ...]

    @property
    def best(self) -> Measurement:
        return max(self.measurements, key=lambda m: m.samples_per_s)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "source": self.source,
            "format": self.format,
            "sample": self.sample,
            "files": self.files,
            "total_bytes": self.total_bytes,
            "rows_known": self.rows_known,
            "loader": self.loader,
            "bytes_kind": self.bytes_kind,
            "cpu": self.cpu,
            "usable_cpus": self.usable_cpus,
            "measurements": [m.to_dict() for m in self.measurements],
            "best": self.best.to_dict(),
            "demand": self.demand.to_dict() if self.demand is not None else None,
            "verdict": self.verdict.to_dict() if self.verdict is not None else None,
            "advice": [a.to_dict() for a in self.advice],
            "notes": list(self.notes),
        }

    @classmethod
    def from_dict(cls, data: object, source: str = "the data bench result") -> DataBenchResult:
        doc = require_object(data, _DOCUMENT, source)
        demand = doc.get("demand")
        verdict = doc.get("verdict")
        return cls(
            source=read_str(doc, "source", source),
            format=read_str(doc, "format", source),
            sample=read_str(doc, "sample", source),
            files=read_int(doc, "files", source),
            total_bytes=read_int(doc, "total_bytes", source),
            rows_known=read_optional_int(doc, "rows_known", source),
            loader=read_str(doc, "loader", source),
            bytes_kind=read_str(doc, "bytes_kind", source),
            cpu=read_str(doc, "cpu", source),
            usable_cpus=read_int(doc, "usable_cpus", source),
            measurements=tuple(
                Measurement.from_dict(_mapping(m, source), source) for m in read_list(doc, "measurements", source)
            ),
            demand=Demand.from_dict(read_mapping(doc, "demand", source), source) if demand is not None else None,
            verdict=Verdict.from_dict(read_mapping(doc, "verdict", source), source) if verdict is not None else None,
            advice=tuple(Advice.from_dict(_mapping(a, source), source) for a in read_list(doc, "advice", source)),
            notes=tuple(str(n) for n in read_list(doc, "notes", source)),
        )


def _mapping(value: object, source: str) -> Mapping[str, Any]:
    return require_object(value, _DOCUMENT, source)
