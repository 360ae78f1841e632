"""What a run cost: the ledger's aggregate of its samples (``Ledger.run_totals``), then one pure formula.

The run summary, ``runs``, ``cost report`` and budgets all price runs through ``price_run``, so a
run's dollars, kWh and idle cost are the same number wherever they appear.

    duration_h     = (end or last heartbeat or now) - start, or for a resubmitted run (one with
                     attempts) the sum of its attempts' durations: waiting between them is not billed
    cost_usd       = hourly_usd (the price snapshot taken at launch) x duration_h
    gpu_hours      = gpu_count x duration_h
    energy_kwh     = sum(sample energy_j) / 3.6e6 x PUE          (measured or estimated per sample)
    co2_kg         = energy_kwh x grid gCO2/kWh / 1000
    idle_cost_usd  = cost_usd x idle seconds / sampled seconds
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from computewise.ledger import Ledger, RunRow, RunStatus, RunTotals
from computewise.specs.codec import Document, Jsonable, Layout, json_field, json_property

__all__ = ["ListedRun", "RunCost", "RunListing", "list_runs", "price_run", "price_runs", "run_end_s"]

_J_PER_KWH = 3.6e6


@dataclass(frozen=True)
class RunCost(Jsonable):
    """The money, GPU-hours, energy and carbon of one run; its JSON is its fields, in order."""

    run_id: int
    duration_s: float
    cost_usd: float
    gpu_hours: float
    energy_kwh: float
    energy_measured: bool
    co2_kg: float
    idle_s: float
    idle_cost_usd: float
    gpu_util_pct_mean: float | None
    cpu_percent_mean: float | None


def run_end_s(run: RunRow, now_s: float) -> float:
    """When the run stopped costing money: its end, or now while it is still running."""
    if run.ended_at_s is not None:
        return run.ended_at_s
    if run.status == "running":
        return now_s
    return run.heartbeat_at_s


def price_run(run: RunRow, totals: RunTotals, now_s: float) -> RunCost:
    """Price one run from its snapshot price and its sample totals (formulas in the module docstring)."""
    end_s = run_end_s(run, now_s)
    if totals.attempt_count:
        open_s = max(0.0, end_s - totals.attempt_open_since_s) if totals.attempt_open_since_s is not None else 0.0
        duration_s = totals.attempts_closed_s + open_s
    else:
        duration_s = max(0.0, end_s - run.started_at_s)
    duration_h = duration_s / 3600.0
    cost_usd = run.price.hourly_usd * duration_h
    energy_kwh = totals.energy_j / _J_PER_KWH * run.price.pue
    idle_fraction = totals.idle_s / totals.sampled_s if totals.sampled_s > 0 else 0.0
    return RunCost(
        run_id=run.id,
        duration_s=duration_s,
        cost_usd=cost_usd,
        gpu_hours=run.gpu_count * duration_h,
        energy_kwh=energy_kwh,
        energy_measured=totals.energy_measured,
        co2_kg=energy_kwh * run.price.carbon_g_per_kwh / 1000.0,
        idle_s=totals.idle_s,
        idle_cost_usd=cost_usd * idle_fraction,
        gpu_util_pct_mean=totals.gpu_util_pct_mean,
        cpu_percent_mean=totals.cpu_percent_mean,
    )


def price_runs(ledger: Ledger, runs: Iterable[RunRow], now_s: float) -> list[RunCost]:
    """Price many runs with one aggregate query."""
    run_list = list(runs)
    totals = ledger.run_totals(r.id for r in run_list)
    return [price_run(r, totals[r.id], now_s) for r in run_list]


@dataclass(frozen=True)
class ListedRun(Jsonable):
    """One line of ``computewise runs``: the run and what it cost (of its cost, the four figures the list shows)."""

    json_layout: ClassVar[Layout] = ("run", "duration_s", "cost_usd", "gpu_hours", "energy_kwh")

    run: RunRow = field(metadata=json_field(inline=True))
    cost: RunCost

    @json_property(description="Seconds billed: until its end, or now while running; a resubmitted run's attempts.")
    def duration_s(self) -> float:
        return self.cost.duration_s

    @json_property(description="The price snapshot taken at launch times duration_s, in US dollars.")
    def cost_usd(self) -> float:
        return self.cost.cost_usd

    @json_property(description="gpu_count times duration_s, in hours.")
    def gpu_hours(self) -> float:
        return self.cost.gpu_hours

    @json_property(description="Energy of its samples times the PUE, measured or estimated, in kWh.")
    def energy_kwh(self) -> float:
        return self.cost.energy_kwh


@dataclass(frozen=True)
class RunListing(Jsonable):
    """The runs ``computewise runs`` lists, newest first, and the ledger they were read from."""

    json_document: ClassVar[Document] = Document(
        "runs",
        "runs --json",
        "The recorded runs matching the filters, newest first, each with what it cost so far "
        "(account.totals.RunListing); a running run is priced until now.",
    )

    ledger: str = field(metadata=json_field(description="The ledger's URL."))
    runs: tuple[ListedRun, ...]


def list_runs(
    ledger: Ledger,
    now_s: float,
    *,
    tags: Mapping[str, str] | None = None,
    status: RunStatus | None = None,
    since_s: float | None = None,
    limit: int | None = 20,
) -> RunListing:
    """The most recent runs matching every filter, priced at ``now_s`` (a running one costs until now)."""
    runs = ledger.runs(tags=tags, status=status, since_s=since_s, limit=limit)
    costs = price_runs(ledger, runs, now_s)
    return RunListing(ledger.url, tuple(ListedRun(run, cost) for run, cost in zip(runs, costs, strict=True)))
