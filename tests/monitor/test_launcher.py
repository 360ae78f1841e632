"""The launcher with real commands: exit codes, signal forwarding, commands that cannot start.

Signals are only ever sent to processes these tests start: a driver process runs the launcher (as
``computewise run`` would) so that the pytest process itself is never signalled.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from computewise.errors import CommandNotExecutableError, CommandNotFoundError, ComputewiseError, InputError
from computewise.monitor.launcher import Child

WaitFor = Callable[..., None]

DRIVER = """
import json, os, signal, sys
from computewise.monitor.launcher import Child, SignalForwarder
with SignalForwarder() as forwarder:
    if os.environ.get("SIGNAL_BEFORE_START"):
        os.kill(os.getpid(), signal.SIGUSR1)  # arrives before the child exists: held, then delivered
    child = Child.start(sys.argv[1:])
    forwarder.attach(child)
    ended = child.wait()
print(json.dumps({"exit_code": ended.exit_code, "returncode": ended.returncode,
                  "signalled_by": ended.signalled_by, "status": ended.status, "cpu_s": ended.usage.cpu_s}))
sys.exit(ended.exit_code)
"""

# A job that says it is ready once its handlers are in place, then waits to be signalled.
TRAPPER = """
import os, signal, sys, time
def on_term(signum, frame):
    sys.exit(42)
def on_usr1(signum, frame):
    open(sys.argv[2], "w").write("usr1")
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
signal.signal(signal.SIGUSR1, on_usr1)
open(sys.argv[1], "w").close()
time.sleep(60)
"""


def _driver(tmp_path: Path, argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    return subprocess.Popen(
        [sys.executable, str(script), *argv],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,  # no controlling terminal: keyboard signals are forwarded, as in a script
        env={**os.environ, **(env or {})},
    )


def _finish(driver: subprocess.Popen[str]) -> tuple[int, dict[str, object]]:
    try:
        out, _ = driver.communicate(timeout=30)
    finally:
        if driver.poll() is None:
            os.kill(driver.pid, signal.SIGKILL)
    return driver.returncode, json.loads(out.strip().splitlines()[-1])


@pytest.mark.parametrize("code", [0, 3])
def test_exit_code_is_propagated(code: int) -> None:
    ended = Child.start([sys.executable, "-c", f"import sys; sys.exit({code})"]).wait()
    assert (ended.exit_code, ended.returncode, ended.signalled_by) == (code, code, None)
    assert ended.status == ("succeeded" if code == 0 else "failed")


def test_killed_by_a_signal_exits_like_a_shell() -> None:
    ended = Child.start([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"]).wait()
    assert (ended.returncode, ended.exit_code, ended.status) == (-9, 137, "failed")


def test_wait_reports_the_jobs_cpu_from_wait4() -> None:
    child = Child.start(
        [sys.executable, "-c", "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass"]
    )
    assert child.wait().usage.cpu_s >= 0.3


def test_sigterm_is_forwarded_and_the_run_counts_as_interrupted(tmp_path: Path, wait_for: WaitFor) -> None:
    ready, marker = tmp_path / "ready", tmp_path / "usr1"
    driver = _driver(tmp_path, [sys.executable, "-c", TRAPPER, str(ready), str(marker)])
    wait_for(ready.exists, "the job's handlers")
    os.kill(driver.pid, signal.SIGTERM)  # the driver is ours: only it and its child are signalled
    code, result = _finish(driver)
    assert code == 42  # the job's own exit code, from its SIGTERM handler
    assert (result["exit_code"], result["signalled_by"], result["status"]) == (42, signal.SIGTERM, "interrupted")


def test_sigusr1_is_forwarded(tmp_path: Path, wait_for: WaitFor) -> None:
    ready, marker = tmp_path / "ready", tmp_path / "usr1"
    driver = _driver(tmp_path, [sys.executable, "-c", TRAPPER, str(ready), str(marker)])
    wait_for(ready.exists, "the job's handlers")
    os.kill(driver.pid, signal.SIGUSR1)
    code, result = _finish(driver)
    assert (code, result["status"], result["signalled_by"]) == (0, "succeeded", signal.SIGUSR1)
    assert marker.read_text() == "usr1"


def test_sigint_without_a_terminal_is_forwarded(tmp_path: Path, wait_for: WaitFor) -> None:
    ready = tmp_path / "ready"
    job = f"open({str(ready)!r}, 'w').close()\nimport time\ntime.sleep(60)"
    driver = _driver(tmp_path, [sys.executable, "-c", job])
    wait_for(ready.exists, "the job to start")
    os.kill(driver.pid, signal.SIGINT)
    code, result = _finish(driver)
    # Python dies of an unhandled KeyboardInterrupt by re-raising SIGINT: 128 + 2, like a shell.
    assert (code, result["returncode"], result["status"]) == (130, -signal.SIGINT, "interrupted")


def test_a_signal_before_the_child_exists_is_delivered_once_it_does(tmp_path: Path) -> None:
    driver = _driver(tmp_path, [sys.executable, "-c", "import time\ntime.sleep(60)"], {"SIGNAL_BEFORE_START": "1"})
    code, result = _finish(driver)
    assert (code, result["returncode"]) == (128 + signal.SIGUSR1, -signal.SIGUSR1)  # default action: terminate


def test_send_signal_after_exit_sends_nothing() -> None:
    child = Child.start([sys.executable, "-c", "pass"])
    child.wait()
    assert not child.send_signal(signal.SIGTERM)
    assert child.signals == (signal.SIGTERM,)


def test_command_not_found_maps_to_127(tmp_path: Path) -> None:
    with pytest.raises(CommandNotFoundError, match="command not found: no-such-program-xyz") as caught:
        Child.start(["no-such-program-xyz", "--flag"])
    assert caught.value.exit_code == 127 and caught.value.hint
    assert isinstance(caught.value, ComputewiseError)


def test_not_executable_maps_to_126(tmp_path: Path) -> None:
    script = tmp_path / "train.sh"
    script.write_text("echo hi\n")
    with pytest.raises(CommandNotExecutableError, match="permission denied") as caught:
        Child.start([str(script)])
    assert caught.value.exit_code == 126 and "chmod +x" in str(caught.value)
    script.chmod(0o755)  # executable but no #! line: the kernel refuses it (ENOEXEC)
    with pytest.raises(CommandNotExecutableError, match="#!"):
        Child.start([str(script)])
    with pytest.raises(CommandNotExecutableError):
        Child.start([str(tmp_path)])  # a directory


def test_no_command_or_a_missing_directory_are_input_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no command"):
        Child.start([])
    with pytest.raises(InputError, match="no such directory"):
        Child.start([sys.executable, "-c", "pass"], cwd=tmp_path / "missing")
