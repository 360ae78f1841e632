"""Monthly budgets per scope: month-to-date spend, burn rate, a run-out forecast, and alerts that fire once.

A budget covers the runs whose tags match its scope (``account.tags.Scope``) over the calendar month
in UTC. Spend is accrued (``account.spend``): a job that started last month counts for the hours it
ran this month. The forecast is a straight line at the recent burn rate::

    burn_rate_usd_per_day = spend in [now - w, now) / w,   w = clamp(now - first matching run start, 1 d, 7 d)
    projected_month_end   = spent + burn_rate x (month end - now)
    runs_out_at           = now + (monthly - spent) / burn_rate, if that falls before the month ends
    ran_out_at            = the instant this month's accrued spend reached the budget, once it has

The trailing week (rather than month to date) follows a change of pace within days and does not
reset on the 1st; the one-day floor keeps a team's very first hour from being extrapolated 24-fold.

``check_budgets`` records each crossed threshold with ``Ledger.record_alert``; the database's unique
key (kind, budget, month, threshold) makes it fire once per month even with many processes checking,
and only the process whose insert won delivers it.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from computewise.account.alerts import Alert, Notifier, parse_webhook_url
from computewise.account.periods import DAY_S, iso_utc, month_period, month_start_s, next_month_start_s
from computewise.account.spend import PricedRun, overlapping, priced_runs
from computewise.account.tags import Scope, parse_scope
from computewise.errors import InputError
from computewise.ledger import BudgetRow, Ledger
from computewise.specs.codec import Document, Jsonable, Layout, json_field, json_property
from computewise.units import format_usd, parse_usd

__all__ = [
    "BURN_WINDOW_MAX_S",
    "BURN_WINDOW_MIN_S",
    "BudgetSetResult",
    "BudgetStatus",
    "BudgetStatusReport",
    "budget_status",
    "budget_window_start_s",
    "check_budgets",
    "parse_alert_at",
    "set_budget",
]

BURN_WINDOW_MAX_S = 7 * DAY_S
BURN_WINDOW_MIN_S = DAY_S
_MAX_PCT = 1000.0
_BUDGET_STATUS = Document(
    "budget-status",
    "budget set|status --json",
    "The budget just set (BudgetSetResult, its status's fields at the top level) or every budget's month to date "
    "and forecast (BudgetStatusReport); account.budgets.BudgetStatus is also each budget of the dashboard's "
    "/api/budgets and /api/overview.",
)


@dataclass(frozen=True)
class BudgetStatus(Jsonable):
    """Where one budget stands at ``now_s``."""

    json_description: ClassVar[str] = "One budget's month to date and forecast (account.budgets.BudgetStatus)."
    # The budget's own settings first, then the month's figures; the Scope and the instants as seconds are
    # written as the budget's scope text and ISO 8601 times.
    json_layout: ClassVar[Layout] = (
        "budget_id", "scope_text", "monthly_usd", "alert_at_pct", "webhook", "command", "period", "month_start",
        "month_end", "now_s", "spent_usd", "pct_used", "remaining_usd", "exhausted", "runs", "running",
        "burn_rate_usd_per_day", "burn_window_s", "burn_rate_basis", "projected_month_end_usd", "runs_out_at_s",
        "runs_out_at", "ran_out_at_s", "ran_out_at", "fired_pct",
    )  # fmt: skip

    budget: BudgetRow
    scope: Scope
    period: str = field(metadata=json_field(description="The budget's month, YYYY-MM (UTC)."))
    month_start_s: float
    month_end_s: float
    now_s: float = field(metadata=json_field(description="When the status was taken, seconds since the epoch."))
    spent_usd: float = field(metadata=json_field(description="Accrued this month in the scope's runs."))
    runs: int = field(metadata=json_field(minimum=0, description="The scope's runs that ran this month."))
    running: int = field(metadata=json_field(minimum=0, description="Of those, the ones still running."))
    burn_rate_usd_per_day: float
    burn_window_s: float = field(
        metadata=json_field(description="Seconds the burn rate averages over, ending now (1 to 7 days).")
    )
    projected_month_end_usd: float
    runs_out_at_s: float | None = field(  # the forecast, while money is left
        metadata=json_field(
            description="When the burn rate spends the rest, seconds since the epoch; null when not before the month "
            "ends, or when it already ran out."
        )
    )
    ran_out_at_s: float | None = field(  # when the spend reached the budget, once it has (exhausted)
        metadata=json_field(
            description="When this month's spend reached the budget, seconds since the epoch; null until it has."
        )
    )
    fired_pct: tuple[float, ...] = field(metadata=json_field(description="Thresholds already alerted this month."))

    @json_property(minimum=0)
    def budget_id(self) -> int:
        return self.budget.id

    @json_property(name="scope", description="The runs it covers: all, or KEY=VALUE[,KEY=VALUE...].")
    def scope_text(self) -> str:
        return self.budget.scope

    @json_property()
    def monthly_usd(self) -> float:
        return self.budget.monthly_usd

    @json_property(description="Percentages of monthly_usd that raise an alert.")
    def alert_at_pct(self) -> tuple[float, ...]:
        return self.budget.alert_at_pct

    @json_property(description="Alerts are posted to a webhook (its URL is not written).")
    def webhook(self) -> bool:
        return self.budget.webhook_url is not None

    @json_property(description="The command each alert runs; null when none.")
    def command(self) -> str | None:
        return self.budget.command

    @json_property()
    def month_start(self) -> str:
        return iso_utc(self.month_start_s)

    @json_property()
    def month_end(self) -> str:
        return iso_utc(self.month_end_s)

    @json_property()
    def pct_used(self) -> float:
        return 100.0 * self.spent_usd / self.budget.monthly_usd

    @json_property()
    def remaining_usd(self) -> float:
        return self.budget.monthly_usd - self.spent_usd

    @json_property()
    def exhausted(self) -> bool:
        return self.spent_usd >= self.budget.monthly_usd

    @json_property()
    def burn_rate_basis(self) -> str:
        """What the burn rate averages (the module docstring)."""
        return "trailing window of burn_window_s seconds ending now (1 to 7 days)"

    @json_property(description="runs_out_at_s in ISO 8601 (UTC); null as it is.")
    def runs_out_at(self) -> str | None:
        return None if self.runs_out_at_s is None else iso_utc(self.runs_out_at_s)

    @json_property(description="ran_out_at_s in ISO 8601 (UTC); null as it is.")
    def ran_out_at(self) -> str | None:
        return None if self.ran_out_at_s is None else iso_utc(self.ran_out_at_s)

    @property
    def crossed_pct(self) -> tuple[float, ...]:
        """Thresholds at or below the spend so far (fired or about to be)."""
        return tuple(p for p in self.budget.alert_at_pct if self.pct_used >= p)


@dataclass(frozen=True)
class BudgetSetResult(Jsonable):
    """``budget set --json``: the budget as stored and where it stands this month.

    A document of its own rather than ``BudgetStatus`` itself, so that a status written elsewhere on its
    own (an alert's details) keeps its bytes without a ``schema_version``.
    """

    json_document: ClassVar[Document] = _BUDGET_STATUS
    json_description: ClassVar[str] = "`budget set --json`: the status of the budget just set, its fields at the top."

    status: BudgetStatus = field(metadata=json_field(inline=True))


@dataclass(frozen=True)
class BudgetStatusReport(Jsonable):
    """``budget status --json``: every budget, in scope order (none: an empty list)."""

    json_document: ClassVar[Document] = _BUDGET_STATUS
    json_description: ClassVar[str] = "`budget status --json`: every budget's status, in scope order."

    budgets: tuple[BudgetStatus, ...]


def parse_alert_at(text: str | Sequence[float]) -> tuple[float, ...]:
    """``"50,80,100"`` (a ``%`` after each is allowed) -> ``(50.0, 80.0, 100.0)``: each in (0, 1000], no repeats,
    returned sorted."""
    parts: list[str | float] = list(text.split(",")) if isinstance(text, str) else list(text)
    if not parts or (len(parts) == 1 and not str(parts[0]).strip()):
        raise InputError("no alert thresholds given", "give percentages of the budget, e.g. --alert-at 50,80,100")
    values: list[float] = []
    for part in parts:
        cleaned = str(part).strip().removesuffix("%").strip()
        try:
            value = float(cleaned)
        except ValueError:
            raise InputError(
                f"cannot read alert threshold {str(part).strip()!r}", "give percentages, e.g. --alert-at 50,80,100"
            ) from None
        if not math.isfinite(value) or not 0.0 < value <= _MAX_PCT:
            raise InputError(
                f"alert threshold {cleaned}% is out of range",
                f"each threshold must be above 0 and at most {_MAX_PCT:g} (percent of the monthly budget)",
            )
        if value in values:
            raise InputError(f"alert threshold {value:g}% is given twice", "list each threshold once")
        values.append(value)
    return tuple(sorted(values))


def set_budget(
    ledger: Ledger,
    scope: str,
    monthly_usd: str | float,
    now_s: float,
    alert_at: str | Sequence[float] = "50,80,100",
    webhook_url: str | None = None,
    command: str | None = None,
) -> BudgetRow:
    """Validate what the user typed and create or replace the budget of ``scope`` (stored canonically)."""
    parsed_scope = parse_scope(scope)
    usd = parse_usd(monthly_usd, "--monthly-usd")
    thresholds = parse_alert_at(alert_at)
    url = None if webhook_url is None else parse_webhook_url(webhook_url)
    if command is not None:
        try:
            argv = shlex.split(command)
        except ValueError as exc:
            raise InputError(f"cannot read --command {command!r}: {exc}", "quote it like a shell word list") from None
        if not argv:
            raise InputError("--command is empty", "give a program and its arguments, or leave --command out")
    return ledger.set_budget(parsed_scope.text, usd, thresholds, url, command, now_s)


def budget_status(
    ledger: Ledger, now_s: float, already_priced: Sequence[PricedRun] | None = None
) -> list[BudgetStatus]:
    """Every budget's month-to-date spend and forecast, in scope order.

    ``already_priced``: runs priced (``priced_runs``) over a window that starts at or before
    ``budget_window_start_s(now_s)``, from a page that prices once for several views.
    """
    budgets = ledger.budgets()
    if not budgets:
        return []
    month_from_s = month_start_s(now_s)
    from_s = budget_window_start_s(now_s)
    if already_priced is None:
        runs = priced_runs(ledger, from_s, now_s, now_s)
    else:
        runs = overlapping(already_priced, from_s, now_s)
    period = month_period(now_s)
    fired: dict[int, list[float]] = {}
    for alert in ledger.alerts(since_s=month_from_s):
        if alert.kind == "budget" and alert.period == period and alert.budget_id is not None:
            fired.setdefault(alert.budget_id, []).append(float(alert.threshold_pct or 0.0))
    return [_status(budget, runs, now_s, tuple(sorted(fired.get(budget.id, [])))) for budget in budgets]


def budget_window_start_s(now_s: float) -> float:
    """The earliest spend ``budget_status`` reads: the month's start, or the longest burn-rate window before now."""
    return min(month_start_s(now_s), now_s - BURN_WINDOW_MAX_S)


def check_budgets(ledger: Ledger, now_s: float, notifier: Notifier) -> list[Alert]:
    """Fire every crossed threshold not yet fired this month (once, across processes) and deliver it."""
    alerts: list[Alert] = []
    for status in budget_status(ledger, now_s):
        for threshold in status.crossed_pct:
            if threshold in status.fired_pct:
                continue
            message = _message(status, threshold)
            alert_id = ledger.record_alert(
                kind="budget",
                message=message,
                fired_at_s=now_s,
                scope=status.budget.scope,
                budget_id=status.budget.id,
                period=status.period,
                threshold_pct=threshold,
            )
            if alert_id is None:  # another process fired it first
                continue
            alert = Alert(
                alert_id=alert_id,
                kind="budget",
                message=message,
                fired_at_s=now_s,
                scope=status.budget.scope,
                period=status.period,
                threshold_pct=threshold,
                details=status.to_dict(),
            )
            notifier.notify(alert, webhook_url=status.budget.webhook_url, command=status.budget.command)
            alerts.append(alert)
    return alerts


def _status(budget: BudgetRow, runs: Sequence[PricedRun], now_s: float, fired: tuple[float, ...]) -> BudgetStatus:
    scope = parse_scope(budget.scope)
    month_from_s, month_to_s = month_start_s(now_s), next_month_start_s(now_s)
    matching = [r for r in runs if scope.matches(r.run.tags)]
    spent_usd = 0.0
    in_month = running = 0
    for priced in matching:
        share = priced.share(month_from_s, now_s)
        if share > 0:
            in_month += 1
            running += int(priced.run.status == "running")
        spent_usd += priced.cost.cost_usd * share
    first_start_s = min((r.run.started_at_s for r in matching), default=now_s)
    window_s = min(BURN_WINDOW_MAX_S, max(BURN_WINDOW_MIN_S, now_s - first_start_s))
    window_usd = sum(r.cost.cost_usd * r.share(now_s - window_s, now_s) for r in matching)
    rate_usd_per_s = window_usd / window_s
    runs_out_at_s = None
    if spent_usd < budget.monthly_usd and rate_usd_per_s > 0:
        candidate_s = now_s + (budget.monthly_usd - spent_usd) / rate_usd_per_s
        runs_out_at_s = candidate_s if candidate_s < month_to_s else None
    ran_out_at_s = (
        _ran_out_at_s(matching, month_from_s, now_s, budget.monthly_usd) if spent_usd >= budget.monthly_usd else None
    )
    return BudgetStatus(
        budget=budget,
        scope=scope,
        period=month_period(now_s),
        month_start_s=month_from_s,
        month_end_s=month_to_s,
        now_s=now_s,
        spent_usd=spent_usd,
        runs=in_month,
        running=running,
        burn_rate_usd_per_day=rate_usd_per_s * DAY_S,
        burn_window_s=window_s,
        projected_month_end_usd=spent_usd + rate_usd_per_s * (month_to_s - now_s),
        runs_out_at_s=runs_out_at_s,
        ran_out_at_s=ran_out_at_s,
        fired_pct=fired,
    )


def _ran_out_at_s(runs: Sequence[PricedRun], month_from_s: float, now_s: float, monthly_usd: float) -> float:
    """The first instant this month when accrued spend reached ``monthly_usd`` (to within a second).

    Spend accrues over each run's wall time, so month-to-date spend grows monotonically with the end
    of the window: bisection finds the crossing. Called only when spend at ``now_s`` is already over.
    """

    def spent_by(t_s: float) -> float:
        return sum(r.cost.cost_usd * r.share(month_from_s, t_s) for r in runs)

    low_s, high_s = month_from_s, now_s
    while high_s - low_s > 1.0:
        middle_s = (low_s + high_s) / 2.0
        if spent_by(middle_s) >= monthly_usd:
            high_s = middle_s
        else:
            low_s = middle_s
    return high_s


def _message(status: BudgetStatus, threshold: float) -> str:
    budget = status.budget
    text = (
        f"budget {budget.scope}: {format_usd(status.spent_usd)} of {format_usd(budget.monthly_usd)} spent in "
        f"{status.period} ({status.pct_used:.0f} %, alert at {threshold:g} %)"
    )
    if status.exhausted:
        ran_out = "" if status.ran_out_at_s is None else f" since {iso_utc(status.ran_out_at_s)}"
        return f"{text}; the budget is used up{ran_out}"
    if status.runs_out_at_s is not None:
        return (
            f"{text}; at {format_usd(status.burn_rate_usd_per_day)}/day it runs out on {iso_utc(status.runs_out_at_s)}"
        )
    return (
        f"{text}; at {format_usd(status.burn_rate_usd_per_day)}/day the month ends near "
        f"{format_usd(status.projected_month_end_usd)}"
    )
