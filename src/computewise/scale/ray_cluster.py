"""Joining a running Ray cluster as a driver: the GCS address, a fast reachability probe, and what nodes hold.

Ray Tune and Ray Serve (unlike the Jobs API of ``ray_jobs``, which speaks HTTP to the dashboard)
need this process to join the cluster with ``ray.init(address=HOST:PORT)``. Two things about that
call are worth a module:

- it retries for minutes against an address where nothing listens, so a TCP probe runs first and a
  wrong address fails in seconds, before anything is submitted;
- it rewrites a ``127.0.0.1`` address to this machine's outward IP, and then retries for ever
  against a cluster started with ``--node-ip-address=127.0.0.1`` (the safe way to run a private
  one). When loopback answers and the outward IP does not, the connection is made over loopback,
  which is what ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` would have done had it been set before Ray
  was imported.

``ray`` is imported inside functions: it is the optional ``ray`` extra.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import Iterator, Mapping

from computewise.errors import InputError, JobEngineError, MissingExtraError
from computewise.serve.exposure import is_loopback

__all__ = ["connected", "current_address", "gcs_address", "largest_node", "last_line", "nodes", "probe"]

_PROBE_TIMEOUT_S = 3.0  # a wrong address fails in seconds, not after ray.init's long GCS retries
_HINT = "pass --address HOST:PORT, the cluster's GCS address (6379 by default; `ray status` prints it)"


def gcs_address(address: str | None, environ: Mapping[str, str] | None = None) -> str:
    """``HOST:PORT`` from ``address``, else ``$RAY_ADDRESS``; dashboard and Ray Client URLs are refused."""
    env = os.environ if environ is None else environ
    source = "--address"
    if not address:
        address, source = env.get("RAY_ADDRESS", ""), "RAY_ADDRESS"
    address = address.strip()
    if not address:
        raise InputError("Ray needs the cluster's address", f"{_HINT}, or set RAY_ADDRESS")
    if "://" in address:
        scheme = address.split("://", 1)[0]
        what = "a Ray Client address" if scheme == "ray" else "the dashboard (Jobs API) address"
        raise InputError(f"{source}={address} is {what}; joining a cluster takes its GCS address", _HINT)
    host, colon, port = address.rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InputError(f"{source}={address} is not HOST:PORT", _HINT)
    return address


def probe(address: str) -> None:
    """Refuse in seconds when nothing listens at the GCS address."""
    host, port = _split(address)
    if not _accepts(host, port):
        raise JobEngineError(
            f"no Ray cluster reachable at {address}",
            "start one (`ray start --head --node-ip-address=127.0.0.1`) or pass the GCS address it prints, "
            "e.g. --address 127.0.0.1:6379",
        )


@contextlib.contextmanager
def connected(address: str) -> Iterator[None]:
    """This process joined to the cluster for the block; the cluster (and what was deployed) outlives it.

    A connection the process already had is used and left open, if it is to the same cluster.
    """
    try:
        import ray
    except ImportError as error:
        raise MissingExtraError("ray", "ray", "joining a Ray cluster") from error

    if ray.is_initialized():
        current = current_address()
        if _split(current)[1] != _split(address)[1]:
            raise JobEngineError(
                f"this process is already connected to the Ray cluster at {current}, not {address}",
                "pass the same address, or call ray.shutdown() first",
            )
        yield
        return
    probe(address)
    try:
        with _over_loopback_if_needed(address):
            ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
    except Exception as error:  # ConnectionError, RuntimeError, TimeoutError, ValueError: not a GCS, or refused
        raise JobEngineError(
            f"cannot join the Ray cluster at {address}: {last_line(str(error))}",
            "check it with `ray status`; pass the GCS address, not the dashboard port",
        ) from error
    try:
        yield
    finally:
        ray.shutdown()


def current_address() -> str:
    """The GCS address of the cluster this process is connected to."""
    import ray

    return str(ray.get_runtime_context().gcs_address)


def nodes() -> list[dict[str, float]]:
    """The total resources of each alive node (``CPU``, ``GPU``, ``memory``, custom ones), once connected."""
    import ray

    rows: list[dict[str, object]] = ray.nodes()  # type: ignore[no-untyped-call]
    return [dict(row.get("Resources", {})) for row in rows if row.get("Alive")]  # type: ignore[call-overload]


def largest_node(resource: str) -> float:
    """The most of ``resource`` any one alive node has: a task or replica larger than that waits for ever."""
    return max((node.get(resource, 0.0) for node in nodes()), default=0.0)


@contextlib.contextmanager
def _over_loopback_if_needed(address: str) -> Iterator[None]:
    host, port = _split(address)
    try:
        from ray._private import ray_constants, services  # no public switch exists for this
    except ImportError:  # a Ray without the private switch: it connects as it will
        yield
        return
    if not is_loopback(host) or not ray_constants.ENABLE_RAY_CLUSTER:
        yield
        return
    outward_ip = str(services.get_node_ip_address())  # type: ignore[no-untyped-call]
    if is_loopback(outward_ip) or _accepts(outward_ip, port):
        yield
        return
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = True


def _split(address: str) -> tuple[str, int]:
    host, _, port = gcs_address(address, {}).rpartition(":")
    return host.strip("[]"), int(port)


def _accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=_PROBE_TIMEOUT_S):
            return True
    except OSError:
        return False


def last_line(text: str) -> str:
    """The line that says what went wrong: the last of a traceback, the only one of a message."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else text
