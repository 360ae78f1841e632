"""``computewise budget set|status``: monthly budgets per tag scope, with alerts and a burn-rate forecast."""

from __future__ import annotations

import time
from typing import Annotated

import typer
from rich.console import Console

from computewise.cli.common import DbOption, JsonOption, emit_json, open_ledger

app = typer.Typer(help="Monthly budgets per team/project with alerts and burn-rate forecasts.", no_args_is_help=True)


@app.command("set")
def set_(
    scope: Annotated[str, typer.Option(help="Runs it covers: team=nlp, team=nlp,project=x, or all.")],
    monthly_usd: Annotated[str, typer.Option(help="Budget per calendar month (UTC) in US dollars, e.g. 5000.")],
    alert_at: Annotated[
        str, typer.Option(help="Percentages of the budget that fire an alert, once each.")
    ] = "50,80,100",
    webhook: Annotated[str | None, typer.Option(help="POST each alert as JSON to this http(s) URL.")] = None,
    command: Annotated[
        str | None, typer.Option(help="Also run this command per alert (alert JSON on stdin and in env).")
    ] = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Create or replace the budget of a scope."""
    from computewise.account.budgets import BudgetSetResult, budget_status, set_budget
    from computewise.units import parse_usd

    usd = parse_usd(monthly_usd, "--monthly-usd")  # before the ledger is opened, so a typo creates nothing
    ledger = open_ledger(db, create=True)
    now_s = time.time()
    budget = set_budget(ledger, scope, usd, now_s, alert_at=alert_at, webhook_url=webhook, command=command)
    status = next(s for s in budget_status(ledger, now_s) if s.budget.id == budget.id)
    if as_json:
        emit_json(BudgetSetResult(status).to_dict())
    else:
        Console(soft_wrap=True).print(
            f"budget {budget.scope}: ${budget.monthly_usd:,.2f}/month, alerts at "
            f"{', '.join(f'{p:g} %' for p in budget.alert_at_pct)}; {status.pct_used:.0f} % used this month",
            highlight=False,
            markup=False,
            emoji=False,
        )


@app.command("status")
def status(db: DbOption = None, as_json: JsonOption = False) -> None:
    """Month-to-date spend, burn rate, projected month-end spend and run-out date of every budget."""
    from computewise.account.budgets import BudgetStatusReport, budget_status
    from computewise.report.accounts import budget_grid, print_grid

    statuses = budget_status(open_ledger(db), time.time())
    if as_json:
        emit_json(BudgetStatusReport(tuple(statuses)).to_dict())
    elif not statuses:
        Console().print("no budgets yet: computewise budget set --scope team=nlp --monthly-usd 5000")
    else:
        print_grid(budget_grid(statuses), Console())
