"""Which runs spent money in a time window, and how much of each run's cost falls inside it.

Every accounting view (cost report, budgets, daily spend for anomalies) starts here, so a dollar is
attributed to the same period everywhere. The rule is accrual: a run's cost, GPU-hours, energy,
CO2 and idle time accrue evenly over its wall time, from its start to its end (or ``now`` while it
runs), and a window gets the fraction of that time that lies inside it::

    share(run, [a, b)) = |[start, end] ∩ [a, b)| / (end - start)        (1 or 0 for a zero-length run)

For dollars and GPU-hours this is exact, because ``totals.price_run`` charges a constant hourly
price for the run's duration. For energy, CO2 and idle time it assumes the run's average rate
holds throughout (one aggregate query per report instead of re-aggregating samples per window).
A month-long job therefore counts against each month's budget for the days it ran in that month,
and a three-day job spreads over three days of the anomaly series instead of spiking on day one.

Runs are priced once through ``Ledger.run_totals`` and ``totals.price_run``, the one cost formula.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from computewise.account.totals import RunCost, price_run, run_end_s
from computewise.ledger import Ledger, RunRow, RunTotals

__all__ = ["PricedRun", "overlapping", "priced_runs"]


@dataclass(frozen=True)
class PricedRun:
    """A run with its whole-run cost and sample totals, able to say what share of it lies in a window."""

    run: RunRow
    cost: RunCost
    totals: RunTotals
    end_s: float

    def share(self, from_s: float, to_s: float) -> float:
        """Fraction of the run's wall time inside ``[from_s, to_s)`` (module docstring)."""
        start_s = self.run.started_at_s
        if self.end_s <= start_s:
            return 1.0 if from_s <= start_s < to_s else 0.0
        overlap_s = min(self.end_s, to_s) - max(start_s, from_s)
        return max(0.0, overlap_s) / (self.end_s - start_s)


def priced_runs(ledger: Ledger, from_s: float | None, to_s: float, now_s: float) -> list[PricedRun]:
    """Runs whose wall time overlaps ``[from_s, to_s)`` (``from_s`` None: since the beginning), priced
    with one aggregate of their samples (``Ledger.run_totals``)."""
    selected: list[tuple[RunRow, float]] = []
    for run in ledger.runs(limit=None):
        end_s = max(run.started_at_s, run_end_s(run, now_s))
        if _overlaps(run.started_at_s, end_s, from_s, to_s):
            selected.append((run, end_s))
    totals = ledger.run_totals(run.id for run, _ in selected)
    return [
        PricedRun(run=run, cost=price_run(run, totals[run.id], now_s), totals=totals[run.id], end_s=end_s)
        for run, end_s in selected
    ]


def overlapping(runs: Iterable[PricedRun], from_s: float | None, to_s: float) -> list[PricedRun]:
    """The runs ``priced_runs`` selects for ``[from_s, to_s)``, taken from runs priced over a window covering it.

    A page showing several windows (month to date, the anomaly history, the burn-rate week) prices the
    widest once and narrows it here, instead of aggregating the same samples once per window.
    """
    return [priced for priced in runs if _overlaps(priced.run.started_at_s, priced.end_s, from_s, to_s)]


def _overlaps(start_s: float, end_s: float, from_s: float | None, to_s: float) -> bool:
    """Whether a run's wall time ``[start_s, end_s]`` lies partly in ``[from_s, to_s)`` (zero-length: starts in it)."""
    start_bound = -math.inf if from_s is None else from_s
    if start_s >= to_s:
        return False
    return end_s > start_bound or (end_s == start_s and start_s >= start_bound)
