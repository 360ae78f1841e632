"""Ctrl-C and SIGTERM routed to one handler for a while, the handlers before restored after.

Both HTTP servers (``serve`` and ``dashboard``) run uvicorn, whose own ``capture_signals`` re-raises
the captured signal once it has shut down: Ctrl-C becomes a KeyboardInterrupt traceback and SIGTERM
kills the process with the signal's status. Each server overrides it with this, so stopping it is
the clean exit the user asked for, and the two overrides cannot drift apart.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Generator
from types import FrameType

__all__ = ["stop_signals_to"]

_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def stop_signals_to(handler: Callable[[int, FrameType | None], None]) -> Generator[None, None, None]:
    """``handler`` receives SIGINT and SIGTERM inside the block; the previous handlers come back on leaving it."""
    original = {sig: signal.signal(sig, handler) for sig in _STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, previous in original.items():
            signal.signal(sig, previous)
