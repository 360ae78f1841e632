"""What ``computewise bench`` measured, as frozen values that round-trip through JSON.

``BenchResult.to_dict()`` is the document ``bench --json`` prints (``docs/schemas/bench.schema.json``)
and the one ``catalog.calibration.Calibration.from_bench_dict`` reads, so the catalog never imports
this package. Rates are stored as measured (TFLOP/s, GB/s: decimal, 1e12 and 1e9); the data sheet's
figure sits beside each one so a reader can judge it without the catalog at hand.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from computewise.bench.collectives import CollectiveFigure
from computewise.bench.reference import ReferenceStep
from computewise.bench.storage import StorageFigure
from computewise.bench.timing import Measured
from computewise.specs.codec import Document, Jsonable, Layout, json_field, json_property

__all__ = [
    "BUSY_SPREAD",
    "BandwidthFigure",
    "BenchResult",
    "Comparison",
    "Device",
    "EfficiencyPoint",
    "LaunchFigure",
    "MatmulFigure",
    "MatmulPoint",
    "Skipped",
]

# A figure whose high end is this many times its low end was measured on a busy machine (``busy_figures``).
BUSY_SPREAD = 2.0


@dataclass(frozen=True)
class Device(Jsonable):
    """One measured device: ``cpu`` or ``cuda:N``, the name its driver gives, and its catalog row if one matched."""

    json_description: ClassVar[str] = "One measured device (bench.result.Device)."
    device: str = field(metadata=json_field(pattern="^(cpu|cuda:[0-9]+)$"))
    name: str
    catalog_slug: str | None


@dataclass(frozen=True)
class MatmulPoint(Jsonable):
    """Dense square matmul of one size: ``2 * size**3`` FLOP per product, over the measured time."""

    json_description: ClassVar[str] = "One size."
    size: int = field(metadata=json_field(minimum=1))
    dtype: str
    tflops: Measured


@dataclass(frozen=True)
class MatmulFigure(Jsonable):
    """One dtype on one device: the sweep by size, its best median, and the data sheet's peak (None: no row)."""

    json_description: ClassVar[str] = (
        "One dtype's sweep on one device (bench.result.MatmulFigure): 2 n^3 FLOP per square product."
    )
    device: str
    dtype: str = field(metadata=json_field(enum=["fp32", "tf32", "bf16", "fp16", "int8"]))
    points: tuple[MatmulPoint, ...] = field(metadata=json_field(min_items=1))
    peak_tflops: float
    datasheet_tflops: float | None

    def efficiency(self) -> tuple[tuple[int, float], ...]:
        """(size, share of the best measured median): how far small matmuls fall short of the peak."""
        if self.peak_tflops <= 0:
            return tuple((p.size, 0.0) for p in self.points)
        return tuple((p.size, p.tflops.median / self.peak_tflops) for p in self.points)

    @json_property(name="efficiency")
    def efficiency_points(self) -> tuple[EfficiencyPoint, ...]:
        return tuple(EfficiencyPoint(size, fraction) for size, fraction in self.efficiency())


@dataclass(frozen=True)
class EfficiencyPoint(Jsonable):
    json_description: ClassVar[str] = "A size's median over the best median of the sweep."
    size: int = field(metadata=json_field(minimum=1))
    fraction: float = field(metadata=json_field(minimum=0))


@dataclass(frozen=True)
class BandwidthFigure(Jsonable):
    """A memory or copy bandwidth: ``triad`` (STREAM, 12 bytes per float32 element), or ``h2d``/``d2h`` copies."""

    json_description: ClassVar[str] = (
        "STREAM triad (12 bytes per float32 element) or a host<->device copy (bench.result.BandwidthFigure)."
    )
    device: str
    kind: str = field(metadata=json_field(enum=["triad", "h2d-pinned", "h2d-pageable", "d2h-pinned", "d2h-pageable"]))
    gb_per_s: Measured
    datasheet_gb_per_s: float | None


@dataclass(frozen=True)
class LaunchFigure(Jsonable):
    """Seconds per launch of a one-element kernel (``bench.launch``): queued back to back, and synchronised alone."""

    json_description: ClassVar[str] = (
        "Seconds per launch of a one-element kernel (bench.result.LaunchFigure): back_to_back_s with calls queued "
        "in a loop between one pair of synchronisations (the host's issue rate), synchronised_s with each call "
        "followed by a synchronisation (the round trip)."
    )

    device: str
    back_to_back_s: Measured
    synchronised_s: Measured
    matmul_back_to_back_s: Measured | None = field(
        default=None,
        metadata=json_field(
            omit_empty=True,
            description="Seconds per 128^3 TF32 torch.mm queued back to back on a GPU: the op and timing of the "
            "first H100 bench's matmul sweep at 128, so this host compares with that one; absent on a CPU and "
            "from results written before it was measured.",
        ),
    )


@dataclass(frozen=True)
class Comparison(Jsonable):
    """A measured figure against the data sheet, in words; ``low`` flags one far below what the part can do."""

    json_description: ClassVar[str] = (
        "A figure against the data sheet, in words; low: far below it (bench.result.Comparison)."
    )

    device: str
    figure: str  # "bf16 matmul", "memory bandwidth (triad)"
    share: float  # measured / data sheet
    low: bool
    text: str


@dataclass(frozen=True)
class Skipped(Jsonable):
    """A figure not measured here, and why (no fast kernel, no GPU), so its absence is never silent."""

    json_description: ClassVar[str] = "A figure not measured here, and why (bench.result.Skipped)."

    device: str
    figure: str
    reason: str


@dataclass(frozen=True)
class BenchResult(Jsonable):
    """Everything one ``computewise bench`` measured on one host, with the data-sheet comparisons."""

    json_document: ClassVar[Document] = Document(
        "bench",
        "bench --json",
        "What `computewise bench` measured on one host (bench.result.BenchResult), with the data-sheet comparisons. "
        "Rates are decimal: TFLOP/s = 1e12 FLOP/s (int8: 1e12 integer ops/s), GB/s = 1e9 bytes/s. "
        "catalog.calibration.Calibration.from_bench_dict reads it for --save.",
    )
    json_layout: ClassVar[Layout] = (
        "host",
        "date",
        "cpu",
        "threads",
        "quick",
        "catalog_slug",
        "devices",
        "matmul",
        "bandwidth",
        "launch",
        "collectives",
        "storage",
        "reference",
        "comparisons",
        "skipped",
        "notes",
    )
    host: str
    date: str = field(metadata=json_field(description="ISO 8601 UTC time the run started"))
    cpu: str
    threads: int = field(metadata=json_field(minimum=1, description="torch's intra-op threads for the CPU figures"))
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
    launch: tuple[LaunchFigure, ...] = field(
        default=(),
        metadata=json_field(
            description="Launch latency per device (bench.launch); absent from results written before it was measured."
        ),
    )

    @property
    def main_device(self) -> Device:
        """The device a calibration describes: the first GPU if any was measured, else the CPU."""
        gpus = [d for d in self.devices if d.device != "cpu"]
        return (gpus or list(self.devices) or [Device("cpu", self.cpu, None)])[0]

    @json_property(description="the catalog row of the main device (first GPU, else the CPU); null: none matched")
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
