"""The one shape of a dashboard error response: a page for a browser, ``{"error", "hint"}`` for ``/api``."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response

from computewise.dashboard.layout import error_page

__all__ = ["error_response", "wants_json"]


def wants_json(request: Request) -> bool:
    """``/api/...`` and ``.csv`` downloads are read by programs: they get JSON errors, not a page."""
    return request.url.path.startswith("/api/") or request.url.path.endswith(".csv")


def error_response(request: Request, status: int, message: str, hint: str | None, element_id: str) -> Response:
    """JSON for ``/api``, else a page whose ``#{element_id}`` holds the ``error:`` and ``To fix:`` lines."""
    if wants_json(request):
        return JSONResponse({"error": message, "hint": hint}, status_code=status)
    return HTMLResponse(error_page(status, message, hint, element_id=element_id), status_code=status)
