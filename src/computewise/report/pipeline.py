"""The ``plan serve --pipeline`` tables: each stage sized and priced, the whole pipeline, cheaper placements."""

from __future__ import annotations

from typing import TYPE_CHECKING

from computewise.report.rows import Grid

if TYPE_CHECKING:
    from rich.console import Console

    from computewise.plan.pipeline import PipelinePlan

__all__ = ["pipeline_alternatives_grid", "pipeline_stages_grid", "print_pipeline"]


def print_pipeline(plan: PipelinePlan, console: Console) -> None:
    """Stages first, then the pipeline's p99 and price, then the placements that would cost less."""
    from rich.text import Text

    from computewise.report.table import print_table
    from computewise.report.terminal import print_pairs
    from computewise.units import format_usd

    console.print(Text(f"plan serve --pipeline at {plan.rps:g} requests/s", style="bold"))
    print_table(pipeline_stages_grid(plan), console)
    console.print()
    slo = (
        ""
        if plan.slo_p99_s is None
        else f" (SLO {plan.slo_p99_s * 1000:.0f} ms: {'met' if plan.meets_slo else 'MISSED'})"
    )
    print_pairs(
        [
            ("bottleneck", f"{plan.bottleneck.name}: the first stage to saturate as traffic grows"),
            (
                "p99 end to end",
                f"{plan.p99_s * 1000:.0f} ms{slo}; sum of stage p99s {plan.p99_upper_s * 1000:.0f} ms (upper bound)",
            ),
            ("cost", f"{format_usd(plan.usd_per_1000_requests)} per 1000 requests, {format_usd(plan.usd_per_h)}/h"),
        ],
        console,
    )
    if plan.alternatives:
        console.print()
        console.print(Text("cheaper placements (one stage moved)", style="bold"))
        print_table(pipeline_alternatives_grid(plan), console)
    for note in [plan.latency_rule, *plan.notes]:
        console.print(f"* {note}", style="dim", highlight=False, markup=False, emoji=False)


def pipeline_stages_grid(plan: PipelinePlan) -> Grid:
    from computewise.units import format_usd

    rows = tuple(
        (
            s.name,
            f"{s.gpus}x {s.accelerator}",
            str(s.batch),
            f"{s.fan_out:g}",
            f"{s.calls_per_s:.4g}",
            f"{s.capacity_rps_per_replica:.4g}",
            str(s.replicas),
            f"{s.utilization:.0%}",
            f"{s.p99_s * 1000:.0f}",
            format_usd(s.usd_per_h),
        )
        for s in plan.stages
    )
    headers = ("stage", "on", "batch", "fan-out", "calls/s", "per replica/s", "replicas", "util", "p99 ms", "$/h")
    return Grid(headers, rows, frozenset(range(2, 10)), whole=frozenset({0}))


def pipeline_alternatives_grid(plan: PipelinePlan) -> Grid:
    from computewise.units import format_usd

    rows = tuple(
        (
            a.stage,
            a.accelerator,
            str(a.replicas),
            format_usd(a.usd_per_h),
            format_usd(a.saves_usd_per_1000_requests),
            f"{a.p99_s * 1000:.0f}",
        )
        for a in plan.alternatives
    )
    headers = ("stage", "moved to", "replicas", "stage $/h", "saves $/1000", "p99 ms")
    return Grid(headers, rows, frozenset(range(2, 6)), whole=frozenset({0}))
