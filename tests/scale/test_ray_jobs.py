"""The Ray Jobs engine against a real local Ray cluster (2 CPUs, no GPU) started by ``ray_cluster``."""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("ray.job_submission", reason="the Ray tests need the ray extra: pip install 'computewise[ray]'")

from computewise.errors import InputError, JobEngineError
from computewise.scale.engine import JobEngine, JobHandle, JobSpec, JobStatus, Resources
from computewise.scale.ray_jobs import (
    RayJobsEngine,
    ray_accelerator_type,
    ray_device_resource,
    submit_while_agent_starts,
)
from computewise.train.memory_cap import GPU_MEMORY_FRACTION_ENV, apply_gpu_memory_cap, fraction_memory_cap

# One Ray cluster per xdist worker: every Ray test runs on the same worker (make test uses --dist loadgroup).
pytestmark = pytest.mark.xdist_group("ray")

_TERMINAL: tuple[JobStatus, ...] = ("succeeded", "failed", "stopped")


def _wait_for(engine: RayJobsEngine, handle: JobHandle, wanted: tuple[JobStatus, ...], limit_s: float = 60) -> str:
    deadline = time.monotonic() + limit_s
    status = engine.status(handle)
    while status not in wanted and time.monotonic() < deadline:
        time.sleep(0.25)
        status = engine.status(handle)
    return status


def _submitted_run_names(engine: RayJobsEngine) -> set[str]:
    from ray.job_submission import JobSubmissionClient

    jobs = JobSubmissionClient(engine.address).list_jobs()
    return {(job.metadata or {}).get("computewise_run_name", "") for job in jobs}


@pytest.fixture(scope="module")
def engine(ray_cluster: object) -> RayJobsEngine:
    return RayJobsEngine(ray_cluster.address)  # type: ignore[attr-defined]


def test_job_runs_to_success_with_logs_env_and_metadata(engine: RayJobsEngine, tmp_path: Path) -> None:
    marker = tmp_path / "done.txt"
    script = (
        "import os, pathlib, sys; "
        "print('hello from ray', os.environ['COMPUTEWISE_RUN_NAME'], os.environ['COMPUTEWISE_CHECKPOINT_URI']); "
        "pathlib.Path(sys.argv[1]).write_text('done')"
    )
    spec = JobSpec(
        name="ray-hello",
        command=(sys.executable, "-c", script, str(marker)),
        resources=Resources(cpus=1, memory_bytes=50_000_000),
        tags={"team": "ml"},
        checkpoint_uri=str(tmp_path / "ckpt"),
        hourly_usd=2.5,
    )
    assert isinstance(engine, JobEngine)
    handle = engine.submit(spec)
    assert handle.engine == "ray"
    assert handle.name == "ray-hello"
    assert handle.job_id.startswith("ray-hello-")
    assert _wait_for(engine, handle, _TERMINAL) == "succeeded", engine.logs(handle)
    assert f"hello from ray ray-hello {tmp_path / 'ckpt'}" in engine.logs(handle)
    assert marker.read_text() == "done"
    metadata = engine.metadata(handle)
    assert metadata["computewise_run_name"] == "ray-hello"
    assert metadata["computewise_tag_team"] == "ml"
    assert metadata["computewise_hourly_usd"] == "2.5"
    # The same stable name submits again as a new Ray job: a resubmission after preemption.
    again = engine.submit(spec)
    assert again.job_id != handle.job_id
    assert _wait_for(engine, again, _TERMINAL) == "succeeded"


def test_failing_job_reads_failed(engine: RayJobsEngine) -> None:
    spec = JobSpec(name="ray-fails", command=(sys.executable, "-c", "raise SystemExit(3)"))
    handle = engine.submit(spec)
    assert _wait_for(engine, handle, _TERMINAL) == "failed"


def test_cancel_stops_a_sleeping_job(engine: RayJobsEngine) -> None:
    spec = JobSpec(
        name="ray-sleeper",
        command=(sys.executable, "-c", "import time; print('sleeping', flush=True); time.sleep(120)"),
    )
    handle = engine.submit(spec)
    assert _wait_for(engine, handle, ("running", *_TERMINAL)) == "running"
    started = time.monotonic()
    engine.cancel(handle)
    assert _wait_for(engine, handle, _TERMINAL, limit_s=30) == "stopped"
    assert time.monotonic() - started < 30


def test_unreachable_address_fails_fast_before_submitting() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again below: nothing listens there
    started = time.monotonic()
    with pytest.raises(JobEngineError, match=f"no Ray cluster reachable at http://127.0.0.1:{port}") as caught:
        RayJobsEngine(f"127.0.0.1:{port}")
    assert time.monotonic() - started < 5
    assert caught.value.hint is not None
    assert "ray start --head" in caught.value.hint


def test_not_an_http_address_is_refused() -> None:
    with pytest.raises(InputError, match="not an HTTP address"):
        RayJobsEngine("ray://127.0.0.1:10001")


def test_ray_address_env_pointing_elsewhere_is_refused(ray_cluster: object, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAY_ADDRESS", "http://127.0.0.1:1")
    with pytest.raises(JobEngineError, match="RAY_ADDRESS"):
        RayJobsEngine(ray_cluster.address)  # type: ignore[attr-defined]


def test_more_gpus_than_the_cluster_has_is_refused_before_submitting(engine: RayJobsEngine) -> None:
    spec = JobSpec(name="ray-four-gpus", command=("true",), resources=Resources(gpus=4))
    with pytest.raises(JobEngineError) as caught:
        engine.submit(spec)
    message = caught.value.message
    assert "can never run job 'ray-four-gpus'" in message
    assert "it asks for 4 GPU(s) but the largest node has 1 (whole cluster 1), 3 short" in message
    assert caught.value.hint is not None
    assert "computewise plan" in caught.value.hint
    assert "ray-four-gpus" not in _submitted_run_names(engine)


def test_absent_accelerator_type_is_refused(engine: RayJobsEngine) -> None:
    spec = JobSpec(name="ray-h100", command=("true",), resources=Resources(accelerator="h100-sxm"))
    with pytest.raises(JobEngineError, match="accelerator type 'H100' and no node has one"):
        engine.submit(spec)
    assert "ray-h100" not in _submitted_run_names(engine)


def test_a_tpu_or_neuron_job_asks_ray_for_its_own_resource_not_for_gpus(engine: RayJobsEngine) -> None:
    """Ray counts Cloud TPU chips as "TPU" and AWS Neuron devices in "neuron_cores" (two per device); a TPU or
    Trainium job asked for GPUs, which a TPU or trn1 node does not have, and was never placed."""
    for accelerator, gpus, asked in (("tpu-v5e", 4, "4 of 'TPU'"), ("trainium", 16, "32 of 'neuron_cores'")):
        spec = JobSpec(
            name=f"ray-{accelerator}", command=("true",), resources=Resources(gpus=gpus, accelerator=accelerator)
        )
        with pytest.raises(JobEngineError) as caught:
            engine.submit(spec)
        assert f"it asks for {asked} but the largest node has 0" in caught.value.message
        assert "GPU(s)" not in caught.value.message


def test_more_cpus_and_memory_than_any_node_lists_every_shortfall(engine: RayJobsEngine) -> None:
    spec = JobSpec(name="ray-big", command=("true",), resources=Resources(cpus=5, memory_bytes=10**15))
    with pytest.raises(JobEngineError) as caught:
        engine.submit(spec)
    assert "it asks for 5 CPU(s) but the largest node has 4 (whole cluster 4), 1 short" in caught.value.message
    assert "it asks for 1e+06 GB of memory" in caught.value.message


def test_more_than_a_whole_gpu_in_fractions_is_refused(engine: RayJobsEngine) -> None:
    spec = JobSpec(name="ray-two-gpus", command=("true",), resources=Resources(gpus=2))
    with pytest.raises(JobEngineError, match=r"2 GPU\(s\) but the largest node has 1"):
        engine.submit(spec)


def test_unknown_job_is_a_clear_error(engine: RayJobsEngine) -> None:
    handle = JobHandle(engine="ray", job_id="no-such-job-123", name="no-such-job")
    with pytest.raises(JobEngineError, match="no Ray job 'no-such-job-123'"):
        engine.status(handle)


def test_devices_are_counted_in_rays_resource_for_them() -> None:
    assert ray_device_resource("h100") == ("GPU", 1) and ray_device_resource("mi300x") == ("GPU", 1)
    assert ray_device_resource("tpu-v5p") == ("TPU", 1) and ray_device_resource("gaudi3") == ("HPU", 1)
    assert ray_device_resource("inferentia2") == ("neuron_cores", 2)
    assert ray_device_resource("RTX-PRO-6000") == ("GPU", 1) and ray_device_resource(None) == ("GPU", 1)


def test_accelerator_slugs_map_to_ray_types() -> None:
    assert ray_accelerator_type("h100-sxm") == "H100"
    assert ray_accelerator_type("A100-80GB") == "A100"
    assert ray_accelerator_type("RTX-PRO-6000") == "RTX-PRO-6000"
    assert ray_accelerator_type("a100") == "A100"  # a catalog alias


def test_fraction_memory_cap_only_for_shared_gpus() -> None:
    assert fraction_memory_cap(0.25) == {GPU_MEMORY_FRACTION_ENV: "0.25"}
    assert fraction_memory_cap(1) == {}
    assert fraction_memory_cap(0) == {}


def test_apply_gpu_memory_cap_validates_and_skips_without_a_device() -> None:
    assert apply_gpu_memory_cap({}) is None
    with pytest.raises(InputError, match="not a fraction"):
        apply_gpu_memory_cap({GPU_MEMORY_FRACTION_ENV: "1.5"})
    with pytest.raises(InputError, match="not a fraction"):
        apply_gpu_memory_cap({GPU_MEMORY_FRACTION_ENV: "half"})


@pytest.mark.torch
@pytest.mark.gpu
def test_apply_gpu_memory_cap_limits_the_allocator() -> None:
    torch = pytest.importorskip("torch")
    assert apply_gpu_memory_cap({GPU_MEMORY_FRACTION_ENV: "0.1"}) == 0.1
    total_bytes = torch.cuda.get_device_properties(0).total_memory
    with pytest.raises(torch.cuda.OutOfMemoryError):
        torch.empty(int(total_bytes * 0.2), dtype=torch.uint8, device="cuda")
    small = torch.empty(int(total_bytes * 0.05), dtype=torch.uint8, device="cuda")
    assert small.numel() > 0


AGENT_STARTING = "Request failed with status code 500: No available agent to submit job, please try again later."


class _StartingAgent:
    """Ray's answer while a fresh head node's job agent starts, ``refusals`` times, then a job id."""

    def __init__(self, refusals: int, message: str = AGENT_STARTING) -> None:
        self.refusals = refusals
        self.message = message
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.refusals:
            raise RuntimeError(self.message)
        return "raysubmit_1"


class _Clock:
    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s

    def sleep(self, seconds: float) -> None:
        self.now_s += seconds


def test_a_starting_job_agent_is_waited_for_with_back_off_and_said() -> None:
    clock, said = _Clock(), list[str]()
    submit = _StartingAgent(refusals=3)
    job_id = submit_while_agent_starts(submit, "warm", said.append, clock, clock.sleep)
    assert job_id == "raysubmit_1" and submit.calls == 4
    assert clock.now_s == pytest.approx(0.5 + 1.0 + 2.0)  # doubling waits
    assert len(said) == 3 and "job agent is still starting" in said[0]


def test_an_agent_that_never_starts_is_an_error_within_the_bound() -> None:
    clock = _Clock()
    with pytest.raises(JobEngineError, match="did not start within 120 s"):
        submit_while_agent_starts(_StartingAgent(refusals=10**6), "warm", lambda _: None, clock, clock.sleep)
    assert clock.now_s <= 120.0


def test_a_retry_that_finds_the_first_attempt_accepted_returns_that_job() -> None:
    """The agent timed out answering but started the job: the retry's "already exists" is the job."""
    clock = _Clock()
    attempts = iter(
        [
            RuntimeError(AGENT_STARTING),
            RuntimeError("Request failed with status code 400: Job with submission_id warm-ab12 already exists."),
        ]
    )

    def submit() -> str:
        raise next(attempts)

    assert submit_while_agent_starts(submit, "warm", lambda _: None, clock, clock.sleep, "warm-ab12") == "warm-ab12"


def test_other_refusals_are_not_retried() -> None:
    clock = _Clock()
    submit = _StartingAgent(refusals=1, message="Request failed with status code 400: bad runtime_env")
    with pytest.raises(JobEngineError, match="bad runtime_env"):
        submit_while_agent_starts(submit, "bad", lambda _: None, clock, clock.sleep)
    assert submit.calls == 1 and clock.now_s == 0.0
