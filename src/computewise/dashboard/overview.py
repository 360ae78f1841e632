"""The Overview page (``/``) and ``/api/overview``: this month at a glance.

Spend this month against each budget with its burn-rate forecast, the last 30 days of spend stacked
by a tag (``?stack=KEY``; default the key most runs carry), GPU-hours, idle cost, the biggest spend
anomalies and the runs running now. An empty ledger gets a page that says how to record a first run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from computewise.account.periods import iso_utc
from computewise.dashboard.context import DashboardContext
from computewise.dashboard.layout import chart, esc, page
from computewise.dashboard.views import OverviewView, RunItem, overview_view
from computewise.errors import InputError
from computewise.report.svg import PALETTE, Axis, Column, stacked_columns
from computewise.units import format_duration, format_usd

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import BaseRoute

__all__ = ["empty_state", "routes", "run_rows"]

_MAX_KEY_CHARS = 255  # the ledger's tag key column


def routes() -> list[BaseRoute]:
    from starlette.routing import Route

    return [Route("/", _page), Route("/api/overview", _api)]


async def _load(request: Request) -> OverviewView:
    from starlette.concurrency import run_in_threadpool

    stack = request.query_params.get("stack", "").strip() or None
    if stack is not None and (len(stack) > _MAX_KEY_CHARS or "=" in stack):
        raise InputError(f"stack={stack!r} is not a tag key", "give a tag key such as stack=team")
    context: DashboardContext = request.app.state.context
    return await run_in_threadpool(overview_view, context.ledger, context.clock(), stack)


async def _api(request: Request) -> Response:
    from starlette.responses import JSONResponse

    return JSONResponse((await _load(request)).to_dict())


async def _page(request: Request) -> Response:
    from starlette.responses import HTMLResponse

    view = await _load(request)
    return HTMLResponse(page("Overview", overview_html(view), active="overview"))


def empty_state() -> str:
    """What a ledger with no runs shows: the two ways to record one."""
    return (
        '<section id="empty-state"><h2>No runs recorded yet</h2>'
        "<p>The dashboard shows what the ledger holds. Record a first run with either:</p>"
        "<ul><li>any command, watched from outside: <code>computewise run -- python train.py</code></li>"
        "<li>a training loop, step by step (data wait, MFU): "
        "<code>import computewise; tracker = computewise.track()</code> then "
        "<code>with tracker.step(): ...</code> in the loop</li></ul>"
        '<p class="muted">Both write to the ledger this dashboard reads; '
        "reload this page once a run has started.</p>"
        "</section>"
    )


def overview_html(view: OverviewView) -> str:
    if view.total_runs == 0:
        return "<h1>Overview</h1>" + empty_state()
    parts = [
        f'<h1>Overview <span class="muted">{esc(view.period)}</span></h1>',
        '<div class="cards">',
        _card("spend-month", "spend this month", format_usd(view.spend_month_usd), f"{view.runs_month} runs"),
        _card("gpu-hours", "GPU-hours this month", f"{view.gpu_hours_month:,.1f}", ""),
        _card(
            "idle-cost",
            "idle cost this month",
            format_usd(view.idle_cost_month_usd),
            "paid while the GPUs (or CPUs) sat idle",
        ),
        _card("running-count", "running now", str(view.running_total), ""),
        "</div>",
        _budgets(view),
        _spend_chart(view),
        _anomalies(view),
        '<section id="running-now"><h2>Running now</h2>',
        run_rows(view.running, table_id="running-table") if view.running else '<p class="muted">No run is running.</p>',
        "</section>",
    ]
    return "\n".join(parts)


def _card(element_id: str, label: str, value: str, note: str) -> str:
    return (
        f'<div class="card"><div class="muted">{esc(label)}</div>'
        f'<div class="value" id="{element_id}">{esc(value)}</div><div class="muted">{esc(note)}</div></div>'
    )


def _budgets(view: OverviewView) -> str:
    if not view.budgets:
        return (
            '<section id="budgets-summary"><h2>Budgets</h2><p class="muted">No budget set. '
            "Set one with <code>computewise budget set --scope team=nlp --monthly-usd 5000</code>.</p></section>"
        )
    rows = []
    for status in view.budgets:
        forecast = (
            f"runs out {iso_utc(status.runs_out_at_s)}"
            if status.runs_out_at_s is not None
            else f"ran out {iso_utc(status.ran_out_at_s)}"
            if status.ran_out_at_s is not None
            else "within budget at this pace"
        )
        state = "bad" if status.exhausted else "warn" if status.crossed_pct else "ok"
        rows.append(
            f'<tr data-budget="{esc(status.scope.text)}"><td>{esc(status.scope.text)}</td>'
            f'<td class="num">{esc(format_usd(status.spent_usd))}</td>'
            f'<td class="num">{esc(format_usd(status.budget.monthly_usd))}</td>'
            f'<td class="num {state}">{status.pct_used:.0f} %</td>'
            f'<td class="num">{esc(format_usd(status.burn_rate_usd_per_day))}/day</td>'
            f'<td class="num">{esc(format_usd(status.projected_month_end_usd))}</td>'
            f"<td>{esc(forecast)}</td></tr>"
        )
    return (
        '<section id="budgets-summary"><h2>Budgets this month</h2><div class="wide"><table>'
        '<thead><tr><th>scope</th><th class="num">spent</th><th class="num">budget</th>'
        '<th class="num">used</th><th class="num">burn rate</th><th class="num">month-end forecast</th>'
        "<th>forecast</th></tr></thead><tbody>" + "".join(rows) + '</tbody></table></div><p><a href="/budgets">'
        "budgets and alerts</a></p></section>"
    )


def _spend_chart(view: OverviewView) -> str:
    labels = [day[5:] for day in view.days]  # MM-DD: the year is in the page title
    columns = [Column(s.group, s.daily_usd, PALETTE[i % len(PALETTE)]) for i, s in enumerate(view.spend_by_day)]
    title = f"spend per day, last {len(view.days)} days" + (f", by {view.stack}" if view.stack else "")
    svg = stacked_columns(title, labels, columns, Axis("USD per day", format_usd))
    options = "".join(
        f'<option value="{esc(key)}"{" selected" if key == view.stack else ""}>{esc(key)}</option>'
        for key in view.stack_keys
    )
    picker = (
        '<form method="get" class="filters"><label>stack by<select name="stack">'
        f"{options}</select></label><button>show</button></form>"
        if view.stack_keys
        else ""
    )
    drawn = chart(svg, series="spend-by-day", points=len(labels)) if svg else ""
    empty = "" if svg else '<p class="muted">No spend in these days.</p>'
    return f"<section><h2>Spend by day</h2>{picker}{drawn}{empty}</section>"


def _anomalies(view: OverviewView) -> str:
    if not view.anomalies:
        body = '<p class="muted">No unusual day of spend in the last 30 days.</p>'
    else:
        rows = "".join(
            "<tr>"
            f"<td>{esc(' '.join(f'{k}={v}' for k, v in a.group) or 'all runs')}</td>"
            f"<td>{esc(a.day)}</td>"
            f'<td class="num">{esc(format_usd(a.spend_usd))}</td>'
            f'<td class="num">{esc(format_usd(a.expected_usd))}</td>'
            f'<td class="num">{a.score:.1f}</td></tr>'
            for a in view.anomalies
        )
        body = (
            '<table><thead><tr><th>group</th><th>day</th><th class="num">spent</th>'
            '<th class="num">usual</th><th class="num">score</th></tr></thead>'
            f"<tbody>{rows}</tbody></table>"
        )
    return f'<section id="anomalies"><h2>Top anomalies</h2>{body}</section>'


def run_rows(items: tuple[RunItem, ...], *, table_id: str, header: str = "") -> str:
    """A table of runs, one ``tr[data-run-id]`` each, linking to the run page (shared with the Runs page)."""
    head = header or (
        "<tr><th>run</th><th>status</th><th>command</th><th>tags</th><th>started (UTC)</th>"
        '<th class="num">duration</th><th class="num">cost</th><th class="num">GPU util</th></tr>'
    )
    rows = "".join(
        f'<tr data-run-id="{item.id}"><td><a href="/runs/{item.id}">{item.id}</a></td>'
        f'<td class="{esc(item.status)}">{esc(item.status)}</td>'
        f"<td><code>{esc(_short(item.command))}</code></td>"
        f"<td>{esc(' '.join(f'{k}={v}' for k, v in sorted(item.tags.items())))}</td>"
        f"<td>{esc(iso_utc(item.started_at_s).replace('T', ' ').rstrip('Z'))}</td>"
        f'<td class="num">{esc(format_duration(item.duration_s))}</td>'
        f'<td class="num">{esc(format_usd(item.cost_usd))}</td>'
        f'<td class="num">{"" if item.gpu_util_pct_mean is None else f"{item.gpu_util_pct_mean:.0f} %"}</td></tr>'
        for item in items
    )
    return f'<div class="wide"><table id="{table_id}"><thead>{head}</thead><tbody>{rows}</tbody></table></div>'


def _short(command: str, limit: int = 80) -> str:
    return command if len(command) <= limit else command[: limit - 1] + "…"
