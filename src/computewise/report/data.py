"""``computewise data``: bench's table (each loader configuration, the verdict, the advice) and convert's lines."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.text import Text

from computewise.report.prose import print_prose
from computewise.report.rows import Grid
from computewise.report.table import print_table
from computewise.units import format_bytes, format_count

if TYPE_CHECKING:
    from computewise.data.convert import ConvertResult
    from computewise.data.result import DataBenchResult, Measurement

__all__ = ["data_bench_grid", "print_convert", "print_data_bench"]

_HEADERS = ("workers", "prefetch", "pin", "samples/s", "read/s", "1st batch", "CPU/worker", "main CPU", "samples")


def _row(m: Measurement) -> tuple[str, ...]:
    return (
        str(m.workers),
        str(m.prefetch),
        "yes" if m.pin_memory else "no",
        format_count(m.samples_per_s),
        f"{format_bytes(m.bytes_per_s)}/s",
        f"{m.first_batch_s * 1e3:.0f} ms",
        f"{m.cpu_per_worker_pct:.0f} %",
        f"{100 * m.cpu_main_s / m.elapsed_s if m.elapsed_s > 0 else 0:.0f} %",
        f"{m.samples:,}" + ("" if m.complete else "*"),
    )


def data_bench_grid(r: DataBenchResult) -> Grid:
    """One row per configuration; on a narrow terminal pinning, prefetch, main CPU and first batch go first."""
    rows = tuple(_row(m) for m in r.measurements)
    return Grid(_HEADERS, rows, numeric=frozenset(range(len(_HEADERS))), drop_order=(2, 1, 7, 5))


def print_data_bench(r: DataBenchResult, console: Console) -> None:
    """What was read, the table, then what the job would see and what to change."""
    size = f", {format_bytes(r.total_bytes)} in {r.files} file(s)" if r.files else ""
    console.print(f"[bold]{r.source}[/bold] ({r.format}{size}); loader: {r.loader}", highlight=False)
    print_table(data_bench_grid(r), console)
    if not all(m.complete for m in r.measurements):
        console.print("* stopped at --time-per-config before the end of the data", highlight=False)
    console.print(f"bytes {r.bytes_kind}; CPU: {r.cpu}, {r.usable_cpus} usable cores", highlight=False)
    if r.verdict is not None and r.demand is not None:
        print_prose(console, Text(r.verdict.text, style="bold"))
        print_prose(console, f"  demand: {r.demand.basis}", markup=False)
    for advice in r.advice:
        how = "measured" if advice.measured else "estimated"
        print_prose(console, Text.assemble(f"- {advice.change}  ", (f"({how}: {advice.evidence})", "dim")))
    for note in r.notes:
        print_prose(console, f"note: {note}", style="dim", markup=False)


def print_convert(r: ConvertResult, console: Console) -> None:
    """What was written, and how much faster it reads back than the row format it came from."""
    print_prose(
        console,
        f"wrote {r.target}: {format_count(r.rows)} rows, {format_bytes(r.target_bytes)} "
        f"(from {format_bytes(r.source_bytes)}) in {r.convert_s:.2f} s",
        markup=False,
    )
    print_prose(
        console,
        f"read back: {r.source_read_s:.2f} s as {Path(r.source).suffix.lstrip('.').upper() or 'text'}, "
        f"{r.target_read_s:.2f} s as Parquet ({r.read_speedup:.1f}x faster)",
        markup=False,
    )
