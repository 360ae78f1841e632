"""``computewise bench`` as one call: every figure on every chosen device, compared with its data sheet.

The order is the cheapest first (matmul sweeps, launch latency, memory, copies), then the figures that start
processes or read a disk (collectives, storage), then the reference steps, which need the measured
fp32 peak for their MFU. Each stage reports through ``progress(description, done, total)``; the
CLI draws that as a bar on stderr, and a library caller may pass nothing.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from computewise.bench.compare import compare_bandwidth, compare_matmul, match_cpu
from computewise.bench.launch import measure_launch
from computewise.bench.matmul import matmul_dtypes, matmul_sizes, measure_matmul
from computewise.bench.memory import measure_copies, measure_triad
from computewise.bench.result import (
    BandwidthFigure,
    BenchResult,
    Comparison,
    Device,
    LaunchFigure,
    MatmulFigure,
    Skipped,
)
from computewise.catalog import Catalog, load_catalog, user_catalog_dir
from computewise.errors import InputError
from computewise.specs import Accelerator
from computewise.system.cpu import cpu_model_name, usable_cpus

if TYPE_CHECKING:
    from computewise.bench.reference import ReferenceStep
    from computewise.bench.storage import StorageFigure

__all__ = ["BenchOptions", "Progress", "collective_sizes", "resolve_devices", "run_bench"]

Progress = Callable[[str, int, int], None]
"""What is being measured now, the stages done, and the stages in all."""

_KIB, _MIB = 1 << 10, 1 << 20
_LOCAL_RANKS = 2  # gloo between two local processes: the smallest group with traffic each way


@dataclass(frozen=True)
class BenchOptions:
    """What to measure: ``device`` is ``all``, ``cpu`` or ``cuda:N``; ``storage`` a directory to read, or None."""

    quick: bool = False
    device: str = "all"
    storage: Path | None = None
    catalog_paths: tuple[Path, ...] = ()


def resolve_devices(device: str) -> tuple[str, ...]:
    """``all`` is the CPU and every visible GPU; ``cuda:N`` must be visible to torch."""
    import torch

    gpus = tuple(f"cuda:{i}" for i in range(torch.cuda.device_count())) if torch.cuda.is_available() else ()
    text = device.strip().lower()
    if text == "all":
        return ("cpu", *gpus)
    if text == "cpu" or text in gpus:
        return (text,)
    seen = ", ".join(("cpu", *gpus))
    why = "torch sees no GPU (torch.cuda.is_available() is False)" if not gpus else f"visible here: {seen}"
    raise InputError(
        f"--device {device!r} is not a device on this machine: {why}", f"use --device all, or one of {seen}"
    )


def collective_sizes(*, quick: bool) -> tuple[int, ...]:
    """Message sizes from latency-bound to bandwidth-bound, x4 apart (nccl-tests sweeps x2; x4 halves the time)."""
    if quick:
        return (64 * _KIB, 1 * _MIB, 16 * _MIB)
    return tuple(_KIB * 4**k for k in range(10))  # 1 KiB .. 256 MiB


def run_bench(options: BenchOptions, progress: Progress | None = None) -> BenchResult:
    """Measure everything ``options`` asks for on this machine and compare it with the catalog."""
    import torch

    from computewise.bench.collectives import measure_collectives
    from computewise.bench.reference import REFERENCE_ENTRY_POINT, measure_reference_steps

    started = datetime.now(UTC).isoformat(timespec="seconds")
    devices = resolve_devices(options.device)
    catalog = load_catalog(options.catalog_paths)
    stages = _Stages(progress, 4 * len(devices) + 1 + (1 if options.storage else 0))
    notes: list[str] = []
    described: list[Device] = []
    matmul: list[MatmulFigure] = []
    bandwidth: list[BandwidthFigure] = []
    launch: list[LaunchFigure] = []
    skipped: list[Skipped] = []
    for device in devices:
        row = _catalog_row(catalog, device)
        described.append(Device(device, _device_name(device), row.slug if row else None))
        notes.extend(_row_note(device, described[-1].name, row))
        dtypes, missing = matmul_dtypes(device)
        skipped.extend(missing)
        for dtype in dtypes:
            sheet = _sheet_tflops(row, dtype)
            stages.say(f"{device} {dtype} matmul")
            matmul.append(
                measure_matmul(
                    device,
                    dtype,
                    matmul_sizes(device, quick=options.quick),
                    quick=options.quick,
                    datasheet_tflops=sheet,
                    progress=stages.detail,
                )
            )
        stages.done()
        stages.say(f"{device} launch latency")
        launch.append(measure_launch(device))
        stages.done()
        stages.say(f"{device} memory bandwidth (triad)")
        sheet_gb_per_s = row.memory_bandwidth_bytes_per_s / 1e9 if row else None
        bandwidth.append(measure_triad(device, quick=options.quick, datasheet_gb_per_s=sheet_gb_per_s or None))
        stages.done()
        if device != "cpu":
            stages.say(f"{device} host<->device copies")
            bandwidth.extend(measure_copies(device, quick=options.quick))
        stages.done()
    stages.say("collectives")
    collectives = measure_collectives(
        _LOCAL_RANKS, collective_sizes(quick=options.quick), quick=options.quick, progress=stages.detail
    )
    gpus = [d for d in devices if d != "cpu"]
    if len(gpus) >= 2 and options.device == "all":
        collectives += measure_collectives(
            len(gpus), collective_sizes(quick=options.quick), quick=options.quick, progress=stages.detail, device="cuda"
        )
    stages.done()
    storage: tuple[StorageFigure, ...] = ()
    if options.storage is not None:
        from computewise.bench.storage import measure_storage

        stages.say(f"storage {options.storage}")
        storage = measure_storage(options.storage, quick=options.quick, progress=stages.detail)
        stages.done()
    reference: list[ReferenceStep] = []
    for device in devices:
        stages.say(f"{device} reference steps")
        fp32 = [f.peak_tflops for f in matmul if f.device == device and f.dtype == "fp32"]
        steps = measure_reference_steps(
            device, fp32[0] * 1e12 if fp32 else None, quick=options.quick, progress=stages.detail
        )
        if not steps:
            why = f"{REFERENCE_ENTRY_POINT} is not importable here: run bench from the repository root"
            skipped.append(Skipped(device, "reference steps", why))
        reference.extend(steps)
        stages.done()
    if "cpu" in devices:
        notes.append(f"CPU figures use {torch.get_num_threads()} torch threads on {usable_cpus()} usable CPUs")
    return BenchResult(
        host=socket.gethostname(),
        date=started,
        cpu=cpu_model_name(),
        threads=torch.get_num_threads(),
        quick=options.quick,
        devices=tuple(described),
        matmul=tuple(matmul),
        bandwidth=tuple(bandwidth),
        launch=tuple(launch),
        collectives=tuple(collectives),
        storage=tuple(storage),
        reference=tuple(reference),
        comparisons=_comparisons(matmul, bandwidth),
        skipped=tuple(skipped),
        notes=tuple(notes),
    )


def _comparisons(matmul: list[MatmulFigure], bandwidth: list[BandwidthFigure]) -> tuple[Comparison, ...]:
    found = [compare_matmul(f) for f in matmul] + [compare_bandwidth(f) for f in bandwidth]
    return tuple(c for c in found if c is not None)


def _catalog_row(catalog: Catalog, device: str) -> Accelerator | None:
    import torch

    if device == "cpu":
        return match_cpu(catalog, cpu_model_name())
    properties = torch.cuda.get_device_properties(device)
    return catalog.match_device(properties.name, float(properties.total_memory))


def _sheet_tflops(row: Accelerator | None, dtype: str) -> float | None:
    """The data sheet's dense peak for exactly this dtype (no fallback: tf32 is not fp32's figure), or None."""
    flops = next((value for key, value in row.peak_flops.items() if key == dtype), 0.0) if row else 0.0
    return flops / 1e12 if flops else None


def _device_name(device: str) -> str:
    """The CPU's model name, or the GPU's as the CUDA driver reports it (the same string NVML gives)."""
    if device == "cpu":
        return cpu_model_name()
    import torch

    return str(torch.cuda.get_device_name(device))


def _row_note(device: str, name: str, row: Accelerator | None) -> list[str]:
    if row is None:
        where = user_catalog_dir() / "accelerators.csv"
        kind = "CPU" if device == "cpu" else "GPU"
        return [
            f"{device}: no data-sheet row for this {kind} ({name}); add one to the user catalog ({where}) "
            "to compare the figures with it"
        ]
    note = f"{device}: compared with the data sheet of {row.name} ({row.slug}, {row.source}, retrieved {row.retrieved})"
    if device == "cpu":
        note += f"; the sheet is for the whole socket and this process may use {usable_cpus()} CPUs"
    return [note]


class _Stages:
    """Counts finished stages for the bar; ``detail`` passes a measuring function's own messages through."""

    def __init__(self, progress: Progress | None, total: int) -> None:
        self._progress, self._total, self._done, self._stage = progress, max(total, 1), 0, ""

    def say(self, stage: str) -> None:
        self._stage = stage
        self.detail("")

    def detail(self, message: str) -> None:
        if self._progress is not None:
            text = (
                f"{self._stage}: {message}"
                if message and not message.startswith(self._stage)
                else (message or self._stage)
            )
            self._progress(text, self._done, self._total)

    def done(self) -> None:
        self._done += 1
        self.detail("")
