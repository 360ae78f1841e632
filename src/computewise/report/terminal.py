"""Compact Rich tables for ``estimate``, ``plan`` and ``compare-onprem``.

Only rich is imported: the CLI prints these on every run and must start fast. Values come from
:mod:`computewise.report.rows`, shared with the HTML page. Every string from the dicts is passed as
``Text``, never as markup, so a model name like ``[org]/llama`` cannot turn into a style tag.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich import box
from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from computewise.report.rows import (
    Grid,
    break_even_grid,
    estimate_setup,
    estimate_summary,
    fit,
    format_share,
    group_rejections,
    memory_parts,
    memory_peaks,
    option_grid,
    plural,
    recommendation,
    rejection_line,
    scaling_grid,
    step_rows,
)
from computewise.units import format_bytes

__all__ = ["MAX_REASONS", "print_break_even", "print_estimate", "print_plan"]

MAX_REASONS = 10  # rejection reasons printed in all; the rest are one --json away


def print_pairs(rows: Sequence[tuple[str, str]], console: Console) -> None:
    """Label-value lines without a frame: a report's setup or verdict block."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    for label, value in rows:
        grid.add_row(Text(label), Text(value))
    console.print(grid)


def _table() -> Table:
    # The box's blank divider is the only gap between columns: a 120-column terminal fits the candidate table.
    return Table(box=box.SIMPLE_HEAD, padding=0, pad_edge=False, show_edge=False)


def _heading(title: str, console: Console) -> None:
    # A blank line and a bold title, not a table title, which Rich would wrap to the table's width.
    console.print()
    console.print(Text(title, style="bold"))


def _print_grid(grid: Grid, title: str, console: Console) -> None:
    """Numbers keep their full width on a narrow terminal; only the text columns fold to make room."""
    table = _table()
    for i, header in enumerate(grid.headers):
        if i in grid.numeric:
            widest = max((len(row[i]) for row in grid.rows), default=0)
            table.add_column(header, justify="right", no_wrap=True, min_width=max(widest, len(header)))
        else:
            table.add_column(header, justify="left")
    for row in grid.rows:
        table.add_row(*(Text(cell) for cell in row))
    _heading(title, console)
    console.print(table)


def _print_memory(memory: dict[str, Any], console: Console) -> None:
    parts = memory_parts(memory)
    total = sum(value for _, value in parts)
    table = _table()
    table.add_column("part")
    table.add_column("size", justify="right")
    table.add_column("share", justify="right")
    for label, value in parts:
        table.add_row(Text(label), Text(format_bytes(value)), Text(format_share(value / total) if total else ""))
    for label, value in memory_peaks(memory) or [("total", total)]:
        style = "bold" if label == "total" else ""
        table.add_row(Text(label, style=style), Text(format_bytes(value), style=style), "")
    _heading("memory per device", console)
    console.print(table)
    verdict = fit(memory)
    style = "red bold" if verdict.fits is False else "green" if verdict.fits else ""
    console.print(Text(verdict.text, style=style))


def _print_notes(notes: Sequence[str], console: Console) -> None:
    if notes:
        console.print()
    for note in notes:
        console.print(Text(f"· {note}", style="dim"))


def print_estimate(d: dict[str, Any], console: Console) -> None:
    """Memory first (does it fit?), then what it takes: FLOPs, time, throughput, cost, energy, CO2."""
    console.print(Text(estimate_setup(d), style="bold"))
    _print_memory(d["memory"], console)
    summary = Table.grid(padding=(0, 2))
    summary.add_column()
    summary.add_column(justify="right")
    summary.add_column(style="dim")
    for label, value, detail in estimate_summary(d):
        summary.add_row(Text(label), Text(value), Text(detail))
    console.print()
    console.print(summary)
    _print_step(d, console)
    _print_notes(d.get("notes", []), console)


def _print_step(d: dict[str, Any], console: Console) -> None:
    """Where one training step goes, and the part to attack first."""
    rows = step_rows(d)
    if not rows:
        return
    _heading("where a step goes", console)
    grid = Table.grid(padding=(0, 2))
    grid.add_column()
    grid.add_column(justify="right")
    grid.add_column(justify="right", style="dim")
    for part, seconds, share in rows:
        grid.add_row(Text(part), Text(seconds), Text(share))
    console.print(grid)
    found = d["time"].get("bottleneck")
    if found:
        console.print(Text(f"→ {found['advice']}", style="bold"))


def _print_rejections(rejected: Sequence[dict[str, Any]], console: Console) -> None:
    """Each stage with its count, and a fair share of the reasons: one noisy stage must not hide the others."""
    groups = group_rejections(rejected)
    if not groups:
        return
    _heading("rejected", console)
    per_stage = max(1, MAX_REASONS // len(groups))
    for group in groups:
        console.print(
            Text.assemble(
                ("  " + group.stage, "bold"),
                f": {group.candidates} candidate configurations ({plural(len(group.rejections), 'rejection')})",
            )
        )
        for r in group.rejections[:per_stage]:
            console.print(Text(f"    {rejection_line(r)}"))
        hidden = len(group.rejections) - per_stage
        if hidden > 0:
            console.print(Text(f"    ... {hidden} more, see --json", style="dim"))


def print_plan(d: dict[str, Any], console: Console, top: int = 10) -> None:
    """Recommendation, frontier, top candidates, rejections, then the size of the search."""
    body = Table.grid(padding=(0, 2))
    body.add_column(style="bold")
    body.add_column()
    for label, value in recommendation(d["recommended"]):
        body.add_row(Text(label), Text(value))
    console.print(Panel(body, title="recommended", title_align="left", box=box.ROUNDED, expand=False))
    pareto = d.get("pareto", [])
    # A one-point frontier is the recommendation again.
    if len(pareto) > 1:
        _print_grid(option_grid(pareto), "cost-vs-time frontier (fastest first)", console)
    candidates = d.get("candidates", [])[:top]
    feasible = int(d.get("feasible", len(candidates)))
    if candidates:
        title = f"top {len(candidates)} of {feasible} feasible" if feasible > len(candidates) else "candidates"
        _print_grid(option_grid(candidates, ranked=True), title, console)
    scaling = d.get("scaling", [])
    if scaling:
        _print_grid(scaling_grid(scaling), "scaling of the recommended instance type", console)
    _print_rejections(d.get("rejected", []), console)
    console.print()
    console.print(Text(f"considered {d['considered']} candidate configurations, {feasible} feasible", style="dim"))


def print_break_even(rows: Sequence[dict[str, Any]], console: Console) -> None:
    """Owning beats renting once the server is busy more than the break-even share of its hours."""
    if not rows:
        console.print(Text("no on-premises server with a rental price to compare", style="dim"))
        return
    _print_grid(break_even_grid(rows), "owning vs renting", console)
    console.print(
        Text("break-even utilization = owned cost per hour at full use / rental price of the same GPUs", style="dim")
    )
