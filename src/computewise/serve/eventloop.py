"""The fastest asyncio event loop installed, for both ends of an HTTP exchange.

uvloop (brought by the serve extra through ``uvicorn[standard]``) handles about 1.4x the requests
per core of the standard loop. The server needs it to answer; the load tester needs it just as
much, because on a small machine it shares the cores with the server it measures, and every cycle
the client spends is one the server cannot.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["fastest_loop", "run_fast"]

T = TypeVar("T")


def fastest_loop() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop factory where installed, else None (asyncio's default loop)."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def run_fast(coroutine: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on the fastest loop installed."""
    with asyncio.Runner(loop_factory=fastest_loop()) as runner:
        return runner.run(coroutine)
