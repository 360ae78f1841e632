"""The fastest asyncio event loop installed, for both ends of an HTTP exchange, and no collector stalls.

uvloop (brought by the serve extra through ``uvicorn[standard]``) handles about 1.4x the requests
per core of the standard loop. The server needs it to answer; the load tester needs it just as
much, because on a small machine it shares the cores with the server it measures, and every cycle
the client spends is one the server cannot.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["fastest_loop", "freeze_startup_heap", "run_fast"]

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


def freeze_startup_heap() -> int:
    """Collect once, then exempt every object alive now from later collections; returns how many.

    Call it when start-up is over (model loaded, warmed up). What start-up allocated (modules, the
    model, the tokenizer: about 250,000 tracked objects for MiniLM) lives as long as the process, yet
    each full collection walks all of it: 130-140 ms in a process holding the MiniLM artifact, on the
    event loop's thread, while requests wait. A stall of that size hit the MiniLM server about 30 s
    into five of six capacity searches (p99 near 150 ms and a burst of 429s at 40 req/s, a rate the
    same server sustained 2.5 times over in the sixth). Frozen objects are still freed by
    reference counting; only cycles among them are never collected, and start-up leaves none that
    matter (the collection just before the freeze takes those it does leave).
    """
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
