"""The ``optimize`` report: every variant measured, the speed-vs-quality frontier, and the verdict.

Works on the typed ``SearchResult``, and ranks and plots variants by its ``speed``, the figure the search
chose by, so the report's order cannot drift from the search's. The optimizer is imported for its types
only: loading the report pulls in neither NumPy nor ONNX Runtime. The variants table is built once as strings
(:func:`optimize_grid`) and rendered twice, as a Rich table and as HTML, so the terminal and the
page can never disagree. Rows go baseline first, then the measured variants fastest first for the
search's target, then the failed and skipped ones with their reasons.

Speed-ups are always at the same batching (the variant and the baseline both in arrival order, and
both length-sorted in their own column); what sorting adds is a line of its own, never folded into a
model's speed-up. A ratio above the search's suspect threshold, and a figure timed while other
processes held the CPUs, are marked in the row and explained under "warnings".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Console, JustifyMethod
from rich.table import Table
from rich.text import Text

from computewise.report.html import grid_table, page, pairs_table
from computewise.report.rows import Grid
from computewise.report.svg import ALERT, MUTED, PALETTE, Axis, Series, use_log, xy_chart
from computewise.report.table import at_natural_width, available_width
from computewise.report.terminal import print_pairs
from computewise.units import format_bytes, format_count, plural

if TYPE_CHECKING:
    from computewise.optimize.bench import BatchSpeed
    from computewise.optimize.search import SearchResult, VariantResult
    from computewise.system.hardware import Hardware

__all__ = ["optimize_grid", "optimize_html", "print_optimize"]

BASELINE = "baseline"
CHOSEN_MARK = "★"
NO_WINNER = "No variant beats the FP32 baseline within the budget"
_NOTE_WIDTH = 48  # the reason column wraps here, so a piped table stays readable at its natural width
_NOTE_MIN_WIDTH = 24  # and is never squeezed below a few words a line
# Cells with several parts ("375K/s (sorted 512K/s)") may wrap between them on a narrow terminal; single figures never.
_WRAPPING = ("quality", "items/s", "note")
# On a narrow terminal, and always on the page (1100 px wide), these columns go to a second table.
_SPEED_COLUMNS = ("p50 @", "items/s @", "x ", "size", "peak memory")


@dataclass(frozen=True)
class _Point:
    """A variant on the speed-vs-quality chart; ``speed`` is items/s or calls/s, higher is better either way."""

    name: str
    speed: float
    quality: float


def _ordered(r: SearchResult) -> list[VariantResult]:
    """Baseline, measured variants fastest first, failed, skipped: the reader meets the candidates before the misses."""
    rank = {"ok": 1, "failed": 2, "skipped": 3}
    measured = sorted((v for v in r.variants if v.name != BASELINE and v.status == "ok"), key=r.speed_key, reverse=True)
    others = sorted((v for v in r.variants if v.status != "ok"), key=lambda v: rank.get(v.status, 4))
    return [v for v in r.variants if v.name == BASELINE] + measured + others


def _allowed_drop(r: SearchResult) -> float:
    return float(r.metric.budget.allowed(r.baseline_quality))


def _decimals(r: SearchResult) -> int:
    """Two digits finer than the allowed drop, so a variant just inside the budget does not print as the baseline."""
    allowed = abs(_allowed_drop(r))
    if allowed == 0 or not math.isfinite(allowed):
        return 5
    # The 0.05 keeps a budget of 0.98 % (1 % of a 0.98 baseline) at the decimals of a 1 % one.
    return min(8, max(3, math.ceil(-math.log10(allowed) - 0.05) + 2))


def _quality(r: SearchResult, value: float) -> str:
    return f"{value:.{_decimals(r)}f}"


def _quality_cell(r: SearchResult, v: VariantResult) -> str:
    if v.quality is None:
        return ""
    text = _quality(r, v.quality.value)
    return text if v.quality.worst is None else f"{text} (worst {_quality(r, v.quality.worst)})"


def _relative_budget(r: SearchResult) -> bool:
    return str(r.metric.budget).endswith("%")


def _drop(r: SearchResult, quality: float) -> str:
    """Baseline minus the variant, in the budget's own terms: percent of the baseline for "1%", metric units else."""
    baseline = float(r.baseline_quality)
    drop = baseline - quality
    if _relative_budget(r) and baseline != 0:
        return f"{drop / abs(baseline):.2%}"
    return _quality(r, drop)


def _yes_no(flag: bool | None) -> str:
    return "" if flag is None else "yes" if flag else "no"


def _invariant_cell(v: VariantResult) -> str:
    if v.invariance is None:
        return ""
    return f"{_yes_no(v.batch_invariant)} ({v.invariance:.6f})"


def _ms(ms: float) -> str:
    return f"{ms:,.0f} ms" if ms >= 100 else f"{ms:.3g} ms"


def _per_s(items_per_s: float) -> str:
    return f"{format_count(items_per_s)}/s"


def _throughput_cell(speed: BatchSpeed) -> str:
    text = _per_s(speed.items_per_s)
    if speed.sorted_items_per_s is not None:
        text += f" (sorted {_per_s(speed.sorted_items_per_s)})"
    return text


def _times(factor: float | None, suspect: bool = False) -> str:
    if factor is None:
        return ""
    return f"{factor:.2f}x" + (" (suspect)" if suspect else "")


def _bytes(n_bytes: int | None) -> str:
    # A size of 0 means the variant has no file of its own to weigh (a module quantized in memory).
    return format_bytes(n_bytes) if n_bytes else ""


def _ratios(r: SearchResult, v: VariantResult) -> tuple[float | None, float | None, float | None, bool]:
    """The speed-ups over the baseline (throughput, both length-sorted, latency) and whether they are suspect."""
    s = r.speedup(v)
    return (None, None, None, False) if s is None else (s.throughput, s.sorted_throughput, s.latency, s.suspect)


def _note(r: SearchResult, v: VariantResult) -> str:
    """Why a row has no numbers, or what is unusual about one that has them."""
    if v.status != "ok":
        return str(v.reason or v.status)
    notes: list[str] = []
    floor, worst = r.metric.item_floor, None if v.quality is None else v.quality.worst
    if floor is not None and worst is not None and worst < floor:
        notes.append(f"worst example below the {_quality(r, floor)} floor")
    if r.options.batch_invariant and v.batch_invariant is False:
        notes.append("not batch-invariant")
    if v.kept_fp32:
        notes.append(f"{plural(len(v.kept_fp32), 'layer')} kept in FP32")
    if v.export_blocker and v.name != BASELINE:
        notes.append(f"not exportable: {v.export_blocker}")
    contended = [s for s in v.speeds if s.contended]
    if contended:
        share = max(s.others_cpu_share for s in contended)
        notes.append(f"timed under contention ({share:.0%} of the CPUs busy elsewhere)")
    return "; ".join(notes)


def _is_chosen(r: SearchResult, v: VariantResult) -> bool:
    return r.chosen is not None and v.name == r.chosen.name


def _display_name(r: SearchResult, v: VariantResult) -> str:
    return f"{CHOSEN_MARK} {v.name}" if _is_chosen(r, v) else v.name


def _row(r: SearchResult, v: VariantResult) -> tuple[str, ...]:
    name, status, note = _display_name(r, v), str(v.status), _note(r, v)
    blanks = len(_headers(r)) - 3
    if v.status != "ok":
        return (name, status, *([""] * blanks), note)
    speeds: list[str] = []
    for size in r.options.batch_sizes:
        speed = v.speed_at(size)
        speeds += [_ms(speed.p50_ms), _throughput_cell(speed)] if speed else ["", ""]
    throughput, sorted_throughput, latency, suspect = _ratios(r, v)
    sorted_column = [_times(sorted_throughput, suspect)] if _has_sorted(r) else []
    return (
        name,
        status,
        _quality_cell(r, v),
        "-" if v.name == BASELINE or v.quality is None else _drop(r, v.quality.value),
        _yes_no(v.meets_budget),
        _invariant_cell(v),
        *speeds,
        _times(throughput, suspect),
        *sorted_column,
        _times(latency, suspect),
        _bytes(v.size_bytes),
        _bytes(v.peak_memory_bytes),
        note,
    )


def _has_sorted(r: SearchResult) -> bool:
    """Whether length-sorted order was timed (text models at a batch size above one)."""
    return any(_ratios(r, v)[1] is not None for v in r.variants)


def _headers(r: SearchResult) -> tuple[str, ...]:
    per_batch = [h for size in r.options.batch_sizes for h in (f"p50 @{size}", f"items/s @{size}")]
    sorted_header = ["x sorted"] if _has_sorted(r) else []
    return (
        "variant",
        "status",
        "quality",
        "drop",
        "in budget",
        "batch-invariant",
        *per_batch,
        "x throughput",
        *sorted_header,
        "x latency",
        "size",
        "peak memory",
        "note",
    )


def optimize_grid(result: SearchResult) -> Grid:
    """One row per variant, baseline first, the chosen one marked with a star; shared by terminal and HTML."""
    headers = _headers(result)
    numeric = frozenset(range(2, len(headers) - 1)) - {headers.index("in budget"), headers.index("batch-invariant")}
    return Grid(headers, tuple(_row(result, v) for v in _ordered(result)), numeric)


def _halves(grid: Grid) -> tuple[list[int], list[int]]:
    """Column indices of the quality half and the speed half, each led by the variant's name."""
    speed = [i for i, header in enumerate(grid.headers) if header.startswith(_SPEED_COLUMNS)]
    return [i for i in range(len(grid.headers)) if i not in speed], [0, *speed]


def _hardware(hw: Hardware) -> str:
    parts = [hw.cpu]
    if hw.cpu_features:
        parts.append(" ".join(hw.cpu_features))
    parts += [plural(hw.threads, "thread"), f"VNNI {_yes_no(hw.has_vnni)}"]
    if hw.cuda_device:
        parts.append(hw.cuda_device)
    return " · ".join(parts)


def _setup(r: SearchResult) -> list[tuple[str, str]]:
    """(label, value) lines saying what was optimized, judged how, on what: the header of both reports."""
    metric, baseline = r.metric, float(r.baseline_quality)
    budget = f"max drop {metric.budget} (down to {_quality(r, baseline - _allowed_drop(r))})"
    floor = "" if metric.item_floor is None else f", every example at least {_quality(r, metric.item_floor)}"
    largest, smallest = max(r.options.batch_sizes), min(r.options.batch_sizes)
    target = f"latency at batch {smallest}" if r.options.target == "latency" else f"throughput at batch {largest}"
    if r.options.batch_invariant:
        target += ", batch-invariant outputs required"
    return [
        ("model", f"{r.source.description} ({r.source.kind})"),
        ("task", str(r.source.task)),
        ("metric", f"{metric.name}: baseline {_quality(r, baseline)}"),
        ("budget", budget + floor),
        ("examples", f"{r.eval_examples} held aside for grading, {r.calibration_examples} for calibration"),
        ("hardware", _hardware(r.hardware)),
        ("target", target),
    ]


def _gains(r: SearchResult, v: VariantResult) -> str:
    throughput, sorted_throughput, latency, _ = _ratios(r, v)
    parts = []
    if throughput is not None:
        same = f" ({sorted_throughput:.2f}x both length-sorted)" if sorted_throughput else ""
        parts.append(f"{throughput:.2f}x throughput at batch {max(r.options.batch_sizes)}{same}")
    if latency is not None:
        parts.append(f"{latency:.2f}x lower p50 latency at batch {min(r.options.batch_sizes)}")
    return ", ".join(parts)


def _standing(r: SearchResult, v: VariantResult) -> str:
    """'2.97x throughput ..., quality 0.97963 (drop 0.00%)': a variant's case in one clause."""
    q = v.quality
    quality = "" if q is None else f"quality {_quality(r, q.value)} (drop {_drop(r, q.value)})"
    return ", ".join(part for part in (_gains(r, v), quality) if part)


def _verdict(r: SearchResult) -> tuple[bool, list[str]]:
    """Whether a variant won, and the lines that say so: the winner's case, or the best of each kind."""
    chosen = r.chosen
    if chosen is not None:
        lines = [f"{CHOSEN_MARK} chosen: {chosen.name}: {_standing(r, chosen)}"]
        if chosen.kept_fp32:
            lines.append(f"kept in FP32: {', '.join(chosen.kept_fp32)}")
        return True, lines
    lines = [f"{NO_WINNER} (max drop {r.metric.budget}); keep the FP32 model."]
    for label, best in (("best quality", r.best_quality), ("best speed", r.best_speed)):
        if best is not None:
            lines.append(f"{label}: {best.name}: {_standing(r, best)}")
    return False, lines


def _sorting_gains(r: SearchResult) -> list[str]:
    """What length-sorted batching buys at the largest batch, for the baseline and the winner; text models only."""
    largest = max(r.options.batch_sizes)
    lines = []
    shown = [v for v in r.variants if v.name == BASELINE] + ([r.chosen] if r.chosen is not None else [])
    for v in {v.name: v for v in shown}.values():
        speed = v.speed_at(largest)
        if speed is None or speed.sorted_items_per_s is None or speed.items_per_s <= 0:
            continue
        ratio = speed.sorted_items_per_s / speed.items_per_s
        lines.append(
            f"length-sorted batching at batch {largest}, {v.name}: {_per_s(speed.items_per_s)} in arrival order, "
            f"{_per_s(speed.sorted_items_per_s)} sorted by length ({ratio:.2f}x; a serving choice, "
            "not counted in the speed-ups)"
        )
    return lines


def _doctor(r: SearchResult) -> list[tuple[str, str]]:
    doctor = r.doctor
    fused = ", ".join(f"{op} {count}" for op, count in sorted(doctor.fused_operators.items()))
    attention = {True: "yes", False: "no", None: "not checked"}[doctor.attention_fused]
    return [
        ("exporter", str(doctor.exporter or "not recorded")),
        ("fused operators", fused or "none"),
        ("attention fused", attention),
    ]


def _notes(r: SearchResult) -> list[str]:
    return [*r.hardware.notes, *r.notes]


def _legend(r: SearchResult) -> str:
    largest, smallest = max(r.options.batch_sizes), min(r.options.batch_sizes)
    return (
        "@N: batch size N; p50: median latency per call; batch-invariant: worst cosine of an output alone vs batched; "
        f"x throughput: items/s at batch {largest} over the FP32 baseline's, both in arrival order"
        + ("; x sorted: the same, both sorted by length" if _has_sorted(r) else "")
        + f"; x latency: the baseline's p50 at batch {smallest} over the variant's; "
        "threads: the same for every runtime; peak memory: rise while building and measuring"
    )


# --- terminal ---------------------------------------------------------------------------------------------------


def _row_style(r: SearchResult, v: VariantResult) -> str:
    if v.status != "ok":
        return "dim"
    return "bold" if _is_chosen(r, v) else ""


def _cell(header: str, text: str, row_style: str) -> Text:
    if header == "in budget" and row_style != "dim":
        return Text(text, style={"yes": "green", "no": "red"}.get(text, ""))
    return Text(text, style="dim" if header == "note" else "")


def _variants_table(r: SearchResult, grid: Grid, variants: Sequence[VariantResult], columns: Sequence[int]) -> Table:
    """The rows of ``variants`` in the grid's ``columns``; single figures never wrap, compound cells may."""
    # Right padding plus the box's blank divider: two spaces between columns, the header rule kept.
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), pad_edge=False, show_edge=False)
    for i in columns:
        header = grid.headers[i]
        justify: JustifyMethod = "right" if i in grid.numeric else "left"
        wraps = header.startswith(_WRAPPING)
        table.add_column(
            header,
            justify=justify,
            no_wrap=not wraps,
            overflow="fold" if wraps else "ellipsis",
            min_width=_NOTE_MIN_WIDTH if header == "note" else None,
            max_width=_NOTE_WIDTH if header == "note" else None,
        )
    rows = dict(zip((v.name for v in _ordered(r)), grid.rows, strict=True))
    for v in variants:
        style, row = _row_style(r, v), rows[v.name]
        table.add_row(*(_cell(grid.headers[i], row[i], style) for i in columns), style=style)
        if v.name == BASELINE:
            table.add_section()
    return table


def _print_variants(r: SearchResult, console: Console) -> None:
    """One table where it fits (a pipe takes any width); on a narrow terminal, quality and speed one above the other."""
    grid, variants = optimize_grid(r), _ordered(r)
    every = range(len(grid.headers))
    table = _variants_table(r, grid, variants, every)
    natural = console.measure(table, options=console.options.update_width(10_000)).maximum
    if available_width(console) is None or natural <= console.width:
        at_natural_width(console, table).print(table)
        return
    quality, speed = _halves(grid)
    console.print(_variants_table(r, grid, variants, quality))
    console.print()
    console.print(_variants_table(r, grid, [v for v in variants if v.status == "ok"], speed))


def print_optimize(result: SearchResult, console: Console) -> None:
    """Setup, the variants table, the export doctor and notes, then the verdict: what to ship and why."""
    console.print(Text(f"computewise optimize: {result.source.description}", style="bold"))
    print_pairs(_setup(result), console)
    console.print()
    _print_variants(result, console)
    console.print(Text(_legend(result), style="dim"))
    console.print()
    console.print(Text("export doctor", style="bold"))
    print_pairs(_doctor(result), console)
    for note in result.doctor.notes:
        console.print(Text(f"· {note}", style="dim"))
    notes = _notes(result)
    if notes:
        console.print()
        console.print(Text("notes", style="bold"))
    for note in notes:
        console.print(Text(f"· {note}", style="dim"))
    warnings = result.warnings
    if warnings:
        console.print()
        console.print(Text("warnings", style="bold yellow"))
    for warning in warnings:
        console.print(Text(f"· {warning}", style="yellow"))
    console.print()
    won, lines = _verdict(result)
    console.print(Text(lines[0], style="bold green" if won else "bold yellow"))
    for line in [*lines[1:], *_sorting_gains(result)]:
        console.print(Text(f"  {line}"))


# --- HTML -------------------------------------------------------------------------------------------------------


def _points(r: SearchResult) -> list[_Point]:
    return [
        _Point(v.name, speed, float(v.quality.value))
        for v in r.variants
        if v.status == "ok" and v.quality is not None and (speed := r.speed(v)) is not None and speed > 0
    ]


def _pareto(points: Sequence[_Point], decimals: int) -> list[_Point]:
    """Points no other beats on both speed and quality, slowest first: each one step is a trade the user can take.

    Quality is compared as printed: a variant 1e-9 better than a faster one (float noise on a cosine of 1.0) is
    not a trade anyone would take, and a frontier row reading "same quality, slower" would puzzle the reader.
    """
    frontier: list[_Point] = []
    best_quality = -math.inf
    for point in sorted(points, key=lambda p: (-p.speed, -p.quality)):
        quality = round(point.quality, decimals)
        if quality > best_quality:
            frontier.append(point)
            best_quality = quality
    return frontier[::-1]


def _speed_label(r: SearchResult) -> str:
    if r.options.target == "latency":
        return f"calls/s at batch {min(r.options.batch_sizes)} (1000 / p50 ms)"
    return f"items/s at batch {max(r.options.batch_sizes)} (best of arrival and sorted order)"


def _chart(r: SearchResult, points: Sequence[_Point], frontier: Sequence[_Point]) -> str:
    """All variants in grey, the frontier joined in colour, the winner large, the budget's floor as a red line."""

    def tip(p: _Point) -> str:
        return f"{p.name}: {_per_s(p.speed)}, quality {_quality(r, p.quality)}"

    def series(name: str, chosen: Sequence[_Point], color: str, **style: Any) -> Series:
        return Series(name, tuple((p.speed, p.quality) for p in chosen), color, tips=tuple(map(tip, chosen)), **style)

    floor = float(r.baseline_quality) - _allowed_drop(r)
    speeds = [p.speed for p in points]
    drawn = [
        series("variants", points, MUTED),
        series("frontier", frontier, PALETTE[0], line=True),
        Series(
            f"budget floor {_quality(r, floor)}",
            ((min(speeds), floor), (max(speeds), floor)),
            ALERT,
            line=True,
            radius=0,
        ),
    ]
    winner = [p for p in points if r.chosen is not None and p.name == r.chosen.name]
    if winner:
        drawn.append(series("chosen", winner, PALETTE[1], radius=7))
    decimals = _decimals(r)
    return xy_chart(
        "speed vs quality frontier",
        drawn,
        Axis(_speed_label(r), _per_s, log=use_log(speeds, ratio=30)),
        Axis(r.metric.name, lambda value: f"{value:.{decimals}g}"),
    )


def _frontier_grid(r: SearchResult, frontier: Sequence[_Point]) -> Grid:
    by_name = {v.name: v for v in r.variants}
    rows = tuple(
        (_display_name(r, v), _per_s(p.speed), _quality(r, p.quality), _drop(r, p.quality))
        for p in frontier[::-1]
        if (v := by_name.get(p.name)) is not None
    )
    return Grid(("variant", "speed", "quality", "drop"), rows, frozenset({1, 2, 3}))


def _subgrid(grid: Grid, columns: Sequence[int], rows: Sequence[int] | None = None) -> Grid:
    """Some columns (and rows) of ``grid``, its right-aligned columns still right-aligned."""
    kept = grid.rows if rows is None else tuple(grid.rows[r] for r in rows)
    return Grid(
        tuple(grid.headers[i] for i in columns),
        tuple(tuple(row[i] for i in columns) for row in kept),
        frozenset(n for n, i in enumerate(columns) if i in grid.numeric),
    )


def _list(items: Sequence[str], klass: str = "") -> str:
    attribute = f' class="{klass}"' if klass else ""
    lines = "\n".join(f"<li>{escape(item)}</li>" for item in items)
    return f"<ul{attribute}>\n{lines}\n</ul>"


def optimize_html(result: SearchResult) -> str:
    """A self-contained page: verdict, setup, frontier chart and table, every variant, the export doctor, notes."""
    won, lines = _verdict(result)
    source = result.source.description
    body = [
        f"<h1>computewise optimize: {escape(source)}</h1>",
        f'<p class="{"ok" if won else "bad"}">{escape(lines[0])}</p>',
    ]
    details = [*lines[1:], *_sorting_gains(result)]
    if details:
        body.append(_list(details))
    body += ["<h2>Setup</h2>", pairs_table(_setup(result), frozenset())]
    grid = optimize_grid(result)
    quality, speed = _halves(grid)
    measured = [i for i, v in enumerate(_ordered(result)) if v.status == "ok"]
    points = _points(result)
    if points:
        frontier = _pareto(points, _decimals(result))
        body += [
            "<h2>Speed vs quality</h2>",
            _chart(result, points, frontier),
            "<h3>Frontier (fastest first): no other variant is both faster and better</h3>",
            grid_table(_frontier_grid(result, frontier)),
        ]
    body += [
        "<h2>Variants</h2>",
        grid_table(_subgrid(grid, quality)),
        "<h3>Speed and size of the measured variants</h3>",
        grid_table(_subgrid(grid, speed, measured)),
        f'<p class="muted">{escape(_legend(result))}</p>',
        "<h2>Export doctor</h2>",
        pairs_table(_doctor(result), frozenset()),
    ]
    if result.doctor.notes:
        body.append(_list(result.doctor.notes, "muted"))
    notes = _notes(result)
    if notes:
        body += ["<h2>Notes</h2>", _list(notes, "muted")]
    warnings = result.warnings
    if warnings:
        body += ["<h2>Warnings</h2>", _list(warnings, "bad")]
    return page(f"computewise optimize: {source}", body)
