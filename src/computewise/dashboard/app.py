"""The dashboard's ASGI app: the six pages' routes, the token check, and errors that read like the CLI's.

Errors are designed states, not tracebacks: a value in the query string that cannot be used
(``InputError``) is a 400 that says how to fix it; a ledger that cannot be read (``LedgerError``: the
ledger turns every database failure into one, so the dashboard never sees SQLAlchemy's types) is a
503 holding the very ``error:`` and ``To fix:`` lines the CLI prints. Pages get HTML, ``/api`` gets
``{"error": ..., "hint": ...}``.

The token check is pure ASGI middleware, so server-sent event streams pass through it unbuffered.
"""

from __future__ import annotations

import hmac
from urllib.parse import parse_qsl, urlencode

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from computewise.dashboard import budgets, costs, overview, plans, run_page, runs
from computewise.dashboard.context import DashboardContext
from computewise.dashboard.layout import error_page
from computewise.dashboard.responses import error_response, wants_json
from computewise.errors import InputError, LedgerError

__all__ = ["TOKEN_COOKIE", "create_app", "create_broken_app"]

TOKEN_COOKIE = "computewise_token"


def all_routes() -> list[BaseRoute]:
    return [
        *overview.routes(),
        *runs.routes(),
        *run_page.routes(),
        *costs.routes(),
        *budgets.routes(),
        *plans.routes(),
    ]


def create_app(context: DashboardContext) -> Starlette:
    """The dashboard over ``context.ledger``; every route needs ``context.token`` when one is set."""
    app = Starlette(
        routes=all_routes(),
        exception_handlers={
            InputError: _input_error,
            LedgerError: _ledger_error,
            HTTPException: _http_error,
        },
    )
    app.state.context = context
    if context.token is not None:
        app.add_middleware(_TokenGate, token=context.token)
    return app


def create_broken_app(error: LedgerError, token: str | None) -> Starlette:
    """Every URL answers 503 with the ledger's error: what the dashboard serves when it cannot open the ledger.

    The server still starts, so the person who opened the link sees why and how to fix it instead of
    a refused connection.
    """

    async def broken(request: Request) -> Response:
        if wants_json(request):
            return _ledger_error(request, error)
        note = "The dashboard opened no ledger: restart it once this is fixed."
        html = error_page(503, error.message, error.hint, element_id="ledger-error", note=note)
        return HTMLResponse(html, status_code=503)

    app = Starlette(exception_handlers={HTTPException: lambda request, exc: broken(request)})
    app.router.add_route("/{path:path}", broken, methods=["GET", "HEAD", "POST"])
    if token is not None:
        app.add_middleware(_TokenGate, token=token)
    return app


# Starlette calls a handler with the exception class it was registered for; the handlers take
# ``Exception`` because that is the type Starlette's signature promises.


def _input_error(request: Request, exc: Exception) -> Response:
    error = exc if isinstance(exc, InputError) else InputError(str(exc))
    return error_response(request, 400, error.message, error.hint, "input-error")


def _ledger_error(request: Request, exc: Exception) -> Response:
    error = exc if isinstance(exc, LedgerError) else LedgerError(str(exc))
    return error_response(request, 503, error.message, error.hint, "ledger-error")


def _http_error(request: Request, exc: Exception) -> Response:
    if not isinstance(exc, HTTPException):
        return error_response(request, 500, str(exc), None, "http-error")
    if exc.status_code == 404:
        return error_response(
            request, 404, f"nothing at {request.url.path}", "start from the overview at /", "not-found"
        )
    return error_response(request, exc.status_code, str(exc.detail), None, "http-error")


class _TokenGate:
    """Every request needs the token: ``Authorization: Bearer T``, the ``computewise_token`` cookie, or ``?token=T``.

    ``?token=T`` is how a shared link carries it: the answer sets the cookie (HttpOnly, SameSite=Strict,
    so no script and no other site can read or send it) and redirects to the same URL without the token,
    which keeps it out of the address bar, the history and the logs of every later request.
    """

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        query = parse_qsl(request.url.query, keep_blank_values=True)
        given = [value for key, value in query if key == "token"]
        if given:
            if self._matches(given[-1]):
                rest = urlencode([(key, value) for key, value in query if key != "token"])
                target = request.url.path + (f"?{rest}" if rest else "")
                response: Response = RedirectResponse(target, status_code=303)
                response.set_cookie(TOKEN_COOKIE, given[-1], httponly=True, samesite="strict")
                await response(scope, receive, send)
                return
        elif self._matches(_bearer(request) or _cookie(request) or ""):
            await self.app(scope, receive, send)
            return
        reason = "wrong token" if given or _bearer(request) or _cookie(request) else "this dashboard needs a token"
        response = error_response(
            request,
            401,
            reason,
            "open the link with ?token=TOKEN once (it sets a cookie), or send 'Authorization: Bearer TOKEN'",
            "auth-error",
        )
        response.headers["WWW-Authenticate"] = "Bearer"
        await response(scope, receive, send)

    def _matches(self, candidate: str) -> bool:
        # compare_digest: the time taken must not tell how much of a guessed token was right.
        return bool(candidate) and hmac.compare_digest(candidate.encode(), self.token)


def _bearer(request: Request) -> str | None:
    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    return credentials.strip() if scheme.lower() == "bearer" and credentials.strip() else None


def _cookie(request: Request) -> str | None:
    return request.cookies.get(TOKEN_COOKIE) or None
