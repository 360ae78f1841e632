"""``computewise dashboard``: a local web view over the ledger, read-only, until Ctrl-C.

Starlette and uvicorn are imported inside the command, so ``computewise --help`` stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from computewise.cli.common import DbOption, bounded_int

TOKEN_ENV = "COMPUTEWISE_DASHBOARD_TOKEN"


def dashboard(
    db: DbOption = None,
    port: Annotated[
        int, typer.Option(parser=bounded_int("--port"), help="TCP port (0: any free port; the printed URL says which).")
    ] = 8050,
    host: Annotated[str, typer.Option(help="Address to listen on; anything but loopback needs --token.")] = "127.0.0.1",
    token: Annotated[
        str | None,
        typer.Option(
            envvar=TOKEN_ENV,
            help="Require this token: open the printed link once (it sets a cookie), or send "
            "'Authorization: Bearer TOKEN'.",
        ),
    ] = None,
    plans_dir: Annotated[
        Path | None, typer.Option(help="Folder of `computewise plan train ... --json` files for the Plans page.")
    ] = None,
    open_browser: Annotated[bool, typer.Option("--open/--no-open", help="Open the page in a web browser.")] = False,
) -> None:
    """Serve the dashboard: spend and budgets, runs (live while they run), costs and plans."""
    from computewise.dashboard.server import serve_dashboard

    serve_dashboard(db, host, port, token, plans_dir, open_browser)
