"""Sentences and notes at the terminal's width: folded at spaces, never inside a word.

Rich folds a line by cutting the word that crosses the edge, which splits a path or a command in
two and breaks copy and paste; left unfolded (``soft_wrap``), a note with two paths runs to 200+
columns. Here a line breaks only at a space, so every word arrives whole, and a word longer than
the terminal gets a line of its own. On a bare pipe (no terminal, no ``COLUMNS``) a sentence stays
on one line, as tables print at their natural width there (``report.table``).
"""

from __future__ import annotations

import re

from rich.cells import cell_len
from rich.console import Console
from rich.text import Text

from computewise.report.table import available_width

__all__ = ["print_prose"]

_WORD = re.compile(r"\S+")


def print_prose(console: Console, text: str | Text, style: str = "", *, markup: bool = True) -> None:
    """Print ``text`` (Rich markup unless ``markup`` is False) folded at spaces to the console's width."""
    if isinstance(text, Text):
        rich_text = text
    else:
        rich_text = Text.from_markup(text, style=style) if markup else Text(text, style=style)
    width = available_width(console)
    if width is None:
        console.print(rich_text, soft_wrap=True, highlight=False)
        return
    for line in rich_text.divide(_breaks(rich_text.plain, width)):
        line.rstrip()
        console.print(line, soft_wrap=True, highlight=False)


def _breaks(plain: str, width: int) -> list[int]:
    """Offsets where lines start, so that no line is wider than ``width`` unless one word is."""
    breaks: list[int] = []
    line_start = 0
    for word in _WORD.finditer(plain):
        if "\n" in plain[line_start : word.start()]:
            line_start = plain.rindex("\n", line_start, word.start()) + 1
        if word.start() > line_start and cell_len(plain[line_start : word.end()]) > width:
            breaks.append(word.start())
            line_start = word.start()
    return breaks
