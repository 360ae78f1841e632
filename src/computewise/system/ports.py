"""A free TCP port on the loopback interface, for the servers computewise starts and its tests start.

The kernel picks a port that was free when asked; another process may take it before the caller
binds it, which callers that retry (the dashboard, the collectives bench) or own the machine (tests)
accept. Every port is on 127.0.0.1: nothing computewise starts on its own listens beyond the host.
"""

from __future__ import annotations

import socket

__all__ = ["free_port", "free_ports"]


def free_port() -> int:
    """One port on 127.0.0.1 that was free a moment ago."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports on 127.0.0.1 that were free a moment ago (held open together while chosen)."""
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()
