"""What the overview, runs and run pages show, as typed read-only results (the ``/api`` JSON is their ``to_dict``,
written by ``specs.codec`` from their fields, as are ``docs/schemas/dashboard-{overview,runs}.schema.json``).

No figure is computed here that ``account`` or ``monitor`` already computes: dollars come from
``account.totals.price_run`` (through ``priced_runs``, ``group_report`` (what ``cost_report`` sums),
``budget_status``, ``spend_anomalies`` and ``price_runs``; the overview prices its runs once and hands
the same priced runs to each), the diagnosis, steps and attempts from ``monitor.summary.summarize``
(what ``computewise runs show`` prints), so the dashboard and the CLI never disagree. What is new here is
only how much is fetched: filters, sorting and pages in SQL, and time series averaged into at most
``MAX_POINTS`` buckets in SQL (``ledger.queries``), so a page costs the same over a thousand runs and a
million samples as over ten.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from computewise.account.anomalies import SpendAnomaly, history_start_s, spend_anomalies
from computewise.account.budgets import BudgetStatus, budget_status, budget_window_start_s
from computewise.account.periods import DAY_S, day_start_s, iso_day, iso_utc, month_period, month_start_s
from computewise.account.report import group_report
from computewise.account.spend import PricedRun, overlapping, priced_runs
from computewise.account.tags import NO_TAG
from computewise.account.totals import RunCost, price_runs, run_end_s
from computewise.ledger import Ledger, RunKind, RunRow, RunStatus
from computewise.ledger.queries import RunFilter, RunSort
from computewise.ledger.store import STALE_HEARTBEATS, STALE_MIN_S
from computewise.monitor.summary import RunSummary, summarize
from computewise.specs.codec import Document, Jsonable, json_field, json_property

if TYPE_CHECKING:
    from computewise.catalog import Catalog

__all__ = [
    "MAX_PER_PAGE",
    "MAX_POINTS",
    "OVERVIEW_DAYS",
    "DailySpend",
    "OverviewView",
    "RunItem",
    "RunProgress",
    "RunView",
    "RunsQuery",
    "RunsView",
    "overview_view",
    "run_progress",
    "run_view",
    "runs_view",
]

MAX_PER_PAGE = 500  # runs on one page of a list (the query string's per_page)
MAX_POINTS = 500  # per series: more than a chart 640 px wide can show, few enough to draw at once
OVERVIEW_DAYS = 30
TOP_ANOMALIES = 5
RUNNING_SHOWN = 20


@dataclass(frozen=True)
class RunItem(Jsonable):
    """One row of a run list: who, what, when, and what it cost so far."""

    json_description: ClassVar[str] = "One run of a list (dashboard.views.RunItem)."
    id: int
    kind: RunKind
    command: str
    tags: dict[str, str]
    status: RunStatus
    user: str
    host: str
    started_at_s: float
    ended_at_s: float | None
    gpu_count: int
    duration_s: float = field(metadata=json_field(minimum=0, description="billed duration (account.totals.price_run)"))
    cost_usd: float = field(
        metadata=json_field(minimum=0, description="account.totals.price_run, up to now for a running run")
    )
    gpu_hours: float = field(metadata=json_field(minimum=0))
    idle_cost_usd: float = field(metadata=json_field(minimum=0))
    gpu_util_pct_mean: float | None
    cpu_percent_mean: float | None

    @classmethod
    def of(cls, run: RunRow, cost: RunCost) -> RunItem:
        return cls(
            id=run.id,
            kind=run.kind,
            command=run.command,
            tags=dict(run.tags),
            status=run.status,
            user=run.user,
            host=run.host,
            started_at_s=run.started_at_s,
            ended_at_s=run.ended_at_s,
            gpu_count=run.gpu_count,
            duration_s=cost.duration_s,
            cost_usd=cost.cost_usd,
            gpu_hours=cost.gpu_hours,
            idle_cost_usd=cost.idle_cost_usd,
            gpu_util_pct_mean=cost.gpu_util_pct_mean,
            cpu_percent_mean=cost.cpu_percent_mean,
        )

    @json_property(after="host", description="UTC, YYYY-MM-DDTHH:MM:SSZ")
    def started_at(self) -> str:
        return iso_utc(self.started_at_s)


def _items(ledger: Ledger, runs: list[RunRow], now_s: float) -> list[RunItem]:
    return [RunItem.of(run, cost) for run, cost in zip(runs, price_runs(ledger, runs, now_s), strict=True)]


# -- overview ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class DailySpend(Jsonable):
    """One stacked series of the overview's chart: a group's spend on each of its days, oldest first."""

    group: str
    daily_usd: tuple[float, ...]


_AT_LEAST_0 = json_field(minimum=0)


@dataclass(frozen=True)
class OverviewView(Jsonable):
    """This month's spend against the budgets, the last ``OVERVIEW_DAYS`` days of spend stacked by a tag,
    the biggest anomalies, and the runs running now. ``total_runs`` 0 is the empty ledger."""

    json_document: ClassVar[Document] = Document(
        "dashboard-overview",
        "dashboard: GET /api/overview",
        "This month's spend, GPU-hours and idle cost, the budgets with their forecast, the last 30 days of spend "
        "stacked by a tag, the top anomalies and the runs running now (dashboard.views.OverviewView). total_runs 0 "
        "is the empty ledger.",
    )
    now_s: float
    period: str = field(metadata=json_field(pattern="^[0-9]{4}-[0-9]{2}$"))
    total_runs: int = field(metadata=_AT_LEAST_0)
    spend_month_usd: float = field(metadata=_AT_LEAST_0)
    gpu_hours_month: float = field(metadata=_AT_LEAST_0)
    idle_cost_month_usd: float = field(metadata=_AT_LEAST_0)
    runs_month: int = field(metadata=_AT_LEAST_0)
    budgets: tuple[BudgetStatus, ...]
    stack: str | None = field(
        metadata=json_field(description="the tag key the daily spend is stacked by; null: one series of all runs")
    )
    stack_keys: tuple[str, ...] = field(metadata=json_field(description="every tag key, most common first"))
    days: tuple[str, ...] = field(
        metadata=json_field(items={"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"})
    )
    spend_by_day: tuple[DailySpend, ...]  # biggest first
    anomalies: tuple[SpendAnomaly, ...] = field(
        metadata=json_field(description="the biggest, as `cost anomalies --json` prints each")
    )
    running: tuple[RunItem, ...]
    running_total: int = field(metadata=_AT_LEAST_0)

    @json_property(after="period")
    def month_start(self) -> str:
        return iso_utc(month_start_s(self.now_s))


def overview_view(ledger: Ledger, now_s: float, stack: str | None) -> OverviewView:
    """The overview; ``stack`` is a tag key (default: the one most runs carry; none: one series of all runs)."""
    total_runs = ledger.count_runs(RunFilter())
    keys = tuple(key for key, _ in ledger.tag_key_counts())
    stack_key = stack if stack else (keys[0] if keys else None)
    by = (stack_key,) if stack_key else ()
    month_from_s = month_start_s(now_s)
    since_s = day_start_s(now_s) - (OVERVIEW_DAYS - 1) * DAY_S
    # One pricing pass over the widest window any figure reads; each figure narrows it (``overlapping``).
    widest_from_s = min(month_from_s, history_start_s(since_s, now_s), budget_window_start_s(now_s))
    priced = priced_runs(ledger, widest_from_s, now_s, now_s)
    month_runs = overlapping(priced, month_from_s, now_s)
    month = group_report(month_runs, (), lambda _run: (), month_from_s, now_s, now_s).total
    anomalies = spend_anomalies(ledger, by, since_s, now_s, already_priced=priced)
    skip = round((since_s - anomalies.first_day_s) / DAY_S)
    series = sorted(
        ((_group_label(dict(group), stack_key), daily[skip:]) for group, daily in anomalies.series),
        key=lambda pair: (-sum(pair[1]), pair[0]),
    )
    top = sorted(anomalies.anomalies, key=lambda a: -a.score)[:TOP_ANOMALIES]
    running_where = RunFilter(status="running")
    running = ledger.runs_page(running_where, "started", True, now_s, 0, RUNNING_SHOWN)
    return OverviewView(
        now_s=now_s,
        period=month_period(now_s),
        total_runs=total_runs,
        spend_month_usd=month.cost_usd,
        gpu_hours_month=month.gpu_hours,
        idle_cost_month_usd=month.idle_cost_usd,
        runs_month=month.runs,
        budgets=tuple(budget_status(ledger, now_s, already_priced=priced)),
        stack=stack_key,
        stack_keys=keys,
        days=tuple(iso_day(since_s + k * DAY_S) for k in range(OVERVIEW_DAYS)),
        spend_by_day=tuple(DailySpend(label, tuple(daily)) for label, daily in series if any(v > 0 for v in daily)),
        anomalies=tuple(top),
        running=tuple(_priced_items(ledger, running, priced, now_s)),
        running_total=ledger.count_runs(running_where),
    )


def _priced_items(ledger: Ledger, runs: list[RunRow], priced: list[PricedRun], now_s: float) -> list[RunItem]:
    """Rows for ``runs``, priced by the page's one pass where it covers them (a running run always overlaps now)."""
    costs = {p.run.id: p.cost for p in priced}
    if all(run.id in costs for run in runs):
        return [RunItem.of(run, costs[run.id]) for run in runs]
    return _items(ledger, runs, now_s)


def _group_label(group: dict[str, str], key: str | None) -> str:
    return "all runs" if key is None else group.get(key, NO_TAG)


# -- runs --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunsQuery(Jsonable):
    """A run list as the query string asks for it (already parsed and checked); its JSON is the same words."""

    where: RunFilter = field(default_factory=RunFilter, metadata=json_field(inline=True))
    sort: RunSort = "started"
    order: Literal["asc", "desc"] = "desc"
    page: int = field(default=1, metadata=json_field(minimum=1))
    per_page: int = field(default=50, metadata=json_field(minimum=1, maximum=MAX_PER_PAGE))

    @property
    def descending(self) -> bool:
        return self.order == "desc"


@dataclass(frozen=True)
class RunsView(Jsonable):
    """One page of the matching runs, how many match, and what all of them cost together."""

    json_document: ClassVar[Document] = Document(
        "dashboard-runs",
        "dashboard: GET /api/runs",
        "One page of the runs matching the query, how many match, and what all of them cost together "
        "(dashboard.views.RunsView).",
    )
    query: RunsQuery
    now_s: float
    matched: int = field(metadata=json_field(minimum=0))
    pages: int = field(metadata=json_field(minimum=1))
    total_cost_usd: float = field(metadata=json_field(minimum=0))
    total_gpu_hours: float = field(metadata=json_field(minimum=0))
    ledger_empty: bool
    runs: tuple[RunItem, ...]


def runs_view(ledger: Ledger, query: RunsQuery, now_s: float) -> RunsView:
    """The page asked for; the totals cover every matching run, priced like ``cost report`` prices them."""
    matching = ledger.runs_page(query.where, query.sort, query.descending, now_s, 0, None)
    costs = price_runs(ledger, matching, now_s)
    start = (query.page - 1) * query.per_page
    shown = matching[start : start + query.per_page]
    page_costs = costs[start : start + query.per_page]
    return RunsView(
        query=query,
        now_s=now_s,
        matched=len(matching),
        pages=max(1, math.ceil(len(matching) / query.per_page)),
        total_cost_usd=sum(cost.cost_usd for cost in costs),
        total_gpu_hours=sum(cost.gpu_hours for cost in costs),
        runs=tuple(RunItem.of(run, cost) for run, cost in zip(shown, page_costs, strict=True)),
        ledger_empty=not matching and ledger.count_runs(RunFilter()) == 0,
    )


# -- one run -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunView(Jsonable):
    """A run's page: ``runs show``'s summary, and its series averaged into at most ``MAX_POINTS`` buckets.

    ``summary`` is what ``runs show --json`` prints, less its thinned series, written in place: ``series``
    maps a chart name (``cpu``, ``memory``, ``power``, ``cost``, ``gpuN-util``, ``gpuN-memory``) to
    ``(seconds since start, value)`` points instead.
    """

    json_document: ClassVar[Document] = Document(
        "dashboard-run",
        "dashboard: GET /api/runs/{id}",
        "One run: what `computewise runs show ID --json` prints (monitor.summary.RunSummary, without its thinned "
        "series), plus its time series averaged in the database into at most 500 points each, and what track() "
        "reported (dashboard.views.RunView).",
    )
    summary: RunSummary = field(metadata=json_field(inline=True, without=("series",)))
    sample_count: int = field(metadata=json_field(minimum=0))
    bucket_s: float = field(
        metadata=json_field(minimum=0, description="Seconds of samples each point averages (0: no samples).")
    )
    live: bool = field(
        metadata=json_field(description="The run is running: /api/runs/{id}/events streams its progress.")
    )
    track: dict[str, Any] | None = field(
        metadata=json_field(description="What track() reported at the end (steps, throughput, MFU), if it ran.")
    )
    series: dict[str, tuple[tuple[float, float], ...]] = field(
        metadata=json_field(
            description="Per chart (cpu, memory, power, cost, gpuN-util, gpuN-memory), (seconds since start, value) "
            "points, each the mean of a bucket.",
            property_names={"pattern": "^(cpu|memory|power|cost|gpu[0-9]+-(util|memory))$"},
        )
    )

    @property
    def run(self) -> RunRow:
        return self.summary.run


def run_view(ledger: Ledger, catalog: Catalog, run_id: int, now_s: float) -> RunView:
    """Raises ``InputError`` for an unknown run id (the CLI's message)."""
    summary = summarize(ledger, run_id, now_s, catalog)
    run = summary.run
    count, first_s, last_s = ledger.sample_span(run_id)
    series: dict[str, tuple[tuple[float, float], ...]] = {}
    bucket_s = 0.0
    if count and first_s is not None and last_s is not None:
        # A hair wider than span / MAX_POINTS, so the last sample still falls in bucket MAX_POINTS - 1.
        bucket_s = max(run.interval_s, (last_s - first_s) / MAX_POINTS) * (1 + 1e-9) + 1e-9
        series = _series(ledger, run, first_s, bucket_s, summary.cost, now_s)
    return RunView(
        summary=summary,
        sample_count=count,
        bucket_s=bucket_s,
        series=series,
        live=run.status == "running",
        track=dict(run.summary) if run.summary else None,
    )


def _series(
    ledger: Ledger, run: RunRow, first_s: float, bucket_s: float, cost: RunCost, now_s: float
) -> dict[str, tuple[tuple[float, float], ...]]:
    buckets = ledger.sample_buckets(run.id, first_s, bucket_s)
    start_s = run.started_at_s
    # Cost accrues evenly over the run's wall time (account.spend): the same rule every report uses.
    priced = PricedRun(
        run=run,
        cost=cost,
        totals=ledger.run_totals([run.id])[run.id],
        end_s=max(run.started_at_s, run_end_s(run, now_s)),
    )
    series: dict[str, tuple[tuple[float, float], ...]] = {
        "cpu": tuple((b.t_s - start_s, b.cpu_percent) for b in buckets),
        "memory": tuple((b.t_s - start_s, b.rss_bytes) for b in buckets),
        # Mean power of the job (measured, or estimated per sample) = energy / time sampled.
        "power": tuple((b.t_s - start_s, b.energy_j / b.sampled_s) for b in buckets if b.sampled_s > 0),
        "cost": tuple((b.t_s - start_s, cost.cost_usd * priced.share(start_s, b.t_s)) for b in buckets),
    }
    per_gpu: dict[str, list[tuple[float, float]]] = {}
    for g in ledger.gpu_buckets(run.id, first_s, bucket_s):
        if g.utilization_pct is not None:
            per_gpu.setdefault(f"gpu{g.gpu_index}-util", []).append((g.t_s - start_s, g.utilization_pct))
        if g.memory_used_bytes is not None:
            per_gpu.setdefault(f"gpu{g.gpu_index}-memory", []).append((g.t_s - start_s, g.memory_used_bytes))
    return series | {name: tuple(points) for name, points in per_gpu.items()}


# -- live updates ------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunProgress(Jsonable):
    """What a live page watches: a change of any field means new samples or a new status.

    ``over`` holds once the run has ended, or when its monitor fell silent for as long as the
    ledger's crash rule allows (``STALE_HEARTBEATS`` intervals, at least ``STALE_MIN_S``): a stream
    must not wait forever on a run whose process was killed without a word.
    """

    run_id: int
    status: str
    sample_count: int
    last_sample_s: float | None
    heartbeat_at_s: float
    over: bool


def run_progress(ledger: Ledger, run_id: int, now_s: float) -> RunProgress:
    run = ledger.run(run_id)
    count, _, last_s = ledger.sample_span(run_id)
    seen_s = max(run.heartbeat_at_s, last_s if last_s is not None else run.heartbeat_at_s)
    silent = now_s - seen_s > max(STALE_HEARTBEATS * run.interval_s, STALE_MIN_S)
    return RunProgress(
        run_id=run_id,
        status=run.status,
        sample_count=count,
        last_sample_s=last_s,
        heartbeat_at_s=run.heartbeat_at_s,
        over=run.status != "running" or silent,
    )
