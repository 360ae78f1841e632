"""``computewise loadtest`` end to end: the real CLI in a child process against a real server on 127.0.0.1.

The child runs ``computewise.cli.app.main`` (so user errors go through the real exit-code-2 path),
registering the ``loadtest`` verb first if the app does not have it yet.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from computewise.specs.loadtest import LoadtestRun, MaxRateSearch, read_loadtest

ROOT = Path(__file__).resolve().parents[2]
FIELDS = {
    "url",
    "rate_rps",
    "duration_s",
    "sent",
    "ok",
    "rejected",
    "errors",
    "throughput_rps",
    "p50_ms",
    "p95_ms",
    "p99_ms",
    "max_ms",
    "error_rate",
    "rejection_rate",
}
_MAIN = """
import sys
from computewise.cli import app as cli
sys.argv = ["computewise", "loadtest", *sys.argv[1:]]
cli.main()
"""


def loadtest(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run(
        [sys.executable, "-c", _MAIN, *args], capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT
    )


@contextmanager
def serving(app: Starlette) -> Iterator[str]:
    """``app`` on a real uvicorn on 127.0.0.1 (a free port), for as long as the block runs: its base URL."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)


@contextmanager
def status_server(status: int) -> Iterator[str]:
    """An endpoint that answers every request with ``status``."""

    async def refuse(request: Request) -> JSONResponse:
        return JSONResponse({"error": "refused"}, status_code=status)

    with serving(Starlette(routes=[Route("/work", refuse, methods=["GET", "POST"])])) as base:
        yield f"{base}/work"


@contextmanager
def echo_server(delay_s: float) -> Iterator[tuple[str, list[object]]]:
    """An endpoint that sleeps ``delay_s`` and records the JSON bodies it got."""
    bodies: list[object] = []

    async def work(request: Request) -> JSONResponse:
        bodies.append(await request.json())
        await asyncio.sleep(delay_s)
        return JSONResponse({"outputs": [1]})

    with serving(Starlette(routes=[Route("/work", work, methods=["POST"])])) as base:
        yield f"{base}/work", bodies


@pytest.fixture
def payload(tmp_path: Path) -> Path:
    path = tmp_path / "payload.json"
    path.write_text(json.dumps([{"inputs": ["a"]}, {"inputs": ["b"]}]))
    return path


def test_json_report_of_one_run(payload: Path, json_schema: Callable[[object, str], None]) -> None:
    with echo_server(0.02) as (url, bodies):
        done = loadtest(url, "--rate", "30", "--duration", "1.5s", "--payload", str(payload), "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    json_schema(data, "loadtest")
    assert data["schema_version"] == 1 and read_loadtest(data) == LoadtestRun.from_dict(data)
    assert data.keys() >= FIELDS
    assert data["url"] == url and data["rate_rps"] == 30 and data["duration_s"] == 1.5
    assert data["sent"] > 20 and data["ok"] == data["sent"] == len(bodies)
    assert data["errors"] == 0 and data["error_rate"] == 0 and data["rejection_rate"] == 0
    assert 15 <= data["p50_ms"] <= data["p95_ms"] <= data["p99_ms"] <= data["max_ms"]
    assert {json.dumps(b) for b in bodies} == {'{"inputs": ["a"]}', '{"inputs": ["b"]}'}


def test_a_dead_port_prints_the_table_then_fails_with_exit_1() -> None:
    """A closed port on 127.0.0.1: every request is refused, which is a failed load test, not a result."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    done = loadtest(f"http://127.0.0.1:{port}/work", "--rate", "20", "--duration", "1s")
    assert done.returncode == 1, done.stderr
    assert "throughput" in done.stdout and "latency p99" in done.stdout and "connect" in done.stdout
    assert "error: no request succeeded" in done.stderr


def test_find_max_json_reaches_the_ceiling_of_a_fast_server(
    payload: Path, json_schema: Callable[[object, str], None]
) -> None:
    with echo_server(0.005) as (url, _bodies):
        done = loadtest(
            url,
            *("--find-max", "--slo-p99-ms", "500", "--rate", "10", "--max-rate", "40", "--duration", "1s"),
            *("--payload", str(payload), "--json"),
        )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    json_schema(data, "loadtest")
    search = read_loadtest(data)
    assert isinstance(search, MaxRateSearch) and search.to_dict() == data  # what plan serve reads, round trip
    assert data["max_rate_rps"] == 40 and data["slo_p99_ms"] == 500
    assert [p["rate_rps"] for p in data["probes"]] == [10, 20, 40]
    assert all(p["meets_slo"] and FIELDS - {"url"} <= p.keys() for p in data["probes"])
    assert data["best"]["rate_rps"] == 40
    assert "probe 40.0 rps" in done.stderr


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "does not exist"),
        ('{"inputs": [', "not valid JSON"),
        ("[1, 2]", "item 0 is not a JSON object"),
    ],
)
def test_bad_payload_file_exits_2_with_a_clear_message(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "payload.json"
    if content is not None:
        path.write_text(content)
    done = loadtest("http://127.0.0.1:9/work", "--payload", str(path), "--duration", "1s")
    assert done.returncode == 2, done.stderr
    stderr = " ".join(done.stderr.split())  # Rich wraps long lines
    assert stderr.startswith("error: --payload") and message in stderr and "To fix:" in stderr
    assert "Traceback" not in stderr and done.stdout == ""


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--find-max",), "--find-max needs --slo-p99-ms"),
        (("--rate", "0"), "--rate must be between 0.001 and 1e7 requests/s"),
        (("--duration", "soon"), "--duration"),
        (("--find-max", "--slo-p99-ms", "100", "--rate", "50", "--max-rate", "10"), "below --rate"),
        (("--max-rate", "5"), "--max-rate only applies to --find-max"),
        (("--repeat-ratio", "0.5"), "--repeat-ratio needs --payload"),
    ],
)
def test_bad_flags_exit_2(args: tuple[str, ...], message: str) -> None:
    done = loadtest("http://127.0.0.1:9/work", *args)
    assert done.returncode == 2 and message in " ".join(done.stderr.split()), done.stderr


@pytest.mark.parametrize(
    ("status", "fix"),
    [
        (401, "give the server's token with --token"),
        (404, "check the URL: the model name"),
        (400, "check the --payload bodies"),
    ],
)
def test_a_server_that_answers_every_request_with_an_error_gets_the_fix_for_its_status(status: int, fix: str) -> None:
    """The server is up (it answered): the message names the status seen and its fix, not "is it up?"."""
    with status_server(status) as url:
        done = loadtest(url, "--rate", "20", "--duration", "1s")
    stderr = " ".join(done.stderr.split())
    assert done.returncode == 1, done.stderr
    assert f"error: no request succeeded (http {status} x" in stderr
    assert f"To fix: HTTP {status}: {fix}" in stderr and "is the server up" not in stderr
