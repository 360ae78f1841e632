"""The open-loop load tester against a real HTTP server on 127.0.0.1.

The server is a tiny Starlette app under uvicorn on a background thread (port 0, so no race for a
free port). Its one endpoint sleeps a configurable service time, optionally in a fixed number of
slots (a server with known capacity: slots / service time) and optionally answering 429 when too
many requests are already in flight. It counts what it saw, so the tests can tell open-loop from
closed-loop behaviour: a tester that waits for answers never has more than a few requests in flight.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from computewise.errors import InputError
from computewise.serve.loadtest import (
    LOWEST_RETRIES,
    MAX_REQUESTS,
    LoadProgress,
    LoadRequest,
    find_max_rate,
    load_payloads,
    load_test,
    poisson_arrivals,
    request_order,
    run_load,
)
from computewise.specs.loadtest import LoadResult, LoadtestRun, MaxRateSearch, Probe


@dataclass
class FakeService:
    """What the endpoint does (service time, slots, 429 threshold) and what it saw."""

    delay_s: float = 0.0
    slots: int | None = None
    reject_at_in_flight: int | None = None
    slow_once_at: int | None = None  # the request (1-based, counted over the service's life) that takes slow_once_s
    slow_once_s: float = 0.0
    received: int = 0
    in_flight: int = 0
    peak_in_flight: int = 0
    bodies: list[bytes] = field(default_factory=list)
    methods: Counter[str] = field(default_factory=Counter)
    authorizations: Counter[str] = field(default_factory=Counter)

    def app(self) -> Starlette:
        semaphore = asyncio.Semaphore(self.slots) if self.slots else None

        async def work(request: Request) -> JSONResponse:
            self.received += 1
            try:
                self.bodies.append(await request.body())
            except ClientDisconnect:  # the client timed out before sending its body
                return JSONResponse({"error": "gone"}, status_code=499)
            self.methods[request.method] += 1
            self.authorizations[request.headers.get("authorization", "")] += 1
            if self.reject_at_in_flight is not None and self.in_flight >= self.reject_at_in_flight:
                return JSONResponse({"error": "busy"}, status_code=429, headers={"Retry-After": "1"})
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
            try:
                if semaphore is None:
                    await asyncio.sleep(self.slow_once_s if self.received == self.slow_once_at else self.delay_s)
                else:
                    async with semaphore:
                        if await request.is_disconnected():  # the client gave up while queued
                            return JSONResponse({"error": "gone"}, status_code=499)
                        await asyncio.sleep(self.delay_s)
            finally:
                self.in_flight -= 1
            return JSONResponse({"outputs": [1]})

        return Starlette(routes=[Route("/work", work, methods=["GET", "POST"])])


@contextmanager
def serving(service: FakeService) -> Iterator[str]:
    """The URL of ``service`` under a real uvicorn on 127.0.0.1, stopped on exit."""
    config = uvicorn.Config(
        service.app(), host="127.0.0.1", port=0, log_level="warning", lifespan="off", timeout_graceful_shutdown=1
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/work"
    finally:
        server.should_exit = True
        thread.join(10)


def test_arrivals_are_seeded_poisson_and_bounded() -> None:
    arrivals = poisson_arrivals(1000, 10, seed=3)
    assert arrivals == poisson_arrivals(1000, 10, seed=3)
    assert arrivals != poisson_arrivals(1000, 10, seed=4)
    assert arrivals == sorted(arrivals) and arrivals[0] > 0 and arrivals[-1] < 10
    assert abs(len(arrivals) - 10_000) < 400  # Poisson: sd 100
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    assert sum(gaps) / len(gaps) == pytest.approx(1e-3, rel=0.05)
    assert sum(g > 2e-3 for g in gaps) / len(gaps) == pytest.approx(0.135, abs=0.02)  # exp(-2): exponential tail
    assert max(len(poisson_arrivals(2, 1, seed)) for seed in range(200)) <= 3  # the 1.5x cap
    with pytest.raises(InputError, match="rate must be positive"):
        poisson_arrivals(0, 10)
    with pytest.raises(InputError, match="lower --rate"):
        poisson_arrivals(MAX_REQUESTS, 10)


def test_offered_rate_is_held_while_answers_take_200_ms() -> None:
    service = FakeService(delay_s=0.2)
    snapshots: list[LoadProgress] = []
    with serving(service) as url:
        started = time.monotonic()
        result = asyncio.run(run_load(url, [{"inputs": [1]}], 50, 3, timeout_s=5, on_progress=snapshots.append))
        took_s = time.monotonic() - started
    scheduled = len(poisson_arrivals(50, 3, seed=0))
    assert result.sent == scheduled == service.received
    assert abs(result.sent - 150) <= 30
    assert result.ok == result.sent and result.errors == 0 and result.rejected == 0
    # Open loop: about rate x delay = 10 requests at the server at once; a closed loop would hold 1.
    assert service.peak_in_flight >= 6
    assert result.p50_ms is not None and result.p99_ms is not None and result.max_ms is not None
    assert 195 <= result.p50_ms <= 400
    assert result.p50_ms <= result.p95_ms <= result.p99_ms <= result.max_ms  # type: ignore[operator]
    assert result.throughput_rps == pytest.approx(result.ok / result.wall_s, rel=0.1)
    assert result.throughput_rps >= 0.8 * result.sent / 3
    assert took_s < 3 + 1.5
    assert snapshots and snapshots[-1].sent == result.sent and snapshots[-1].ok == result.ok
    assert [s.sent for s in snapshots] == sorted(s.sent for s in snapshots)
    assert any(s.in_flight >= 5 for s in snapshots)
    assert any(s.recent_p99_ms is not None and s.recent_p99_ms >= 195 for s in snapshots)


def test_client_side_queueing_counts_in_latency() -> None:
    """One connection for 40 requests/s of 50 ms each: requests wait their turn, and that wait is latency."""
    service = FakeService(delay_s=0.05)
    with serving(service) as url:
        result = asyncio.run(run_load(url, [], 40, 1.5, timeout_s=10, max_in_flight=1))
    assert service.peak_in_flight == 1 and result.ok == result.sent
    assert service.methods == Counter({"GET": result.sent})  # no payload: GET
    # 60 requests need 3 s through one connection; the last waited well over a second after its send time.
    assert result.max_ms is not None and result.max_ms > 1000
    assert result.p50_ms is not None and result.p50_ms > 200


def test_429_answers_are_rejections_not_errors() -> None:
    service = FakeService(delay_s=0.2, reject_at_in_flight=2)
    with serving(service) as url:
        result = asyncio.run(run_load(url, [{"x": 1}], 40, 2, timeout_s=5))
    assert result.rejected > result.sent / 3 and result.ok > 0
    assert result.errors == 0 and result.ok + result.rejected == result.sent
    assert result.rejection_rate == pytest.approx(result.rejected / result.sent)
    assert result.p50_ms is not None and result.p50_ms >= 195  # percentiles cover successful answers only
    assert not result.meets(slo_p99_ms=1000)


def test_refused_connections_are_errors_not_a_crash() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = asyncio.run(run_load(f"http://127.0.0.1:{port}/work", [], 20, 1, timeout_s=2))
    assert result.sent > 0 and result.errors == result.sent and result.ok == 0
    assert result.error_kinds == {"connect": result.sent} and result.error_rate == 1.0
    assert result.p50_ms is None and result.p99_ms is None and result.throughput_rps == 0
    assert json.loads(json.dumps(result.to_dict()))["errors"] == result.sent


def test_slow_answers_time_out_and_the_run_stops_on_time() -> None:
    service = FakeService(delay_s=3.0)
    with serving(service) as url:
        started = time.monotonic()
        result = asyncio.run(run_load(url, [{"x": 1}], 20, 1, timeout_s=0.3))
        took_s = time.monotonic() - started
    assert result.errors == result.sent > 0 and result.error_kinds == {"timeout": result.sent}
    assert took_s < 1 + 0.3 + 1.5


def test_payloads_go_round_robin_with_the_token() -> None:
    service = FakeService()
    payloads = [{"i": 0}, {"i": 1}, {"i": 2}]
    with serving(service) as url:
        result = asyncio.run(run_load(url, payloads, 30, 1, token="s3cret", seed=7))
    seen = Counter(json.loads(body)["i"] for body in service.bodies)
    assert sum(seen.values()) == result.sent == result.ok
    assert max(seen.values()) - min(seen.values()) <= 1
    assert service.authorizations == Counter({"Bearer s3cret": result.sent})


@dataclass
class RawServer:
    """A bare asyncio TCP server giving one fixed answer, to pin down how the client reads HTTP/1.x framing."""

    answer: bytes
    close_after_answer: bool = False
    answers_per_connection: int | None = None  # then read the next request and hang up without answering
    connections: int = 0
    requests: int = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        answered = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lengths = [
                    int(line.split(b":")[1]) for line in head.lower().split(b"\r\n") if b"content-length" in line
                ]
                await reader.readexactly(lengths[0] if lengths else 0)
                self.requests += 1
                if self.answers_per_connection is not None and answered == self.answers_per_connection:
                    break
                writer.write(self.answer)
                await writer.drain()
                answered += 1
                if self.close_after_answer:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def load(self, rate_rps: float = 40, duration_s: float = 0.5) -> LoadResult:
        async def scenario() -> LoadResult:
            server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
            port = server.sockets[0].getsockname()[1]
            async with server:
                return await run_load(f"http://127.0.0.1:{port}/x", [{"a": 1}], rate_rps, duration_s, timeout_s=2)

        return asyncio.run(scenario())


@pytest.mark.parametrize(
    ("answer", "close", "outcome"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", False, "ok"),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n3;x=1\r\nabc\r\n0\r\nT: 1\r\n\r\n",
            False,
            "ok",
        ),
        (b"HTTP/1.1 204 No Content\r\n\r\n", False, "ok"),
        (b"HTTP/1.1 200 OK\r\n\r\nthe body ends when the server closes", True, "ok"),
        (b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", True, "ok"),
        (b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", True, "ok"),
        (b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n", False, "http 503"),
        (b"SSH-2.0-OpenSSH_9.6\r\n\r\n", True, "bad response"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", True, "connection closed"),
        (b"", True, "connection closed"),
    ],
)
def test_every_response_framing_is_read_to_its_end(answer: bytes, close: bool, outcome: str) -> None:
    server = RawServer(answer, close_after_answer=close)
    result = server.load()
    assert result.sent > 5 and server.requests == result.sent
    if outcome == "ok":
        assert result.ok == result.sent, result.error_kinds
    else:
        assert result.error_kinds == {outcome: result.sent}
    if not close:  # keep-alive: far fewer connections than requests
        assert server.connections < result.sent / 2


def test_a_keep_alive_connection_dropped_by_the_server_is_replaced() -> None:
    """The server answers once per connection, then hangs up on the next request: each is resent, none lost."""
    server = RawServer(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", answers_per_connection=1)
    result = server.load(rate_rps=40, duration_s=1)
    assert result.ok == result.sent and result.errors == 0
    assert server.requests > result.sent  # some went out twice: first on a connection that was already dropped


def test_find_max_lands_near_the_capacity_of_a_slot_limited_server() -> None:
    """10 slots of 100 ms: 100 requests/s at most. With p99 <= 400 ms the answer is close below that.

    Past capacity the queue grows without bound, so a probe there misses the SLO; at 80 % of it
    the wait stays short. The service time is long next to the scheduling noise of a busy 2-core
    machine, which is what keeps this test steady.
    """
    capacity_rps = 10 / 0.1
    service = FakeService(delay_s=0.1, slots=10)
    probes_seen: list[tuple[float, bool]] = []
    with serving(service) as url:
        best, probes = find_max_rate(
            url,
            [{"x": 1}],
            slo_p99_ms=400,
            duration_s=2,
            low_rps=20,
            high_rps=640,
            resolution=0.1,
            max_probes=10,
            settle_s=0.5,
            on_probe=lambda result, passed: probes_seen.append((result.rate_rps, passed)),
        )
    assert best is not None and 0.5 * capacity_rps <= best <= 1.25 * capacity_rps, probes_seen
    assert len(probes) == len(probes_seen) <= 10
    assert [r.rate_rps for r in probes] == [rate for rate, _ in probes_seen]
    assert any(not passed for _, passed in probes_seen) and all(passed for rate, passed in probes_seen if rate < best)
    assert [r.rate_rps for r in probes[:3]] == [20, 40, 80]  # the ramp doubles


def test_find_max_reports_none_when_even_the_lowest_rate_misses() -> None:
    service = FakeService(delay_s=0.1)
    with serving(service) as url:
        best, probes = find_max_rate(url, [], slo_p99_ms=20, duration_s=0.5, low_rps=10, high_rps=100, settle_s=0)
    assert best is None and len(probes) == 1 + LOWEST_RETRIES and all(p.ok > 0 for p in probes)
    spread = MaxRateSearch(url, 20, best, tuple(Probe(p, False) for p in probes)).spread
    assert (spread.low_rps, spread.high_rps, spread.lowest_probes, spread.lowest_passed) == (None, 10, 3, 0)


def test_load_test_returns_the_document_its_request_asks_for() -> None:
    """One call for the verb: a run at one rate without an SLO, the search with each probe judged with one."""
    service = FakeService()
    with serving(service) as url:
        run = load_test(LoadRequest(url, [{"x": 1}], rate_rps=20, duration_s=0.5))
        probes_heard: list[bool] = []
        search = load_test(
            LoadRequest(url, [{"x": 1}], rate_rps=10, duration_s=0.5, slo_p99_ms=1000, max_rate_rps=10),
            on_probe=lambda _, passed: probes_heard.append(passed),
        )
    assert isinstance(run, LoadtestRun) and run.url == url and run.result.rate_rps == 20 and run.result.ok > 0
    assert isinstance(search, MaxRateSearch) and search.url == url and search.slo_p99_ms == 1000
    assert search.max_rate_rps == 10 and [p.meets_slo for p in search.probes] == probes_heard == [True]
    assert search.best is search.probes[0].result


def test_one_slow_answer_at_the_lowest_probe_no_longer_reports_no_rate() -> None:
    """Issue 20 section 6, reproduced: one answer over the SLO in the lowest probe (10 requests at 5/s)
    is that probe's p99, and without a retry the search reported "no rate" for a server that answers
    in 5 ms. With the retry the search goes on, and the spread shows the lowest rate's 1 of 2."""

    def search(lowest_retries: int) -> tuple[float | None, list[LoadResult]]:
        service = FakeService(delay_s=0.005, slow_once_at=4, slow_once_s=0.3)  # the 4th request of the life
        with serving(service) as url:
            return find_max_rate(
                url, [{"x": 1}], slo_p99_ms=100, duration_s=2, low_rps=5, high_rps=20, settle_s=0,
                lowest_retries=lowest_retries,
            )  # fmt: skip

    best, probes = search(lowest_retries=0)  # the behaviour before the fix
    assert best is None and len(probes) == 1
    assert probes[0].sent == 10 and probes[0].p99_ms is not None and probes[0].p99_ms > 100
    assert probes[0].p50_ms is not None and probes[0].p50_ms < 100  # every other answer was fast

    best, probes = search(lowest_retries=LOWEST_RETRIES)
    assert best == 20, [(p.rate_rps, p.p99_ms) for p in probes]
    assert [p.rate_rps for p in probes] == [5, 5, 10, 20]
    spread = MaxRateSearch("u", 100, best, tuple(Probe(p, p.meets(100)) for p in probes)).spread
    assert (spread.low_rps, spread.high_rps, spread.lowest_probes, spread.lowest_passed) == (20, None, 2, 1)


def test_request_order_repeats_earlier_bodies_at_the_ratio_and_is_seeded() -> None:
    count, distinct = 4000, 10_000
    order = request_order(count, distinct, 0.5, seed=7)
    assert order == request_order(count, distinct, 0.5, seed=7) != request_order(count, distinct, 0.5, seed=8)
    seen: set[int] = set()
    fresh = repeats = 0
    for index in order:  # an independent reading: a body is a repeat iff it was sent before
        if index in seen:
            repeats += 1
        else:
            assert index == fresh  # fresh bodies go through the payloads in order
            fresh += 1
            seen.add(index)
    # Binomial(3999, 0.5): 4 standard deviations is +-126.
    assert abs(repeats - 0.5 * (count - 1)) < 130
    assert request_order(5, 3, 0.0) == [0, 1, 2, 0, 1]  # no repeats: round robin, as before
    assert len(set(request_order(50, 100, 1.0))) == 1  # all but the first repeat it
    with pytest.raises(InputError):
        request_order(5, 3, 1.5)


def test_payload_files(tmp_path: Path) -> None:
    one = tmp_path / "one.json"
    one.write_text('{"inputs": ["a"]}')
    assert load_payloads(one) == [{"inputs": ["a"]}]
    many = tmp_path / "many.json"
    many.write_text('[{"input": 1}, {"input": 2}]')
    assert load_payloads(many) == [{"input": 1}, {"input": 2}]
    lines = tmp_path / "lines.jsonl"
    lines.write_text('{"input": "a"}\n\n{"input": "b"}\n')
    assert load_payloads(lines) == [{"input": "a"}, {"input": "b"}]
    cases = {
        "missing.json": (None, "does not exist"),
        "broken.json": ('{"inputs": [', "not valid JSON"),
        "scalar.json": ("3", "not a JSON object"),
        "mixed.json": ('[{"a": 1}, 2]', "item 1 is not a JSON object"),
        "empty.json": ("[]", "holds no request body"),
        "bad.jsonl": ('{"a": 1}\n{oops\n', "bad.jsonl:2: not valid JSON"),
        "list.jsonl": ("[1]\n", "list.jsonl:1: each line must be a JSON object"),
    }
    for name, (text, message) in cases.items():
        path = tmp_path / name
        if text is not None:
            path.write_text(text)
        with pytest.raises(InputError, match=message):
            load_payloads(path)


def test_bad_arguments_are_input_errors() -> None:
    with pytest.raises(InputError, match="not an http"):
        asyncio.run(run_load("127.0.0.1:8000/work", [], 10, 1))
    with pytest.raises(InputError, match="timeout must be positive"):
        asyncio.run(run_load("http://127.0.0.1:1/work", [], 10, 1, timeout_s=0))
    with pytest.raises(InputError, match="low <= high"):
        find_max_rate("http://127.0.0.1:1/work", [], 100, 1, 50, 10)
