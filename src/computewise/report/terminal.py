"""Compact Rich tables for ``estimate``, ``plan`` and ``compare-onprem``.

Only rich is imported: the CLI prints these on every run and must start fast. Values come from
:mod:`computewise.report.rows`, shared with the HTML page. Every string from the results is passed as
``Text``, never as markup, so a model name like ``[org]/llama`` cannot turn into a style tag.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich import box
from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from computewise.report.rows import (
    BREAK_EVEN_NOTE,
    Grid,
    break_even_grid,
    estimate_setup,
    estimate_summary,
    fit,
    group_rejections,
    memory_grid,
    option_grid,
    recommendation,
    rejection_line,
    scaling_grid,
    step_rows,
)
from computewise.report.table import print_details, print_table

if TYPE_CHECKING:
    from computewise.estimate.figures import DeviceMemory
    from computewise.estimate.single import InferEstimate, TrainEstimate
    from computewise.plan.infer import InferPlan
    from computewise.plan.onprem import BreakEven
    from computewise.plan.result import Plan, Rejection

__all__ = ["MAX_REASONS", "print_break_even", "print_estimate", "print_plan"]

MAX_REASONS = 10  # rejection reasons printed in all; the rest are one --json away


def print_pairs(rows: Sequence[tuple[str, str]], console: Console) -> None:
    """Label-value lines without a frame: a report's setup or verdict block."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    for label, value in rows:
        grid.add_row(Text(label), Text(value))
    console.print(grid)


def _heading(title: str, console: Console) -> None:
    # A blank line and a bold title, not a table title, which Rich would wrap to the table's width.
    console.print()
    console.print(Text(title, style="bold"))


def _print_grid(grid: Grid, title: str, console: Console) -> None:
    """A titled table: numbers keep their full width on a narrow terminal, text folds, extra columns hide."""
    _heading(title, console)
    print_table(grid, console)


def _print_memory(memory: DeviceMemory, console: Console) -> None:
    grid = memory_grid(memory)
    _heading("memory per device", console)
    print_table(grid, console, row_styles=["bold" if row[0] == "total" else "" for row in grid.rows])


def _print_fit(memory: DeviceMemory, console: Console) -> None:
    """Whether it fits, the first thing said: a configuration that does not fit is neither timed nor priced."""
    verdict = fit(memory)
    style = "red bold" if verdict.fits is False else "green" if verdict.fits else ""
    text = f"{verdict.text}, so nothing is timed or priced" if verdict.fits is False else verdict.text
    console.print(Text(text, style=style))


def _print_notes(notes: Sequence[str], console: Console) -> None:
    if notes:
        console.print()
    for note in notes:
        console.print(Text(f"· {note}", style="dim"))


def print_estimate(e: TrainEstimate | InferEstimate, console: Console) -> None:
    """Whether it fits first, then memory, then what it takes: FLOPs, time, throughput, cost, energy, CO2."""
    console.print(Text(estimate_setup(e), style="bold"))
    _print_fit(e.device_memory, console)
    _print_memory(e.device_memory, console)
    console.print()
    print_details(estimate_summary(e), console)
    if e.kind == "train":
        _print_step(e, console)
    _print_notes(e.all_notes, console)


def _print_step(e: TrainEstimate, console: Console) -> None:
    """Where one training step goes, and the part to attack first."""
    rows = step_rows(e.step_breakdown_s)
    if not rows:
        return
    _heading("where a step goes", console)
    print_details(rows, console, numeric_detail=True)
    console.print(Text(f"→ {e.advice}", style="bold"))


def _print_rejections(rejected: Sequence[Rejection], console: Console) -> None:
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
                f": {group.counts()}",
            )
        )
        for r in group.rejections[:per_stage]:
            console.print(Text(f"    {rejection_line(r)}"))
        hidden = len(group.rejections) - per_stage
        if hidden > 0:
            console.print(Text(f"    ... {hidden} more, see --json", style="dim"))


def print_plan(plan: Plan | InferPlan, console: Console) -> None:
    """Recommendation, frontier, the candidates ``--top`` keeps (every one with --top 0), rejections, then the
    size of the search."""
    body = Table.grid(padding=(0, 2))
    body.add_column(style="bold")
    body.add_column()
    for label, value in recommendation(plan.recommended):
        body.add_row(Text(label), Text(value))
    console.print(Panel(body, title="recommended", title_align="left", box=box.ROUNDED, expand=False))
    for warning in plan.warnings if plan.kind == "train" else ():
        console.print(Text(f"warning: {warning}", style="yellow bold"))
    # A one-point frontier is the recommendation again.
    if len(plan.pareto) > 1:
        _print_grid(option_grid(plan.pareto), "cost-vs-time frontier (fastest first)", console)
    candidates = plan.shown
    feasible = len(plan.candidates)
    if candidates:
        title = f"top {len(candidates)} of {feasible} feasible" if feasible > len(candidates) else "candidates"
        _print_grid(option_grid(candidates, ranked=True), title, console)
    if plan.kind == "train" and plan.scaling:
        _print_grid(scaling_grid(plan.scaling), "scaling of the recommended instance type", console)
    _print_rejections(plan.rejected, console)
    _print_notes(plan.notes if plan.kind == "train" else (), console)
    console.print()
    console.print(Text(f"considered {plan.considered} candidate configurations, {feasible} feasible", style="dim"))


def print_break_even(rows: Sequence[BreakEven], console: Console) -> None:
    """Owning beats renting once the server is busy more than the break-even share of its hours."""
    if not rows:
        console.print(Text("no on-premises server with a rental price to compare", style="dim"))
        return
    _print_grid(break_even_grid(rows), "owning vs renting", console)
    console.print(Text(BREAK_EVEN_NOTE, style="dim"))
