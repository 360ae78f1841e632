"""A budget webhook that accepts and never answers must not hold up ``computewise run``'s exit.

The receiver is a real socket on 127.0.0.1 that accepts every connection and never says a word, the
way a hung proxy or a wedged chat server behaves. Before the fix a run over its budget waited for
four five-second attempts, cut at ten seconds; now its alerts get ``ALERT_DELIVERY_S`` in all.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from computewise.ledger import Ledger
from computewise.monitor.runner import ALERT_DELIVERY_S

CLI = [sys.executable, "-m", "computewise.cli.app"]
# What a dead webhook may add to a run: the delivery budget, the wait to record it, and ample room for
# a loaded two-core machine; the bug added about ten seconds.
EXTRA_LIMIT_S = ALERT_DELIVERY_S + 3.0


def _cli(*args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    # urllib honours *_proxy variables; the receiver is local and must be reached directly.
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    start = time.monotonic()
    result = subprocess.run(
        [*CLI, *args], capture_output=True, text=True, env={**env, "COMPUTEWISE_FAKE_GPU": ""}, timeout=120
    )
    return result, time.monotonic() - start


@pytest.fixture
def silent_webhook() -> Iterator[str]:
    """Accepts connections and holds them open without reading or answering."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except TimeoutError:
                continue
            except OSError:
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}/hook"
    finally:
        stop.set()
        thread.join(5)
        for connection in held:
            connection.close()
        server.close()


def test_a_silent_budget_webhook_adds_at_most_seconds_to_the_run(tmp_path: Path, silent_webhook: str) -> None:
    db = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    job = ("--hourly-usd", "100", "--", sys.executable, "-c", "import time; time.sleep(1)")
    # The same run with no budget to alert, timed on this machine now, so start-up cost cancels out.
    baseline, baseline_s = _cli("run", "--db", db, "--tag", "team=cv", *job)
    assert baseline.returncode == 0, baseline.stderr
    budget, _ = _cli(
        "budget", "set", "--db", db, "--scope", "team=nlp", "--monthly-usd", "0.01", "--webhook", silent_webhook
    )
    assert budget.returncode == 0, budget.stderr

    over, over_s = _cli("run", "--db", db, "--tag", "team=nlp", *job)

    assert over.returncode == 0, over.stderr
    assert "alert: budget team=nlp" in over.stderr
    assert over_s - baseline_s < EXTRA_LIMIT_S, (baseline_s, over_s)
    ledger = Ledger.open(db)
    try:
        alerts = ledger.alerts()
    finally:
        ledger.close()
    assert alerts and all(alert.kind == "budget" and "webhook" in alert.delivery for alert in alerts)
