"""``computewise distill``'s tables: teacher against student, the grade, the speed-up, what it took."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.text import Text

from computewise.report.rows import Grid
from computewise.report.table import print_table
from computewise.report.terminal import print_pairs
from computewise.units import format_count, format_duration, format_usd

if TYPE_CHECKING:
    from computewise.distill.run import DistillResult


def distill_grid(r: DistillResult) -> Grid:
    """Teacher and student side by side, each batch size at the exported variant's precision and runtime."""
    rows = [("parameters", format_count(r.teacher_parameters), format_count(r.student_parameters), "")]
    rows.append((r.metric, f"{r.teacher_quality:.4f}", f"{r.student_quality:.4f}", ""))
    for speed in r.speeds:
        batch = speed.batch_size
        rows.append(
            (
                f"items/s at batch {batch}",
                f"{speed.teacher_items_per_s:,.0f}",
                f"{speed.student_items_per_s:,.0f}",
                f"{speed.throughput_speedup:.2f}x",
            )
        )
        rows.append(
            (
                f"p50 latency at batch {batch}",
                f"{speed.teacher_p50_ms:.3g} ms",
                f"{speed.student_p50_ms:.3g} ms",
                f"{speed.latency_speedup:.2f}x",
            )
        )
    return Grid(("", "teacher", "student", "student gain"), tuple(rows), frozenset({1, 2, 3}))


def print_distill(r: DistillResult, console: Console) -> None:
    """What was distilled, the comparison table, then the verdict and where the student went."""
    console.print(Text(f"computewise distill: {r.teacher} -> {r.student}", style="bold"))
    print_pairs(
        [
            ("student", r.student_description),
            ("inputs", f"{r.train_examples} to train on, {r.held_out_examples} held aside to grade"),
            (
                "training",
                f"{r.epochs} epochs, {r.steps} steps in {format_duration(r.train_time_s)}; "
                f"loss {r.first_loss:.4g} -> {r.last_loss:.4g}",
            ),
            (
                "took",
                f"{format_duration(r.wall_time_s)} in all, {format_usd(r.cost_usd)} at "
                f"{format_usd(r.usd_per_hour)}/h ({r.price_explanation})",
            ),
        ],
        console,
    )
    console.print()
    print_table(distill_grid(r), console)
    console.print(Text(f"speeds: both exported as {r.variant} (FP32), same threads and batching", style="dim"))
    console.print()
    verdict = "within" if r.meets_budget else "outside"
    style = "bold green" if r.meets_budget else "bold yellow"
    console.print(Text(f"the student is {verdict} the {r.max_drop} quality budget", style=style))
    if r.exported_to:
        console.print(f"  exported {r.exported_to}: `computewise serve {r.exported_to}` runs it", markup=False)
