"""The Runs page (``/runs``) and ``/api/runs``: every recorded run, filtered, sorted and paged in SQL.

A plain GET form (no script): ``q`` (text in the command or a ``key=value`` tag), ``tag`` (``key=value``,
repeatable, all must match), ``status``, ``kind``, ``since``/``until`` (UTC days, both included),
``sort`` (``started|cost|duration|name|status``), ``order`` (``asc|desc``), ``page`` and ``per_page``
(at most 500). The header links re-sort and the pager keeps the filters, so every view is a URL one
can share.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING
from urllib.parse import urlencode

from computewise.dashboard.context import DashboardContext
from computewise.dashboard.layout import esc, page
from computewise.dashboard.overview import empty_state, run_rows
from computewise.dashboard.params import parse_choice, parse_day_s, parse_int, parse_tag_filters
from computewise.dashboard.views import MAX_PER_PAGE, RunsQuery, RunsView, runs_view
from computewise.errors import InputError
from computewise.ledger import RUN_KINDS, RUN_STATUSES
from computewise.ledger.queries import RUN_SORTS, RunFilter, RunSort
from computewise.units import format_usd

if TYPE_CHECKING:
    from starlette.datastructures import QueryParams
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import BaseRoute

__all__ = ["MAX_PER_PAGE", "parse_runs_query", "routes"]

MAX_PAGE = 1_000_000
_MAX_TEXT_CHARS = 200
_COLUMNS: tuple[tuple[str, RunSort | None, bool], ...] = (
    ("run", None, False),
    ("status", "status", False),
    ("command", "name", False),
    ("tags", None, False),
    ("started (UTC)", "started", False),
    ("duration", "duration", True),
    ("cost", "cost", True),
    ("GPU util", None, True),
)


def routes() -> list[BaseRoute]:
    from starlette.routing import Route

    return [Route("/runs", _page), Route("/api/runs", _api)]


def parse_runs_query(params: QueryParams | dict[str, str], tags: Sequence[str] = ()) -> RunsQuery:
    """The query string as a checked ``RunsQuery``; ``InputError`` (400) names the bad value and its fix."""
    text = (params.get("q") or "").strip() or None
    if text is not None and len(text) > _MAX_TEXT_CHARS:
        raise InputError(f"q is {len(text)} characters long", f"search for at most {_MAX_TEXT_CHARS} characters")
    since_s = parse_day_s(params.get("since"), "since")
    until_s = parse_day_s(params.get("until"), "until", end_of_day=True)
    if since_s is not None and until_s is not None and since_s >= until_s:
        raise InputError("since is after until", "give a since day on or before the until day")
    sort = parse_choice(params.get("sort"), "sort", RUN_SORTS, default="started")
    order = parse_choice(params.get("order"), "order", ("desc", "asc"), default="desc")
    return RunsQuery(
        where=RunFilter(
            text=text,
            tags=parse_tag_filters(tags),
            status=parse_choice(params.get("status"), "status", RUN_STATUSES, default=None),
            kind=parse_choice(params.get("kind"), "kind", RUN_KINDS, default=None),
            since_s=since_s,
            until_s=until_s,
        ),
        sort=sort,  # type: ignore[arg-type]  # one of RUN_SORTS, checked just above
        order=order,  # type: ignore[arg-type]  # asc or desc, checked just above
        page=parse_int(params.get("page"), "page", default=1, low=1, high=MAX_PAGE),
        per_page=parse_int(params.get("per_page"), "per_page", default=50, low=1, high=MAX_PER_PAGE),
    )


async def _load(request: Request) -> RunsView:
    from starlette.concurrency import run_in_threadpool

    query = parse_runs_query(request.query_params, request.query_params.getlist("tag"))
    context: DashboardContext = request.app.state.context
    return await run_in_threadpool(runs_view, context.ledger, query, context.clock())


async def _api(request: Request) -> Response:
    from starlette.responses import JSONResponse

    return JSONResponse((await _load(request)).to_dict())


async def _page(request: Request) -> Response:
    from starlette.responses import HTMLResponse

    view = await _load(request)
    return HTMLResponse(page("Runs", runs_html(view, list(request.query_params.multi_items())), active="runs"))


def _url(params: list[tuple[str, str]], **changes: str) -> str:
    """``/runs`` with ``params`` where ``changes`` replace their keys (empty values dropped)."""
    kept = [(k, v) for k, v in params if k not in changes and v]
    kept += [(k, v) for k, v in changes.items() if v]
    return "/runs" + (f"?{urlencode(kept)}" if kept else "")


def _form(view: RunsView, params: list[tuple[str, str]]) -> str:
    where = view.query.where

    def value(name: str) -> str:
        return esc(next((v for k, v in params if k == name), ""))

    def select(name: str, options: Sequence[str], current: str | None) -> str:
        choices = "".join(
            f'<option value="{esc(o)}"{" selected" if o == current else ""}>{esc(o)}</option>' for o in options
        )
        return f'<label>{name}<select name="{name}"><option value="">any</option>{choices}</select></label>'

    tags = [v for k, v in params if k == "tag" and v.strip()] or [""]
    tag_inputs = "".join(
        f'<label>tag<input name="tag" value="{esc(t)}" placeholder="team=nlp" size="14"></label>' for t in tags
    )
    return (
        '<form id="run-filters" method="get" action="/runs" class="filters">'
        f'<label>text<input name="q" value="{value("q")}" placeholder="command or tag" size="18"></label>'
        f"{tag_inputs}"
        f"{select('status', RUN_STATUSES, where.status)}{select('kind', RUN_KINDS, where.kind)}"
        f'<label>since<input name="since" type="date" value="{value("since")}"></label>'
        f'<label>until<input name="until" type="date" value="{value("until")}"></label>'
        f'<input type="hidden" name="sort" value="{esc(view.query.sort)}">'
        f'<input type="hidden" name="order" value="{"desc" if view.query.descending else "asc"}">'
        f'<label>per page<input name="per_page" type="number" min="1" max="{MAX_PER_PAGE}" '
        f'value="{view.query.per_page}" size="4"></label>'
        '<button type="submit">filter</button> <a href="/runs">clear</a></form>'
    )


def _header(view: RunsView, params: list[tuple[str, str]]) -> str:
    cells = []
    for label, sort, numeric in _COLUMNS:
        css = ' class="num"' if numeric else ""
        if sort is None:
            cells.append(f"<th{css}>{esc(label)}</th>")
            continue
        current = view.query.sort == sort
        # A click on the current column flips the order; on another it starts with the biggest (newest) first.
        order = ("asc" if view.query.descending else "desc") if current else "desc"
        arrow = (" ▼" if view.query.descending else " ▲") if current else ""
        href = _url(params, sort=sort, order=order, page="")
        cells.append(f'<th{css}><a data-sort="{sort}" href="{esc(href)}">{esc(label)}{arrow}</a></th>')
    return "<tr>" + "".join(cells) + "</tr>"


def _pager(view: RunsView, params: list[tuple[str, str]]) -> str:
    page_no = view.query.page
    links = []
    if page_no > 1:
        links.append(f'<a rel="prev" href="{esc(_url(params, page=str(page_no - 1)))}">← previous</a>')
    links.append(f'<span id="page-of">page {page_no} of {view.pages}</span>')
    if page_no < view.pages:
        links.append(f'<a rel="next" href="{esc(_url(params, page=str(page_no + 1)))}">next →</a>')
    return '<div class="pager">' + "".join(links) + "</div>"


def runs_html(view: RunsView, params: list[tuple[str, str]]) -> str:
    if view.ledger_empty:
        return "<h1>Runs</h1>" + empty_state()
    summary = (
        f'<p id="runs-summary"><strong id="runs-matched">{view.matched}</strong> runs match · '
        f'total cost <strong id="runs-total-cost">{esc(format_usd(view.total_cost_usd))}</strong> · '
        f"{view.total_gpu_hours:,.1f} GPU-hours</p>"
    )
    if not view.runs and view.matched:
        last = _url(params, page=str(view.pages))
        listing = (
            f'<p id="no-runs">Page {view.query.page} is past the last page of these runs. '
            f'<a href="{esc(last)}">Go to page {view.pages}</a>.</p>'
        )
    elif not view.runs:
        listing = (
            '<p id="no-runs">No run matches these filters. '
            '<a href="/runs">Clear the filters</a> or widen the dates.</p>'
        )
    else:
        listing = run_rows(view.runs, table_id="runs-table", header=_header(view, params)) + _pager(view, params)
    return "<h1>Runs</h1>" + _form(view, params) + summary + listing
