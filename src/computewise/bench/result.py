"""What ``computewise bench`` measured, as frozen values that round-trip through JSON.

``BenchResult.to_dict()`` is the document ``bench --json`` prints (``docs/schemas/bench.schema.json``)
and the one ``catalog.calibration.Calibration.from_bench_dict`` reads, so the catalog never imports
this package. Rates are stored as measured (TFLOP/s, GB/s: decimal, 1e12 and 1e9); the data sheet's
figure sits beside each one so a reader can judge it without the catalog at hand.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from computewise.bench.timing import Measured
from computewise.specs.document import (
    SCHEMA_VERSION,
    read_bool,
    read_float,
    read_int,
    read_list,
    read_mapping,
    read_optional_float,
    read_optional_str,
    read_str,
    require_object,
)

if TYPE_CHECKING:
    from computewise.bench.collectives import CollectiveFigure
    from computewise.bench.reference import ReferenceStep
    from computewise.bench.storage import StorageFigure

__all__ = [
    "BUSY_SPREAD",
    "BandwidthFigure",
    "BenchResult",
    "Comparison",
    "Device",
    "LaunchFigure",
    "MatmulFigure",
    "MatmulPoint",
    "Skipped",
]

_SOURCE = "bench result"
# A figure whose high end is this many times its low end was measured on a busy machine (``busy_figures``).
BUSY_SPREAD = 2.0


@dataclass(frozen=True)
class Device:
    """One measured device: ``cpu`` or ``cuda:N``, the name its driver gives, and its catalog row if one matched."""

    device: str
    name: str
    catalog_slug: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device, "name": self.name, "catalog_slug": self.catalog_slug}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = _SOURCE) -> Device:
        return cls(
            read_str(data, "device", source),
            read_str(data, "name", source),
            read_optional_str(data, "catalog_slug", source),
        )


@dataclass(frozen=True)
class MatmulPoint:
    """Dense square matmul of one size: ``2 * size**3`` FLOP per product, over the measured time."""

    size: int
    dtype: str
    tflops: Measured

    def to_dict(self) -> dict[str, Any]:
        return {"size": self.size, "dtype": self.dtype, "tflops": self.tflops.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = _SOURCE) -> MatmulPoint:
        return cls(
            read_int(data, "size", source),
            read_str(data, "dtype", source),
            Measured.from_dict(read_mapping(data, "tflops", source), source),
        )


@dataclass(frozen=True)
class MatmulFigure:
    """One dtype on one device: the sweep by size, its best median, and the data sheet's peak (None: no row)."""

    device: str
    dtype: str
    points: tuple[MatmulPoint, ...]
    peak_tflops: float
    datasheet_tflops: float | None

    def efficiency(self) -> tuple[tuple[int, float], ...]:
        """(size, share of the best measured median): how far small matmuls fall short of the peak."""
        if self.peak_tflops <= 0:
            return tuple((p.size, 0.0) for p in self.points)
        return tuple((p.size, p.tflops.median / self.peak_tflops) for p in self.points)

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "dtype": self.dtype,
            "points": [p.to_dict() for p in self.points],
            "peak_tflops": self.peak_tflops,
            "datasheet_tflops": self.datasheet_tflops,
            "efficiency": [{"size": size, "fraction": fraction} for size, fraction in self.efficiency()],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = _SOURCE) -> MatmulFigure:
        return cls(
            device=read_str(data, "device", source),
            dtype=read_str(data, "dtype", source),
            points=tuple(MatmulPoint.from_dict(_object(p, source), source) for p in read_list(data, "points", source)),
            peak_tflops=read_float(data, "peak_tflops", source),
            datasheet_tflops=read_optional_float(data, "datasheet_tflops", source),
        )


@dataclass(frozen=True)
class BandwidthFigure:
    """A memory or copy bandwidth: ``triad`` (STREAM, 12 bytes per float32 element), or ``h2d``/``d2h`` copies."""

    device: str
    kind: str  # "triad", "h2d-pinned", "h2d-pageable", "d2h-pinned", "d2h-pageable"
    gb_per_s: Measured
    datasheet_gb_per_s: float | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "kind": self.kind,
            "gb_per_s": self.gb_per_s.to_dict(),
            "datasheet_gb_per_s": self.datasheet_gb_per_s,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = _SOURCE) -> BandwidthFigure:
        return cls(
            read_str(data, "device", source),
            read_str(data, "kind", source),
            Measured.from_dict(read_mapping(data, "gb_per_s", source), source),
            read_optional_float(data, "datasheet_gb_per_s", source),
        )


@dataclass(frozen=True)
class LaunchFigure:
    """Seconds per launch of a one-element kernel (``bench.launch``): queued back to back, and synchronised alone."""

    device: str
    back_to_back_s: Measured
    synchronised_s: Measured

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "back_to_back_s": self.back_to_back_s.to_dict(),
            "synchronised_s": self.synchronised_s.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = _SOURCE) -> LaunchFigure:
        return cls(
            read_str(data, "device", source),
            Measured.from_dict(read_mapping(data, "back_to_back_s", source), source),
            Measured.from_dict(read_mapping(data, "synchronised_s", source), source),
        )


@dataclass(frozen=True)
class Comparison:
    """A measured figure against the data sheet, in words; ``low`` flags one far below what the part can do."""

    device: str
    figure: str  # "bf16 matmul", "memory bandwidth (triad)"
    share: float  # measured / data sheet
    low: bool
    text: str

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device, "figure": self.figure, "share": self.share, "low": self.low, "text": self.text}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = _SOURCE) -> Comparison:
        return cls(
            read_str(data, "device", source),
            read_str(data, "figure", source),
            read_float(data, "share", source),
            read_bool(data, "low", source),
            read_str(data, "text", source),
        )


@dataclass(frozen=True)
class Skipped:
    """A figure not measured here, and why (no fast kernel, no GPU), so its absence is never silent."""

    device: str
    figure: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device, "figure": self.figure, "reason": self.reason}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = _SOURCE) -> Skipped:
        return cls(read_str(data, "device", source), read_str(data, "figure", source), read_str(data, "reason", source))


@dataclass(frozen=True)
class BenchResult:
    """Everything one ``computewise bench`` measured on one host, with the data-sheet comparisons."""

    host: str
    date: str  # ISO 8601 UTC, when the run started
    cpu: str
    threads: int
    quick: bool
    devices: tuple[Device, ...]
    matmul: tuple[MatmulFigure, ...]
    bandwidth: tuple[BandwidthFigure, ...]
    collectives: tuple[CollectiveFigure, ...]
    storage: tuple[StorageFigure, ...]
    reference: tuple[ReferenceStep, ...]
    comparisons: tuple[Comparison, ...]
    skipped: tuple[Skipped, ...]
    notes: tuple[str, ...]
    launch: tuple[LaunchFigure, ...] = ()  # absent from results written before launch latency was measured
    schema_version: int = SCHEMA_VERSION

    @property
    def main_device(self) -> Device:
        """The device a calibration describes: the first GPU if any was measured, else the CPU."""
        gpus = [d for d in self.devices if d.device != "cpu"]
        return (gpus or list(self.devices) or [Device("cpu", self.cpu, None)])[0]

    @property
    def catalog_slug(self) -> str | None:
        """The catalog row of the main device."""
        return self.main_device.catalog_slug

    def busy_figures(self) -> tuple[str, ...]:
        """The calibration's figures whose repeats spread wider than ``BUSY_SPREAD``, in words.

        A quiet machine repeats a matmul, a STREAM triad or a training step within a few percent; a
        figure whose fastest repeat is twice its slowest or more was shared with other work, and its
        median says more about that work than about the device. Only the figures ``bench --save``
        writes are judged: the main device's matmul sweep, its triad, its back-to-back launch
        latency and its training reference steps.
        """
        device = self.main_device.device
        measured = [
            *((f"{f.dtype} matmul {p.size}", p.tflops, "TFLOP/s") for f in self.matmul if f.device == device
              for p in f.points),
            *((f"{b.kind} bandwidth", b.gb_per_s, "GB/s") for b in self.bandwidth
              if b.device == device and b.kind == "triad"),
            *(("launch latency", f.back_to_back_s, "s") for f in self.launch if f.device == device),
            *((f"{s.model} training step", s.step_s, "s") for s in self.reference
              if s.device == device and s.kind == "train"),
        ]  # fmt: skip
        return tuple(
            f"{what}: {m.low:.3g}-{m.high:.3g} {unit} ({m.spread:.1f}x)"
            for what, m, unit in measured
            if m.spread >= BUSY_SPREAD
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "host": self.host,
            "date": self.date,
            "cpu": self.cpu,
            "threads": self.threads,
            "quick": self.quick,
            "catalog_slug": self.catalog_slug,
            "devices": [d.to_dict() for d in self.devices],
            "matmul": [f.to_dict() for f in self.matmul],
            "bandwidth": [f.to_dict() for f in self.bandwidth],
            "launch": [f.to_dict() for f in self.launch],
            "collectives": [f.to_dict() for f in self.collectives],
            "storage": [f.to_dict() for f in self.storage],
            "reference": [f.to_dict() for f in self.reference],
            "comparisons": [c.to_dict() for c in self.comparisons],
            "skipped": [s.to_dict() for s in self.skipped],
            "notes": list(self.notes),
        }

    @classmethod
    def from_dict(cls, data: object, source: str = _SOURCE) -> BenchResult:
        from computewise.bench.collectives import CollectiveFigure
        from computewise.bench.reference import ReferenceStep
        from computewise.bench.storage import StorageFigure

        d = require_object(data, "computewise bench --json", source)

        def objects(key: str) -> list[Mapping[str, Any]]:
            return [_object(item, source) for item in read_list(d, key, source)]

        return cls(
            host=read_str(d, "host", source),
            date=read_str(d, "date", source),
            cpu=read_str(d, "cpu", source),
            threads=read_int(d, "threads", source),
            quick=read_bool(d, "quick", source),
            devices=tuple(Device.from_dict(x, source) for x in objects("devices")),
            matmul=tuple(MatmulFigure.from_dict(x, source) for x in objects("matmul")),
            bandwidth=tuple(BandwidthFigure.from_dict(x, source) for x in objects("bandwidth")),
            collectives=tuple(CollectiveFigure.from_dict(x) for x in objects("collectives")),
            storage=tuple(StorageFigure.from_dict(x) for x in objects("storage")),
            reference=tuple(ReferenceStep.from_dict(x) for x in objects("reference")),
            comparisons=tuple(Comparison.from_dict(x, source) for x in objects("comparisons")),
            skipped=tuple(Skipped.from_dict(x, source) for x in objects("skipped")),
            notes=tuple(str(n) for n in read_list(d, "notes", source)),
            launch=tuple(LaunchFigure.from_dict(x, source) for x in objects("launch")) if "launch" in d else (),
            schema_version=read_int(d, "schema_version", source),
        )


def _object(item: object, source: str) -> Mapping[str, Any]:
    return require_object(item, "an entry of computewise bench --json", source)
