"""Serving reports: the load tester's live line and tables, and the serving plan.

Like the other report modules these read the JSON-ready dicts (``LoadResult.to_dict()``,
``ServePlan.to_dict()``), so a saved ``--json`` renders the same later; only the live line reads
the load tester's progress snapshots as they come.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Console

if TYPE_CHECKING:
    from rich.text import Text

    from computewise.serve.loadtest import LoadProgress, LoadResult

__all__ = ["LoadProgressView", "print_load_result", "print_serve_plan", "probe_line"]


class LoadProgressView:
    """The live line on stderr: sent, ok, rejected, errors, in flight, p99 of the last two seconds."""

    def __init__(self, console: Console) -> None:
        from rich.live import Live

        self._live = Live(console=console, transient=True, refresh_per_second=4)

    def __enter__(self) -> LoadProgressView:
        self._live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._live.stop()

    def update(self, progress: LoadProgress) -> None:
        self._live.update(_progress_text(progress))


def _progress_text(progress: LoadProgress) -> Text:
    from rich.text import Text

    p99 = f"{progress.recent_p99_ms:.0f} ms" if progress.recent_p99_ms is not None else "-"
    elapsed_s = min(progress.elapsed_s, progress.duration_s)
    return Text.assemble(
        (f"{progress.rate_rps:g} rps ", "bold"),
        f"{elapsed_s:.1f}/{progress.duration_s:g} s  sent {progress.sent}  ",
        (f"ok {progress.ok}", "green"),
        "  ",
        (f"rejected {progress.rejected}", "yellow" if progress.rejected else ""),
        "  ",
        (f"errors {progress.errors}", "red" if progress.errors else ""),
        f"  in flight {progress.in_flight}  p99 {p99}",
    )


def _ms(value: float | None) -> str:
    return f"{value:.1f} ms" if value is not None else "-"


def probe_line(result: LoadResult, passed: bool) -> str:
    verdict = "[green]meets[/]" if passed else "[red]misses[/]"
    return (
        f"probe {result.rate_rps:.1f} rps: {verdict} (p99 {_ms(result.p99_ms)}, "
        f"errors {result.error_rate:.1%}, rejected {result.rejection_rate:.1%})"
    )


def print_load_result(data: dict[str, Any], console: Console) -> None:
    from rich.table import Table

    table = Table(title=f"loadtest {data['url']}", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column(justify="right")
    table.add_row("offered", f"{data['rate_rps']:g} requests/s for {data['duration_s']:g} s")
    table.add_row("sent", str(data["sent"]))
    table.add_row("ok", str(data["ok"]))
    table.add_row("rejected (429)", f"{data['rejected']} ({data['rejection_rate']:.1%})")
    table.add_row("errors", f"{data['errors']} ({data['error_rate']:.1%})")
    if data["error_kinds"]:
        table.add_row("  of which", ", ".join(f"{kind} {count}" for kind, count in data["error_kinds"].items()))
    table.add_row("throughput", f"{data['throughput_rps']:.1f} ok/s")
    for name in ("p50", "p95", "p99", "max"):
        table.add_row(f"latency {name}", _ms(data[f"{name}_ms"]))
    console.print(table)


def print_serve_plan(d: dict[str, Any], console: Console) -> None:
    """The answer first (replicas, the three bills), then the schedule, then what was assumed."""
    from rich.table import Table

    from computewise.units import format_usd

    cap, traffic, price, replicas = d["capacity"], d["traffic"], d["price"], d["replicas"]
    summary = Table(show_header=False, box=None, title="plan serve", title_justify="left")
    summary.add_column(style="bold")
    summary.add_column()
    summary.add_row(
        "capacity",
        f"{cap['rps_per_replica']:g} requests/s per replica, planned at {cap['target_utilization']:.0%} "
        f"= {cap['rps_per_replica_at_target']:.3g} requests/s ({cap['source']})",
    )
    summary.add_row("traffic", f"peak {traffic['peak_rps']:g}, mean {traffic['mean_rps']:.3g} requests/s")
    summary.add_row("price", f"{format_usd(price['usd_per_hour_per_replica'])}/h per replica ({price['source']})")
    summary.add_row("replicas", f"{replicas['at_peak']} at peak, {replicas['at_mean']} at mean (min {replicas['min']})")
    console.print(summary)

    modes = Table(title="monthly cost (730 h)", title_justify="left")
    for column in ("mode", "avg replicas", "$/month", "$/1000 requests", "cold starts/month"):
        modes.add_column(column, justify="left" if column == "mode" else "right")
    for mode in d["modes"].values():
        starts = mode["cold_starts_per_month"]
        modes.add_row(
            mode["mode"],
            f"{mode['average_replicas']:.2f}",
            format_usd(mode["monthly_usd"]),
            format_usd(mode["usd_per_1000_requests"]),
            "-" if starts is None else f"{starts:.0f}",
        )
    console.print(modes)
    if d["schedule"]:
        schedule = Table(title="hourly schedule", title_justify="left")
        for column in ("hour", "requests/s", "autoscaled", "scale-to-zero", "utilization"):
            schedule.add_column(column, justify="right")
        for hour in d["schedule"]:
            schedule.add_row(
                str(hour["hour"]),
                f"{hour['rps']:g}",
                str(hour["autoscaled_replicas"]),
                str(hour["scale_to_zero_replicas"]),
                f"{hour['utilization']:.0%}",
            )
        console.print(schedule)
    for note in d["notes"]:
        console.print(f"* {note}", style="dim", highlight=False)
