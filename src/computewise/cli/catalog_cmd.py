"""``computewise catalog list|show|validate`` (owned by the catalog work; placeholder wiring)."""

from __future__ import annotations

import typer

app = typer.Typer(help="Browse and validate the hardware, price and carbon catalog.", no_args_is_help=True)
