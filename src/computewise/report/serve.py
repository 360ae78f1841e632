"""Serving reports: the load tester's live line and tables, and the serving plan.

These read the typed results (``LoadtestRun``, ``RateSpread``, ``PlannedServing``), so mypy checks every
field they show; ``--json`` is the same results' ``to_dict``. The live line reads the load tester's
progress snapshots as they come.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console

from computewise.report.rows import Grid

if TYPE_CHECKING:
    from collections.abc import Callable

    from rich.text import Text

    from computewise.plan.serve import HourPlan, ServePlan
    from computewise.plan.serve_cache import CacheSaving
    from computewise.plan.serve_request import CapBudget, PlannedServing
    from computewise.plan.spendcap import SpendCap
    from computewise.serve.loadtest import LoadProgress
    from computewise.specs.loadtest import LoadResult, LoadtestRun, RateSpread

__all__ = [
    "LoadProgressView",
    "print_load_result",
    "print_serve_plan",
    "probe_line",
    "rate_spread_pairs",
    "serve_cache_pairs",
    "serve_modes_grid",
    "serve_plan_html",
    "serve_plan_pairs",
    "serve_schedule_grid",
]


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


def rate_spread_pairs(spread: RateSpread) -> list[tuple[str, str]]:
    """``MaxRateSearch.spread``: between which rates the capacity lies, and how the lowest rate fared."""
    low, high, relative = spread.low_rps, spread.high_rps, spread.relative
    if low is None:
        bracket = "below the lowest rate probed"
    elif high is None or relative is None:  # relative is None exactly when one end is
        bracket = f"at least {low:.1f} requests/s (no higher rate probed missed the SLO)"
    else:
        bracket = f"between {low:.1f} and {high:.1f} requests/s (+{relative:.0%})"
    lowest = f"{spread.lowest_passed} of {spread.lowest_probes} probes met the SLO"
    if spread.lowest_probes > 1:
        lowest += " (retried after a miss)"
    return [("capacity", bracket), ("lowest rate", lowest)]


def print_load_result(run: LoadtestRun, console: Console) -> None:
    from rich.text import Text

    from computewise.report.terminal import print_pairs

    result = run.result
    rows = [
        ("offered", f"{result.rate_rps:g} requests/s for {result.duration_s:g} s"),
        ("sent", str(result.sent)),
        ("ok", str(result.ok)),
        ("rejected (429)", f"{result.rejected} ({result.rejection_rate:.1%})"),
        ("errors", f"{result.errors} ({result.error_rate:.1%})"),
    ]
    if result.repeat_ratio:
        rows.insert(1, ("repeated", f"{result.repeat_ratio:.0%} of requests repeat an earlier body"))
    if result.error_kinds:
        rows.append(("  of which", ", ".join(f"{kind} {count}" for kind, count in result.error_kinds.items())))
    rows.append(("throughput", f"{result.throughput_rps:.1f} ok/s"))
    latencies = (("p50", result.p50_ms), ("p95", result.p95_ms), ("p99", result.p99_ms), ("max", result.max_ms))
    rows += [(f"latency {name}", _ms(ms)) for name, ms in latencies]
    console.print(Text(f"loadtest {run.url}", style="bold"))
    print_pairs(rows, console)


def print_serve_plan(planned: PlannedServing, console: Console) -> None:
    """The answer first (replicas, the three bills), then the schedule, then what was assumed."""
    from rich.text import Text

    from computewise.report.table import print_table
    from computewise.report.terminal import print_pairs

    plan = planned.plan
    console.print(Text("plan serve", style="bold"))
    print_pairs(serve_plan_pairs(planned), console)
    console.print()
    console.print(Text("monthly cost (730 h)", style="bold"))
    print_table(serve_modes_grid(plan), console)
    if plan.schedule:
        console.print()
        console.print(Text("hourly schedule", style="bold"))
        print_table(serve_schedule_grid(plan), console)
    if plan.spend_cap is not None:
        console.print()
        console.print(Text("spend cap", style="bold"))
        print_pairs(serve_cap_pairs(plan.spend_cap, planned.budget), console)
        if plan.spend_cap.capped_hours:
            print_table(serve_capped_grid(plan.spend_cap), console)
    if planned.cache is not None:
        console.print()
        console.print(Text("prediction cache", style="bold"))
        print_pairs(serve_cache_pairs(planned.cache), console)
    for note in planned.notes:
        console.print(f"* {note}", style="dim", highlight=False, markup=False, emoji=False)


def serve_cache_pairs(cache: CacheSaving) -> list[tuple[str, str]]:
    """``plan serve --cache-hit-ratio``: replicas and monthly $ without and with the cache, per mode."""
    from computewise.units import format_usd

    rows = [
        ("hit ratio", f"{cache.hit_ratio:.0%} of requests never reach the model"),
        ("replicas at peak", f"{cache.replicas_at_peak} -> {cache.cached_replicas_at_peak}"),
        ("replicas at mean", f"{cache.replicas_at_mean} -> {cache.cached_replicas_at_mean}"),
    ]
    for mode, saved in cache.saved_monthly_usd.items():
        before, after = cache.monthly_usd[mode], cache.cached_monthly_usd[mode]
        per_1000 = cache.cached_usd_per_1000_requests[mode]
        rows.append(
            (
                f"{mode} / month",
                f"{format_usd(before)} -> {format_usd(after)} (saves {format_usd(saved)}; "
                f"{format_usd(per_1000)} per 1000 requests)",
            )
        )
    return rows


def serve_plan_pairs(planned: PlannedServing) -> list[tuple[str, str]]:
    """Capacity, traffic, price and replicas: what the bills below rest on (terminal and HTML)."""
    from computewise.units import format_usd

    plan = planned.plan
    return [
        (
            "capacity",
            f"{plan.capacity_rps_per_replica:g} requests/s per replica, planned at {plan.target_utilization:.0%} "
            f"= {plan.rps_per_replica_at_target:.3g} requests/s ({plan.capacity_source})",
        ),
        ("traffic", f"peak {plan.traffic.peak_rps:g}, mean {plan.traffic.mean_rps:.3g} requests/s"),
        ("price", f"{format_usd(plan.hourly_usd_per_replica)}/h per replica ({plan.price_source})"),
        (
            "replicas",
            f"{plan.replicas_at_peak} at peak, {plan.replicas_at_mean} at mean (min {plan.min_replicas})",
        ),
    ]


def serve_cap_pairs(cap: SpendCap, budget: CapBudget | None = None) -> list[tuple[str, str]]:
    """What ``--max-usd-per-hour`` buys, what it refuses in a surge, and the budget alert it makes reliable."""
    from computewise.units import format_duration, format_usd

    rows = [
        (
            "cap",
            f"{format_usd(cap.max_usd_per_hour)}/h buys {cap.max_replicas} replicas at "
            f"{format_usd(cap.hourly_usd_per_replica)}/h ({format_usd(cap.max_spend_usd_per_hour)}/h at most)",
        ),
    ]
    if not cap.binding:
        rows.append(("surge", "the cap never binds: the peak needs no more replicas than it buys"))
    elif cap.refused_share_of_month is not None:
        rows.append(
            (
                "refused (429)",
                f"{cap.refused_requests_per_month:,.0f} requests/month ({cap.refused_share_of_month:.2%} of all)",
            )
        )
    planned = cap.planned_latency
    if planned is not None:
        rows.append(
            (
                "latency as planned",
                f"p50 {planned.p50_s * 1000:.1f} ms, p99 {planned.p99_s * 1000:.1f} ms at "
                f"{planned.utilization:.0%} of capacity (M/M/1)",
            )
        )
    if budget is not None:
        alert = budget.alert
        if alert.never_runs_out:
            text = f"the cap held all month stays within {format_usd(alert.monthly_usd)}: it cannot run out"
        elif alert.threshold_pct is None:
            text = (
                f"{format_usd(alert.monthly_usd)} lasts only {alert.hours_at_cap:.1f} h at the cap, "
                f"less than the {format_duration(alert.lead_s)} lead asked"
            )
        else:
            text = (
                f"an alert at {alert.threshold_pct:g} % leaves at least {format_duration(alert.lead_s)} "
                "before the budget runs out, even at the cap"
            )
        rows += [("budget", text), ("set it", budget.command), ("serve with", budget.serve_tag)]
    return rows


def serve_capped_grid(cap: SpendCap) -> Grid:
    """Each hour the cap binds: demand, replicas wanted and run, served rate, 429 share, latency of those served."""
    rows = tuple(
        (
            "peak" if h.hour is None else str(h.hour),
            f"{h.demand_rps:g}",
            f"{h.replicas}/{h.wanted_replicas}",
            f"{h.served_rps:.4g}",
            f"{h.refused_share:.1%}",
            f"{h.utilization:.0%}",
            "-" if h.latency is None else f"{h.latency.p50_s * 1000:.1f}",
            "-" if h.latency is None else f"{h.latency.p99_s * 1000:.1f}",
        )
        for h in cap.capped_hours
    )
    headers = ("hour", "requests/s", "replicas/wanted", "served/s", "429", "utilization", "p50 ms", "p99 ms")
    return Grid(headers, rows, frozenset(range(1, 8)), whole=frozenset({0}))


def serve_modes_grid(plan: ServePlan) -> Grid:
    """Always-on, autoscaled and scale-to-zero side by side: a month's bill and $ per 1000 requests."""
    from computewise.units import format_usd

    rows = tuple(
        (
            mode.mode,
            f"{mode.average_replicas:.2f}",
            format_usd(mode.monthly_usd),
            format_usd(mode.usd_per_1000_requests),
            "-" if mode.cold_starts_per_month is None else f"{mode.cold_starts_per_month:.0f}",
        )
        for mode in plan.modes
    )
    headers = ("mode", "avg replicas", "$/month", "$/1000 requests", "cold starts/month")
    return Grid(headers, rows, frozenset({1, 2, 3, 4}), whole=frozenset({0}))


def serve_schedule_grid(plan: ServePlan) -> Grid:
    """Replicas hour by hour under the autoscaled and scale-to-zero modes."""
    rows = tuple(
        (
            str(hour.hour),
            f"{hour.rps:g}",
            str(hour.autoscaled_replicas),
            str(hour.scale_to_zero_replicas),
            f"{hour.utilization:.0%}",
        )
        for hour in plan.schedule or ()
    )
    return Grid(("hour", "requests/s", "autoscaled", "scale-to-zero", "utilization"), rows, frozenset(range(5)))


def serve_plan_html(planned: PlannedServing) -> str:
    """The ``plan serve`` report: what was assumed, the three monthly bills, and replicas hour by hour."""
    from html import escape

    from computewise.report.html import grid_table, page, pairs_table
    from computewise.report.svg import PALETTE, Axis, Series, xy_chart

    plan = planned.plan
    body = [
        "<h1>computewise plan serve</h1>",
        pairs_table(serve_plan_pairs(planned), frozenset()),
        "<h2>Monthly cost (730 h)</h2>",
        grid_table(serve_modes_grid(plan)),
    ]
    if plan.schedule:
        schedule = plan.schedule

        def line(replicas: Callable[[HourPlan], int]) -> tuple[tuple[float, float], ...]:
            return tuple((float(hour.hour), float(replicas(hour))) for hour in schedule)

        chart = xy_chart(
            "replicas by hour",
            [
                Series("autoscaled", line(lambda hour: hour.autoscaled_replicas), PALETTE[0], line=True),
                Series("scale-to-zero", line(lambda hour: hour.scale_to_zero_replicas), PALETTE[1], line=True),
            ],
            Axis("hour", lambda v: f"{v:.0f}", unit=1.0),
            Axis("replicas", lambda v: f"{v:.0f}", unit=1.0),
        )
        body += ["<h2>Hourly schedule</h2>", chart, grid_table(serve_schedule_grid(plan))]
    notes = planned.notes
    if notes:
        body.append('<ul class="muted">' + "".join(f"<li>{escape(note)}</li>" for note in notes) + "</ul>")
    return page("computewise plan serve", body)
