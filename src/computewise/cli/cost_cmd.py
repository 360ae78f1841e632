"""``computewise cost report|anomalies``: who spent what, and which days stand out."""

from __future__ import annotations

import sys
import time
from typing import Annotated

import typer
from rich.console import Console

from computewise.cli.common import DbOption, JsonOption, bounded_float, bounded_int, emit_json, exclusive, open_ledger

app = typer.Typer(help="Spend by team, project or any tag; spend anomalies.", no_args_is_help=True)

ByOption = Annotated[
    list[str] | None, typer.Option("--by", help="Group by this tag key (repeatable, or team,project).")
]
CsvOption = Annotated[bool, typer.Option("--csv", help="Print CSV instead of a table.")]


@app.command("report")
def report(
    by: ByOption = None,
    since: Annotated[str, typer.Option(help="Window start: 30d, 12h, today, month, 2025-03-01.")] = "30d",
    until: Annotated[str | None, typer.Option(help="Window end (default now), same forms as --since.")] = None,
    db: DbOption = None,
    as_json: JsonOption = False,
    as_csv: CsvOption = False,
) -> None:
    """Spend, GPU-hours, energy, CO2, mean utilization and idle cost per group; $ per run and per 1000 inferences."""
    from computewise.account.periods import iso_utc, parse_time_s
    from computewise.report.accounts import cost_grid, csv_text, print_grid
    from computewise.report.prose import print_prose
    from computewise.report.storage import savings_line
    from computewise.storage.savings import cost_report_with_storage

    exclusive({"--json": as_json, "--csv": as_csv})
    now_s = time.time()
    since_s = None if since.strip().lower() == "all" else parse_time_s(since, now_s)
    until_s = None if until is None else parse_time_s(until, now_s, "--until")
    # Storage applies beside compute: bytes freed or archived in the window and the $/month no longer billed.
    document = cost_report_with_storage(open_ledger(db), by or [], since_s, until_s, now_s)
    result, storage = document.report, document.storage
    if as_json:
        emit_json(document.to_dict())
    elif as_csv:
        sys.stdout.write(csv_text(result.csv_rows(include_total=True)))
    else:
        console = Console()
        window = f"since {iso_utc(since_s)}" if since_s is not None else "all time"
        title = f"spend {window} until {iso_utc(result.until_s)}"
        print_grid(cost_grid(result), console, title, more="--json or --csv")
        if result.rows and not result.total.energy_all_measured:
            console.print("* energy estimated for some runs (no GPU energy counter)", style="dim")
        if (line := savings_line(storage)) is not None:
            print_prose(console, line, markup=False)


@app.command("anomalies")
def anomalies(
    by: ByOption = None,
    since: Annotated[str, typer.Option(help="Report anomalies on days since: 30d, 7d, month, 2025-03-01.")] = "30d",
    window: Annotated[
        int, typer.Option(parser=bounded_int("--window"), help="Trailing days the robust baseline looks at.")
    ] = 14,
    threshold: Annotated[
        float, typer.Option(parser=bounded_float("--threshold"), help="Robust z-score above which a day is flagged.")
    ] = 3.5,
    db: DbOption = None,
    as_json: JsonOption = False,
    as_csv: CsvOption = False,
) -> None:
    """Days whose spend jumps above the group's recent median (robust z-score on median and MAD)."""
    from computewise.account.anomalies import spend_anomalies
    from computewise.account.periods import iso_utc
    from computewise.report.accounts import anomalies_grid, csv_text, print_grid
    from computewise.report.rows import plural

    exclusive({"--json": as_json, "--csv": as_csv})
    now_s = time.time()
    result = spend_anomalies(
        open_ledger(db), by or [], _past_since_s(since, now_s), now_s, window=window, threshold=threshold
    )
    since_day = iso_utc(result.since_s)[:10]
    if as_json:
        emit_json(result.to_dict())
    elif as_csv:
        sys.stdout.write(csv_text(result.csv_rows()))
    elif not result.anomalies:
        Console().print(f"no spend anomalies since {since_day} ({plural(len(result.series), 'group')} checked)")
    else:
        print_grid(anomalies_grid(result), Console(), f"spend anomalies since {since_day}", "--json or --csv")


def _past_since_s(text: str, now_s: float) -> float:
    """``--since`` of ``cost anomalies``: days to come have no spend to judge, so a future start is refused
    rather than quietly read as today."""
    from computewise.account.periods import iso_day, parse_time_s
    from computewise.errors import InputError

    since_s = parse_time_s(text, now_s)
    if since_s > now_s:
        raise InputError(
            f"--since {text!r} is in the future: there is no spend after today ({iso_day(now_s)}) to judge",
            "give a past start, e.g. --since 30d or --since month",
        )
    return since_s
