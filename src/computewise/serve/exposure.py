"""Who can reach a server: loopback is private to this machine, anything else needs a token or an explicit opt-out.

One rule for the local server, its Ray Serve deployment, the dashboard and the checks that ask
whether an address is this machine's only; light (the standard library only) so the CLI and
``scale`` can use it without loading uvicorn. ``bind_listener`` opens the socket both servers hand
to uvicorn, so a taken port is an error before anything slow starts.
"""

from __future__ import annotations

import ipaddress
import socket

from computewise.errors import InputError

__all__ = ["bind_listener", "check_exposure", "is_loopback"]


def bind_listener(host: str, port: int) -> socket.socket:
    """The listening socket, bound now: an unknown host or a taken port is an ``InputError`` with a fix."""
    if not 0 <= port <= 65535:
        raise InputError(f"--port {port} is not a TCP port", "pick a port between 1024 and 65535")
    try:
        family, kind, proto, _name, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as error:
        raise InputError(
            f"cannot resolve --host {host}: {error.strerror}", "give an IP address such as 127.0.0.1"
        ) from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as error:
        sock.close()
        raise InputError(
            f"cannot listen on {host}:{port}: {error.strerror}", "pick another --port, or stop what is using it"
        ) from None
    return sock


def is_loopback(host: str) -> bool:
    """True for addresses only this machine can reach: localhost, 127.0.0.0/8, ::1."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name other than localhost may resolve to any interface


def check_exposure(host: str, token: str | None, insecure: bool) -> None:
    """Refuse an empty token, and a host other machines can reach without a token or ``insecure``."""
    if token is not None and not token.strip():
        raise InputError("--token is empty", "give a long random token, e.g. --token $(openssl rand -hex 16)")
    if not is_loopback(host) and token is None and not insecure:
        raise InputError(
            f"refusing to listen on {host}, which other machines can reach, without authentication",
            "add --token TOKEN (clients send 'Authorization: Bearer TOKEN'), "
            "or --insecure if the network is trusted, or keep the default --host 127.0.0.1",
        )
