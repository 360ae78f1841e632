"""What ``computewise run`` promises a newcomer, checked from outside with real processes.

The job's memory is the job's (never the monitor's), the diagnosis agrees with the figures printed,
no command is an error line (exit 2), repeated Ctrl-C escalates to SIGTERM then SIGKILL and says so,
and ``--json`` leaves exactly one JSON object on stdout, for ``run`` and for every other verb.
Signals go only to processes these tests start; waits poll for state with generous bounds.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from computewise.ledger import Ledger

CLI = [sys.executable, "-m", "computewise.cli.app"]
MIB = 1 << 20
PATIENCE_S = 60.0  # a loaded 2-core machine can be slow; no test here sleeps a fixed time


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COMPUTEWISE_FAKE_GPU": ""}
    return subprocess.run([*CLI, *args], capture_output=True, text=True, env=env, timeout=timeout)


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'ledger.sqlite'}"


def test_peak_memory_of_sleep_is_sleeps_not_the_monitors(db: str) -> None:
    """`sleep` resides in a couple of MiB; the monitor, a Python process with SQLAlchemy, in ~70 MiB."""
    result = cli("run", "--db", db, "--json", "--no-live", "--", "sleep", "1.5")
    assert result.returncode == 0, result.stderr
    peak_bytes = json.loads(result.stdout)["utilization"]["peak_rss_bytes"]
    assert 0 < peak_bytes < 16 * MIB, peak_bytes


def test_peak_memory_of_a_short_big_job_is_counted(db: str) -> None:
    """200 MiB touched and freed within one sampling interval: the kernel's peak (wait4) still has it."""
    code = "b = b'x' * (200 * 1024 * 1024); del b"
    result = cli("run", "--db", db, "--json", "--no-live", "--interval", "5s", "--", sys.executable, "-c", code)
    assert result.returncode == 0, result.stderr
    peak_bytes = json.loads(result.stdout)["utilization"]["peak_rss_bytes"]
    assert 200 * MIB <= peak_bytes < 300 * MIB, peak_bytes


def test_a_big_parent_does_not_hide_the_jobs_peak(db: str) -> None:
    """Started from a process holding 600 MiB (a notebook, a test worker): Linux hands that peak to the
    monitor across exec, and a 200 MiB job below it must still be counted (it once read 6.6 MiB)."""
    job = [sys.executable, "-c", "b = b'x' * (200 * 1024 * 1024); del b"]
    monitor = [*CLI, "run", "--db", db, "--json", "--no-live", "--interval", "5s", "--", *job]
    parent = f"import subprocess, sys\nheld = b'x' * (600 << 20)\nsys.exit(subprocess.run({monitor!r}).returncode)"
    env = {**os.environ, "COMPUTEWISE_FAKE_GPU": ""}
    result = subprocess.run([sys.executable, "-c", parent], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    peak_bytes = json.loads(result.stdout)["utilization"]["peak_rss_bytes"]
    assert 200 * MIB <= peak_bytes < 300 * MIB, peak_bytes


def test_a_sleeping_python_job_is_diagnosed_as_waiting_with_the_printed_cpu(db: str) -> None:
    result = cli(
        "run", "--db", db, "--json", "--no-live", "--interval", "0.5s", "--",
        sys.executable, "-c", "import time; time.sleep(3)",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    [finding] = data["diagnosis"]
    assert finding["verdict"] == "mostly waiting", finding
    printed = data["utilization"]["cpu_percent"]["mean"]
    assert printed < 30  # an interpreter's start-up and exit, spread over 3 s
    assert f"used {printed:.0f} % CPU" in finding["evidence"]


@pytest.mark.parametrize("extra", [[], ["--tag", "team=nlp"], ["--"]])
def test_no_command_is_an_error_line_and_exit_2(db: str, extra: list[str]) -> None:
    result = cli("run", "--db", db, *extra)
    assert result.returncode == 2
    assert result.stderr.startswith("error: no command to run"), result.stderr
    assert "To fix:" in result.stderr and "computewise run -- python train.py" in result.stderr
    assert "Usage:" not in result.stderr + result.stdout and result.stdout == ""


def test_json_stdout_holds_the_report_only_and_the_jobs_output_goes_to_stderr(db: str) -> None:
    code = "import sys; print('hello'); print('to-stderr', file=sys.stderr)"
    result = cli("run", "--db", db, "--json", "--no-live", "--", sys.executable, "-c", code)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)  # the whole of stdout: one object, nothing before or after
    assert isinstance(data, dict) and data["child_stdout"] == "stderr"
    assert "hello" in result.stderr and "to-stderr" in result.stderr


def test_json_of_a_command_that_cannot_start_is_the_failed_run(db: str) -> None:
    result = cli("run", "--db", db, "--json", "--no-live", "--", "no-such-program-xyz")
    assert result.returncode == 127
    data = json.loads(result.stdout)
    assert data["run"]["status"] == "failed" and data["run"]["exit_code"] == 127
    assert "command not found" in result.stderr


@pytest.fixture(scope="module")
def recorded_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A ledger holding one recorded run, for the verbs that read one."""
    url = f"sqlite:///{tmp_path_factory.mktemp('recorded') / 'ledger.sqlite'}"
    recorded = cli("run", "--db", url, "--no-live", "--tag", "team=nlp", "--", "true")
    assert recorded.returncode == 0, recorded.stderr
    return url


@pytest.mark.parametrize(
    "args",
    [
        ["estimate", "train", "--model", "llama-3-8b", "--gpu", "h100", "--gpus", "8", "--tokens", "10B"],
        ["estimate", "comm", "--gpu", "h100", "--gpus", "64", "--op", "all-reduce", "--bytes", "1GiB"],
        ["plan", "compare-onprem", "--gpu", "h100"],
        ["catalog", "validate"],
        ["runs"],
        ["cost", "report", "--by", "team"],
        ["cost", "anomalies"],
        ["budget", "set", "--scope", "team=nlp", "--monthly-usd", "5000"],
        ["budget", "status"],
        ["submit", "--engine", "slurm", "--name", "x", "--gpus", "1", "--dry-run", "--", "python", "train.py"],
    ],
    ids=lambda args: " ".join(args[:2]),
)
def test_every_verb_with_json_prints_exactly_one_object(recorded_db: str, args: list[str]) -> None:
    split = args.index("--") if "--" in args else len(args)
    ledger = ["--db", recorded_db] if args[0] in {"runs", "cost", "budget"} else []
    result = cli(*args[:split], "--json", *ledger, *args[split:])
    assert result.returncode == 0, result.stderr
    assert isinstance(json.loads(result.stdout), dict), result.stdout[:200]


# A job that says it is ready once its handlers are in place, then ignores SIGINT (and, if asked, SIGTERM).
STUBBORN = """
import signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
if sys.argv[2] == "ignore-term":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
open(sys.argv[1], "w").close()
time.sleep(600)
"""


class _Lines:
    """Collects a pipe's lines on a thread, so a test can wait for one without blocking on the pipe."""

    def __init__(self, stream: object) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: object) -> None:
        for line in stream:  # type: ignore[attr-defined]
            self.lines.append(line)

    def wait_for(self, text: str, timeout_s: float = PATIENCE_S) -> str:
        return _poll(lambda: next((line for line in self.lines if text in line), None), timeout_s, text)


def _poll(probe: Callable[[], str | None], timeout_s: float, what: str) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = probe()
        if found is not None:
            return found
        time.sleep(0.05)
    raise AssertionError(f"not seen within {timeout_s:.0f} s: {what}")


@pytest.mark.parametrize(("mode", "exit_code"), [("ignore-term", 128 + 9), ("obey-term", 128 + 15)])
def test_repeated_sigint_escalates_to_sigterm_then_sigkill(db: str, tmp_path: Path, mode: str, exit_code: int) -> None:
    ready = tmp_path / "ready"
    proc = subprocess.Popen(
        [*CLI, "run", "--db", db, "--no-live", "--", sys.executable, "-c", STUBBORN, str(ready), mode],
        env={**os.environ, "COMPUTEWISE_FAKE_GPU": ""},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # no terminal: our SIGINT is what a Ctrl-C on the monitor looks like
    )
    try:
        stderr = _Lines(proc.stderr)
        _poll(lambda: "ready" if ready.exists() else None, PATIENCE_S, "the job's ready file")
        proc.send_signal(signal.SIGINT)
        stderr.wait_for("press Ctrl-C again to send it SIGTERM")
        assert proc.poll() is None  # the job ignores SIGINT, and the monitor waits for the job
        proc.send_signal(signal.SIGINT)
        stderr.wait_for("sent SIGTERM to the job")
        if mode == "ignore-term":
            assert proc.poll() is None
            proc.send_signal(signal.SIGINT)
            stderr.wait_for("sent SIGKILL to the job")
        assert proc.wait(timeout=PATIENCE_S) == exit_code
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    [run] = Ledger.open(db).runs()
    assert run.status == "interrupted" and run.exit_code == exit_code
