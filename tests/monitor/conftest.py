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

from computewise.ledger import Ledger, NewRun

SpawnPython = Callable[..., subprocess.Popen[bytes]]


@pytest.fixture
def sqlite_ledger(tmp_path: Path) -> Iterator[Ledger]:
    """A real SQLite ledger (the sampler's tests need one backend, not the root ``ledger``'s two)."""
    opened = Ledger.open(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    yield opened
    opened.close()


@pytest.fixture
def run_id(sqlite_ledger: Ledger, new_run: Callable[..., NewRun]) -> int:
    """A run started in ``sqlite_ledger``, for samples to belong to."""
    return sqlite_ledger.start_run(new_run())


@pytest.fixture
def spawn_python() -> Iterator[SpawnPython]:
    """Start ``python -c CODE`` children; any still running at teardown is killed by its pid."""
    started: list[subprocess.Popen[bytes]] = []

    def spawn(code: str, *args: str) -> subprocess.Popen[bytes]:
        process = subprocess.Popen([sys.executable, "-c", code, *args])
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
