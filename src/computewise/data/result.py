"""What ``data bench`` found, as frozen values: ``--json`` prints ``DataBenchResult.to_dict()``.

The layout is generated from these types (``specs.codec``) into ``docs/schemas/data-bench.schema.json``;
``from_dict`` reads it back (a newer ``schema_version`` is refused by name, as every document of computewise).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from computewise.specs.codec import Document, Jsonable, json_field, json_property

__all__ = ["Advice", "DataBenchResult", "Demand", "Measurement", "Verdict"]

_AT_LEAST_0 = json_field(minimum=0)
_FORMATS = ["parquet", "csv", "jsonl", "npy", "bin", "tar", "images", "entry-point"]


@dataclass(frozen=True)
class Measurement(Jsonable):
    """One loader configuration read for a while (or to the end): how fast, how soon, at what CPU cost."""

    workers: int = field(metadata=json_field(minimum=0, description="Loader worker processes; 0 is the main process."))
    prefetch: int = field(metadata=json_field(minimum=1))
    pin_memory: bool
    samples: int = field(metadata=_AT_LEAST_0)
    read_bytes: int = field(metadata=_AT_LEAST_0)  # from storage, or the batches' memory (DataBenchResult.bytes_kind)
    elapsed_s: float = field(metadata=_AT_LEAST_0)
    first_batch_s: float = field(metadata=_AT_LEAST_0)  # from asking for the iterator to the first batch (start-up in)
    cpu_main_s: float = field(metadata=_AT_LEAST_0)  # CPU time of this process while it read
    cpu_workers_s: float = field(metadata=_AT_LEAST_0)  # CPU time of the worker processes (0 without workers)
    complete: bool = field(
        metadata=json_field(description="The whole dataset was read (else stopped at --time-per-config).")
    )

    @json_property(minimum=0)
    def samples_per_s(self) -> float:
        return self.samples / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @json_property(minimum=0)
    def bytes_per_s(self) -> float:
        return self.read_bytes / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @json_property(minimum=0)
    def cpu_per_worker_pct(self) -> float:
        """Share of one core each worker kept busy (the main process when there are no workers)."""
        if self.elapsed_s <= 0:
            return 0.0
        if self.workers == 0:
            return 100.0 * self.cpu_main_s / self.elapsed_s
        return 100.0 * self.cpu_workers_s / self.elapsed_s / self.workers


@dataclass(frozen=True)
class Demand(Jsonable):
    """How many samples per second the job consumes, and where that figure comes from."""

    samples_per_s: float = field(metadata=json_field(exclusive_minimum=0))
    basis: str  # e.g. "8 x h100 training llama-3-8b: 512 samples per 2.1 s step (estimate train)"
    gpus: int | None
    accelerator: str | None


@dataclass(frozen=True)
class Verdict(Jsonable):
    """The loader's best measured rate against the demand: input-bound when demand exceeds supply."""

    supply_samples_per_s: float = field(metadata=_AT_LEAST_0)
    demand_samples_per_s: float = field(metadata=_AT_LEAST_0)
    text: str

    @json_property(
        after="demand_samples_per_s",
        description="Demand over supply; above 1 the job is input-bound by that factor.",
    )
    def ratio(self) -> float:
        """Demand over supply: above 1 the GPUs wait on input by that factor."""
        return self.demand_samples_per_s / self.supply_samples_per_s if self.supply_samples_per_s > 0 else float("inf")

    @json_property(after="ratio")
    def input_bound(self) -> bool:
        return self.ratio > 1.0


@dataclass(frozen=True)
class Advice(Jsonable):
    """One change to try, and the measurement (or arithmetic on measurements) behind it."""

    change: str
    evidence: str
    measured: bool = field(
        metadata=json_field(description="True: measured by running the change here; false: reasoned from the figures.")
    )


@dataclass(frozen=True)
class DataBenchResult(Jsonable):
    """Everything ``data bench`` measured about one source, and what it means for the job."""

    json_document: ClassVar[Document] = Document(
        "data-bench",
        "data bench --json",
        "A data loader measured at 1, 2, 4... workers (data.bench), compared with what the job consumes "
        "(data.demand), with advice (data.advice).",
    )

    source: str
    format: str = field(metadata=json_field(enum=_FORMATS))
    sample: str  # what one sample is, in words
    files: int = field(metadata=_AT_LEAST_0)
    total_bytes: int = field(metadata=_AT_LEAST_0)
    rows_known: int | None = field(metadata=_AT_LEAST_0)  # from metadata, before reading (Parquet, .npy, images)
    loader: str  # "torch DataLoader", "plain iterator", or the entry point
    bytes_kind: str = field(metadata=json_field(enum=["read from storage", "in the batches' arrays"]))
    cpu: str
    usable_cpus: int = field(metadata=json_field(minimum=1))
    measurements: tuple[Measurement, ...] = field(metadata=json_field(min_items=1))
    demand: Demand | None
    verdict: Verdict | None
    advice: tuple[Advice, ...]
    notes: tuple[str, ...]

    @json_property(after="measurements")
    def best(self) -> Measurement:
        return max(self.measurements, key=lambda m: m.samples_per_s)
