"""A job that ``monitored_run`` started is never left running when watching it fails.

Before the fix, an error after ``Child.start`` (the Prometheus port, the sampler) left the job running
unwatched while the run was closed as failed, exit 1. The failure is injected where the watch starts;
the job is a real child process and the ledger a real SQLite file.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import psutil
import pytest

from computewise.catalog import Catalog
from computewise.estimate.quote import PriceRequest
from computewise.ledger import Ledger
from computewise.monitor import runner
from computewise.monitor.gpu import open_gpu_source
from computewise.monitor.runner import RunOptions, monitored_run

# Ignores SIGTERM, says so through a file, then sleeps far longer than any test may take.
STUBBORN = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "open(sys.argv[1], 'w').close()\n"
    "time.sleep(600)\n"
)


def _live_children() -> set[int]:
    """Our child processes still running (a zombie has ended; ``Child.wait`` reaps it)."""
    return {p.pid for p in psutil.Process().children() if p.status() != psutil.STATUS_ZOMBIE}


@pytest.fixture
def leftovers() -> Iterator[set[int]]:
    """Children alive before the test; any new one still alive after it is killed by its pid."""
    before = _live_children()
    yield before
    for pid in _live_children() - before:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def _watch_fails_once(ready: Path | None = None) -> object:
    """A ``Watch`` that cannot start: raises once ``ready`` exists (the job is set up), or at once."""

    def failing(*args: object, **kwargs: object) -> NoReturn:
        deadline = time.monotonic() + 60.0
        while ready is not None and not ready.exists():
            if time.monotonic() > deadline:
                raise AssertionError("the job never became ready")
            time.sleep(0.02)
        raise RuntimeError("the sampler could not start")

    return failing


def _run(ledger: Ledger, catalog: Catalog, argv: tuple[str, ...]) -> None:
    options = RunOptions(argv=argv, price=PriceRequest(hourly_usd=1.0), child_stdout_to_stderr=True)
    gpu = open_gpu_source({})
    try:
        monitored_run(ledger, catalog, gpu, options)
    finally:
        gpu.close()


def test_a_failed_watch_stops_the_job_and_closes_the_run(
    sqlite_ledger: Ledger, catalog: Catalog, leftovers: set[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runner, "Watch", _watch_fails_once())
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="the sampler could not start"):
        _run(sqlite_ledger, catalog, (sys.executable, "-c", "import time; time.sleep(600)"))
    assert _live_children() <= leftovers, "the job was left running unwatched"
    assert time.monotonic() - started < 60.0
    [run] = sqlite_ledger.runs()
    assert run.status == "failed" and "the sampler could not start" in (run.error or "")


def test_a_job_that_ignores_sigterm_is_killed_after_the_grace(
    sqlite_ledger: Ledger,
    catalog: Catalog,
    leftovers: set[int],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    ready = tmp_path / "ignoring-sigterm"
    monkeypatch.setattr(runner, "STOP_GRACE_S", 0.5)
    monkeypatch.setattr(runner, "Watch", _watch_fails_once(ready))
    with pytest.raises(RuntimeError, match="the sampler could not start"):
        _run(sqlite_ledger, catalog, (sys.executable, "-c", STUBBORN, str(ready)))
    assert _live_children() <= leftovers, "a job that ignores SIGTERM was left running"
    [run] = sqlite_ledger.runs()
    assert run.status == "failed"
