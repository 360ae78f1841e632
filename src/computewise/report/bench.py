"""``computewise bench``: the measured figures as tables, the data-sheet verdicts, and the efficiency curve.

Works on ``BenchResult.to_dict()`` only, so a saved ``bench --json`` renders the same later. The
terminal and the HTML page print the same grids; the page adds the matmul efficiency curve (share
of the best measured TFLOP/s by matrix size), the figure the planner takes for small matmuls.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import Any

from rich.console import Console
from rich.text import Text

from computewise.report.html import grid_table, page
from computewise.report.prose import print_prose
from computewise.report.rows import Grid
from computewise.report.svg import PALETTE, Axis, Series, xy_chart
from computewise.report.table import print_table
from computewise.report.terminal import print_pairs
from computewise.units import format_bytes

__all__ = ["bench_grids", "bench_html", "bench_setup", "print_bench"]


def _spread(measured: dict[str, Any], digits: int = 3) -> str:
    """'0.171 (0.158-0.174)': the median, then the spread it came with."""
    return f"{measured['median']:.{digits}g} ({measured['low']:.{digits}g}-{measured['high']:.{digits}g})"


def _optional(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}g}"


def bench_setup(d: dict[str, Any]) -> list[tuple[str, str]]:
    """Where and when it ran, on what, and whether it was the quick sweep."""
    devices = "; ".join(
        f"{dev['device']} {dev['name']}" + (f" (catalog: {dev['catalog_slug']})" if dev["catalog_slug"] else "")
        for dev in d["devices"]
    )
    return [
        ("host", f"{d['host']}, {d['date']}" + (" (--quick)" if d["quick"] else "")),
        ("devices", devices),
        ("cpu threads", str(d["threads"])),
    ]


def _matmul_grid(d: dict[str, Any]) -> Grid:
    rows = []
    for figure in d["matmul"]:
        for point, share in zip(figure["points"], figure["efficiency"], strict=True):
            rows.append(
                (
                    figure["device"],
                    figure["dtype"],
                    str(point["size"]),
                    _spread(point["tflops"]),
                    f"{share['fraction']:.0%}",
                    _optional(figure["datasheet_tflops"]),
                )
            )
    headers = ("device", "dtype", "size", "TFLOP/s median (spread)", "of best", "data sheet")
    return Grid(headers, tuple(rows), frozenset({2, 3, 4, 5}))


def _bandwidth_grid(d: dict[str, Any]) -> Grid:
    rows = tuple(
        (f["device"], f["kind"], _spread(f["gb_per_s"]), _optional(f["datasheet_gb_per_s"], 4)) for f in d["bandwidth"]
    )
    return Grid(("device", "kind", "GB/s median (spread)", "data sheet"), rows, frozenset({2, 3}))


def _launch_grid(d: dict[str, Any]) -> Grid:
    """Microseconds per launch of a one-element kernel; a result saved before it was measured has none."""

    def micros(measured: dict[str, Any]) -> str:
        return _spread({key: measured[key] * 1e6 for key in ("median", "low", "high")})

    rows = tuple((f["device"], micros(f["back_to_back_s"]), micros(f["synchronised_s"])) for f in d.get("launch", ()))
    return Grid(("device", "back to back (us)", "synchronised (us)"), rows, frozenset({1, 2}))


def _collectives_grid(d: dict[str, Any]) -> Grid:
    rows = tuple(
        (
            f"{c['op']} ({c['backend']}, {c['world_size']} ranks)",
            format_bytes(c["message_bytes"]),
            f"{c['time_s']['median'] * 1e6:.1f}",
            f"{c['algbw_gb_per_s']:.2f}",
            f"{c['busbw_gb_per_s']:.2f}",
        )
        for c in d["collectives"]
    )
    headers = ("collective", "size", "time (us)", "algbw (GB/s)", "busbw (GB/s)")
    return Grid(headers, rows, frozenset({1, 2, 3, 4}))


def _storage_grid(d: dict[str, Any]) -> Grid:
    rows = tuple(
        (
            s["pattern"],
            format_bytes(s["block_bytes"]),
            format_bytes(s["file_bytes"]),
            _spread(s["gb_per_s"]),
            s["cache"],
        )
        for s in d["storage"]
    )
    headers = ("read", "block", "file", "GB/s median (spread)", "page cache")
    return Grid(headers, rows, frozenset({1, 2, 3}))


def _reference_grid(d: dict[str, Any]) -> Grid:
    rows = tuple(
        (
            f"{r['kind']} {r['model']}",
            r["device"],
            r["dtype"],
            f"{r['step_s']['median'] * 1e3:.2f} ({r['step_s']['low'] * 1e3:.2f}-{r['step_s']['high'] * 1e3:.2f})",
            f"{r['tflops']:.3g}",
            "-" if r["mfu"] is None else f"{r['mfu']:.0%}",
        )
        for r in d["reference"]
    )
    headers = ("step", "device", "dtype", "ms median (spread)", "TFLOP/s", "of fp32 peak")
    return Grid(headers, rows, frozenset({3, 4, 5}))


def bench_grids(d: dict[str, Any]) -> list[tuple[str, Grid]]:
    """The titled tables, in the order measured; a section with nothing measured is left out."""
    sections = [
        ("dense matmul", _matmul_grid(d)),
        ("memory bandwidth", _bandwidth_grid(d)),
        ("launch latency (one-element kernel)", _launch_grid(d)),
        ("collectives (nccl-tests bus bandwidth)", _collectives_grid(d)),
        (f"storage {d['storage'][0]['path']}" if d["storage"] else "storage", _storage_grid(d)),
        ("reference steps", _reference_grid(d)),
    ]
    return [(title, grid) for title, grid in sections if grid.rows]


def _verdicts(d: dict[str, Any]) -> list[tuple[str, bool]]:
    """Data-sheet comparisons (flagged ones marked), skipped figures and notes, as (line, flagged)."""
    lines = [(f"{c['device']}: {c['text']}", bool(c["low"])) for c in d["comparisons"]]
    lines += [(f"{s['device']}: {s['figure']} skipped: {s['reason']}", False) for s in d["skipped"]]
    lines += [(note, False) for note in d["notes"]]
    return lines


def print_bench(d: dict[str, Any], console: Console) -> None:
    print_pairs(bench_setup(d), console)
    for title, grid in bench_grids(d):
        console.print()
        console.print(Text(title, style="bold"))
        print_table(grid, console)
    if d["matmul"]:
        console.print()
    for figure in d["matmul"]:
        console.print(Text(f"{figure['device']} {figure['dtype']} matmul peak: {figure['peak_tflops']:.3g} TFLOP/s"))
    verdicts = _verdicts(d)
    if verdicts:
        console.print()
    for line, flagged in verdicts:
        # Folded at spaces only: a path or command in a note stays whole to be copied.
        print_prose(console, Text(f"{'!' if flagged else '·'} {line}", style="bold red" if flagged else "dim"))


def _efficiency_chart(matmul: Sequence[dict[str, Any]]) -> str:
    series = [
        Series(
            f"{f['device']} {f['dtype']} (peak {f['peak_tflops']:.3g} TFLOP/s)",
            tuple((float(e["size"]), float(e["fraction"])) for e in f["efficiency"]),
            PALETTE[i % len(PALETTE)],
            line=True,
        )
        for i, f in enumerate(matmul)
    ]
    sizes = tuple(sorted({float(e["size"]) for f in matmul for e in f["efficiency"]}))
    return xy_chart(
        "matmul efficiency by size (share of the best measured)",
        series,
        Axis("square matrix size n", lambda v: f"{v:g}", log=True, ticks=sizes),
        Axis("share of the peak", lambda v: f"{v:.0%}", domain=(0.0, 1.05)),
    )


def bench_html(d: dict[str, Any]) -> str:
    """The page: setup, the efficiency curve, every table, then the verdicts, flagged ones in red."""
    title = f"computewise bench: {d['host']}"
    body = [f"<h1>{escape(title)}</h1>"]
    body += [f'<p class="muted">{escape(label)}: {escape(value)}</p>' for label, value in bench_setup(d)]
    if d["matmul"]:
        body += ["<h2>Matmul efficiency</h2>", _efficiency_chart(d["matmul"])]
    for heading, grid in bench_grids(d):
        body += [f"<h2>{escape(heading.capitalize())}</h2>", grid_table(grid)]
    verdicts = _verdicts(d)
    if verdicts:
        items = "\n".join(
            f'<li class="{"bad" if flagged else "muted"}">{escape(line)}</li>' for line, flagged in verdicts
        )
        body += ["<h2>Against the data sheet, and notes</h2>", f"<ul>\n{items}\n</ul>"]
    return page(title, body)
