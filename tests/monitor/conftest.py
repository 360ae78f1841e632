"""Fixtures for the sampling runtime: a real SQLite ledger with one run, and real child processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from computewise.ledger import Ledger, NewRun, PriceSnapshot

SpawnPython = Callable[..., subprocess.Popen[bytes]]


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    opened = Ledger.open(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    yield opened
    opened.close()


@pytest.fixture
def run_id(ledger: Ledger) -> int:
    price = PriceSnapshot(hourly_usd=3.6, source="test", explanation="a round price for the tests", assumed=False)
    return ledger.start_run(
        NewRun(
            kind="command",
            command="python train.py",
            argv=("python", "train.py"),
            tags={},
            host="test-host",
            pid=os.getpid(),
            user="tester",
            cwd=str(Path.cwd()),
            started_at_s=time.time(),
            interval_s=1.0,
            price=price,
        )
    )


@pytest.fixture
def spawn_python() -> Iterator[SpawnPython]:
    """Start ``python -c CODE`` children; any still running at teardown is killed by its pid."""
    started: list[subprocess.Popen[bytes]] = []

    def spawn(code: str, *args: str, **kwargs: object) -> subprocess.Popen[bytes]:
        process = subprocess.Popen([sys.executable, "-c", code, *args], **kwargs)  # type: ignore[call-overload]
        started.append(process)
        return process

    yield spawn
    for process in started:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


WaitFor = Callable[..., None]


@pytest.fixture
def wait_for() -> WaitFor:
    """``wait_for(condition, what, timeout_s=20)``: poll until it holds (generous: this machine can be slow)."""

    def wait(condition: Callable[[], bool], what: str, timeout_s: float = 20.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
            time.sleep(0.02)

    return wait
