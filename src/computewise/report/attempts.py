"""The terminal view of a resubmitted run: its attempts, what it was billed, and what interruptions added."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.console import Console
from rich.text import Text

from computewise.report.rows import Grid
from computewise.report.table import print_table
from computewise.report.terminal import print_pairs
from computewise.units import format_duration, format_usd

if TYPE_CHECKING:
    from computewise.account.interruptions import InterruptionCost
    from computewise.ledger import AttemptRow
    from computewise.scale.supervise import SupervisedRun

__all__ = ["attempts_grid", "interruption_line", "print_attempts", "print_supervised_run"]


def print_supervised_run(result: SupervisedRun, console: Console) -> None:
    """The run, its attempts, what it was billed and what the interruptions added."""
    console.print()
    title = f"run {result.run_id} ({result.name}) on {result.backend}: {result.status}"
    console.print(Text(title, style="bold"))
    print_attempts(result.attempts, console)
    interruption = result.interruption
    rows = [
        ("billed", f"{format_duration(interruption.billed_s)} x {format_usd(result.price.hourly_usd)}/h"),
        ("cost", format_usd(result.cost.cost_usd)),
        ("price", result.price.explanation),
    ]
    if interruption.interruptions:
        rows.append(("interruptions", interruption_line(interruption)))
    print_pairs(rows, console)


def print_attempts(attempts: Sequence[AttemptRow], console: Console) -> None:
    """One line per submission: its engine job id, how it ended and how long it ran."""
    print_table(attempts_grid(attempts), console)


def attempts_grid(attempts: Sequence[AttemptRow]) -> Grid:
    """The attempts of a resubmitted run; the job id and the outcome are never cut."""
    rows = tuple(
        (
            str(attempt.number),
            attempt.job_id,
            attempt.outcome,
            "-" if attempt.exit_code is None else str(attempt.exit_code),
            "-" if attempt.ended_at_s is None else format_duration(attempt.ended_at_s - attempt.started_at_s),
        )
        for attempt in attempts
    )
    headers = ("attempt", "job id", "outcome", "exit", "ran")
    return Grid(headers, rows, frozenset({0, 3, 4}), whole=frozenset({1, 2}))


def interruption_line(interruption: InterruptionCost) -> str:
    """How many interruptions, and the time and money they added (all unknown together when no steps were timed)."""
    count = interruption.interruptions
    added_s, added_usd = interruption.added_s, interruption.added_usd
    lost_s, restart_s = interruption.lost_s, interruption.restart_s
    if added_s is None or added_usd is None or lost_s is None or restart_s is None:
        return (
            f"{count}; what they added is unknown: the job records no steps "
            "(train with computewise.train, or time its steps with computewise.track)"
        )
    return (
        f"{count}, adding {format_duration(added_s)} ({format_usd(added_usd)}): "
        f"{format_duration(lost_s)} of work after the last checkpoint lost, "
        f"{format_duration(restart_s)} restarting"
    )
