"""``cost report``, ``cost anomalies`` and ``budget status`` as terminal tables (JSON and CSV come from the dicts)."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from typing import Any

from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

from computewise.report.rows import Grid, format_kg, format_kwh
from computewise.units import format_usd

__all__ = ["anomalies_grid", "at_natural_width", "budget_grid", "cost_grid", "csv_text", "print_grid"]


def _opt(value: float | None, fmt: str = "{:.0f} %") -> str:
    return "" if value is None else fmt.format(value)


def _group(group: dict[str, str], by: Sequence[str]) -> tuple[str, ...]:
    return tuple(group.get(key, "(none)") for key in by) if by else ("all",)


def cost_grid(d: dict[str, Any]) -> Grid:
    """One line per group, then the total: spend, GPU-hours, energy, CO2, utilization, idle, unit costs."""
    by = d["by"]
    headers = (*(by or ["group"]), "runs", "cost", "GPU-h", "energy", "CO2", "GPU util", "CPU", "idle cost")
    headers = (*headers, "$/run", "$/1k inf")
    keys = len(by or ["group"])

    def line(row: dict[str, Any], labels: tuple[str, ...]) -> tuple[str, ...]:
        return (
            *labels,
            str(row["runs"]),
            format_usd(row["cost_usd"]),
            f"{row['gpu_hours']:.3g}",
            format_kwh(row["energy_kwh"]) + ("" if row["energy_all_measured"] else "*"),
            format_kg(row["co2_kg"]),
            _opt(row["gpu_util_pct_mean"]),
            _opt(row["cpu_percent_mean"]),
            format_usd(row["idle_cost_usd"]),
            "" if row["usd_per_training_run"] is None else format_usd(row["usd_per_training_run"]),
            "" if row["usd_per_1k_inferences"] is None else format_usd(row["usd_per_1k_inferences"]),
        )

    rows = [line(row, _group(row["group"], by)) for row in d["rows"]]
    rows.append(line(d["total"], ("(total)", *([""] * (keys - 1)))))
    return Grid(headers, tuple(rows), frozenset(range(keys, len(headers))))


def budget_grid(statuses: Sequence[dict[str, Any]]) -> Grid:
    rows = tuple(
        (
            s["scope"],
            s["period"],
            format_usd(s["monthly_usd"]),
            format_usd(s["spent_usd"]),
            f"{s['pct_used']:.0f} %",
            f"{format_usd(s['burn_rate_usd_per_day'])}/day",
            format_usd(s["projected_month_end_usd"]),
            s["runs_out_at"][:10] if s["runs_out_at"] else "not this month",
            ",".join(f"{p:g}" for p in s["fired_pct"]) or "-",
        )
        for s in statuses
    )
    headers = ("scope", "month", "budget", "spent", "used", "burn rate", "month-end", "runs out", "alerts fired")
    return Grid(headers, rows, frozenset({2, 3, 4, 5, 6}))


def anomalies_grid(d: dict[str, Any]) -> Grid:
    by = d["by"]
    rows = tuple(
        (
            *_group(a["group"], by),
            a["day"],
            format_usd(a["spend_usd"]),
            format_usd(a["expected_usd"]),
            "" if a["ratio"] is None else f"{a['ratio']:.1f}x",
            f"{a['score']:.1f}",
        )
        for a in d["anomalies"]
    )
    keys = len(by or ["group"])
    headers = (*(by or ["group"]), "day", "spend", "expected", "ratio", "score")
    return Grid(headers, rows, frozenset(range(keys + 1, len(headers))))


def print_grid(grid: Grid, console: Console, title: str | None = None) -> None:
    if title:
        console.print(Text(title, style="bold"))
    table = Table(box=None, padding=(0, 1), pad_edge=False)
    for i, header in enumerate(grid.headers):
        table.add_column(header, justify="right" if i in grid.numeric else "left", no_wrap=True)
    for row in grid.rows:
        table.add_row(*(Text(cell) for cell in row))
    at_natural_width(console, table).print(table)


def at_natural_width(console: Console, renderable: RenderableType) -> Console:
    """A pipe or a file has no width: print there at the table's natural width rather than cut "$0.0…"."""
    if console.is_terminal:
        return console
    natural = console.measure(renderable, options=console.options.update_width(10_000)).maximum
    return Console(file=console.file, width=max(console.width, natural), no_color=True)


def csv_text(rows: Sequence[Sequence[str]]) -> str:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(rows)
    return buffer.getvalue()
