"""``cost report``: spend, GPU-hours, energy, CO2, utilization and idle cost per tag group and period.

Runs are grouped by the values of the requested tag keys (a run without a key falls in the group
``(none)``), priced once through the one cost formula (``account.totals``) and attributed to the
window by accrual (``account.spend``): a run that started before ``since`` but ran into the window
contributes the part of its cost incurred inside it. Means are weighted by what they describe:

    gpu_util_pct_mean    = Σ util_run x gpu_hours_in_window / Σ gpu_hours_in_window   (runs with GPU samples)
    cpu_percent_mean     = Σ cpu%_run x hours_in_window / Σ hours_in_window             (runs with samples)
    usd_per_training_run = Σ whole-run cost / number of training runs (kind command or track) in the window
    usd_per_1k_inferences= 1000 x Σ whole-run cost / Σ inferences over serving runs (kind serve) in the window

The two unit costs use whole runs (what one run costs), not window shares; a run still running
counts with its cost so far. The result is a frozen value (``specs.codec.Jsonable``: ``to_dict()``) with ``csv_rows()``;
printing belongs to the CLI.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from computewise.account.periods import iso_utc
from computewise.account.spend import PricedRun, priced_runs
from computewise.account.tags import NO_TAG, TagGroup, parse_group_keys
from computewise.errors import InputError
from computewise.ledger import Ledger, RunRow
from computewise.specs.codec import Jsonable, Layout, json_field, json_property

__all__ = ["CSV_COLUMNS", "CostReport", "CostRow", "GroupOf", "cost_report", "group_report"]

GroupOf = Callable[[RunRow], tuple[tuple[str, str], ...]]
"""The group a run belongs to: ``(key, value)`` pairs, one per grouping key."""

_TRAINING_KINDS = frozenset({"command", "track"})
_TOTAL_LABEL = "(total)"

CSV_COLUMNS = (
    "runs",
    "running",
    "cost_usd",
    "gpu_hours",
    "energy_kwh",
    "energy_all_measured",
    "co2_kg",
    "gpu_util_pct_mean",
    "cpu_percent_mean",
    "idle_s",
    "idle_cost_usd",
    "assumed_price_runs",
    "training_runs",
    "usd_per_training_run",
    "serving_runs",
    "inferences",
    "usd_per_1k_inferences",
)
"""Metric columns of ``CostReport.csv_rows`` after one column per grouping key."""


_COUNT = json_field(minimum=0)


@dataclass(frozen=True)
class CostRow(TagGroup, Jsonable):
    """One group's spend in the window (or the totals over all groups)."""

    json_description: ClassVar[str] = "account.report.CostRow: one group's spend in the window, or the total"
    # The group's pairs are written as one object first (``labels``), then the metrics in the CSV's order.
    json_layout: ClassVar[Layout] = ("labels", *CSV_COLUMNS)

    group: tuple[tuple[str, str], ...]
    runs: int = field(metadata=_COUNT)
    running: int = field(metadata=_COUNT)
    cost_usd: float
    gpu_hours: float
    energy_kwh: float
    energy_all_measured: bool = field(
        metadata=json_field(description="Every run's energy was measured, none estimated.")
    )
    co2_kg: float
    gpu_util_pct_mean: float | None = field(
        metadata=json_field(description="Weighted by GPU-hours in the window; null when no run has GPU samples.")
    )
    cpu_percent_mean: float | None = field(
        metadata=json_field(description="Weighted by hours in the window; null when no run has samples.")
    )
    idle_s: float
    idle_cost_usd: float
    assumed_price_runs: int = field(metadata=_COUNT)
    training_runs: int = field(metadata=_COUNT)
    usd_per_training_run: float | None = field(
        metadata=json_field(description="Whole-run cost per training run (kind command or track); null when none.")
    )
    serving_runs: int = field(metadata=_COUNT)
    inferences: int = field(metadata=_COUNT)
    usd_per_1k_inferences: float | None = field(
        metadata=json_field(description="Whole-run cost of serving runs per 1000 inferences; null when none.")
    )


@dataclass(frozen=True)
class CostReport(Jsonable):
    """Rows sorted by cost (highest first), then group; ``total`` sums every run once."""

    by: tuple[str, ...] = field(metadata=json_field(description="The tag keys grouped by; empty: all runs as one."))
    since_s: float | None = field(metadata=json_field(description="Window start, Unix seconds; null for all time."))
    until_s: float = field(metadata=json_field(description="Window end (excluded), Unix seconds: --until or now."))
    now_s: float = field(metadata=json_field(description="When the report was made, Unix seconds."))
    rows: tuple[CostRow, ...] = field(metadata=json_field(description="One per group, highest cost first."))
    total: CostRow = field(metadata=json_field(description="Every run in the window counted once."))

    @json_property(after="since_s", description="since_s in ISO 8601 UTC; null for all time.")
    def since(self) -> str | None:
        return None if self.since_s is None else iso_utc(self.since_s)

    @json_property(after="until_s", description="until_s in ISO 8601 UTC.")
    def until(self) -> str:
        return iso_utc(self.until_s)

    @json_property(after="now_s")
    def attribution(self) -> str:
        """How a run's cost is split between windows (``account.spend``)."""
        return "accrual: each run's cost is spread evenly over its wall time; the window gets its share"

    def csv_rows(self, include_total: bool = False) -> list[list[str]]:
        """A header then one row per group; numbers unformatted, None as an empty cell."""
        header = [*self.by, *CSV_COLUMNS] if self.by else ["group", *CSV_COLUMNS]
        rows = [*self.rows, self.total] if include_total else list(self.rows)
        out = [header]
        for row in rows:
            labels = dict(row.group)
            if self.by:
                cells = [_TOTAL_LABEL if row is self.total else labels.get(key, NO_TAG) for key in self.by]
            else:
                cells = [_TOTAL_LABEL if row is self.total else "all"]
            out.append([*cells, *(_cell(getattr(row, name)) for name in CSV_COLUMNS)])
        return out


def cost_report(
    ledger: Ledger,
    by: Sequence[str],
    since_s: float | None,
    until_s: float | None,
    now_s: float,
) -> CostReport:
    """Spend per group of ``by`` tag values over ``[since_s, until_s)`` (None: all time, until now)."""
    keys = parse_group_keys(by)
    end_s = now_s if until_s is None else until_s
    if since_s is not None and since_s >= end_s:
        raise InputError(
            f"the report window starts at {iso_utc(since_s)}, not before its end {iso_utc(end_s)}",
            "give a --since earlier than --until (and not in the future)",
        )
    runs = priced_runs(ledger, since_s, end_s, now_s)
    return group_report(
        runs, keys, lambda run: tuple((key, run.tags.get(key, NO_TAG)) for key in keys), since_s, end_s, now_s
    )


def group_report(
    runs: Sequence[PricedRun],
    by: tuple[str, ...],
    group_of: GroupOf,
    since_s: float | None,
    until_s: float,
    now_s: float,
) -> CostReport:
    """The report over runs already priced (``account.spend.priced_runs``), grouped by ``group_of``.

    ``cost_report`` groups by tag values; the dashboard also groups by a run's kind, user or GPU, and
    reuses one pricing pass for the table and its chart, so both add up to the same dollars.
    """
    start_s = -math.inf if since_s is None else since_s
    groups: dict[tuple[tuple[str, str], ...], list[tuple[PricedRun, float]]] = {}
    everything: list[tuple[PricedRun, float]] = []
    for priced in runs:
        share = priced.share(start_s, until_s)
        group = group_of(priced.run)
        groups.setdefault(group, []).append((priced, share))
        everything.append((priced, share))
    rows = sorted((_row(group, members) for group, members in groups.items()), key=_order)
    return CostReport(
        by=by, since_s=since_s, until_s=until_s, now_s=now_s, rows=tuple(rows), total=_row((), everything)
    )


def _order(row: CostRow) -> tuple[float, tuple[tuple[str, str], ...]]:
    return (-row.cost_usd, row.group)


def _row(group: tuple[tuple[str, str], ...], members: Sequence[tuple[PricedRun, float]]) -> CostRow:
    cost_usd = gpu_hours = energy_kwh = co2_kg = idle_s = idle_cost_usd = 0.0
    util_weighted = util_weight = cpu_weighted = cpu_weight = 0.0
    training_usd = serving_usd = 0.0
    training_runs = serving_runs = inferences = running = assumed = 0
    all_measured = True
    for priced, share in members:
        cost, run = priced.cost, priced.run
        cost_usd += cost.cost_usd * share
        gpu_hours += cost.gpu_hours * share
        energy_kwh += cost.energy_kwh * share
        co2_kg += cost.co2_kg * share
        idle_s += cost.idle_s * share
        idle_cost_usd += cost.idle_cost_usd * share
        all_measured = all_measured and cost.energy_measured
        running += int(run.status == "running")
        assumed += int(run.price.assumed)
        if cost.gpu_util_pct_mean is not None and cost.gpu_hours > 0:
            util_weighted += cost.gpu_util_pct_mean * cost.gpu_hours * share
            util_weight += cost.gpu_hours * share
        if cost.cpu_percent_mean is not None:
            cpu_weighted += cost.cpu_percent_mean * cost.duration_s * share
            cpu_weight += cost.duration_s * share
        if run.kind in _TRAINING_KINDS:
            training_runs += 1
            training_usd += cost.cost_usd
        elif run.kind == "serve":
            serving_runs += 1
            serving_usd += cost.cost_usd
            inferences += run.inferences
    return CostRow(
        group=group,
        runs=len(members),
        running=running,
        cost_usd=cost_usd,
        gpu_hours=gpu_hours,
        energy_kwh=energy_kwh,
        energy_all_measured=all_measured and bool(members),
        co2_kg=co2_kg,
        gpu_util_pct_mean=util_weighted / util_weight if util_weight > 0 else None,
        cpu_percent_mean=cpu_weighted / cpu_weight if cpu_weight > 0 else None,
        idle_s=idle_s,
        idle_cost_usd=idle_cost_usd,
        assumed_price_runs=assumed,
        training_runs=training_runs,
        usd_per_training_run=training_usd / training_runs if training_runs else None,
        serving_runs=serving_runs,
        inferences=inferences,
        usd_per_1k_inferences=1000.0 * serving_usd / inferences if inferences else None,
    )


def _cell(value: object) -> str:
    """One CSV cell. A float is written as ``--json`` writes it (shortest exact ``repr``), never rounded to
    fixed decimals: the energy and CO2 of a short run are around 1e-9 and would read 0.0."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)
