"""Alert delivery against a real HTTP server on 127.0.0.1 and real child processes; the caller never waits."""

from __future__ import annotations

import http.server
import io
import json
import os
import shlex
import socket
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from accounting_runs import NOW_S

from computewise.account.alerts import Alert, Notifier
from computewise.ledger import Ledger

HANG_LIMIT_S = 10.0  # a hanging handler gives up after this, so the test server always stops
NOTIFY_LIMIT_S = 0.25  # notify() only starts a thread: milliseconds, with room for a loaded CI machine


@dataclass
class Hook:
    """A webhook receiver: answers each POST with the next scripted reply (an HTTP status or "hang")."""

    replies: list[int | str]
    url: str = ""
    received: list[dict[str, Any]] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)


@pytest.fixture
def hook() -> Iterator[Hook]:
    state = Hook(replies=[])

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            state.received.append({"body": json.loads(body), "content_type": self.headers["Content-Type"]})
            reply = state.replies.pop(0) if state.replies else 200
            if reply == "hang":
                state.release.wait(HANG_LIMIT_S)
                reply = 200
            try:
                self.send_response(int(reply))
                self.end_headers()
                self.wfile.write(b"{}")
            except OSError:  # the client timed out and left
                pass

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    try:
        yield state
    finally:
        state.release.set()
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """urllib honours *_proxy variables; the test server is local and must be reached directly."""
    for name in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def sqlite_ledger(tmp_path: Path) -> Iterator[Ledger]:
    ledger = Ledger.open("sqlite:///" + str(tmp_path / "l.sqlite"))
    yield ledger
    ledger.close()


def _alert(ledger: Ledger | None, message: str = "budget team=nlp: $4,000 of $5,000 spent (80 %)") -> Alert:
    alert_id = None if ledger is None else ledger.record_alert(kind="budget", message=message, fired_at_s=NOW_S)
    return Alert(alert_id, "budget", message, NOW_S, scope="team=nlp", period="2025-03", threshold_pct=80.0)


def _delivery(ledger: Ledger, alert: Alert) -> dict[str, Any]:
    return next(a.delivery for a in ledger.alerts() if a.id == alert.alert_id)


def _timed_notify(notifier: Notifier, alert: Alert, **where: str) -> float:
    start = time.perf_counter()
    notifier.notify(alert, **where)
    return time.perf_counter() - start


def test_webhook_gets_the_alert_as_json_and_the_log_gets_a_line(sqlite_ledger: Ledger, hook: Hook) -> None:
    stream = io.StringIO()
    notifier = Notifier(sqlite_ledger, stream=stream)
    alert = _alert(sqlite_ledger)

    assert _timed_notify(notifier, alert, webhook_url=hook.url) < NOTIFY_LIMIT_S
    assert notifier.close(5.0)

    assert stream.getvalue() == f"computewise: alert: {alert.message}\n"
    [request] = hook.received
    assert request["content_type"] == "application/json"
    assert request["body"]["text"] == alert.message  # chat webhooks show it as is
    assert request["body"]["threshold_pct"] == 80.0 and request["body"]["scope"] == "team=nlp"
    webhook = _delivery(sqlite_ledger, alert)["webhook"]
    assert webhook["status"] == "delivered" and webhook["attempts"] == 1 and webhook["http_status"] == 200


def test_server_errors_are_retried_with_back_off(sqlite_ledger: Ledger, hook: Hook) -> None:
    hook.replies = [500, 503, 200]
    notifier = Notifier(sqlite_ledger, stream=io.StringIO(), backoff_s=0.05, seed=1)
    alert = _alert(sqlite_ledger)

    start = time.perf_counter()
    notifier.notify(alert, webhook_url=hook.url)
    assert notifier.close(5.0)
    elapsed_s = time.perf_counter() - start

    assert len(hook.received) == 3
    assert elapsed_s >= 0.5 * 0.05 + 0.5 * 0.10  # jittered back-off slept between the tries
    webhook = _delivery(sqlite_ledger, alert)["webhook"]
    assert webhook == {"status": "delivered", "attempts": 3, "http_status": 200, "errors": ["HTTP 500", "HTTP 503"]}


def test_client_errors_are_not_retried(sqlite_ledger: Ledger, hook: Hook) -> None:
    hook.replies = [404]
    notifier = Notifier(sqlite_ledger, stream=io.StringIO(), backoff_s=0.01)
    alert = _alert(sqlite_ledger)
    notifier.notify(alert, webhook_url=hook.url)
    assert notifier.close(5.0)
    assert len(hook.received) == 1
    assert _delivery(sqlite_ledger, alert)["webhook"]["status"] == "rejected"


def test_a_hanging_webhook_never_blocks_the_caller(sqlite_ledger: Ledger, hook: Hook) -> None:
    hook.replies = ["hang", "hang"]
    notifier = Notifier(sqlite_ledger, stream=io.StringIO(), timeout_s=0.4, attempts=2, backoff_s=0.01)
    alert = _alert(sqlite_ledger)

    assert _timed_notify(notifier, alert, webhook_url=hook.url) < NOTIFY_LIMIT_S
    start = time.perf_counter()
    assert not notifier.close(0.2)  # a bounded wait at exit, then give up
    assert time.perf_counter() - start < 0.6
    assert _delivery(sqlite_ledger, alert)["webhook"] == {"status": "pending"}

    assert notifier.close(5.0)  # each attempt times out after 0.4 s
    webhook = _delivery(sqlite_ledger, alert)["webhook"]
    assert webhook["status"] == "failed" and webhook["attempts"] == 2 and webhook["http_status"] is None
    assert all("timed out" in error for error in webhook["errors"])
    assert len(hook.received) == 2


def test_a_webhook_gets_its_total_time_and_no_more(sqlite_ledger: Ledger, hook: Hook) -> None:
    """Retries stop at ``total_timeout_s``, so a caller that waits at exit knows how long it may wait."""
    hook.replies = ["hang"] * 4
    notifier = Notifier(
        sqlite_ledger, stream=io.StringIO(), timeout_s=0.4, total_timeout_s=0.5, attempts=4, backoff_s=0.01
    )
    alert = _alert(sqlite_ledger)
    notifier.notify(alert, webhook_url=hook.url)
    assert notifier.close(5.0)  # four attempts of 0.4 s would need 1.6 s; the total cuts them at 0.5 s
    webhook = _delivery(sqlite_ledger, alert)["webhook"]
    assert webhook["status"] == "failed" and webhook["attempts"] < 4
    assert webhook["errors"][-1] == "gave up after 0.5 s in all"


def test_connection_refused_fails_after_every_attempt(sqlite_ledger: Ledger) -> None:
    with socket.socket() as probe:  # a port nobody listens on once the probe closes
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    notifier = Notifier(sqlite_ledger, stream=io.StringIO(), attempts=3, backoff_s=0.01)
    alert = _alert(sqlite_ledger)

    assert _timed_notify(notifier, alert, webhook_url=f"http://127.0.0.1:{port}/hook") < NOTIFY_LIMIT_S
    assert notifier.close(5.0)
    webhook = _delivery(sqlite_ledger, alert)["webhook"]
    assert webhook["status"] == "failed" and webhook["attempts"] == 3
    assert all("refused" in error.lower() for error in webhook["errors"])


def _script(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "on_alert.py"
    path.write_text("import json, os, sys, time\n" + body)
    return path


def test_command_gets_the_alert_on_stdin_and_in_the_environment(sqlite_ledger: Ledger, tmp_path: Path) -> None:
    out = tmp_path / "seen.json"
    script = _script(
        tmp_path,
        "payload = json.load(sys.stdin)\n"
        "env = {k: v for k, v in os.environ.items() if k.startswith('COMPUTEWISE_ALERT_')}\n"
        f"open({str(out)!r}, 'w').write(json.dumps({{'payload': payload, 'env': env}}))\n",
    )
    notifier = Notifier(sqlite_ledger, stream=io.StringIO())
    alert = _alert(sqlite_ledger)

    assert (
        _timed_notify(notifier, alert, command=f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}")
        < NOTIFY_LIMIT_S
    )
    assert notifier.close(10.0)

    seen = json.loads(out.read_text())
    assert seen["payload"]["message"] == alert.message and seen["payload"]["alert_id"] == alert.alert_id
    assert seen["env"]["COMPUTEWISE_ALERT_THRESHOLD_PCT"] == "80.0"
    assert seen["env"]["COMPUTEWISE_ALERT_SCOPE"] == "team=nlp"
    assert seen["env"]["COMPUTEWISE_ALERT_ID"] == str(alert.alert_id)
    assert _delivery(sqlite_ledger, alert)["command"] == {"status": "ok", "exit_code": 0, "stderr_tail": ""}


def test_a_command_past_its_time_limit_is_killed(sqlite_ledger: Ledger, tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    script = _script(tmp_path, f"open({str(pid_file)!r}, 'w').write(str(os.getpid()))\ntime.sleep(60)\n")
    notifier = Notifier(sqlite_ledger, stream=io.StringIO(), command_timeout_s=1.0)
    alert = _alert(sqlite_ledger)

    assert (
        _timed_notify(notifier, alert, command=f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}")
        < NOTIFY_LIMIT_S
    )
    assert notifier.close(10.0)

    assert _delivery(sqlite_ledger, alert)["command"] == {"status": "timeout", "timeout_s": 1.0}
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_failing_missing_and_disallowed_commands(sqlite_ledger: Ledger, tmp_path: Path) -> None:
    notifier = Notifier(sqlite_ledger, stream=io.StringIO())
    failing, missing = _alert(sqlite_ledger, "one"), _alert(sqlite_ledger, "two")
    notifier.notify(failing, command=f"{shlex.quote(sys.executable)} -c \"import sys; sys.exit('no route')\"")
    notifier.notify(missing, command="/nonexistent/computewise-hook --now")
    assert notifier.close(10.0)
    assert _delivery(sqlite_ledger, failing)["command"] == {
        "status": "failed",
        "exit_code": 1,
        "stderr_tail": "no route\n",
    }
    assert _delivery(sqlite_ledger, missing)["command"]["status"] == "failed"
    assert "FileNotFoundError" in _delivery(sqlite_ledger, missing)["command"]["error"]

    marker = tmp_path / "ran"
    guarded = Notifier(sqlite_ledger, stream=io.StringIO(), run_commands=False)
    alert = _alert(sqlite_ledger, "three")
    guarded.notify(alert, command=f"touch {shlex.quote(str(marker))}")
    assert guarded.close(1.0)
    assert _delivery(sqlite_ledger, alert) == {"log": "written", "command": {"status": "skipped"}}
    assert not marker.exists()


def test_without_a_ledger_alerts_are_still_logged_and_sent(hook: Hook) -> None:
    stream = io.StringIO()
    with Notifier(stream=stream) as notifier:
        notifier.notify(_alert(None, "idle GPUs for 30 min"), webhook_url=hook.url)
    assert stream.getvalue() == "computewise: alert: idle GPUs for 30 min\n"
    assert [r["body"]["alert_id"] for r in hook.received] == [None]
