"""The ``scaletest`` report: measured scaling per world size beside the prediction, and the verdict.

Reads the typed ``ScaleTestResult`` (mypy checks every field it shows; ``--json`` is its ``to_dict``).
The table is built once as strings (:func:`scaletest_grid`) and the verdict once as a sentence
(:func:`scaletest_verdict`), so tests and the terminal read the same words.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.text import Text

from computewise.report.rows import Grid, plural
from computewise.report.table import print_table
from computewise.units import format_bytes, format_count

if TYPE_CHECKING:
    from computewise.tune.scaletest import ScaleTestResult, WorldSizeResult

__all__ = ["LEGEND", "print_scaletest", "scaletest_grid", "scaletest_verdict"]

# Short headers so the table fits 80 columns; LEGEND spells them out under it.
_HEADERS = ("procs", "batch", "step", "samples/s", "tokens/s", "speed-up", "eff.", "pred.", "sync", "note")
LEGEND = (
    "eff. = measured scaling efficiency, throughput(N) / (N x throughput(1)); pred. = predicted efficiency; "
    "sync = predicted all-reduce time a step"
)


def _processes(count: int) -> str:
    return plural(count, "process", "processes")


def _ms(seconds: float | None) -> str:
    if seconds is None:
        return ""
    ms = seconds * 1000.0
    return f"{ms:,.0f} ms" if ms >= 100 else f"{ms:.3g} ms"


def _rate(value: float | None) -> str:
    return "" if value is None else format_count(value)


def _share(value: float | None) -> str:
    return "" if value is None else f"{value:.0%}"


def _times(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}x"


def _note(row: WorldSizeResult, floor: float) -> str:
    if row.status != "ok":
        return f"{row.status}: {row.message}"
    spread = row.rank_median_step_s
    notes = []
    if row.efficiency is not None and row.nproc > 1 and row.efficiency < floor:
        notes.append(f"below {floor:.0%}")
    if len(spread) > 1 and min(spread) > 0 and max(spread) / min(spread) > 1.1:
        notes.append(f"ranks {_ms(min(spread))}-{_ms(max(spread))}")
    return "; ".join(notes)


def scaletest_grid(result: ScaleTestResult) -> Grid:
    """One row per world size: what was measured, then what the model predicted."""
    floor = result.efficiency_floor
    rows = tuple(
        (
            str(row.nproc),
            str(row.global_batch_size),
            _ms(row.step_s),
            _rate(row.samples_per_s),
            _rate(row.tokens_per_s),
            _times(row.speedup),
            _share(row.efficiency),
            _share(row.predicted_efficiency),
            _ms(row.predicted_allreduce_s) if row.nproc > 1 else "",
            _note(row, floor),
        )
        for row in result.rows
    )
    # The prediction gives way first on a narrow terminal; LEGEND and --json keep it.
    return Grid(_HEADERS, rows, frozenset(range(9)), drop_order=(8, 7, 4))


def _best(result: ScaleTestResult) -> tuple[WorldSizeResult, float] | None:
    """The world size with the highest measured throughput, and that throughput."""
    measured = [(row, row.samples_per_s) for row in result.rows if row.samples_per_s is not None]
    return max(measured, key=lambda pair: pair[1]) if measured else None


def scaletest_verdict(result: ScaleTestResult) -> str:
    """Where adding workers stops paying, measured, and whether the prediction said the same."""
    floor = result.efficiency_floor
    rows = {row.nproc: row for row in result.rows}
    tried = ", ".join(str(n) for n in rows)
    stop = result.stops_paying_at
    predicted = result.predicted_stops_paying_at
    if stop is None:
        largest = max(n for n, row in rows.items() if row.status == "ok")
        sentence = (
            f"Adding workers keeps paying up to {_processes(largest)} (efficiency >= {floor:.0%} and throughput "
            f"growing at every size tried: {tried})."
        )
    else:
        row = rows[stop]
        previous = max(n for n in rows if n < stop and rows[n].status == "ok")
        # stops_paying_at is a measured size: its throughput and efficiency are there (0.0 only for mypy).
        grew = (row.samples_per_s or 0.0) > (rows[previous].samples_per_s or 0.0)
        why = (
            f"efficiency {row.efficiency or 0.0:.0%} < {floor:.0%}"
            if grew
            else f"{_rate(row.samples_per_s)} samples/s, no more than with {previous}"
        )
        sentence = f"Adding workers stops paying at {_processes(stop)} ({why}); stay at {previous}."
    if result.link is None:
        return sentence + " No prediction: the link of this device is not in the catalog (give --link-gb-per-s)."
    if predicted == stop:
        return sentence + " The prediction agrees."
    if predicted is None:
        return sentence + " The prediction said every size tried would pay."
    return sentence + f" The prediction said it stops paying at {_processes(predicted)}."


def print_scaletest(result: ScaleTestResult, console: Console) -> None:
    threads = plural(result.threads_per_process, "thread")
    console.print(
        Text(
            f"scaletest {result.entry} on {result.device_name} ({result.device}, {threads} per process, "
            f"{plural(result.cores, 'core')})",
            style="bold",
        )
    )
    console.print(
        f"weak scaling: {result.batch_per_rank} samples per rank a step (micro-batch {result.micro_batch_size}); "
        f"step = the slowest rank's median of {plural(result.steps, 'step')} after {result.warmup_steps} warm-up; "
        f"{format_count(result.params)} parameters, "
        f"{format_bytes(result.gradient_bytes)} of gradients to all-reduce; training config: {result.train_config}",
        highlight=False,
    )
    print_table(scaletest_grid(result), console)
    console.print(LEGEND, highlight=False)
    link = result.link
    if link is not None:
        console.print(
            f"prediction: one process's step + ring all-reduce of the gradients over {link.name} at "
            f"{link.bytes_per_s / 1e9:.3g} GB/s ({link.source}), no overlap with backward",
            highlight=False,
        )
    best = _best(result)
    if best is not None:
        row, samples_per_s = best
        console.print(f"fastest: {_processes(row.nproc)}, {_rate(samples_per_s)} samples/s", highlight=False)
    console.print(Text(scaletest_verdict(result), style="bold"))
    for warning in result.warnings:
        console.print(f"[yellow]warning:[/] {escape(warning)}", highlight=False, emoji=False)
