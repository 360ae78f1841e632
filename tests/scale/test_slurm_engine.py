"""``SlurmEngine`` submit, status, logs and cancel through stand-in Slurm commands that run the real batch script."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from slurm_standin import install

from computewise.scale.engine import JobHandle, JobSpec, JobStatus
from computewise.scale.slurm import SlurmEngine


@pytest.fixture
def slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SlurmEngine:
    install(tmp_path / "bin", tmp_path / "slurm-state")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{Path(sys.executable).parent}:/usr/bin:/bin")
    monkeypatch.chdir(tmp_path)  # sbatch writes the output file in the submit directory
    return SlurmEngine()


def _wait(engine: SlurmEngine, handle: JobHandle, wanted: tuple[JobStatus, ...], limit_s: float = 30) -> JobStatus:
    deadline = time.monotonic() + limit_s
    while (status := engine.status(handle)) not in wanted:
        assert time.monotonic() < deadline, f"job {handle.job_id} stayed {status}"
        time.sleep(0.1)
    return status


def test_a_job_runs_its_batch_script_and_its_output_is_read_back(slurm: SlurmEngine) -> None:
    spec = JobSpec(
        name="hello", command=(sys.executable, "-c", "import os; print('on', os.environ['COMPUTEWISE_RUN_NAME'])")
    )
    handle = slurm.submit(spec)
    assert handle.job_id.isdigit() and handle.engine == "slurm"
    assert _wait(slurm, handle, ("succeeded", "failed")) == "succeeded"
    assert "on hello" in slurm.logs(handle)


def test_a_failing_job_reads_as_failed(slurm: SlurmEngine) -> None:
    handle = slurm.submit(JobSpec(name="fails", command=(sys.executable, "-c", "raise SystemExit(3)")))
    assert _wait(slurm, handle, ("succeeded", "failed")) == "failed"


def test_cancel_stops_a_running_job(slurm: SlurmEngine) -> None:
    handle = slurm.submit(JobSpec(name="sleeper", command=(sys.executable, "-c", "import time; time.sleep(60)")))
    assert _wait(slurm, handle, ("running",)) == "running"
    slurm.cancel(handle)
    assert _wait(slurm, handle, ("stopped",)) == "stopped"


def test_an_unknown_job_is_a_clear_error(slurm: SlurmEngine) -> None:
    from computewise.errors import JobEngineError

    with pytest.raises(JobEngineError, match="Invalid job id"):
        slurm.status(JobHandle("slurm", "999999", "nope"))
