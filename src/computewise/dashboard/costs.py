"""The Costs page: spend by any tag (or kind, user, GPU) over any window, per day, week or month.

Every dollar comes from one pricing pass (``account.spend.priced_runs``, which prices each run once
through ``account.totals.price_run``): the table is ``account.report.group_report`` over it, the
same rows ``computewise cost report --by KEY --since ... --until ...`` prints, and the chart spreads
the same priced runs over the periods by the same accrual rule (``PricedRun.share``)::

    spend[group, period] = sum over the group's runs of cost_usd x share(run, period ∩ [since, until))

so the bars of a group add up to its row in the table. ``since`` and ``until`` read like the CLI's
``--since``/``--until`` (``30d``, ``month``, ``2025-03-01``; the window ends just before ``until``).
``by=kind``, ``user`` or ``gpu`` group by the run's own fields; any other word is a tag key.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, ClassVar
from urllib.parse import urlencode

from computewise.account.periods import day_start_s, iso_utc, month_start_s, next_month_start_s, parse_time_s
from computewise.account.report import CostReport, GroupOf, group_report
from computewise.account.spend import PricedRun, priced_runs
from computewise.account.tags import NO_TAG, parse_group_keys
from computewise.dashboard.context import DashboardContext
from computewise.dashboard.layout import chart, esc, page
from computewise.errors import InputError
from computewise.ledger import Ledger, RunRow
from computewise.report.accounts import cost_grid, csv_text
from computewise.report.html import grid_table
from computewise.report.svg import MUTED, PALETTE, Axis, Column, stacked_columns
from computewise.specs.codec import Document, Jsonable, Layout, json_field, json_property
from computewise.units import format_usd

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import BaseRoute

__all__ = ["PERIODS", "RUN_FIELDS", "CostsQuery", "CostsView", "costs_view", "parse_costs_query", "routes"]

PERIODS = ("day", "week", "month")
MAX_PERIODS = 400  # bars in one chart: more are thinner than a pixel and the page slows down
DEFAULT_SINCE = "30d"  # as `computewise cost report`
_CHART_GROUPS = len(PALETTE) - 1  # the biggest groups get a colour each, the rest are one grey "other" bar

RUN_FIELDS: Mapping[str, Callable[[RunRow], str]] = {
    "kind": lambda run: run.kind,
    "user": lambda run: run.user,
    "gpu": lambda run: run.accelerator or run.gpu_name or "(no GPU)",
}
"""``by`` values that group by a field of the run rather than by a tag."""


@dataclass(frozen=True)
class CostsQuery:
    """What the page was asked for; ``by`` None means "the tag key most runs carry, else kind"."""

    by: str | None
    since_s: float | None  # None: all time
    until_s: float
    period: str
    since_text: str
    until_text: str


@dataclass(frozen=True)
class Period(Jsonable):
    """One bar of the chart: ``[start_s, end_s)`` clipped to the window, written as UTC times."""

    json_description: ClassVar[str] = (
        "[start, end) in UTC, clipped to the window; label YYYY-MM-DD, YYYY-Www or YYYY-MM"
    )
    json_layout: ClassVar[Layout] = ("label", "start", "end")
    label: str
    start_s: float
    end_s: float

    @json_property()
    def start(self) -> str:
        return iso_utc(self.start_s)

    @json_property()
    def end(self) -> str:
        return iso_utc(self.end_s)


@dataclass(frozen=True)
class GroupSeries(Jsonable):
    """A group's spend per period, in the order of ``CostsView.periods``."""

    json_description: ClassVar[str] = "one group's USD per period, in the order of `periods`; same order as report.rows"
    group: str
    cost_usd: tuple[float, ...]


@dataclass(frozen=True)
class CostsView(Jsonable):
    """The table (``report``), the per-period series of every group, and the tag keys one could group by."""

    json_document: ClassVar[Document] = Document(
        "dashboard-costs",
        "dashboard: GET /api/costs",
        "Spend by one tag key (or kind, user, gpu) over a window (dashboard.costs.CostsView). `report` is the "
        "report `computewise cost report --json` prints for the same --by, --since and --until (less its version "
        "and storage savings); `series` spreads "
        "the same priced runs over `periods` by accrual, so a group's values add up to its row.",
    )
    by: str = field(metadata=json_field(description="a tag key, or kind, user, gpu (a field of the run)"))
    period: str = field(metadata=json_field(enum=list(PERIODS)))
    periods: tuple[Period, ...]
    series: tuple[GroupSeries, ...]  # same order as report.rows: highest spend first
    tag_keys: tuple[str, ...]
    report: CostReport = field(
        metadata=json_field(
            description="as `cost report --json` (account.report.CostReport), without its version and storage"
        )
    )


def parse_costs_query(params: Mapping[str, str], now_s: float) -> CostsQuery:
    """The page's query string, each value checked with a fix for a bad one (an ``InputError``)."""
    by_text = (params.get("by") or "").strip()
    if "," in by_text:
        raise InputError(f"by={by_text!r} names more than one key", "group by one tag key (or kind, user, gpu)")
    by = None if not by_text else by_text if by_text in RUN_FIELDS else parse_group_keys([by_text])[0]
    since_text = (params.get("since") or "").strip() or DEFAULT_SINCE
    until_text = (params.get("until") or "").strip()
    since_s = None if since_text.lower() == "all" else parse_time_s(since_text, now_s, "since")
    until_s = now_s if not until_text else parse_time_s(until_text, now_s, "until")
    if since_s is not None and since_s >= until_s:
        raise InputError(
            f"the window starts at {iso_utc(since_s)}, not before its end {iso_utc(until_s)}",
            "give a since earlier than until (and not in the future)",
        )
    period = (params.get("period") or "").strip() or "day"
    if period not in PERIODS:
        raise InputError(f"period={period!r} is not one of {', '.join(PERIODS)}", "use period=day, week or month")
    return CostsQuery(by, since_s, until_s, period, since_text, until_text)


def costs_view(ledger: Ledger, query: CostsQuery, now_s: float) -> CostsView:
    """Price the window's runs once, then group them for the table and spread them over periods for the chart."""
    runs = priced_runs(ledger, query.since_s, query.until_s, now_s)
    in_window = [r for r in runs if r.share(-math.inf if query.since_s is None else query.since_s, query.until_s) > 0]
    tag_counts = Counter(key for r in in_window for key in r.run.tags)
    by = query.by or (tag_counts.most_common(1)[0][0] if tag_counts else "kind")
    group_of = _group_of(by)
    report = group_report(runs, (by,), group_of, query.since_s, query.until_s, now_s)
    first_s = min((r.run.started_at_s for r in runs), default=query.until_s - 30 * 86400.0)
    periods = _periods(query.since_s if query.since_s is not None else first_s, query.until_s, query.period)
    series = _series(runs, group_of, by, periods, [_label(row.group, by) for row in report.rows])
    tag_keys = tuple(sorted(set(tag_counts) - set(RUN_FIELDS)))
    return CostsView(by=by, period=query.period, periods=periods, series=series, tag_keys=tag_keys, report=report)


def _group_of(by: str) -> GroupOf:
    run_field = RUN_FIELDS.get(by)
    if run_field is not None:
        return lambda run: ((by, run_field(run)),)
    return lambda run: ((by, run.tags.get(by, NO_TAG)),)


def _label(group: tuple[tuple[str, str], ...], by: str) -> str:
    return dict(group).get(by, NO_TAG)


def _period_start_s(t_s: float, period: str) -> float:
    if period == "day":
        return day_start_s(t_s)
    if period == "week":  # ISO weeks start on Monday, UTC
        return day_start_s(t_s) - datetime.fromtimestamp(t_s, UTC).weekday() * 86400.0
    return month_start_s(t_s)


def _next_start_s(start_s: float, period: str) -> float:
    if period == "month":
        return next_month_start_s(start_s)
    return start_s + (7 if period == "week" else 1) * 86400.0


def _period_label(start_s: float, period: str) -> str:
    moment = datetime.fromtimestamp(start_s, UTC)
    if period == "month":
        return moment.strftime("%Y-%m")
    if period == "week":
        year, week, _ = moment.isocalendar()
        return f"{year}-W{week:02d}"
    return moment.date().isoformat()


def _periods(since_s: float, until_s: float, period: str) -> tuple[Period, ...]:
    """Calendar periods (UTC) covering ``[since_s, until_s)``, the first and last clipped to it."""
    out: list[Period] = []
    start_s = _period_start_s(since_s, period)
    while start_s < until_s:
        end_s = _next_start_s(start_s, period)
        out.append(Period(_period_label(start_s, period), max(start_s, since_s), min(end_s, until_s)))
        if len(out) > MAX_PERIODS:
            days = (until_s - since_s) / 86400.0
            raise InputError(
                f"{days:,.0f} days by {period} is more than {MAX_PERIODS} bars",
                "choose period=week or period=month, or a later since",
            )
        start_s = end_s
    return tuple(out)


def _series(
    runs: Sequence[PricedRun], group_of: GroupOf, by: str, periods: Sequence[Period], order: Sequence[str]
) -> tuple[GroupSeries, ...]:
    """Each group's accrued spend per period; a run visits only the periods its wall time overlaps."""
    starts = [p.start_s for p in periods]
    sums: dict[str, list[float]] = {group: [0.0] * len(periods) for group in order}
    for priced in runs:
        group = _label(group_of(priced.run), by)
        row = sums.setdefault(group, [0.0] * len(periods))
        first = max(0, bisect.bisect_right(starts, priced.run.started_at_s) - 1)
        for i in range(first, len(periods)):
            if periods[i].start_s > priced.end_s:
                break
            row[i] += priced.cost.cost_usd * priced.share(periods[i].start_s, periods[i].end_s)
    return tuple(GroupSeries(group, tuple(sums[group])) for group in order)


def _chart(view: CostsView) -> str:
    """The biggest groups stacked per period, the rest folded into one grey "other"."""
    shown = list(view.series[:_CHART_GROUPS])
    rest = view.series[_CHART_GROUPS:]
    columns = [Column(s.group, s.cost_usd, PALETTE[i]) for i, s in enumerate(shown)]
    if rest:
        other = tuple(sum(values) for values in zip(*(s.cost_usd for s in rest), strict=True))
        columns.append(Column(f"other ({len(rest)})", other, MUTED))
    svg = stacked_columns(
        f"spend per {view.period} by {view.by}",
        [p.label for p in view.periods],
        columns,
        Axis("USD", lambda usd: format_usd(usd) if usd else "$0"),
        width=960,
    )
    drawn = sum(1 for c in columns for value in c.values if value > 0)
    return chart(svg, series="costs", points=drawn)


def _form(view: CostsView, query: CostsQuery) -> str:
    keys = "".join(f'<option value="{esc(k)}">' for k in (*view.tag_keys, *RUN_FIELDS))
    periods = "".join(f'<option value="{p}"{" selected" if p == view.period else ""}>{p}</option>' for p in PERIODS)
    return (
        '<form id="costs-filters" class="filters" method="get" action="/costs">'
        f'<label>by<input name="by" list="costs-keys" value="{esc(view.by)}"></label>'
        f'<datalist id="costs-keys">{keys}</datalist>'
        f'<label>since<input name="since" value="{esc(query.since_text)}" placeholder="30d, month, 2025-03-01"></label>'
        f'<label>until<input name="until" value="{esc(query.until_text)}" placeholder="now"></label>'
        f'<label>period<select name="period">{periods}</select></label>'
        "<button type=submit>Show</button></form>"
    )


def _query_string(view: CostsView, query: CostsQuery) -> str:
    pairs = {"by": view.by, "since": query.since_text, "until": query.until_text, "period": view.period}
    return urlencode({key: value for key, value in pairs.items() if value})


def _html(view: CostsView, query: CostsQuery) -> str:
    data = view.report.to_dict()
    window = (
        f"all time until {data['until']}"
        if view.report.since_s is None
        else f"from {data['since']} to {data['until']} (end excluded)"
    )
    total = view.report.total
    parts = [
        "<h1>Costs</h1>",
        _form(view, query),
        f'<p class="muted">{esc(window)}; {total.runs} runs, {esc(format_usd(total.cost_usd))} in all. '
        "A run's cost accrues evenly over its wall time; the window and each bar get their share. "
        f"Same figures as <code>computewise cost report --by {esc(view.by)}</code> for the same window.</p>",
    ]
    if not view.report.rows:
        parts.append('<p id="costs-empty">No run spent money in this window.</p>')
    parts += [
        _chart(view),
        grid_table(cost_grid(view.report), table_id="costs-table"),
        f'<p><a id="costs-csv" href="/costs.csv?{esc(_query_string(view, query))}" download>Download CSV</a></p>',
    ]
    return page("Costs", "\n".join(parts), active="costs")


def _view(request: Request) -> tuple[CostsView, CostsQuery]:
    context: DashboardContext = request.app.state.context
    now_s = context.clock()
    query = parse_costs_query(request.query_params, now_s)
    return costs_view(context.ledger, query, now_s), query


async def _page(request: Request) -> Response:
    from starlette.concurrency import run_in_threadpool
    from starlette.responses import HTMLResponse

    view, query = await run_in_threadpool(_view, request)
    return HTMLResponse(_html(view, query))


async def _api(request: Request) -> Response:
    from starlette.concurrency import run_in_threadpool
    from starlette.responses import JSONResponse

    view, _ = await run_in_threadpool(_view, request)
    return JSONResponse(view.to_dict())


async def _csv(request: Request) -> Response:
    from starlette.concurrency import run_in_threadpool
    from starlette.responses import Response

    view, query = await run_in_threadpool(_view, request)
    since = "all" if query.since_s is None else datetime.fromtimestamp(query.since_s, UTC).date().isoformat()
    until = (datetime.fromtimestamp(query.until_s, UTC) - timedelta(seconds=1)).date().isoformat()
    name = f"costs-by-{''.join(ch if ch.isalnum() else '-' for ch in view.by)}-{since}-{until}.csv"
    return Response(
        csv_text(view.report.csv_rows(include_total=True)),
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{name}"'},
    )


def routes() -> list[BaseRoute]:
    """``/costs`` (HTML), ``/api/costs`` (JSON) and ``/costs.csv`` (the CLI's ``cost report --csv``)."""
    from starlette.routing import Route

    return [
        Route("/costs", _page, methods=["GET"]),
        Route("/api/costs", _api, methods=["GET"]),
        Route("/costs.csv", _csv, methods=["GET"]),
    ]
