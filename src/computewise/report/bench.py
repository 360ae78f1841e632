"""``computewise bench``: the measured figures as tables, the data-sheet verdicts, and the efficiency curve.

Works on the typed ``BenchResult`` (a saved ``bench --json`` reads back with ``BenchResult.from_dict``
and renders the same), with the figures it derives, the efficiency by size, taken from it. The
terminal and the HTML page print the same grids; the page adds the matmul efficiency curve (share
of the best measured TFLOP/s by matrix size), the figure the planner takes for small matmuls.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import TYPE_CHECKING

from rich.console import Console
from rich.text import Text

from computewise.report.html import grid_table, page
from computewise.report.prose import print_prose
from computewise.report.rows import Grid
from computewise.report.svg import PALETTE, Axis, Series, xy_chart
from computewise.report.table import print_table
from computewise.report.terminal import print_pairs
from computewise.units import format_bytes

if TYPE_CHECKING:
    from computewise.bench.result import BenchResult, MatmulFigure
    from computewise.bench.timing import Measured

__all__ = ["bench_grids", "bench_html", "bench_setup", "print_bench"]


def _spread(measured: Measured, digits: int = 3, scale: float = 1.0) -> str:
    """'0.171 (0.158-0.174)': the median, then the spread it came with, each times ``scale`` (1e6: seconds as us)."""
    median, low, high = (measured.median * scale, measured.low * scale, measured.high * scale)
    return f"{median:.{digits}g} ({low:.{digits}g}-{high:.{digits}g})"


def _optional(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}g}"


def bench_setup(r: BenchResult) -> list[tuple[str, str]]:
    """Where and when it ran, on what, and whether it was the quick sweep."""
    devices = "; ".join(
        f"{dev.device} {dev.name}" + (f" (catalog: {dev.catalog_slug})" if dev.catalog_slug else "")
        for dev in r.devices
    )
    return [
        ("host", f"{r.host}, {r.date}" + (" (--quick)" if r.quick else "")),
        ("devices", devices),
        ("cpu threads", str(r.threads)),
    ]


def _matmul_grid(r: BenchResult) -> Grid:
    rows = []
    for figure in r.matmul:
        for point, (_, fraction) in zip(figure.points, figure.efficiency(), strict=True):
            rows.append(
                (
                    figure.device,
                    figure.dtype,
                    str(point.size),
                    _spread(point.tflops),
                    f"{fraction:.0%}",
                    _optional(figure.datasheet_tflops),
                )
            )
    headers = ("device", "dtype", "size", "TFLOP/s median (spread)", "of best", "data sheet")
    return Grid(headers, tuple(rows), frozenset({2, 3, 4, 5}))


def _bandwidth_grid(r: BenchResult) -> Grid:
    rows = tuple((f.device, f.kind, _spread(f.gb_per_s), _optional(f.datasheet_gb_per_s, 4)) for f in r.bandwidth)
    return Grid(("device", "kind", "GB/s median (spread)", "data sheet"), rows, frozenset({2, 3}))


def _launch_grid(r: BenchResult) -> Grid:
    """Microseconds per launch of a one-element kernel (and, on a GPU, of a 128^3 matmul); a result saved
    before it was measured has none."""
    rows = tuple(
        (
            f.device,
            _spread(f.back_to_back_s, scale=1e6),
            _spread(f.synchronised_s, scale=1e6),
            "n/a" if f.matmul_back_to_back_s is None else _spread(f.matmul_back_to_back_s, scale=1e6),
        )
        for f in r.launch
    )
    headers = ("device", "back to back (us)", "synchronised (us)", "128^3 mm back to back (us)")
    return Grid(headers, rows, frozenset({1, 2, 3}))


def _collectives_grid(r: BenchResult) -> Grid:
    rows = tuple(
        (
            f"{c.op} ({c.backend}, {c.world_size} ranks)",
            format_bytes(c.message_bytes),
            f"{c.time_s.median * 1e6:.1f}",
            f"{c.algbw_gb_per_s:.2f}",
            f"{c.busbw_gb_per_s:.2f}",
        )
        for c in r.collectives
    )
    headers = ("collective", "size", "time (us)", "algbw (GB/s)", "busbw (GB/s)")
    return Grid(headers, rows, frozenset({1, 2, 3, 4}))


def _storage_grid(r: BenchResult) -> Grid:
    rows = tuple(
        (s.pattern, format_bytes(s.block_bytes), format_bytes(s.file_bytes), _spread(s.gb_per_s), s.cache)
        for s in r.storage
    )
    headers = ("read", "block", "file", "GB/s median (spread)", "page cache")
    return Grid(headers, rows, frozenset({1, 2, 3}))


def _reference_grid(r: BenchResult) -> Grid:
    rows = tuple(
        (
            f"{s.kind} {s.model}",
            s.device,
            s.dtype,
            f"{s.step_s.median * 1e3:.2f} ({s.step_s.low * 1e3:.2f}-{s.step_s.high * 1e3:.2f})",
            f"{s.tflops:.3g}",
            "-" if s.mfu is None else f"{s.mfu:.0%}",
        )
        for s in r.reference
    )
    headers = ("step", "device", "dtype", "ms median (spread)", "TFLOP/s", "of fp32 peak")
    return Grid(headers, rows, frozenset({3, 4, 5}))


def bench_grids(r: BenchResult) -> list[tuple[str, Grid]]:
    """The titled tables, in the order measured; a section with nothing measured is left out."""
    sections = [
        ("dense matmul", _matmul_grid(r)),
        ("memory bandwidth", _bandwidth_grid(r)),
        ("launch latency (one-element kernel)", _launch_grid(r)),
        ("collectives (nccl-tests bus bandwidth)", _collectives_grid(r)),
        (f"storage {r.storage[0].path}" if r.storage else "storage", _storage_grid(r)),
        ("reference steps", _reference_grid(r)),
    ]
    return [(title, grid) for title, grid in sections if grid.rows]


def _verdicts(r: BenchResult) -> list[tuple[str, bool]]:
    """Data-sheet comparisons (flagged ones marked), skipped figures and notes, as (line, flagged)."""
    lines = [(f"{c.device}: {c.text}", c.low) for c in r.comparisons]
    lines += [(f"{s.device}: {s.figure} skipped: {s.reason}", False) for s in r.skipped]
    lines += [(note, False) for note in r.notes]
    return lines


def print_bench(r: BenchResult, console: Console) -> None:
    print_pairs(bench_setup(r), console)
    for title, grid in bench_grids(r):
        console.print()
        console.print(Text(title, style="bold"))
        print_table(grid, console)
    if r.matmul:
        console.print()
    for figure in r.matmul:
        console.print(Text(f"{figure.device} {figure.dtype} matmul peak: {figure.peak_tflops:.3g} TFLOP/s"))
    verdicts = _verdicts(r)
    if verdicts:
        console.print()
    for line, flagged in verdicts:
        # Folded at spaces only: a path or command in a note stays whole to be copied.
        print_prose(console, Text(f"{'!' if flagged else '·'} {line}", style="bold red" if flagged else "dim"))


def _efficiency_chart(matmul: Sequence[MatmulFigure]) -> str:
    series = [
        Series(
            f"{f.device} {f.dtype} (peak {f.peak_tflops:.3g} TFLOP/s)",
            tuple((float(size), fraction) for size, fraction in f.efficiency()),
            PALETTE[i % len(PALETTE)],
            line=True,
        )
        for i, f in enumerate(matmul)
    ]
    sizes = tuple(sorted({float(size) for f in matmul for size, _ in f.efficiency()}))
    return xy_chart(
        "matmul efficiency by size (share of the best measured)",
        series,
        Axis("square matrix size n", lambda v: f"{v:g}", log=True, ticks=sizes),
        Axis("share of the peak", lambda v: f"{v:.0%}", domain=(0.0, 1.05)),
    )


def bench_html(r: BenchResult) -> str:
    """The page: setup, the efficiency curve, every table, then the verdicts, flagged ones in red."""
    title = f"computewise bench: {r.host}"
    body = [f"<h1>{escape(title)}</h1>"]
    body += [f'<p class="muted">{escape(label)}: {escape(value)}</p>' for label, value in bench_setup(r)]
    if r.matmul:
        body += ["<h2>Matmul efficiency</h2>", _efficiency_chart(r.matmul)]
    for heading, grid in bench_grids(r):
        body += [f"<h2>{escape(heading.capitalize())}</h2>", grid_table(grid)]
    verdicts = _verdicts(r)
    if verdicts:
        items = "\n".join(
            f'<li class="{"bad" if flagged else "muted"}">{escape(line)}</li>' for line, flagged in verdicts
        )
        body += ["<h2>Against the data sheet, and notes</h2>", f"<ul>\n{items}\n</ul>"]
    return page(title, body)
