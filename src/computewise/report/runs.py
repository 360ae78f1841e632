"""Monitored runs on the terminal and as HTML: the end-of-run summary and the ``runs`` list.

Works on the typed ``RunSummary`` and the ``ListedRun`` lines of ``computewise runs``; the HTML page
plots the sampled time series with our own SVG charts.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from html import escape
from typing import TYPE_CHECKING

from rich.console import Console
from rich.text import Text

from computewise.report.accounts import print_grid
from computewise.report.attempts import interruption_line, print_attempts
from computewise.report.html import grid_table, page, pairs_table
from computewise.report.rows import Grid, format_amount, format_kg, format_kwh
from computewise.report.svg import PALETTE, Axis, Series, xy_chart
from computewise.report.table import print_details
from computewise.units import format_bytes, format_duration, format_usd, plural

if TYPE_CHECKING:
    from computewise.account.totals import ListedRun
    from computewise.monitor.summary import RunSummary

__all__ = ["print_run_summary", "print_runs", "run_html", "runs_grid", "summary_rows"]


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f} %"


def _when(epoch_s: float | None) -> str:
    if epoch_s is None:
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch_s))


def _tags(tags: dict[str, str]) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(tags.items()))


def _headline(summary: RunSummary) -> str:
    run = summary.run
    exit_text = "" if run.exit_code is None else f", exit {run.exit_code}"
    tags = f" [{_tags(run.tags)}]" if run.tags else ""
    return f"run {run.id} {run.status}{exit_text}: {run.command}{tags}"


def summary_rows(summary: RunSummary) -> list[tuple[str, str, str]]:
    """(label, value, detail) rows shared by the terminal and the HTML page."""
    run, util, price, cost = summary.run, summary.stats, summary.run.price, summary.cost
    gpu = f"{run.gpu_count} x {run.gpu_name}" if run.gpu_count else "no GPU"
    rows = [
        ("duration", format_duration(cost.duration_s), f"{_when(run.started_at_s)} on {run.host}"),
        ("GPU-hours", format_amount(cost.gpu_hours), gpu),
        ("cost", format_usd(cost.cost_usd), price.explanation),
        ("energy", format_kwh(cost.energy_kwh), f"{summary.energy_basis}; PUE {price.pue:.2f}"),
        ("CO2", format_kg(cost.co2_kg), f"{price.carbon_g_per_kwh:.0f} gCO2/kWh"),
    ]
    gpu_util = util.gpu_util_pct
    if gpu_util:
        rows.append(("GPU utilization", _pct(gpu_util.mean), f"p50 {_pct(gpu_util.p50)}, p95 {_pct(gpu_util.p95)}"))
    elif run.gpu_count == 0:
        rows.append(("GPU utilization", "n/a", "no NVIDIA GPU was visible to the run"))
    cpu = util.cpu_percent
    if cpu:
        rows.append(
            (
                "CPU",
                f"{cpu.mean:.0f} %",
                f"of one core; p95 {cpu.p95:.0f} %; {plural(util.logical_cpus, 'logical CPU')}",
            )
        )
    if util.peak_rss_bytes is not None:
        rows.append(("peak memory", format_bytes(util.peak_rss_bytes), "resident, whole process tree"))
    if util.peak_gpu_memory_bytes is not None:
        rows.append(("peak GPU memory", format_bytes(util.peak_gpu_memory_bytes), "all GPUs"))
    rows.append(
        (
            "disk / network",
            f"{format_bytes(util.disk_read_bytes)} read",
            f"{format_bytes(util.disk_write_bytes)} written; network {format_bytes(util.net_recv_bytes)} in",
        )
    )
    rows.append(("idle", format_duration(cost.idle_s), f"{format_usd(cost.idle_cost_usd)} of the cost"))
    steps = summary.steps
    if steps:
        share = steps.data_wait_share
        rows.append(("steps", str(steps.steps), "" if share is None else f"{share:.0%} of step time waiting for data"))
    return rows


def print_run_summary(summary: RunSummary, console: Console) -> None:
    """What the run cost and why it was slow, in a dozen lines."""
    console.print()
    status = summary.run.status
    style = "green bold" if status == "succeeded" else "red bold" if status in ("failed", "crashed") else "bold"
    console.print(Text(_headline(summary), style=style))
    print_details(summary_rows(summary), console)
    if summary.findings or summary.idle_text:
        console.print()
        console.print(Text("diagnosis", style="bold"))
    for finding in summary.findings:
        console.print(Text.assemble((f"{finding.verdict}: ", "bold"), finding.evidence))
        console.print(Text(f"  → {finding.advice}", style="dim"))
    if summary.idle_text:
        console.print(Text(summary.idle_text))
    if summary.attempts:
        console.print()
        console.print(Text("attempts", style="bold"))
        print_attempts(summary.attempts, console)
        if summary.interruption is not None and summary.interruption.interruptions:
            console.print(Text(f"interruptions: {interruption_line(summary.interruption)}"))
    if summary.run.error:
        console.print(Text(summary.run.error, style="red"))


def runs_grid(runs: Sequence[ListedRun]) -> Grid:
    """The ``computewise runs`` table: one line per run, newest first."""
    rows = tuple(
        (
            str(r.run.id),
            _when(r.run.started_at_s),
            r.run.status,
            format_duration(r.cost.duration_s),
            format_usd(r.cost.cost_usd),
            _tags(r.run.tags),
            _short(r.run.command),
        )
        for r in runs
    )
    # Id, status and cost stay on any terminal; tags go first, then when it started (`runs show ID` has both).
    headers = ("id", "started", "status", "duration", "cost", "tags", "command")
    return Grid(headers, rows, frozenset({0, 3, 4}), whole=frozenset({1, 2}), drop_order=(5, 1, 3))


def _short(command: str, limit: int = 60) -> str:
    """The command on one line, cut at a word boundary past ``limit`` characters (`runs show ID` has it whole)."""
    one_line = " ".join(command.split())
    if len(one_line) <= limit:
        return one_line
    cut = one_line.rfind(" ", 0, limit)
    return one_line[: cut if cut > 0 else limit] + " …"


def print_runs(runs: Sequence[ListedRun], console: Console, unmatched: Sequence[str] = ()) -> None:
    """The runs as a table. ``unmatched``: the filters, as typed, when none of the recorded runs matched
    them, so an empty list is never read as an empty ledger (and a filter never as the reason it is not)."""
    if not runs and unmatched:
        without = "it" if len(unmatched) == 1 else "them"
        line = f"no runs match {' '.join(unmatched)}: `computewise runs` without {without} lists every recorded run"
        console.print(line, markup=False, highlight=False, soft_wrap=True)
        return
    if not runs:
        console.print("no runs recorded yet: start one with `computewise run -- CMD ...`")
        return
    print_grid(runs_grid(runs), console, more="--json or `runs show ID`")


def _axis_s() -> Axis:
    return Axis("time since start", format_duration)


def _charts(series: dict[str, list[float | None]]) -> list[str]:
    t = series["t_s"]

    def points(key: str, scale: float = 1.0) -> tuple[tuple[float, float], ...]:
        return tuple((x, v / scale) for x, v in zip(t, series[key], strict=True) if x is not None and v is not None)

    percent = Axis("percent", lambda v: f"{v:.0f} %")
    charts = [
        xy_chart(
            "utilization",
            [
                Series("GPU", points("gpu_util_pct"), PALETTE[0], line=True, radius=0),
                Series("CPU (100 % = one core)", points("cpu_percent"), PALETTE[1], line=True, radius=0),
            ],
            _axis_s(),
            percent,
        ),
        xy_chart(
            "memory",
            [
                Series("process tree RSS", points("rss_bytes"), PALETTE[2], line=True, radius=0),
                Series("GPU memory used", points("gpu_memory_used_bytes"), PALETTE[3], line=True, radius=0),
            ],
            _axis_s(),
            Axis("bytes", format_bytes),
        ),
        xy_chart(
            "GPU power",
            [Series("", points("gpu_power_w"), PALETTE[4], line=True, radius=0)],
            _axis_s(),
            Axis("watts", lambda v: f"{v:.0f} W"),
        ),
    ]
    return [chart for chart in charts if chart]


def run_html(summary: RunSummary) -> str:
    """A self-contained page: headline, summary table, diagnosis, time-series plots, idle periods."""
    body = [
        f"<h1>{escape(_headline(summary))}</h1>",
        pairs_table([tuple(row) for row in summary_rows(summary)]),
    ]
    if summary.findings or summary.idle_text:
        body.append("<h2>Diagnosis</h2>")
        body.extend(
            f"<p><strong>{escape(f.verdict)}</strong>: {escape(f.evidence)}<br>"
            f'<span class="muted">→ {escape(f.advice)}</span></p>'
            for f in summary.findings
        )
        if summary.idle_text:
            body.append(f"<p>{escape(summary.idle_text)}</p>")
    charts = _charts(summary.series)
    if charts:
        body.append("<h2>Over time</h2>")
        body.append('<div class="charts">' + "".join(charts) + "</div>")
    if summary.idle:
        body.append("<h2>Idle periods</h2>")
        start = summary.run.started_at_s
        rows = tuple(
            (
                format_duration(max(0.0, p.start_s - start)),
                format_duration(p.duration_s),
                format_usd(p.cost_usd),
            )
            for p in summary.idle
        )
        body.append(grid_table(Grid(("from start", "lasted", "cost"), rows, frozenset({0, 1, 2}))))
    return page(f"computewise run {summary.run.id}", body)
