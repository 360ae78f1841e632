"""``computewise distill``'s tables: teacher against student, the grade, the speed-up, what it took."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.text import Text

from computewise.report.rows import Grid
from computewise.report.table import print_table
from computewise.report.terminal import print_pairs
from computewise.units import format_count, format_duration, format_usd


def distill_grid(d: dict[str, Any]) -> Grid:
    """Teacher and student side by side, each batch size at the exported variant's precision and runtime."""
    rows = [("parameters", format_count(d["teacher_parameters"]), format_count(d["student_parameters"]), "")]
    rows.append((d["metric"], f"{d['teacher_quality']:.4f}", f"{d['student_quality']:.4f}", ""))
    for speed in d["speeds"]:
        batch = speed["batch_size"]
        rows.append(
            (
                f"items/s at batch {batch}",
                f"{speed['teacher_items_per_s']:,.0f}",
                f"{speed['student_items_per_s']:,.0f}",
                f"{speed['throughput_speedup']:.2f}x",
            )
        )
        rows.append(
            (
                f"p50 latency at batch {batch}",
                f"{speed['teacher_p50_ms']:.3g} ms",
                f"{speed['student_p50_ms']:.3g} ms",
                f"{speed['latency_speedup']:.2f}x",
            )
        )
    return Grid(("", "teacher", "student", "student gain"), tuple(rows), frozenset({1, 2, 3}))


def print_distill(d: dict[str, Any], console: Console) -> None:
    """What was distilled, the comparison table, then the verdict and where the student went."""
    console.print(Text(f"computewise distill: {d['teacher']} -> {d['student']}", style="bold"))
    print_pairs(
        [
            ("student", d["student_description"]),
            ("inputs", f"{d['train_examples']} to train on, {d['held_out_examples']} held aside to grade"),
            (
                "training",
                f"{d['epochs']} epochs, {d['steps']} steps in {format_duration(d['train_time_s'])}; "
                f"loss {d['first_loss']:.4g} -> {d['last_loss']:.4g}",
            ),
            (
                "took",
                f"{format_duration(d['wall_time_s'])} in all, {format_usd(d['cost_usd'])} at "
                f"{format_usd(d['usd_per_hour'])}/h ({d['price_explanation']})",
            ),
        ],
        console,
    )
    console.print()
    print_table(distill_grid(d), console)
    console.print(Text(f"speeds: both exported as {d['variant']} (FP32), same threads and batching", style="dim"))
    console.print()
    verdict = "within" if d["meets_budget"] else "outside"
    style = "bold green" if d["meets_budget"] else "bold yellow"
    console.print(Text(f"the student is {verdict} the {d['max_drop']} quality budget", style=style))
    if d["exported_to"]:
        console.print(f"  exported {d['exported_to']}: `computewise serve {d['exported_to']}` runs it", markup=False)
