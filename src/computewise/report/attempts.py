"""The terminal view of a resubmitted run: its attempts, what it was billed, and what interruptions added."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.text import Text

from computewise.report.rows import Grid
from computewise.report.table import print_table
from computewise.report.terminal import print_pairs
from computewise.units import format_duration, format_usd

__all__ = ["attempts_grid", "interruption_line", "print_attempts", "print_supervised_run"]


def print_supervised_run(data: dict[str, Any], console: Console) -> None:
    """``data`` is ``SupervisedRun.to_dict()``."""
    console.print()
    console.print(Text(f"run {data['run_id']} ({data['name']}) on {data['backend']}: {data['status']}", style="bold"))
    print_attempts(data["attempts"], console)
    interruption, cost = data["interruption"], data["cost"]
    rows = [
        ("billed", f"{format_duration(interruption['billed_s'])} x {format_usd(data['hourly_usd'])}/h"),
        ("cost", format_usd(cost["cost_usd"])),
        ("price", data["price_explanation"]),
    ]
    if interruption["interruptions"]:
        rows.append(("interruptions", interruption_line(interruption)))
    print_pairs(rows, console)


def print_attempts(attempts: list[dict[str, Any]], console: Console) -> None:
    """One line per submission: its engine job id, how it ended and how long it ran."""
    print_table(attempts_grid(attempts), console)


def attempts_grid(attempts: list[dict[str, Any]]) -> Grid:
    """The attempts of a resubmitted run; the job id and the outcome are never cut."""
    rows = []
    for attempt in attempts:
        ended = attempt["ended_at_s"]
        exit_code = attempt["exit_code"]
        rows.append(
            (
                str(attempt["number"]),
                attempt["job_id"],
                attempt["outcome"],
                "-" if exit_code is None else str(exit_code),
                format_duration(ended - attempt["started_at_s"]) if ended is not None else "-",
            )
        )
    headers = ("attempt", "job id", "outcome", "exit", "ran")
    return Grid(headers, tuple(rows), frozenset({0, 3, 4}), whole=frozenset({1, 2}))


def interruption_line(interruption: dict[str, Any]) -> str:
    """How many interruptions, and the time and money they added (``InterruptionCost.to_dict()``)."""
    count = interruption["interruptions"]
    if interruption["added_s"] is None:
        return (
            f"{count}; what they added is unknown: the job records no steps "
            "(train with computewise.train, or time its steps with computewise.track)"
        )
    return (
        f"{count}, adding {format_duration(interruption['added_s'])} ({format_usd(interruption['added_usd'])}): "
        f"{format_duration(interruption['lost_s'])} of work after the last checkpoint lost, "
        f"{format_duration(interruption['restart_s'])} restarting"
    )
