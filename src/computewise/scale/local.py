"""The default engine: the job as a detached child process on this machine (torchrun for several), its output
in a log file.

Small on purpose: it is what a single machine needs and what tests and ``--dry-run`` users compare
the other engines against. A job lives in ``STATE_DIR/<job id>/``: ``log`` (stdout and stderr),
``pid``, and ``exit_code`` written by a tiny wrapper when the command ends, so status survives the
submitting process (which is not the child's parent any more after it exits).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shlex
import signal
import subprocess
import sys
from pathlib import Path

from computewise.errors import JobEngineError
from computewise.scale.engine import PREEMPTED_EXIT_CODE, JobExit, JobHandle, JobSpec, JobStatus

__all__ = ["LocalEngine", "default_state_dir"]

# Runs the command, then records its exit code (minus the signal number when a signal killed it).
# The wrapper outlives a cancel's SIGTERM to record the code: a handler, not SIG_IGN, so the
# command (after exec) still gets the default SIGTERM behaviour.
_WRAPPER = (
    "import os, signal, subprocess, sys\n"
    "signal.signal(signal.SIGTERM, lambda signum, frame: None)\n"
    "code = subprocess.call(sys.argv[2:])\n"
    "open(sys.argv[1] + '.tmp', 'w').write(str(code))\n"
    "os.replace(sys.argv[1] + '.tmp', sys.argv[1])\n"
)

# Children this process started: polled so that finished ones are reaped, not left as zombies.
_ORPHANS: list[subprocess.Popen[bytes]] = []


def default_state_dir() -> Path:
    """Where local jobs keep their logs: $COMPUTEWISE_HOME/jobs, else ~/.computewise/jobs."""
    return Path(os.environ.get("COMPUTEWISE_HOME", Path.home() / ".computewise")) / "jobs"


class LocalEngine:
    """Starts each job in its own session (so cancel reaches the whole process group), detached from us."""

    name = "local"

    def __init__(self, state_dir: Path | None = None) -> None:
        self.state_dir = state_dir if state_dir is not None else default_state_dir()

    def _dir(self, handle: JobHandle) -> Path:
        job_dir = self.state_dir / handle.job_id
        if not job_dir.is_dir():
            raise JobEngineError(f"no local job {handle.job_id!r} in {self.state_dir}", "check the job id")
        return job_dir

    def submit(self, spec: JobSpec) -> JobHandle:
        job_id = f"{spec.name}-{secrets.token_hex(3)}"
        job_dir = self.state_dir / job_id
        job_dir.mkdir(parents=True)
        env = {**os.environ, "COMPUTEWISE_RUN_NAME": spec.name, **spec.env}
        if spec.checkpoint_uri is not None:
            env["COMPUTEWISE_CHECKPOINT_URI"] = spec.checkpoint_uri
        command = spec.launch(python=sys.executable)
        (job_dir / "command").write_text(shlex.join(command) + "\n", encoding="utf-8")
        with open(job_dir / "log", "ab") as log:
            try:
                child = subprocess.Popen(
                    [sys.executable, "-c", _WRAPPER, str(job_dir / "exit_code"), *command],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                )
            except OSError as error:
                raise JobEngineError(f"cannot start {spec.command[0]!r}: {error}", "check the command") from error
        (job_dir / "pid").write_text(str(child.pid), encoding="utf-8")
        _ORPHANS.append(child)
        return JobHandle(self.name, job_id, spec.name)

    def status(self, handle: JobHandle) -> JobStatus:
        job_dir = self._dir(handle)
        _ORPHANS[:] = [child for child in _ORPHANS if child.poll() is None]
        exit_file = job_dir / "exit_code"
        if exit_file.exists():
            code = int(exit_file.read_text(encoding="utf-8"))
            if (job_dir / "cancelled").exists():
                return "stopped"
            if code == 0:
                return "succeeded"
            # Preempted after saving: nothing restarts a local job, but it did not fail either.
            return "stopped" if code == PREEMPTED_EXIT_CODE else "failed"
        if _alive(int((job_dir / "pid").read_text(encoding="utf-8"))):
            return "running"
        return "stopped" if (job_dir / "cancelled").exists() else "failed"

    def job_exit(self, handle: JobHandle) -> JobExit:
        """The exit code the wrapper wrote; start and end are when the pid and exit-code files were written."""
        job_dir = self._dir(handle)
        exit_file = job_dir / "exit_code"
        started_at_s = (job_dir / "pid").stat().st_mtime
        if not exit_file.exists():
            return JobExit(None, started_at_s, None)
        return JobExit(int(exit_file.read_text(encoding="utf-8")), started_at_s, exit_file.stat().st_mtime)

    def logs(self, handle: JobHandle) -> str:
        return (self._dir(handle) / "log").read_text(encoding="utf-8", errors="replace")

    def cancel(self, handle: JobHandle) -> None:
        job_dir = self._dir(handle)
        (job_dir / "cancelled").touch()
        pid = int((job_dir / "pid").read_text(encoding="utf-8"))
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGTERM)  # the job's own session: the wrapper and the command, not us


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
