"""Open-loop load against an HTTP endpoint: arrivals fixed in advance, latency as users see it.

A closed-loop tester (N clients, each waiting for its answer before sending the next) slows down
exactly when the server does, so it never sees the queue that real traffic builds: the
"coordinated omission" of wrk and JMeter. Here every arrival time is drawn up front from a seeded
Poisson process at ``rate_rps`` (exponential gaps, as independent users produce), and each request is
launched at its time as its own asyncio task whether or not earlier ones were answered. Latency is
measured from the *scheduled* send time, so a request that waited for a connection or for a late
event loop pays for it, as a user would. Requests go through a small keep-alive HTTP/1.1 client on
asyncio streams (see ``_Pool`` for why not httpx).

Bounded in count and time: at most ``1.5 * rate * duration`` requests, each given ``timeout_s``
from its scheduled time, and a hard stop at ``duration + timeout`` (what is still running then is
cancelled and counted as an error). Percentiles are over successful (2xx) answers only: rejections
(429) are fast and would flatter them, errors are counted apart. Throughput is successful answers
per second over the whole run, until the last answer came back (as vegeta reports it).

``find_max_rate`` ramps the rate up by doubling until a short probe misses the SLO, then bisects
between the last rate that met it and the first that did not. A failed *lowest* probe is run again
(``LOWEST_RETRIES`` times) before the search gives up: see ``find_max_rate``. What a run measured is a
``specs.loadtest.LoadResult``, the value ``plan serve`` reads back from ``--json``.

``repeat_ratio`` makes that share of the requests repeat a body sent earlier in the run (drawn
uniformly from those already sent, by a generator seeded like the arrivals), the rest going through
the payloads in order: the traffic a prediction cache (``serve --cache-size``) is for. Give at least
as many distinct payloads as fresh requests, or the fresh ones repeat too once the list wraps around.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import random
import ssl
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from computewise.errors import InputError
from computewise.serve.eventloop import run_fast
from computewise.specs.loadtest import LoadResult, LoadtestRun, MaxRateSearch, Probe

__all__ = [
    "LOWEST_RETRIES",
    "LoadProgress",
    "LoadRequest",
    "find_max_rate",
    "load_payloads",
    "load_test",
    "poisson_arrivals",
    "request_order",
    "run_load",
]

LOWEST_RETRIES = 2
"""Extra probes at the lowest rate after it failed. At 5 requests/s a 10 s probe has about 50 answers, so
one slow answer (a GC pause, a noisy neighbour on a shared VM) is its p99; a server that truly cannot
sustain the lowest rate fails all three, so retrying costs two probes only when the answer would be 0."""

COUNT_CAP_FACTOR = 1.5
"""No run sends more than this times ``rate * duration`` requests (a Poisson count rarely exceeds 1.2x)."""
MAX_REQUESTS = 5_000_000
"""Arrival times are held in memory; beyond this a run is a mistake in --rate or --duration."""
_PROGRESS_INTERVAL_S = 0.25
_RECENT_WINDOW_S = 2.0
_HARD_STOP_GRACE_S = 0.5
_KEEP_ALIVE_S = 4.0
"""Idle connections older than this are not reused: uvicorn closes them after 5 s, others sooner or later."""
_HEADER_LIMIT = 1 << 16
_FD_HEADROOM = 256
"""File descriptors left free below the soft limit when sizing the connection pool."""


@dataclass(frozen=True)
class LoadProgress:
    """A snapshot while a run is under way; ``recent_p99_ms`` is over answers of the last two seconds."""

    rate_rps: float
    duration_s: float
    elapsed_s: float
    sent: int
    ok: int
    rejected: int
    errors: int
    in_flight: int
    recent_p99_ms: float | None


ProgressCallback = Callable[[LoadProgress], None]


def load_payloads(path: Path) -> list[dict[str, Any]]:
    """Request bodies from FILE: one JSON object, a JSON list of objects, or ``.jsonl`` with one object a line."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"--payload {path} does not exist", "give a JSON or .jsonl file of request bodies") from None
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"--payload {path} cannot be read: {error}", "give a UTF-8 JSON or .jsonl file") from None
    hint = 'e.g. {"inputs": ["a sentence"]}, a list of such objects, or .jsonl with one object a line'
    if path.suffix.lower() in (".jsonl", ".ndjson"):
        payloads: list[Any] = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                payloads.append(json.loads(line))
            except json.JSONDecodeError as error:
                raise InputError(f"--payload {path}:{number}: not valid JSON ({error.msg})", hint) from None
            if not isinstance(payloads[-1], dict):
                raise InputError(f"--payload {path}:{number}: each line must be a JSON object", hint)
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise InputError(
                f"--payload {path}: not valid JSON (line {error.lineno}, column {error.colno}: {error.msg})", hint
            ) from None
        payloads = data if isinstance(data, list) else [data]
        for index, item in enumerate(payloads):
            if not isinstance(item, dict):
                where = f"item {index}" if isinstance(data, list) else "the document"
                raise InputError(f"--payload {path}: {where} is not a JSON object", hint)
    if not payloads:
        raise InputError(f"--payload {path} holds no request body", hint)
    return payloads


def poisson_arrivals(rate_rps: float, duration_s: float, seed: int = 0) -> list[float]:
    """Send times in seconds from the start: exponential gaps at ``rate_rps``, capped in count."""
    if not (math.isfinite(rate_rps) and rate_rps > 0):
        raise InputError(f"the rate must be positive, got {rate_rps}", "e.g. --rate 50")
    if not (math.isfinite(duration_s) and duration_s > 0):
        raise InputError(f"the duration must be positive, got {duration_s}", "e.g. --duration 30s")
    cap = max(1, math.ceil(rate_rps * duration_s * COUNT_CAP_FACTOR))
    if cap > MAX_REQUESTS:
        raise InputError(
            f"{rate_rps:g} requests/s for {duration_s:g} s is more than {MAX_REQUESTS:,} requests",
            "lower --rate or --duration",
        )
    rng = random.Random(seed)
    arrivals: list[float] = []
    t = rng.expovariate(rate_rps)
    while t < duration_s and len(arrivals) < cap:
        arrivals.append(t)
        t += rng.expovariate(rate_rps)
    return arrivals


def request_order(count: int, distinct: int, repeat_ratio: float, seed: int = 0) -> list[int]:
    """Which payload each of ``count`` requests sends: with probability ``repeat_ratio`` one already sent
    (uniformly among earlier requests), else the next payload in order (wrapping after ``distinct``)."""
    if not (0 <= repeat_ratio <= 1):
        raise InputError(f"the repeat ratio must be in [0, 1], got {repeat_ratio}", "e.g. --repeat-ratio 0.5")
    if repeat_ratio == 0:
        return [index % distinct for index in range(count)]
    rng = random.Random(f"repeat-{seed}")  # its own stream: the same arrivals with or without repeats
    order: list[int] = []
    fresh = 0
    for _ in range(count):
        if order and rng.random() < repeat_ratio:
            order.append(order[rng.randrange(len(order))])
        else:
            order.append(fresh % distinct)
            fresh += 1
    return order


def _connection_limit(max_in_flight: int) -> int:
    """``max_in_flight``, but below the file-descriptor limit: past it connects fail as errors, not load."""
    try:
        import resource
    except ImportError:  # Windows has no RLIMIT_NOFILE
        return max_in_flight
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return max_in_flight
    return max(1, min(max_in_flight, soft - _FD_HEADROOM))


class _Tally:
    """Counts and latencies of one run, written by the request tasks (one event loop: no locks)."""

    def __init__(self) -> None:
        self.sent = 0
        self.ok = 0
        self.rejected = 0
        self.errors = 0
        self.in_flight = 0
        self.latencies_s: list[float] = []
        self.error_kinds: Counter[str] = Counter()
        self.recent: deque[tuple[float, float]] = deque()  # (finished at, latency s) of 2xx answers
        self.last_done = 0.0

    def answered(self, status: int, finished: float, latency_s: float) -> None:
        self.last_done = max(self.last_done, finished)
        if 200 <= status < 300:
            self.ok += 1
            self.latencies_s.append(latency_s)
            self.recent.append((finished, latency_s))
        elif status == 429:
            self.rejected += 1
        else:
            self.failed(f"http {status}", finished)

    def failed(self, kind: str, finished: float) -> None:
        self.last_done = max(self.last_done, finished)
        self.errors += 1
        self.error_kinds[kind] += 1

    def recent_p99_ms(self, now: float) -> float | None:
        while self.recent and self.recent[0][0] < now - _RECENT_WINDOW_S:
            self.recent.popleft()
        if not self.recent:
            return None
        return float(np.percentile([latency for _, latency in self.recent], 99)) * 1e3


class _BadResponse(Exception):
    """The server's answer is not HTTP/1.x we can read."""


class _Stale(Exception):
    """The connection closed before any byte of the answer (on a reused one: dropped by the server while idle)."""


class _ConnectFailed(Exception):
    """Opening a connection failed (refused, unreachable, out of file descriptors): the server never saw it."""


@dataclass(frozen=True)
class _Target:
    """Where requests go, split once: the host to dial and the bytes of each request, built up front."""

    host: str
    port: int
    tls: ssl.SSLContext | None
    requests: tuple[bytes, ...]

    @classmethod
    def parse(cls, url: str, payloads: list[dict[str, Any]], token: str | None) -> _Target:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InputError(
                f"{url!r} is not an http:// or https:// URL", "e.g. http://127.0.0.1:8000/v1/models/m/infer"
            )
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            raise InputError(f"{url!r} has an invalid port", "e.g. http://127.0.0.1:8000/...") from None
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        head = f"Host: {parts.netloc.rpartition('@')[2]}\r\nUser-Agent: computewise-loadtest\r\nAccept: */*\r\n"
        if token:
            head += f"Authorization: Bearer {token}\r\n"
        if payloads:
            bodies = [json.dumps(payload, separators=(",", ":")).encode() for payload in payloads]
            post = f"POST {path} HTTP/1.1\r\n{head}Content-Type: application/json\r\n"
            requests = tuple(f"{post}Content-Length: {len(body)}\r\n\r\n".encode() + body for body in bodies)
        else:
            requests = (f"GET {path} HTTP/1.1\r\n{head}\r\n".encode(),)
        tls = ssl.create_default_context() if parts.scheme == "https" else None
        return cls(parts.hostname, port, tls, requests)


_Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter, float]  # reader, writer, idle since (loop time)


class _Pool:
    """Keep-alive HTTP/1.1 connections to one server, at most ``limit`` busy; a request past it waits its turn.

    Deliberately tiny, and not httpx: measured on a 2-core machine, httpx spends about 1.3 ms of
    CPU per request and its pool scans every connection for every request, so the tester itself
    saturated near 300 requests/s, far below what a server under test answers (the echo overhead
    figure needs 2,000). Writing prebuilt request bytes and reading the status line, headers and
    body (Content-Length, chunked, or until close) costs about 0.1 ms, so one core offers several
    thousand requests/s.
    """

    def __init__(self, target: _Target, limit: int) -> None:
        self._target = target
        self._slots = asyncio.Semaphore(limit)
        self._idle: list[_Connection] = []

    async def request(self, data: bytes) -> int:
        """Send ``data``, read the whole answer, return its status.

        A reused connection that the server closed while it sat idle fails before any byte of the
        answer; the request then goes out again on another connection (the server never read it).
        """
        loop = asyncio.get_running_loop()
        async with self._slots:
            while True:
                reused, (reader, writer) = await self._connection(loop.time())
                try:
                    status, keep_alive = await _exchange(reader, writer, data)
                except _Stale:
                    writer.close()
                    if reused:
                        continue  # the server closed it while it sat idle; our request was never read
                    raise
                except BaseException:
                    writer.close()  # a half-read answer would corrupt the next request on this connection
                    raise
                if keep_alive:
                    self._idle.append((reader, writer, loop.time()))
                else:
                    writer.close()
                return status

    async def _connection(self, now: float) -> tuple[bool, tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
        while self._idle:
            reader, writer, idle_since = self._idle.pop()
            if not reader.at_eof() and now - idle_since < _KEEP_ALIVE_S:
                return True, (reader, writer)
            writer.close()
        try:
            target = self._target
            return False, await asyncio.open_connection(target.host, target.port, ssl=target.tls, limit=_HEADER_LIMIT)
        except OSError as error:
            raise _ConnectFailed(str(error)) from error

    def close(self) -> None:
        for _reader, writer, _idle_since in self._idle:
            writer.close()
        self._idle.clear()


async def _exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, data: bytes) -> tuple[int, bool]:
    """Write one request, read one response to its end: (status, whether the connection may be reused)."""
    try:
        writer.write(data)
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as error:
        if error.partial:
            raise
        raise _Stale from error
    except ConnectionError as error:
        raise _Stale from error
    except asyncio.LimitOverrunError:
        raise _BadResponse("response headers too long") from None
    status_line, *header_lines = head[:-4].split(b"\r\n")
    version, _, rest = status_line.partition(b" ")
    if not version.startswith(b"HTTP/1.") or not rest[:3].isdigit():
        raise _BadResponse(f"not an HTTP/1.x status line: {status_line[:60]!r}")
    status = int(rest[:3])
    headers: dict[bytes, bytes] = {}
    for line in header_lines:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip().lower()
    keep_alive = headers.get(b"connection") != b"close" and version != b"HTTP/1.0"
    if status < 200 or status in (204, 304):
        return status, keep_alive
    if b"chunked" in headers.get(b"transfer-encoding", b""):
        while True:
            size_line = await reader.readuntil(b"\r\n")
            try:
                size = int(size_line.split(b";")[0].strip(), 16)
            except ValueError:
                raise _BadResponse(f"bad chunk size {size_line[:40]!r}") from None
            if size == 0:
                while await reader.readuntil(b"\r\n") != b"\r\n":  # trailers
                    pass
                return status, keep_alive
            await reader.readexactly(size + 2)
    if b"content-length" in headers:
        try:
            length = int(headers[b"content-length"])
        except ValueError:
            raise _BadResponse(f"bad Content-Length {headers[b'content-length'][:40]!r}") from None
        await reader.readexactly(length)
        return status, keep_alive
    await reader.read()  # no length: the body ends when the server closes
    return status, False


async def _request(pool: _Pool, data: bytes, scheduled: float, timeout_s: float, tally: _Tally) -> None:
    """One request, due at ``scheduled`` (loop time); its whole life, queueing included, fits in ``timeout_s``."""
    loop = asyncio.get_running_loop()
    tally.in_flight += 1
    try:
        async with asyncio.timeout_at(scheduled + timeout_s):
            status = await pool.request(data)
    except TimeoutError:
        tally.failed("timeout", loop.time())
    except _ConnectFailed:
        tally.failed("connect", loop.time())
    except (_Stale, ConnectionError, asyncio.IncompleteReadError):
        tally.failed("connection closed", loop.time())
    except (_BadResponse, asyncio.LimitOverrunError):
        tally.failed("bad response", loop.time())
    except OSError as error:
        tally.failed(type(error).__name__, loop.time())
    else:
        finished = loop.time()
        tally.answered(status, finished, finished - scheduled)
    finally:
        tally.in_flight -= 1


async def _tick(tally: _Tally, start: float, rate_rps: float, duration_s: float, on_progress: ProgressCallback) -> None:
    loop = asyncio.get_running_loop()
    while True:
        on_progress(_snapshot(tally, start, loop.time(), rate_rps, duration_s))
        await asyncio.sleep(_PROGRESS_INTERVAL_S)


def _snapshot(tally: _Tally, start: float, now: float, rate_rps: float, duration_s: float) -> LoadProgress:
    return LoadProgress(
        rate_rps=rate_rps,
        duration_s=duration_s,
        elapsed_s=now - start,
        sent=tally.sent,
        ok=tally.ok,
        rejected=tally.rejected,
        errors=tally.errors,
        in_flight=tally.in_flight,
        recent_p99_ms=tally.recent_p99_ms(now),
    )


async def run_load(
    url: str,
    payloads: list[dict[str, Any]],
    rate_rps: float,
    duration_s: float,
    timeout_s: float = 10.0,
    max_in_flight: int = 10000,
    seed: int = 0,
    token: str | None = None,
    on_progress: ProgressCallback | None = None,
    repeat_ratio: float = 0.0,
) -> LoadResult:
    """Offer ``rate_rps`` Poisson arrivals for ``duration_s``, POSTing ``payloads`` in order (GET when empty),
    with ``repeat_ratio`` of them repeating an earlier body (see the module docstring).

    Never waits for an answer before sending the next request; ``max_in_flight`` bounds open
    connections (requests past it wait for one, and that wait counts in their latency).
    """
    target = _Target.parse(url, payloads, token)
    if not (math.isfinite(timeout_s) and timeout_s > 0):
        raise InputError(f"the timeout must be positive, got {timeout_s}", "e.g. --timeout-s 10")
    if max_in_flight < 1:
        raise InputError(f"max_in_flight must be at least 1, got {max_in_flight}")
    arrivals = poisson_arrivals(rate_rps, duration_s, seed)
    order = request_order(len(arrivals), len(target.requests), repeat_ratio, seed)
    pool = _Pool(target, _connection_limit(max_in_flight))
    tally = _Tally()
    loop = asyncio.get_running_loop()
    tasks: set[asyncio.Task[None]] = set()
    start = loop.time()
    tally.last_done = start
    ticker = asyncio.create_task(_tick(tally, start, rate_rps, duration_s, on_progress)) if on_progress else None
    try:
        for index, offset in enumerate(arrivals):
            delay = start + offset - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            data = target.requests[order[index]]
            task = asyncio.create_task(_request(pool, data, start + offset, timeout_s, tally))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            tally.sent += 1
        hard_stop = start + duration_s + timeout_s + _HARD_STOP_GRACE_S
        if tasks:
            _done, pending = await asyncio.wait(set(tasks), timeout=max(0.0, hard_stop - loop.time()))
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            for _task in pending:
                tally.failed("unfinished", loop.time())
    finally:
        pool.close()
        if ticker is not None:
            ticker.cancel()
    if ticker is not None:
        with contextlib.suppress(asyncio.CancelledError):
            await ticker  # re-raises what the progress callback raised, if it did
    end = loop.time()
    if on_progress is not None:
        on_progress(_snapshot(tally, start, end, rate_rps, duration_s))
    window_s = max(duration_s, tally.last_done - start)
    return _result(tally, rate_rps, duration_s, window_s, end - start, repeat_ratio)


def _result(
    tally: _Tally, rate_rps: float, duration_s: float, window_s: float, wall_s: float, repeat_ratio: float
) -> LoadResult:
    latencies_ms = np.asarray(tally.latencies_s) * 1e3
    p50, p95, p99 = (float(v) for v in np.percentile(latencies_ms, [50, 95, 99])) if tally.ok else (None,) * 3
    return LoadResult(
        rate_rps=rate_rps,
        duration_s=duration_s,
        sent=tally.sent,
        ok=tally.ok,
        rejected=tally.rejected,
        errors=tally.errors,
        throughput_rps=tally.ok / window_s,
        p50_ms=p50,
        p95_ms=p95,
        p99_ms=p99,
        max_ms=float(latencies_ms.max()) if tally.ok else None,
        error_rate=tally.errors / tally.sent if tally.sent else 0.0,
        rejection_rate=tally.rejected / tally.sent if tally.sent else 0.0,
        wall_s=wall_s,
        error_kinds=dict(tally.error_kinds),
        repeat_ratio=repeat_ratio,
    )


def find_max_rate(
    url: str,
    payloads: list[dict[str, Any]],
    slo_p99_ms: float,
    duration_s: float,
    low_rps: float,
    high_rps: float,
    *,
    timeout_s: float = 10.0,
    max_error_rate: float = 0.01,
    max_rejection_rate: float = 0.01,
    resolution: float = 0.05,
    max_probes: int = 16,
    settle_s: float = 1.0,
    seed: int = 0,
    token: str | None = None,
    max_in_flight: int = 10000,
    on_progress: ProgressCallback | None = None,
    on_probe: Callable[[LoadResult, bool], None] | None = None,
    repeat_ratio: float = 0.0,
    lowest_retries: int = LOWEST_RETRIES,
) -> tuple[float | None, list[LoadResult]]:
    """The highest rate in [low, high] that meets the SLO, and every probe run to find it (None: not even low).

    Doubles from ``low_rps`` until a probe fails or ``high_rps`` passes, then bisects until the gap
    is within ``resolution`` of the best rate or ``max_probes`` ran. A probe's request timeout is cut
    to ``max(1 s, 4 x SLO)``: a slower answer fails the probe either way, and an overloaded probe
    then ends soon after its duration. After a failed probe we pause ``settle_s`` so the server
    drains the backlog before the next one. Call from synchronous code (each probe runs its own event loop).
    Each probe goes on through ``payloads`` where the previous one stopped: while they last, no probe
    sends what an earlier one sent, so a server's prediction cache is never warmed by an earlier probe.

    A failed probe at ``low_rps`` is run again up to ``lowest_retries`` times (``LOWEST_RETRIES``), and the
    search goes on from the first retry that passes: there a single slow answer would otherwise report
    "no rate" for a server that sustains many times the rate. Higher probes are not retried: a spurious
    failure there only ends the ramp early, and the spread (``MaxRateSearch.spread``) shows the bracket.
    """
    if not (math.isfinite(slo_p99_ms) and slo_p99_ms > 0):
        raise InputError(f"the p99 SLO must be positive, got {slo_p99_ms} ms", "e.g. --slo-p99-ms 100")
    if not (0 < low_rps <= high_rps):
        raise InputError(
            f"the rate range must satisfy 0 < low <= high, got {low_rps}..{high_rps}", "e.g. --rate 10 --max-rate 1000"
        )
    if max_probes < 1:
        raise InputError(f"max_probes must be at least 1, got {max_probes}")
    if lowest_retries < 0:
        raise InputError(f"lowest_retries must be >= 0, got {lowest_retries}")
    probe_timeout_s = min(timeout_s, max(1.0, 4 * slo_p99_ms / 1e3))
    results: list[LoadResult] = []

    def meets(rate: float) -> bool:
        # Each probe starts where the previous ones stopped in the payloads, so no probe warms a cache for the next.
        offset = sum(result.sent for result in results) % len(payloads) if payloads else 0
        coroutine = run_load(
            url, payloads[offset:] + payloads[:offset], rate, duration_s, probe_timeout_s, max_in_flight,
            seed + len(results), token, on_progress, repeat_ratio,
        )  # fmt: skip
        result = run_fast(coroutine)
        results.append(result)
        passed = result.meets(slo_p99_ms, max_error_rate, max_rejection_rate)
        if on_probe is not None:
            on_probe(result, passed)
        if not passed and settle_s > 0:
            time.sleep(settle_s)
        return passed

    best: float | None = None
    failed: float | None = None
    rate = low_rps
    while len(results) < max_probes:
        passed = meets(rate)
        if not passed and best is None:  # the lowest probe: retried before "no rate" is believed
            for _retry in range(lowest_retries):
                if len(results) >= max_probes or (passed := meets(rate)):
                    break
        if not passed:
            failed = rate
            break
        best = rate
        if rate >= high_rps:
            break
        rate = min(rate * 2, high_rps)
    if best is None or failed is None:
        return best, results
    while len(results) < max_probes and failed - best > resolution * best:
        middle = (best + failed) / 2
        if meets(middle):
            best = middle
        else:
            failed = middle
    return best, results


@dataclass(frozen=True)
class LoadRequest:
    """What ``computewise loadtest`` is asked: one run at ``rate_rps``, or with ``slo_p99_ms`` the highest rate
    between ``rate_rps`` and ``max_rate_rps`` meeting it (each probe ``duration_s`` long)."""

    url: str
    payloads: list[dict[str, Any]]  # empty: GET requests
    rate_rps: float
    duration_s: float
    timeout_s: float = 10.0
    token: str | None = None
    seed: int = 0
    repeat_ratio: float = 0.0
    slo_p99_ms: float | None = None
    max_rate_rps: float = 10000.0


def load_test(
    request: LoadRequest,
    on_progress: ProgressCallback | None = None,
    on_probe: Callable[[LoadResult, bool], None] | None = None,
) -> LoadtestRun | MaxRateSearch:
    """Run ``request``: the ``loadtest --json`` document of one run, or of the search with every probe.

    Call from synchronous code: each run has its own event loop. ``on_probe`` hears each probe of a search.
    """
    if request.slo_p99_ms is None:
        coroutine = run_load(
            request.url,
            request.payloads,
            request.rate_rps,
            request.duration_s,
            request.timeout_s,
            seed=request.seed,
            token=request.token,
            on_progress=on_progress,
            repeat_ratio=request.repeat_ratio,
        )
        return LoadtestRun(request.url, run_fast(coroutine))
    slo = request.slo_p99_ms
    best, probes = find_max_rate(
        request.url,
        request.payloads,
        slo,
        request.duration_s,
        request.rate_rps,
        request.max_rate_rps,
        timeout_s=request.timeout_s,
        seed=request.seed,
        token=request.token,
        on_progress=on_progress,
        on_probe=on_probe,
        repeat_ratio=request.repeat_ratio,
    )
    return MaxRateSearch(request.url, slo, best, tuple(Probe(p, p.meets(slo)) for p in probes))
