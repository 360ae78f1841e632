"""The local engine with real child processes: submit, status, logs, cancel by process group."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from computewise.errors import InputError, JobEngineError
from computewise.scale.engine import JobEngine, JobHandle, JobSpec, JobStatus
from computewise.scale.local import LocalEngine


def wait_for(engine: LocalEngine, handle: JobHandle, wanted: set[JobStatus], timeout_s: float = 20) -> JobStatus:
    deadline = time.monotonic() + timeout_s
    while (status := engine.status(handle)) not in wanted:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{handle.job_id} still {status}")
        time.sleep(0.05)
    return status


def test_submit_runs_the_command_with_its_env_and_keeps_the_log(tmp_path: Path) -> None:
    engine = LocalEngine(tmp_path / "jobs")
    assert isinstance(engine, JobEngine)
    code = "import os; print('hello', os.environ['COMPUTEWISE_RUN_NAME'], os.environ['EXTRA'])"
    spec = JobSpec(name="hello-1", command=(sys.executable, "-c", code), env={"EXTRA": "x y"})
    handle = engine.submit(spec)
    assert handle.engine == "local" and handle.name == "hello-1" and handle.job_id.startswith("hello-1-")
    assert wait_for(engine, handle, {"succeeded", "failed"}) == "succeeded"
    assert engine.logs(handle) == "hello hello-1 x y\n"


def test_failure_and_preemption_exit_codes(tmp_path: Path) -> None:
    engine = LocalEngine(tmp_path / "jobs")
    failing = engine.submit(JobSpec(name="fail", command=(sys.executable, "-c", "raise SystemExit(3)")))
    preempted = engine.submit(JobSpec(name="preempt", command=(sys.executable, "-c", "raise SystemExit(75)")))
    assert wait_for(engine, failing, {"succeeded", "failed", "stopped"}) == "failed"
    assert wait_for(engine, preempted, {"succeeded", "failed", "stopped"}) == "stopped"


def test_cancel_terminates_the_whole_process_group(tmp_path: Path) -> None:
    engine = LocalEngine(tmp_path / "jobs")
    pid_file = tmp_path / "grandchild.pid"
    # The job starts a grandchild: cancel must reach it too, not only the direct child.
    code = (
        "import subprocess, sys, time\n"
        f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(p.pid))\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    handle = engine.submit(JobSpec(name="sleeper", command=(sys.executable, "-c", code)))
    deadline = time.monotonic() + 20
    while "ready" not in engine.logs(handle):
        assert time.monotonic() < deadline, engine.logs(handle)
        time.sleep(0.05)
    assert engine.status(handle) == "running"
    grandchild = int(pid_file.read_text(encoding="utf-8"))
    engine.cancel(handle)
    assert wait_for(engine, handle, {"stopped", "failed", "succeeded"}) == "stopped"
    deadline = time.monotonic() + 10
    while _alive(grandchild):
        assert time.monotonic() < deadline, "the grandchild survived cancel"
        time.sleep(0.05)
    engine.cancel(handle)  # cancelling a finished job is harmless


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    return not (status.exists() and "State:\tZ" in status.read_text(encoding="utf-8"))


def test_unknown_job_and_missing_program(tmp_path: Path) -> None:
    engine = LocalEngine(tmp_path / "jobs")
    with pytest.raises(JobEngineError, match="no local job"):
        engine.status(JobHandle("local", "nope-123", "nope"))
    handle = engine.submit(JobSpec(name="missing", command=("/no/such/program",)))
    assert wait_for(engine, handle, {"failed", "succeeded"}) == "failed"
    assert "No such file" in engine.logs(handle)


def test_several_processes_run_under_torchrun(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="torchrun comes with torch: pip install 'computewise[torch]'")
    out = tmp_path / "ranks"
    out.mkdir()
    code = "import os, sys; open(os.path.join(sys.argv[1], os.environ['RANK']), 'w').write(os.environ['WORLD_SIZE'])"
    engine = LocalEngine(tmp_path / "jobs")
    handle = engine.submit(JobSpec(name="two-ranks", command=(sys.executable, "-c", code, str(out)), processes=2))
    assert wait_for(engine, handle, {"succeeded", "failed"}, timeout_s=60) == "succeeded", engine.logs(handle)
    assert {path.name: path.read_text() for path in out.iterdir()} == {"0": "2", "1": "2"}


def test_zero_processes_is_refused() -> None:
    with pytest.raises(InputError, match="processes must be >= 1"):
        JobSpec(name="none", command=("true",), processes=0)
