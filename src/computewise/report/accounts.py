"""``cost report``, ``cost anomalies`` and ``budget status`` as terminal tables, from the typed results.

JSON and CSV come from the results themselves (``to_dict``, ``csv_rows``)."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from typing import TYPE_CHECKING

from computewise.account.periods import iso_day, iso_utc
from computewise.report.rows import Grid, format_amount, format_kg, format_kwh
from computewise.units import format_usd

if TYPE_CHECKING:
    from rich.console import Console

    from computewise.account.anomalies import AnomalyReport
    from computewise.account.budgets import BudgetStatus
    from computewise.account.report import CostReport, CostRow

__all__ = ["anomalies_grid", "budget_grid", "cost_grid", "csv_text", "print_grid"]


def _opt(value: float | None, fmt: str = "{:.0f} %") -> str:
    return "" if value is None else fmt.format(value)


def _group(group: tuple[tuple[str, str], ...], by: Sequence[str]) -> tuple[str, ...]:
    labels = dict(group)
    return tuple(labels.get(key, "(none)") for key in by) if by else ("all",)


def cost_grid(report: CostReport) -> Grid:
    """One line per group, then the total: spend, GPU-hours, energy, CO2, utilization, idle, unit costs."""
    by = report.by
    headers = (*(by or ("group",)), "runs", "cost", "GPU-h", "energy", "CO2", "GPU util", "CPU", "idle cost")
    headers = (*headers, "$/run", "$/1k inf")
    keys = len(by or ("group",))
    total = report.total  # the largest figure of each column: its unit is the column's

    def line(row: CostRow, labels: tuple[str, ...]) -> tuple[str, ...]:
        return (
            *labels,
            str(row.runs),
            format_usd(row.cost_usd),
            format_amount(row.gpu_hours),
            format_kwh(row.energy_kwh, like=total.energy_kwh) + ("" if row.energy_all_measured else "*"),
            format_kg(row.co2_kg, like=total.co2_kg),
            _opt(row.gpu_util_pct_mean),
            _opt(row.cpu_percent_mean),
            format_usd(row.idle_cost_usd),
            "" if row.usd_per_training_run is None else format_usd(row.usd_per_training_run),
            "" if row.usd_per_1k_inferences is None else format_usd(row.usd_per_1k_inferences),
        )

    rows = [line(row, _group(row.group, by)) for row in report.rows]
    rows.append(line(total, ("(total)", *([""] * (keys - 1)))))
    # Spend, runs and GPU-hours stay on a narrow terminal; the rest is one --json or --csv away.
    drop = tuple(headers.index(h) for h in ("CPU", "$/1k inf", "idle cost", "CO2", "GPU util", "$/run", "energy"))
    return Grid(headers, tuple(rows), frozenset(range(keys, len(headers))), drop_order=drop)


def budget_grid(statuses: Sequence[BudgetStatus]) -> Grid:
    rows = tuple(
        (
            s.budget.scope,
            s.period,
            format_usd(s.budget.monthly_usd),
            format_usd(s.spent_usd),
            f"{s.pct_used:.0f} %",
            f"{format_usd(s.burn_rate_usd_per_day)}/day",
            format_usd(s.projected_month_end_usd),
            _runs_out(s),
            ",".join(f"{p:g}" for p in s.fired_pct) or "-",
        )
        for s in statuses
    )
    headers = ("scope", "month", "budget", "spent", "used", "burn rate", "month-end", "runs out", "alerts fired")
    return Grid(headers, rows, frozenset({2, 3, 4, 5, 6}), whole=frozenset({1, 7}), drop_order=(8, 1, 5))


def _runs_out(status: BudgetStatus) -> str:
    """The "runs out" cell: when it ran out if it has, else the forecast date, else "not this month"."""
    if status.exhausted:
        ran_out = status.ran_out_at_s
        return f"ran out {iso_utc(ran_out)[:10]}" if ran_out is not None else "already exceeded"
    return iso_utc(status.runs_out_at_s)[:10] if status.runs_out_at_s is not None else "not this month"


def anomalies_grid(report: AnomalyReport) -> Grid:
    by = report.by
    rows = tuple(
        (
            *_group(a.group, by),
            iso_day(a.day_start_s),
            format_usd(a.spend_usd),
            format_usd(a.expected_usd),
            "" if a.ratio is None else f"{a.ratio:.1f}x",
            f"{a.score:.1f}",
        )
        for a in report.anomalies
    )
    keys = len(by or ("group",))
    headers = (*(by or ("group",)), "day", "spend", "expected", "ratio", "score")
    numeric = frozenset(range(keys + 1, len(headers)))
    return Grid(headers, rows, numeric, whole=frozenset({keys}), drop_order=(keys + 4,))


def print_grid(grid: Grid, console: Console, title: str | None = None, more: str = "--json") -> None:
    """A bold title, then the table as every report prints one (:func:`computewise.report.table.print_table`).

    Rich is imported here: the dashboard builds these grids as HTML and never loads the terminal printer."""
    from rich.text import Text

    from computewise.report.table import print_table

    if title:
        console.print(Text(title, style="bold"))
    print_table(grid, console, more=more)


def csv_text(rows: Sequence[Sequence[str]]) -> str:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(rows)
    return buffer.getvalue()
