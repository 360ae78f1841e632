"""Grids read at 80 columns: text columns fold, numbers never lose a digit."""

from __future__ import annotations

from rich.console import Console

from computewise.report.rows import Grid
from computewise.report.terminal import _print_grid


def test_numbers_keep_every_digit_at_80_columns() -> None:
    cost = "$144,896,261"
    grid = Grid(
        headers=("GPUs", "hardware", "pricing", "layout", "time", "cost", "$/h", "MFU", "memory"),
        rows=(
            (
                "16384 × h100-sxm",
                "2048 × coreweave hgx-h100-8x us",
                "on-demand",
                "dp64 tp8 pp16 cp2 v8 z1 bf16 mb1",
                "59.9 d",
                cost,
                "$100,844",
                "47%",
                "58.2 GiB",
            ),
        ),
        numeric=frozenset({4, 5, 6, 7, 8}),
    )
    console = Console(width=80, record=True, force_terminal=True, color_system=None)
    _print_grid(grid, "frontier", console)
    text = console.export_text()
    assert all(len(line) <= 80 for line in text.splitlines())
    for number in (cost, "$100,844", "58.2 GiB", "59.9 d"):
        assert number in text
