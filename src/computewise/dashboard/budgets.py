"""The Budgets page: where each monthly budget stands, where it is heading, and every alert that fired.

The figures are ``account.budgets.budget_status``, the same ones ``computewise budget status``
prints: month-to-date spend (accrued), the burn rate over the trailing 1 to 7 days, the month-end
projection and the run-out date. The page adds one word per budget, its state:

    exceeded   spent >= budget
    at risk    the projection passes the budget before the month ends (runs_out_at is set)
    warning    a threshold has been crossed, but the projection stays inside the budget
    ok         none of the above

and a bar per budget (spent, then the forecast to month end, against the budget line). The alert
history is ``Ledger.alerts``, newest first, with how each delivery went.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Literal

from computewise.account.budgets import BudgetStatus, budget_status
from computewise.account.periods import iso_utc
from computewise.dashboard.context import DashboardContext
from computewise.dashboard.layout import chart, esc, page
from computewise.ledger import AlertRow, Ledger
from computewise.report.accounts import budget_grid
from computewise.report.svg import ALERT, PALETTE, Segment, stacked_bar
from computewise.specs.codec import Document, Jsonable, Layout, json_field, json_property
from computewise.units import format_usd

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import BaseRoute

__all__ = [
    "MAX_ALERTS",
    "AlertItem",
    "BudgetState",
    "BudgetsView",
    "StatedBudget",
    "budget_state",
    "budgets_view",
    "routes",
]

MAX_ALERTS = 500  # the newest shown; the ledger keeps them all (`computewise budget status --json` has the month's)


BudgetState = Literal["ok", "warning", "at risk", "exceeded"]


def budget_state(status: BudgetStatus) -> BudgetState:
    """One word for a budget (rules in the module docstring)."""
    if status.exhausted:
        return "exceeded"
    if status.runs_out_at_s is not None:
        return "at risk"
    if status.crossed_pct:
        return "warning"
    return "ok"


@dataclass(frozen=True)
class StatedBudget(Jsonable):
    """A budget as ``computewise budget status --json`` prints it, and its state (``budget_state``)."""

    status: BudgetStatus = field(metadata=json_field(inline=True))

    @json_property(description="dashboard.budgets.budget_state")
    def state(self) -> BudgetState:
        return budget_state(self.status)


@dataclass(frozen=True)
class AlertItem(AlertRow, Jsonable):
    """An alert of the history: the ledger's row, and when it fired as a UTC time."""

    @classmethod
    def of(cls, alert: AlertRow) -> AlertItem:
        return cls(**vars(alert))

    @json_property(after="fired_at_s")
    def fired_at(self) -> str:
        return iso_utc(self.fired_at_s)


@dataclass(frozen=True)
class BudgetsView(Jsonable):
    """Every budget's status and state, and the newest alerts first (``alerts_total`` counts them all)."""

    json_document: ClassVar[Document] = Document(
        "dashboard-budgets",
        "dashboard: GET /api/budgets",
        "Every budget as `computewise budget status --json` prints it (account.budgets.BudgetStatus) plus its "
        "state, and the newest alerts first (dashboard.budgets.BudgetsView).",
    )
    json_layout: ClassVar[Layout] = ("now", "stated", "alerts", "alerts_total")  # the instant written in UTC
    now_s: float
    budgets: tuple[BudgetStatus, ...]
    alerts: tuple[AlertItem, ...]
    alerts_total: int = field(metadata=json_field(minimum=0))

    @json_property()
    def now(self) -> str:
        return iso_utc(self.now_s)

    @json_property(name="budgets")
    def stated(self) -> tuple[StatedBudget, ...]:
        return tuple(StatedBudget(status) for status in self.budgets)


def budgets_view(ledger: Ledger, now_s: float) -> BudgetsView:
    alerts = ledger.alerts()
    newest = tuple(AlertItem.of(alert) for alert in reversed(alerts[-MAX_ALERTS:]))
    return BudgetsView(now_s, tuple(budget_status(ledger, now_s)), newest, len(alerts))


_STATE_CLASS = {"exceeded": "bad", "at risk": "bad", "warning": "warn", "ok": "ok"}


def _table(statuses: Sequence[BudgetStatus]) -> str:
    """``budget status``'s columns, one ``tr[data-budget=SCOPE]`` per budget, plus its state."""
    grid = budget_grid(statuses)
    head = "".join(f"<th{' class=num' if i in grid.numeric else ''}>{esc(h)}</th>" for i, h in enumerate(grid.headers))
    rows = []
    for status, cells in zip(statuses, grid.rows, strict=True):
        state = budget_state(status)
        tds = "".join(f"<td{' class=num' if i in grid.numeric else ''}>{esc(c)}</td>" for i, c in enumerate(cells))
        rows.append(
            f'<tr data-budget="{esc(status.budget.scope)}" data-state="{esc(state)}">{tds}'
            f'<td class="{_STATE_CLASS[state]}">{esc(state)}</td></tr>'
        )
    return (
        f'<div class="wide"><table id="budgets-table"><thead><tr>{head}<th>state</th></tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )


def _bar(status: BudgetStatus) -> str:
    """Spent, then what the burn rate adds by month end, against the budget line (red once past it)."""
    forecast_usd = max(0.0, status.projected_month_end_usd - status.spent_usd)
    segments = [
        Segment("spent", status.spent_usd, ALERT if status.exhausted else PALETTE[0]),
        Segment("forecast to month end", forecast_usd, PALETTE[5]),
    ]
    svg = stacked_bar(
        f"{status.budget.scope}: {status.period}",
        segments,
        format_usd,
        limit=status.budget.monthly_usd,
        limit_label=f"budget {format_usd(status.budget.monthly_usd)}",
    )
    return chart(svg, series=f"budget-{status.budget.id}", points=sum(1 for s in segments if s.value > 0))


def _alerts(view: BudgetsView) -> str:
    if not view.alerts:
        return '<p id="no-alerts">No alert has fired yet.</p>'
    rows = []
    for alert in view.alerts:
        delivery = ", ".join(
            f"{k}: {v.get('status', v) if isinstance(v, dict) else v}" for k, v in alert.delivery.items()
        )
        run = f'<a href="/runs/{alert.run_id}">{alert.run_id}</a>' if alert.run_id is not None else ""
        threshold = "" if alert.threshold_pct is None else f"{alert.threshold_pct:g} %"
        rows.append(
            f'<tr data-alert-id="{alert.id}"><td>{esc(iso_utc(alert.fired_at_s))}</td><td>{esc(alert.kind)}</td>'
            f"<td>{esc(alert.scope or '')}</td><td>{esc(alert.period or '')}</td><td class=num>{esc(threshold)}</td>"
            f"<td>{run}</td><td>{esc(alert.message)}</td><td>{esc(delivery)}</td></tr>"
        )
    shown = f" (newest {len(view.alerts)} of {view.alerts_total})" if view.alerts_total > len(view.alerts) else ""
    return (
        f'<p class="muted">Newest first{esc(shown)}.</p><div class="wide"><table id="alerts-table"><thead><tr>'
        "<th>fired (UTC)</th><th>kind</th><th>scope</th><th>month</th><th class=num>at</th><th>run</th>"
        f"<th>message</th><th>delivery</th></tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
    )


def _html(view: BudgetsView) -> str:
    parts = ["<h1>Budgets</h1>"]
    if view.budgets:
        parts += [
            f'<p class="muted">This month (UTC) at {esc(iso_utc(view.now_s))}. Burn rate: spend over the trailing '
            "1 to 7 days; the forecast extends it to the end of the month. Same figures as "
            "<code>computewise budget status</code>.</p>",
            _table(view.budgets),
            '<div class="charts">' + "".join(_bar(s) for s in view.budgets) + "</div>",
        ]
    else:
        parts.append(
            '<div id="no-budgets"><p>No budgets yet. Set one, with alerts at 50, 80 and 100 % of it:</p>'
            "<pre>computewise budget set --scope team=nlp --monthly-usd 5000</pre></div>"
        )
    parts += ["<h2>Alerts</h2>", _alerts(view)]
    return page("Budgets", "\n".join(parts), active="budgets")


def _view(request: Request) -> BudgetsView:
    context: DashboardContext = request.app.state.context
    return budgets_view(context.ledger, context.clock())


async def _page(request: Request) -> Response:
    from starlette.concurrency import run_in_threadpool
    from starlette.responses import HTMLResponse

    return HTMLResponse(_html(await run_in_threadpool(_view, request)))


async def _api(request: Request) -> Response:
    from starlette.concurrency import run_in_threadpool
    from starlette.responses import JSONResponse

    return JSONResponse((await run_in_threadpool(_view, request)).to_dict())


def routes() -> list[BaseRoute]:
    """``/budgets`` (HTML) and ``/api/budgets`` (JSON)."""
    from starlette.routing import Route

    return [Route("/budgets", _page, methods=["GET"]), Route("/api/budgets", _api, methods=["GET"])]
