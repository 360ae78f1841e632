"""Memory bandwidth: a STREAM triad on the device, and on GPUs the host<->device copies, pinned and pageable.

The triad is STREAM's ``a = b + s * c`` (McCalpin, "Memory Bandwidth and Machine Balance in Current
High Performance Computers", 1995) on float32 arrays, counted as STREAM counts it: 3 arrays x 4
bytes per element per pass, reads and the write, no write-allocate traffic. STREAM asks for arrays
of at least four times the last-level cache so the figure is memory, not cache; the arrays here
are 128 MiB (quick: 64 MiB) on a CPU, and 1 GiB on a GPU, whose L2 is tens of MiB. torch runs
``torch.add(b, c, alpha=s, out=a)`` as one fused pass over all cores, so no temporary is counted.
Passes are timed back to back between one pair of synchronisations, on a GPU replayed from a CUDA
graph (``timing.time_back_to_back``), so the figure is the memory's, not the launches'.

Host<->device copies move one buffer each way, from page-locked (pinned) host memory, which the GPU
reads by DMA, and from ordinary pageable memory, which the driver first copies into a pinned
staging buffer; the gap between the two is what ``pin_memory=True`` buys a data loader.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from computewise.bench.result import BandwidthFigure
from computewise.bench.timing import CALL_S, Measured, calls_to_fill, device_sync, time_back_to_back, time_repeats

if TYPE_CHECKING:
    import torch

__all__ = ["STREAM_BYTES_PER_ELEMENT", "copy_kinds", "measure_copies", "measure_triad", "triad_elements"]

STREAM_BYTES_PER_ELEMENT = 3 * 4  # b and c read, a written; float32
_MIB = 1 << 20
_QUICK_REPEATS, _FULL_REPEATS = 5, 10


def triad_elements(device: str, *, quick: bool) -> int:
    """float32 elements per array: at least four times a 32 MiB last-level cache on a CPU, 1 GiB on a GPU."""
    if device == "cpu":
        return (64 if quick else 128) * _MIB // 4
    return 1024 * _MIB // 4


def measure_triad(
    device: str, *, quick: bool, datasheet_gb_per_s: float | None = None, elements: int | None = None
) -> BandwidthFigure:
    """GB/s (1e9 bytes) of the STREAM triad on ``device``, median over repeats after a warm-up pass."""
    import torch

    n = elements if elements is not None else triad_elements(device, quick=quick)
    b = torch.rand(n, dtype=torch.float32, device=device)
    c = torch.rand(n, dtype=torch.float32, device=device)
    a = torch.empty(n, dtype=torch.float32, device=device)
    scalar = 3.0

    def triad() -> None:
        torch.add(b, c, alpha=scalar, out=a)

    count = calls_to_fill(triad, CALL_S, device=device)
    repeats = _QUICK_REPEATS if quick else _FULL_REPEATS
    times_s = time_back_to_back(triad, count=count, warmup=1, repeats=repeats, device=device, graph=True)
    rates = [STREAM_BYTES_PER_ELEMENT * n / t / 1e9 for t in times_s]
    return BandwidthFigure(device, "triad", Measured.of(rates), datasheet_gb_per_s)


def copy_kinds() -> tuple[str, ...]:
    return ("h2d-pinned", "h2d-pageable", "d2h-pinned", "d2h-pageable")


def measure_copies(device: str, *, quick: bool) -> tuple[BandwidthFigure, ...]:
    """GB/s of one host<->device copy of 64 MiB (quick) or 256 MiB, each direction, pinned and pageable.

    No data sheet is set: the catalog holds NVLink, not the PCIe link, so the comparison with the link's
    nominal rate is made in ``bench.compare``.
    """
    import torch

    n_bytes = (64 if quick else 256) * _MIB
    on_device = torch.empty(n_bytes, dtype=torch.uint8, device=device)
    figures = []
    for kind in copy_kinds():
        host = torch.empty(n_bytes, dtype=torch.uint8, pin_memory=kind.endswith("pinned"))
        copy = _copier(on_device, host, to_device=kind.startswith("h2d"))
        times_s = time_repeats(
            copy, warmup=1, repeats=_QUICK_REPEATS if quick else _FULL_REPEATS, sync=device_sync(device)
        )
        figures.append(BandwidthFigure(device, kind, Measured.of([n_bytes / t / 1e9 for t in times_s]), None))
    return tuple(figures)


def _copier(on_device: torch.Tensor, host: torch.Tensor, *, to_device: bool) -> Callable[[], None]:
    def copy() -> None:
        if to_device:
            on_device.copy_(host)
        else:
            host.copy_(on_device)

    return copy
