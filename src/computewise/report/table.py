"""How every table of the CLI reaches the terminal: numbers whole, text folded, extra columns dropped.

One rule for all of them, so no report can print ``$16…`` on an 80-column terminal again:

* numeric columns (and the ``whole`` ones: ids, statuses, dates) keep their full width and never wrap;
* text columns share what is left and fold at word boundaries, a word wider than its column (a
  path, a file name) after a ``/``, ``_``, ``-`` or ``.`` where it has one, not at any letter;
* when even that does not fit, the columns in ``Grid.drop_order`` are hidden one by one, and a dim
  footnote names them and says how to see them;
* when the numbers alone are wider than the terminal, each row is printed as ``header: value`` lines.

The width is the terminal's; on a pipe it is ``COLUMNS``, and a pipe without it prints every
column at its natural width, since a file has no edge.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

from rich import box
from rich.cells import cell_len
from rich.console import Console, RenderableType
from rich.segment import Segments
from rich.table import Table
from rich.text import Text

from computewise.report.rows import Grid, plural

__all__ = ["at_natural_width", "available_width", "fit_widths", "print_details", "print_table"]

GAP = 1  # the box's blank divider is the only gap: a 120-column terminal fits the plan's candidate table
TEXT_MIN = 12  # a text column narrower than this reads as a column of word fragments
WORD_MAX = 24  # a longer word (a path, a URL) may fold rather than push other columns off the terminal
_WORD = re.compile(r"\S+")
_AFTER_SEPARATOR = re.compile(r"(?<=[/_\-.])")


def available_width(console: Console) -> int | None:
    """Columns a table must fit in: the terminal's width, else COLUMNS; None for a pipe or file without COLUMNS."""
    if console.is_terminal or os.environ.get("COLUMNS", "").strip().isdigit():
        return console.width  # Rich reads COLUMNS itself; a Console(width=...) of the caller wins over both
    return None


def at_natural_width(console: Console, renderable: RenderableType) -> Console:
    """The console to print ``renderable`` on: ``console`` itself, or one at its natural width on a bare pipe."""
    if available_width(console) is not None:
        return console
    natural = console.measure(renderable, options=console.options.update_width(10_000)).maximum
    return Console(file=console.file, width=max(console.width, natural), no_color=True)


def _print_at(console: Console, renderable: RenderableType, width: int) -> None:
    # Console.print caps a width at the console's own; rendering first and printing uncropped does not.
    console.print(Segments(console.render(renderable, console.options.update_width(width))), crop=False)


def _width(text: str) -> int:
    return max((cell_len(line) for line in text.splitlines()), default=0)


def _whole(grid: Grid, i: int) -> bool:
    return i in grid.numeric or i in grid.whole


def _natural(grid: Grid, i: int) -> int:
    return max([_width(grid.headers[i]), *(_width(row[i]) for row in grid.rows)])  # a list: a grid may have no rows


def _longest_word(text: str) -> int:
    return max((cell_len(word) for word in text.split()), default=0)


def _minimum(grid: Grid, i: int, words_whole: bool = True) -> int:
    """Whole columns need their natural width; text its longest word (up to WORD_MAX), or TEXT_MIN at a pinch."""
    natural = _natural(grid, i)
    if _whole(grid, i):
        return natural
    longest = _longest_word(grid.headers[i])
    if words_whole:
        longest = max([longest, *(min(_longest_word(row[i]), WORD_MAX) for row in grid.rows)])
    return min(natural, max(TEXT_MIN, longest))


def _total(widths: Sequence[int]) -> int:
    return sum(widths) + GAP * max(0, len(widths) - 1)


def fit_widths(grid: Grid, limit: int | None) -> tuple[list[int], dict[int, int]]:
    """(shown column indices, their widths): natural widths if they fit, else text shrunk, then columns dropped.

    Columns in ``drop_order`` go before any word is split; only when the rest still does not fit do
    text columns fold inside long words, down to TEXT_MIN.
    """
    shown = list(range(len(grid.headers)))
    natural = {i: _natural(grid, i) for i in shown}
    if limit is None or _total(list(natural.values())) <= limit:
        return shown, natural
    for i in grid.drop_order:
        if _total([_minimum(grid, j) for j in shown]) <= limit:
            break
        shown.remove(i)
    widths = {i: natural[i] for i in shown}
    for words_whole in (True, False):
        floor = {i: _minimum(grid, i, words_whole) for i in shown}
        # Take from the widest text column one cell at a time: short text keeps its width, long text folds.
        while _total(list(widths.values())) > limit:
            shrinkable = [i for i in shown if widths[i] > floor[i]]
            if not shrinkable:
                break
            widths[max(shrinkable, key=lambda i: widths[i])] -= 1
    return shown, widths


def print_table(
    grid: Grid,
    console: Console,
    row_styles: Sequence[str] | None = None,
    more: str = "--json",
) -> None:
    """The one way a grid is printed; ``more`` names where hidden columns can be seen in full."""
    limit = available_width(console)
    shown, widths = fit_widths(grid, limit)
    if limit is not None and _total(list(widths.values())) > limit:
        _print_records(grid, console)
        return
    table = Table(box=box.SIMPLE_HEAD, padding=0, pad_edge=False, show_edge=False)
    for i in shown:
        numeric = i in grid.numeric
        table.add_column(
            grid.headers[i],
            justify="right" if numeric else "left",
            width=widths[i],
            no_wrap=_whole(grid, i),
            overflow="fold",
        )
    for index, row in enumerate(grid.rows):
        style = row_styles[index] if row_styles else ""
        table.add_row(
            *(Text(row[i] if _whole(grid, i) else _fold_long_words(row[i], widths[i])) for i in shown), style=style
        )
    _print_at(console, table, _total(list(widths.values())))
    hidden = [grid.headers[i] for i in range(len(grid.headers)) if i not in shown]
    if hidden:
        every = _total([_natural(grid, i) for i in range(len(grid.headers))])
        console.print(
            Text(
                f"{plural(len(hidden), 'column')} hidden to fit {limit} columns ({', '.join(hidden)}): "
                f"run with COLUMNS={every} or {more} to see them",
                style="dim",
            )
        )


def _fold_long_words(text: str, width: int) -> str:
    """``text`` with each word wider than ``width`` broken into lines after its separators where it can."""

    def fold(word: str) -> str:
        if cell_len(word) <= width:
            return word
        lines: list[str] = []
        line = ""
        for piece in _AFTER_SEPARATOR.split(word):
            if line and cell_len(line + piece) > width:
                lines.append(line)
                line = ""
            line += piece
            while cell_len(line) > width:  # no separator near enough: cut where the column ends
                lines.append(line[:width])
                line = line[width:]
        return "\n".join([*lines, line] if line else lines)

    return _WORD.sub(lambda match: fold(match.group()), text)


def _print_records(grid: Grid, console: Console) -> None:
    """Narrower than the numbers themselves: one ``header: value`` line per cell, a blank line between rows."""
    for index, row in enumerate(grid.rows):
        if index:
            console.print()
        for header, cell in zip(grid.headers, row, strict=True):
            if cell:
                console.print(Text.assemble((f"{header}: ", "bold"), cell))


def print_details(rows: Sequence[tuple[str, str, str]], console: Console, numeric_detail: bool = False) -> None:
    """Label, value, detail lines without a frame: the value never wraps, the dim detail folds under itself."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(no_wrap=True)
    grid.add_column(justify="right", no_wrap=True)
    if numeric_detail:
        grid.add_column(style="dim", justify="right", no_wrap=True)
    else:
        grid.add_column(style="dim", overflow="fold")
    for label, value, detail in rows:
        grid.add_row(Text(label), Text(value), Text(detail))
    limit = available_width(console)
    if limit is not None:
        console.print(grid)
    else:
        _print_at(console, grid, console.measure(grid, options=console.options.update_width(10_000)).maximum)
