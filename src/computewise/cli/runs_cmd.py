"""``computewise runs``: the recorded runs, newest first, and ``runs show ID`` for one run's summary again."""

from __future__ import annotations

import shlex
import time
from typing import Annotated

import typer
from rich.console import Console

from computewise.cli.common import DbOption, HtmlOption, JsonOption, bounded_int, emit, emit_json, open_ledger

app = typer.Typer(
    help="List recorded runs (newest first) or show one run's summary again.",
    no_args_is_help=False,
    invoke_without_command=True,
)


@app.callback()
def list_runs(
    ctx: typer.Context,
    tag: Annotated[
        list[str] | None, typer.Option("--tag", help="Only runs with this KEY=VALUE tag (repeatable).")
    ] = None,
    status: Annotated[
        str | None, typer.Option(help="Only runs with this status: running, succeeded, failed, interrupted, crashed.")
    ] = None,
    since: Annotated[
        str | None, typer.Option(help="Only runs started since: 30d, 12h, today, month, 2025-03-01.")
    ] = None,
    limit: Annotated[int, typer.Option(parser=bounded_int("--limit"), help="At most this many runs.")] = 20,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """List recent runs: id, start, status, duration, cost, tags and command."""
    if ctx.invoked_subcommand is not None:
        return
    from computewise.account.periods import parse_time_s
    from computewise.account.tags import parse_tags
    from computewise.account.totals import list_runs
    from computewise.cli.common import choice
    from computewise.ledger import RUN_STATUSES
    from computewise.report.runs import print_runs

    now_s = time.time()
    tags = parse_tags(tag or [])
    wanted = choice(status, RUN_STATUSES, "--status") if status is not None else None
    since_s = parse_time_s(since, now_s) if since is not None else None
    ledger = open_ledger(db)
    listing = list_runs(ledger, now_s, tags=tags, status=wanted, since_s=since_s, limit=limit)
    if as_json:
        emit_json(listing.to_dict())
        return
    filters = _filters(tag, status, since)
    unmatched = filters if not listing.runs and filters and ledger.runs(limit=1) else []
    print_runs(listing.runs, Console(), unmatched)


def _filters(tag: list[str] | None, status: str | None, since: str | None) -> list[str]:
    """The filters given, as typed (``--tag team=nlp``), to name them when no run matches."""
    given = [f"--tag {shlex.quote(t)}" for t in tag or []]
    given += [f"--{flag} {shlex.quote(value)}" for flag, value in (("status", status), ("since", since)) if value]
    return given


@app.command("show")
def show(
    run_id: Annotated[int, typer.Argument(help="The run's id, as listed by `computewise runs`.")],
    db: DbOption = None,
    as_json: JsonOption = False,
    html: HtmlOption = None,
) -> None:
    """One run's summary: cost, energy, utilization, diagnosis and idle periods."""
    from computewise.catalog import load_catalog
    from computewise.monitor.summary import summarize
    from computewise.report.runs import print_run_summary, run_html

    ledger = open_ledger(db)
    summary = summarize(ledger, run_id, time.time(), load_catalog())
    emit(summary, as_json, html, print_run_summary, run_html)
