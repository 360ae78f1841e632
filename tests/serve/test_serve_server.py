"""``computewise.serve.server.serve`` as a real process: uvicorn on 127.0.0.1, signals, overload, the ledger.

Each server is a child process (``python -c`` calling ``serve``) whose models are entry points
written into a temporary directory: a slow model (a fixed time per call, or per input) to keep
requests in flight, and one that raises on a poisoned input. Clients are httpx, in threads or on
an event loop, every call with a timeout; every child is killed at the end of its test, whatever
happened.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from computewise.errors import InputError
from computewise.ledger import Ledger
from computewise.monitor.summary import summarize
from computewise.serve.exposure import is_loopback
from computewise.serve.loadtest import find_max_rate, run_load
from computewise.serve.server import serve
from computewise.system.ports import free_port

MODELS = '''
import time

def poison():
    """Echo, except that a call holding the input "poison" raises (the whole batch fails)."""
    def predict(items):
        if "poison" in items:
            raise ValueError("poisoned input")
        return list(items)
    return predict

def slow_call():
    """Echo after 0.25 s per call, whatever its size."""
    def predict(items):
        time.sleep(0.25)
        return list(items)
    return predict

def slow_item():
    """Echo after 25 ms per input: batching does not help, so capacity is 40 inputs/s."""
    def predict(items):
        time.sleep(0.025 * len(items))
        return list(items)
    return predict

def hang():
    """A model stuck in its call: it says it started (a file in the working directory), then sleeps 60 s."""
    def predict(items):
        open("hang-started", "w").close()
        time.sleep(60)
        return list(items)
    return predict

def slower_item():
    """Echo after 100 ms per input: capacity 10 inputs/s, however idle the machine."""
    def predict(items):
        time.sleep(0.1 * len(items))
        return list(items)
    return predict
'''

LAUNCH = """
import json, sys
from pathlib import Path
from computewise.serve.batcher import BatchPolicy
from computewise.serve.server import serve
options = json.loads(sys.argv[1])
policy = BatchPolicy(**options.pop("policy", {}))
ready_file = options.pop("ready_file", None)
sys.exit(serve(policy=policy, ready_file=Path(ready_file) if ready_file else None, **options))
"""

START_TIMEOUT_S = 60.0
ANSWERED = 'computewise_serve_requests_total{code="200"}'


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    url: str
    db: str
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture
def models_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "models"
    directory.mkdir()
    (directory / "serve_server_models.py").write_text(textwrap.dedent(MODELS))
    return directory


@contextlib.contextmanager
def running(tmp_path: Path, models_dir: Path, target: str, **options: Any) -> Iterator[Server]:
    """Start ``serve(target, **options)`` in a child process and wait until /readyz says 200."""
    ready_file = tmp_path / "ready.json"
    port = options.setdefault("port", free_port())
    db = options.setdefault("db", f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    log = tmp_path / "server.log"
    arguments = json.dumps({"target": target, "ready_file": str(ready_file), **options})
    env = {**os.environ, "COMPUTEWISE_FAKE_GPU": ""}
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-c", LAUNCH, arguments], cwd=models_dir, stdout=sink, stderr=subprocess.STDOUT, env=env
        )
    try:
        deadline_s = time.monotonic() + START_TIMEOUT_S
        url = f"http://127.0.0.1:{port}"
        while True:
            if process.poll() is not None:
                pytest.fail(f"the server exited with {process.returncode}:\n{log.read_text()}")
            if port == 0 and ready_file.exists():
                url = json.loads(ready_file.read_text())["url"]
            with contextlib.suppress(httpx.HTTPError):
                known = port != 0 or ready_file.exists()
                if known and httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline_s:
                pytest.fail(f"the server was not ready within {START_TIMEOUT_S} s:\n{log.read_text()}")
            time.sleep(0.05)
        yield Server(process, url, db, log)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)


def metric(server: Server, name: str, default: float | None = None) -> float:
    """The value of one series (``name`` with its labels, as exposed); ``default`` when it is absent."""
    text = httpx.get(f"{server.url}/metrics", timeout=5).text
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    if default is None:
        raise AssertionError(f"{name} not in /metrics")
    return default


def serve_run(db: str) -> Any:
    with Ledger.open(db) as ledger:
        runs = [run for run in ledger.runs() if run.kind == "serve"]
    assert len(runs) == 1
    return runs[0]


def test_sigterm_under_load_answers_every_accepted_request(tmp_path: Path, models_dir: Path) -> None:
    with running(
        tmp_path, models_dir, "serve_server_models:slow_call", policy={"mode": "none"}, tags={"team": "search"}
    ) as server:
        results: dict[int, httpx.Response | Exception] = {}

        def call(n: int) -> None:
            try:
                results[n] = httpx.post(
                    f"{server.url}/v1/models/serve_server_models/infer", json={"input": n}, timeout=30
                )
            except httpx.HTTPError as error:
                results[n] = error

        clients = [threading.Thread(target=call, args=(n,)) for n in range(6)]
        for client in clients:
            client.start()
        deadline_s = time.monotonic() + 10
        # All six accepted: one computing, the rest waiting (or, on a slow machine, already answered).
        while metric(server, "computewise_serve_queue_depth") + metric(server, ANSWERED, 0.0) < 5:
            assert time.monotonic() < deadline_s, "the requests never queued up"
            time.sleep(0.02)
        signalled_s = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        for client in clients:
            client.join(timeout=30)
        assert server.process.wait(timeout=15) == 0, server.output()
        drained_s = time.monotonic() - signalled_s
    assert {n: getattr(r, "status_code", r) for n, r in results.items()} == dict.fromkeys(range(6), 200)
    assert sorted(r.json()["outputs"][0] for r in results.values() if isinstance(r, httpx.Response)) == list(range(6))
    assert drained_s < 6 * 0.25 + 3  # the queue's work plus a little, not uvicorn's 35 s graceful bound
    assert "SIGTERM: draining" in server.output()
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{server.url}/healthz", timeout=2)
    run = serve_run(server.db)
    assert (run.status, run.exit_code, run.inferences) == ("succeeded", 0, 6)
    assert run.tags == {"team": "search"} and run.command == "computewise serve serve_server_models:slow_call"
    assert run.summary is not None and run.summary["requests"] == 6 and run.summary["compute_s"] >= 6 * 0.25
    assert run.ended_at_s is not None and run.price.hourly_usd > 0


def test_a_serving_run_is_sampled_so_its_energy_and_cpu_are_recorded(tmp_path: Path, models_dir: Path) -> None:
    """Like any run: CPU, memory and energy samples over the server's process, so kWh > 0 after load."""
    with running(tmp_path, models_dir, "echo") as server:
        with httpx.Client(timeout=10) as client:
            for n in range(400):
                assert client.post(f"{server.url}/v1/models/echo/infer", json={"inputs": [n]}).status_code == 200
        times = psutil.Process(server.process.pid).cpu_times()
        server_cpu_s = times.user + times.system  # measured from outside, before the drain
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(timeout=30) == 0, server.output()
    run = serve_run(server.db)
    with Ledger.open(server.db) as ledger:
        samples = ledger.samples(run.id)
        show = summarize(ledger, run.id, time.time())
    assert samples, "a serving run must have samples"
    sampled_cpu_s = sum(s.cpu_percent / 100.0 * s.interval_s for s in samples)
    assert 0.0 < sampled_cpu_s <= server_cpu_s + 1.0  # its own process, from after the model loaded
    assert sum(s.energy_j for s in samples) > 0 and max(s.rss_bytes for s in samples) > 0
    assert show.cost.energy_kwh > 0 and show.energy_basis != "no samples recorded"
    assert run.inferences == 400


async def surge(url: str, count: int, over_s: float) -> list[tuple[int, str | None, float]]:
    """``count`` requests at evenly spaced times over ``over_s``, never waiting for answers: (code, Retry-After, s)."""
    limits = httpx.Limits(max_connections=count, max_keepalive_connections=count)
    async with httpx.AsyncClient(limits=limits, timeout=20) as client:

        async def one(n: int) -> tuple[int, str | None, float]:
            await asyncio.sleep(n * over_s / count)
            start_s = time.monotonic()
            response = await client.post(url, json={"input": n})
            return response.status_code, response.headers.get("retry-after"), time.monotonic() - start_s

        return list(await asyncio.gather(*(one(n) for n in range(count))))


def test_overload_gets_429_with_retry_after_and_recovers(tmp_path: Path, models_dir: Path) -> None:
    """200 requests in 1 s at 100 ms per input (capacity 10/s) against a queue of 16: 429s, no crash, recovery.

    The bound on what may be accepted is arithmetic, so it holds on a loaded host too: while the surge is
    being sent, at most the queue (16), the one input in the model's hands and 10 inputs per second of the
    surge's wall time can be taken; a loaded client that sends slower widens that bound, never breaks it.
    """
    policy = {"mode": "none"}  # one input per model call: at most one in flight with the default single worker
    with running(tmp_path, models_dir, "serve_server_models:slower_item", policy=policy, queue_limit=16) as server:
        rss_before = psutil.Process(server.process.pid).memory_info().rss
        depths: list[float] = []
        surging = threading.Event()

        def watch_queue() -> None:
            while not surging.is_set():
                depths.append(metric(server, "computewise_serve_queue_depth"))
                time.sleep(0.05)

        watcher = threading.Thread(target=watch_queue)
        watcher.start()
        sent_at_s = time.monotonic()
        try:
            results = asyncio.run(surge(f"{server.url}/v1/models/serve_server_models/infer", 200, 1.0))
        finally:
            surging.set()
            watcher.join()
        surge_s = time.monotonic() - sent_at_s  # sending and answering: an upper bound on the sending
        codes = [code for code, _retry, _s in results]
        assert set(codes) <= {200, 429}, sorted(set(codes))
        most_accepted = 16 + 1 + math.ceil(10.0 * surge_s)
        assert 16 <= codes.count(200) <= most_accepted, (codes.count(200), most_accepted, surge_s)
        assert codes.count(429) == 200 - codes.count(200) > 0
        assert all(retry is not None and int(retry) >= 1 for code, retry, _s in results if code == 429)
        # Accepted requests waited behind at most 16 queued inputs, not behind the surge: read from the
        # server's own gauge, not from wall-clock latency, which a loaded CI host stretches at will.
        assert depths and max(depths) <= 16, max(depths)
        after = httpx.post(f"{server.url}/v1/models/serve_server_models/infer", json={"input": "after"}, timeout=5)
        assert after.status_code == 200 and after.json()["outputs"] == ["after"]
        assert httpx.get(f"{server.url}/readyz", timeout=5).status_code == 200
        assert metric(server, "computewise_serve_rejections_total") == codes.count(429)
        assert psutil.Process(server.process.pid).memory_info().rss - rss_before < 100e6
        assert server.process.poll() is None


OVERLOAD_SLO_MS = 250.0
SURGE_S = 30.0


def test_three_times_capacity_for_30_s_sheds_load_keeps_the_slo_and_recovers(tmp_path: Path, models_dir: Path) -> None:
    """The issue's overload test, measured with our own open-loop load tester.

    The server admits against a 250 ms p99 SLO. First the highest rate it sustains within that
    SLO is found, then three times that rate is offered for 30 s: no crash, no errors, the excess
    refused with 429 and ``Retry-After``, accepted answers within twice the SLO, memory bounded;
    5 s after the surge it answers within the SLO again.
    """
    url_path = "/v1/models/serve_server_models/infer"
    payloads = [{"input": n} for n in range(64)]
    policy = {"mode": "none", "slo_p99_ms": OVERLOAD_SLO_MS}
    with running(tmp_path, models_dir, "serve_server_models:slow_item", policy=policy, queue_limit=64) as server:
        url = server.url + url_path
        capacity_rps, _probes = find_max_rate(url, payloads, OVERLOAD_SLO_MS, 3.0, 10.0, 80.0, resolution=0.1)
        assert capacity_rps is not None and 20 <= capacity_rps <= 45, capacity_rps  # 40 inputs/s by construction
        process = psutil.Process(server.process.pid)
        rss_bytes = [process.memory_info().rss]
        retry_after: list[str | None] = []
        stop = threading.Event()

        def watch() -> None:
            """Sample the server's memory, and catch one 429 to read its Retry-After, while the surge runs."""
            while not stop.wait(0.5):
                rss_bytes.append(process.memory_info().rss)
                if not retry_after:
                    with contextlib.suppress(httpx.HTTPError):
                        answer = httpx.post(url, json={"input": "probe"}, timeout=5)
                        if answer.status_code == 429:
                            retry_after.append(answer.headers.get("retry-after"))

        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            surge_result = asyncio.run(run_load(url, payloads, 3 * capacity_rps, SURGE_S, timeout_s=10.0))
        finally:
            stop.set()
            watcher.join(timeout=10)
        surge_ended_s = time.monotonic()
        recovered_after_s = None
        while time.monotonic() - surge_ended_s < 10:
            start_s = time.monotonic()
            answer = httpx.post(url, json={"input": "after"}, timeout=5)
            if answer.status_code == 200 and (time.monotonic() - start_s) * 1e3 <= OVERLOAD_SLO_MS:
                recovered_after_s = time.monotonic() - surge_ended_s
                break
            time.sleep(0.1)
        calm = asyncio.run(run_load(url, payloads, capacity_rps / 2, 3.0, timeout_s=10.0))
        assert server.process.poll() is None, server.output()

    assert surge_result.errors == 0, surge_result.error_kinds
    assert surge_result.rejection_rate > 0.3, surge_result  # two thirds of 3x capacity cannot be served
    assert surge_result.throughput_rps >= 0.7 * capacity_rps, surge_result  # shedding, not collapsing
    assert surge_result.p99_ms is not None and surge_result.p99_ms <= 2 * OVERLOAD_SLO_MS, surge_result
    assert retry_after and retry_after[0] is not None and int(retry_after[0]) >= 1, retry_after
    assert max(rss_bytes) - rss_bytes[0] < 100e6, rss_bytes
    assert recovered_after_s is not None and recovered_after_s <= 5.0, recovered_after_s
    assert calm.meets(OVERLOAD_SLO_MS), calm


def test_token_model_error_and_ready_file_on_a_live_server(tmp_path: Path, models_dir: Path) -> None:
    """Port 0: the ready file says where. Bearer auth on; a poisoned input fails its own request only."""
    token = "t0ken-for-tests"
    with running(
        tmp_path, models_dir, "serve_server_models:poison", port=0, token=token, policy={"mode": "greedy"}
    ) as server:
        ready = json.loads((tmp_path / "ready.json").read_text())
        assert ready["model"] == "serve_server_models" and ready["pid"] == server.process.pid
        url = f"{server.url}/v1/models/serve_server_models/infer"
        assert httpx.post(url, json={"input": 1}, timeout=5).status_code == 401
        wrong = httpx.post(url, json={"input": 1}, headers={"Authorization": "Bearer nope"}, timeout=5)
        assert wrong.status_code == 401
        assert httpx.get(f"{server.url}/metrics", timeout=5).status_code == 401
        assert httpx.get(f"{server.url}/healthz", timeout=5).status_code == 200

        async def together() -> list[httpx.Response]:
            headers = {"Authorization": f"Bearer {token}"}
            async with httpx.AsyncClient(headers=headers, timeout=20) as client:
                bodies = [{"inputs": ["a", "b"]}, {"inputs": ["c", "poison"]}, {"input": "d"}]
                return list(await asyncio.gather(*(client.post(url, json=body) for body in bodies)))

        first, poisoned, last = asyncio.run(together())
        assert (first.status_code, poisoned.status_code, last.status_code) == (200, 500, 200)
        assert poisoned.json()["field"] == "inputs[1]"
        again = httpx.post(url, json={"input": "e"}, headers={"Authorization": f"Bearer {token}"}, timeout=5)
        assert again.status_code == 200 and again.json()["outputs"] == ["e"]
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(timeout=15) == 0
    assert not (tmp_path / "ready.json").exists()
    assert serve_run(server.db).inferences == 4  # a, b, d, e: the poisoned request served nothing


def test_exposed_host_or_taken_port_is_refused_before_anything_starts(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    with pytest.raises(InputError, match="--token") as refused:
        serve("echo", host="0.0.0.0", db=db)
    assert "--insecure" in str(refused.value)
    with pytest.raises(InputError, match="empty"):
        serve("echo", token="  ", db=db)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(InputError, match="cannot listen"):
            serve("echo", port=taken.getsockname()[1], db=db)
    assert not (tmp_path / "ledger.sqlite").exists()  # refused before the ledger was touched
    assert [is_loopback(h) for h in ("127.0.0.1", "localhost", "::1", "127.8.0.1")] == [True] * 4
    assert [is_loopback(h) for h in ("0.0.0.0", "::", "10.0.0.5", "example.com")] == [False] * 4


def _hung_request(server: Server, models_dir: Path) -> tuple[threading.Thread, dict[str, httpx.Response]]:
    """One request to the ``hang`` model, sent from a thread; returns once the model is inside its call."""
    answers: dict[str, httpx.Response] = {}

    def call() -> None:
        with contextlib.suppress(httpx.HTTPError):
            answers["response"] = httpx.post(
                f"{server.url}/v1/models/serve_server_models/infer", json={"input": 1}, timeout=90
            )

    client = threading.Thread(target=call, daemon=True)
    client.start()
    deadline_s = time.monotonic() + 30
    while not (models_dir / "hang-started").exists():
        assert time.monotonic() < deadline_s, server.output()
        time.sleep(0.05)
    return client, answers


def test_a_hung_model_does_not_keep_a_stopped_server_alive_past_its_timeout(tmp_path: Path, models_dir: Path) -> None:
    """SIGTERM drains within --timeout-s (1 s here), not a fixed 30 s, and the process then exits although
    the model call it gave up on sleeps on for a minute: the run is recorded and the ready file removed."""
    with running(tmp_path, models_dir, "serve_server_models:hang", port=0, timeout_s=1.0) as server:
        client, answers = _hung_request(server, models_dir)
        signalled_s = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(timeout=30) == 0, server.output()
        stopped_after_s = time.monotonic() - signalled_s
        client.join(timeout=10)
    assert stopped_after_s < 15, (stopped_after_s, server.output())  # the model still had ~59 s to sleep
    assert answers["response"].status_code == 504
    assert "stopped; 0 inferences served" in server.output()
    assert not (tmp_path / "ready.json").exists()
    assert serve_run(server.db).status == "succeeded"


def test_a_second_sigterm_stops_a_drain_that_waits_on_a_hung_model(tmp_path: Path, models_dir: Path) -> None:
    """With a long --timeout-s (60 s) the drain would wait for the hung call; a second SIGTERM says stop
    now: the waiting request gets a 504 that says so, the run is recorded, the process exits."""
    with running(tmp_path, models_dir, "serve_server_models:hang", port=0, timeout_s=60.0) as server:
        client, answers = _hung_request(server, models_dir)
        server.process.send_signal(signal.SIGTERM)
        deadline_s = time.monotonic() + 30
        while "SIGTERM: draining" not in server.output():
            assert time.monotonic() < deadline_s and server.process.poll() is None, server.output()
            time.sleep(0.05)
        signalled_s = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(timeout=30) == 0, server.output()
        stopped_after_s = time.monotonic() - signalled_s
        client.join(timeout=10)
    assert stopped_after_s < 15, (stopped_after_s, server.output())
    response = answers["response"]
    assert response.status_code == 504 and "second signal" in response.json()["error"]
    assert "SIGTERM again: stopping now" in server.output() and "Traceback" not in server.output()
    assert not (tmp_path / "ready.json").exists()
    assert serve_run(server.db).status == "succeeded"


def test_a_number_too_large_for_a_float_is_a_400_on_a_live_server(tmp_path: Path, models_dir: Path) -> None:
    """1e400 parses as infinity: refused as malformed JSON (400), not echoed into a 500."""
    with running(tmp_path, models_dir, "echo", port=0) as server:
        url = f"{server.url}/v1/models/echo/infer"
        for body in (b'{"inputs": [1e400]}', b'{"input": -1.5e999}', b'{"inputs": [[0.5, 1' + b"0" * 400 + b".5]]}"):
            response = httpx.post(url, content=body, headers={"content-type": "application/json"}, timeout=10)
            assert response.status_code == 400, (body[:40], response.text)
            assert "out of range" in response.json()["error"]
        assert httpx.post(url, json={"inputs": [1e300]}, timeout=10).json()["outputs"] == [1e300]
        assert metric(server, 'computewise_serve_requests_total{code="400"}') == 3
        assert metric(server, 'computewise_serve_requests_total{code="500"}', 0.0) == 0
