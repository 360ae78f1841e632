"""The live status line of ``computewise run``: one compact Rich line pinned to the terminal's last row.

The child writes to the same terminal, so a redrawing Rich ``Live`` block would erase its output.
Instead we shrink the terminal's scrolling region by one row (DECSTBM, as ``pv`` and tmux's status
bar do): the child scrolls above, our line stays below. Off when stderr is not a terminal, and the
region is always given back on exit, even when the job fails.
"""

from __future__ import annotations

import io
import os
import shutil
from typing import TextIO

from rich.console import Console
from rich.text import Text

from computewise.ledger import SampleRow
from computewise.units import format_bytes, format_duration, format_usd

__all__ = ["LiveStatus", "status_text"]

_SAVE, _RESTORE = "\x1b7", "\x1b8"


def status_text(
    elapsed_s: float,
    cost_usd: float,
    cpu_percent: float,
    rss_bytes: int,
    gpu_util_pct: float | None,
    gpu_memory_used_bytes: int | None,
    gpu_power_w: float | None,
    idle: bool,
) -> Text:
    """``▶ 3 min 10 s  $0.21  CPU 180 %  RSS 2.1 GiB  GPU 94 % 61 GiB 310 W``; idle shown in yellow."""
    text = Text.assemble(("▶ ", "green"), (format_duration(elapsed_s), "bold"), "  ", (format_usd(cost_usd), "bold"))
    text.append(f"  CPU {cpu_percent:.0f} %  RSS {format_bytes(rss_bytes)}")
    if gpu_util_pct is not None:
        text.append(f"  GPU {gpu_util_pct:.0f} %")
        if gpu_memory_used_bytes is not None:
            text.append(f" {format_bytes(gpu_memory_used_bytes)}")
        if gpu_power_w is not None:
            text.append(f" {gpu_power_w:.0f} W")
    if idle:
        text.append("  idle", style="yellow bold")
    return text


class LiveStatus:
    """Pins one line to the bottom row of the terminal behind ``stream`` while the job runs."""

    def __init__(self, stream: TextIO, wanted: bool = True) -> None:
        self._stream = stream
        self.enabled = wanted and stream.isatty() and os.environ.get("TERM", "dumb") != "dumb"
        self._rows = 0

    def __enter__(self) -> LiveStatus:
        if self.enabled:
            self._reserve_last_row()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.enabled and self._rows:
            self._write(f"{_SAVE}\x1b[r\x1b[{self._rows};1H\x1b[2K{_RESTORE}")
            self._rows = 0

    def _reserve_last_row(self) -> None:
        rows = shutil.get_terminal_size().lines
        if rows < 3:
            self.enabled = False
            return
        # Scroll one line first so the cursor is never on the row we take away from the child.
        self._write(f"\n\x1b[1A{_SAVE}\x1b[1;{rows - 1}r{_RESTORE}")
        self._rows = rows

    def update(self, row: SampleRow, elapsed_s: float, cost_usd: float) -> None:
        """A sampler tick: redraw the line from the newest sample (called on the sampler's thread)."""
        self.show(
            status_text(
                elapsed_s,
                cost_usd,
                row.cpu_percent,
                row.rss_bytes,
                row.gpu_util_pct,
                row.gpu_memory_used_bytes,
                row.gpu_power_w,
                row.idle,
            )
        )

    def show(self, text: Text) -> None:
        if not self.enabled:
            return
        size = shutil.get_terminal_size()
        if size.lines != self._rows:
            self._reserve_last_row()
        buffer = io.StringIO()
        Console(file=buffer, force_terminal=True, width=size.columns, color_system="standard").print(
            text, end="", no_wrap=True, overflow="ellipsis"
        )
        self._write(f"{_SAVE}\x1b[{self._rows};1H\x1b[2K{buffer.getvalue()}{_RESTORE}")

    def _write(self, data: str) -> None:
        try:
            self._stream.write(data)
            self._stream.flush()
        except OSError:
            self.enabled = False
