"""``computewise dashboard``'s process: open the ledger read-only, bind, print the URL, serve until Ctrl-C/SIGTERM.

The socket is bound before anything else so a taken port is an error at once, and the URL printed
is the one that answers (``--port 0`` picks a free port). A ledger that cannot be opened does not stop
the server: it serves the 503 page with the CLI's own ``error:``/``To fix:`` lines, so whoever opens
the link learns what to fix. Nothing is aggregated at start: a finished run's sample totals were
kept in the ledger when it ended (``ledger.aggregates``), so the first page over a million samples
reads one row per finished run and is as fast as the next, with no cache to go stale as runs end.

Shutdown: uvicorn's graceful shutdown waits for open connections, and a live run page holds an
event stream open; ``GRACE_S`` bounds that wait, then the process exits 0.
"""

from __future__ import annotations

import contextlib
import functools
import socket
import sys
import time
from collections.abc import Generator
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import uvicorn
from starlette.applications import Starlette

from computewise.dashboard.app import create_app, create_broken_app
from computewise.dashboard.context import DashboardContext
from computewise.errors import InputError, LedgerError
from computewise.ledger import Ledger
from computewise.serve.exposure import bind_listener, check_exposure, is_loopback
from computewise.system.signals import stop_signals_to

if TYPE_CHECKING:
    from computewise.catalog import Catalog

__all__ = ["GRACE_S", "serve_dashboard", "url_of"]

GRACE_S = 1


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://{f'[{host}]' if ':' in host else host}:{port}/"


class _QuietServer(uvicorn.Server):
    """uvicorn, except that Ctrl-C and SIGTERM end the process with 0 instead of re-raising the signal.

    Stock uvicorn re-raises the captured signal after shutting down, which turns Ctrl-C into a
    KeyboardInterrupt traceback; stopping the dashboard is what the user asked for, not an error.
    """

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        with stop_signals_to(self.handle_exit):
            yield


def _check_exposure(host: str, token: str | None) -> None:
    """``serve``'s rule (``serve.exposure``) without its ``--insecure`` way out: the ledger names every
    user, command and cost of a team, so a dashboard other machines reach always needs a token."""
    if token is None and not is_loopback(host):
        raise InputError(
            f"refusing to listen on {host}, which other machines can reach, without a token",
            "add --token TOKEN (then open the printed link once, or send 'Authorization: Bearer TOKEN'), "
            "or keep the default --host 127.0.0.1",
        )
    check_exposure(host, token, insecure=False)  # an empty token is refused there


def serve_dashboard(
    db: str | None,
    host: str,
    port: int,
    token: str | None,
    plans_dir: Path | None,
    open_browser: bool,
    stream: TextIO = sys.stderr,
) -> None:
    """Serve until Ctrl-C or SIGTERM; ``InputError`` for a refused host, a taken port or a bad ``--plans-dir``."""
    _check_exposure(host, token)
    if plans_dir is not None and not plans_dir.is_dir():
        raise InputError(f"--plans-dir {plans_dir} is not a directory", "give the folder holding `plan --json` files")
    sock = bind_listener(host, port)
    try:
        app, ledger = _app(db, token, plans_dir, stream)
        url = url_of(sock)
        link = f"{url}?token={token}" if token else url
        where = f"the ledger {ledger.url}" if ledger is not None else "no ledger (see the error above)"
        print(f"computewise dashboard at {link} over {where}; Ctrl-C stops it", file=stream, flush=True)
        if open_browser:
            import webbrowser

            webbrowser.open(link)
        config = uvicorn.Config(
            app, log_level="warning", access_log=False, lifespan="off", timeout_graceful_shutdown=GRACE_S
        )
        _QuietServer(config).run(sockets=[sock])
    finally:
        sock.close()


def _app(db: str | None, token: str | None, plans_dir: Path | None, stream: TextIO) -> tuple[Starlette, Ledger | None]:
    """The dashboard app over the ledger at ``db``, or the 503 app when it cannot be opened (said on ``stream``)."""
    try:
        ledger = Ledger.open(db, create=False)  # a reader: a missing SQLite file is an error, not a new ledger
    except LedgerError as error:
        print(f"error: {error.message}", file=stream)
        if error.hint:
            print(f"To fix: {error.hint}", file=stream)
        return create_broken_app(error, token), None
    context = DashboardContext(
        ledger=ledger, catalog=_bundled_catalog, token=token, plans_dir=plans_dir, clock=time.time
    )
    return create_app(context), ledger


@functools.cache
def _bundled_catalog() -> Catalog:
    """The catalog, imported and read on the first run page that prices something, then kept."""
    from computewise.catalog import load_catalog

    return load_catalog()
