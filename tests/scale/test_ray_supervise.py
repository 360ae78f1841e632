"""Supervised runs and shared GPUs on the real local Ray cluster (4 logical CPUs, 1 logical GPU).

A training job SIGKILLed mid-run is resubmitted and resumes from its checkpoint to the loss of an
uninterrupted run, as one ledger run whose cost is recorded; two jobs at half a GPU each run side by
side on the one GPU, each with its PyTorch memory capped to half (the CUDA calls are the one seam
faked: this machine has no GPU).
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

from prices import given_price

pytest.importorskip("ray.job_submission", reason="the Ray tests need the ray extra: pip install 'computewise[ray]'")
pytest.importorskip("torch", reason="the spot job trains with torch: pip install 'computewise[torch]'")

from spot_job import SPOT_STEPS, final_loss, spot_command, wait_for_steps

from computewise.ledger import Ledger
from computewise.scale.engine import JobSpec, Resources
from computewise.scale.ray_jobs import RayJobsEngine
from computewise.scale.supervise import SupervisedRun, supervise

pytestmark = pytest.mark.xdist_group("ray")

ROOT = Path(__file__).resolve().parents[2]
PRICE = given_price(4.0)

# Stands in for a CUDA device (the only fake): records the cap the job applies to its allocator.
_SHARED_GPU_JOB = """
import json, os, sys, time
import torch
calls = []
torch.cuda.is_available = lambda: True
torch.cuda.current_device = lambda: 0
torch.cuda.set_per_process_memory_fraction = lambda fraction, device: calls.append([fraction, device])
from computewise.train.memory_cap import apply_gpu_memory_cap
applied = apply_gpu_memory_cap()
# Rendezvous: each job says it is running, then waits for the other; both meet only if they run side by side.
here = os.path.join(sys.argv[2], str(os.getpid()))
open(here, "w").close()
deadline = time.time() + 90
while len(os.listdir(sys.argv[2])) < 2 and time.time() < deadline:
    time.sleep(0.05)
json.dump({"applied": applied, "calls": calls, "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
           "met": len(os.listdir(sys.argv[2])) == 2}, open(sys.argv[1], "w"))
"""


@pytest.fixture(scope="module")
def engine(ray_cluster: object) -> RayJobsEngine:
    return RayJobsEngine(ray_cluster.address)  # type: ignore[attr-defined]


def test_a_job_killed_on_ray_is_resubmitted_and_resumes_to_the_same_loss(
    engine: RayJobsEngine, tmp_path: Path, spot_reference_loss: float
) -> None:
    pid_file, progress = tmp_path / "pid", tmp_path / "progress"
    spec = JobSpec(
        name="ray-spot-gpt",
        command=spot_command(tmp_path / "ckpt", pid_file, progress),
        resources=Resources(cpus=1),
        max_restarts=1,
    )
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    ledger = Ledger.open(url)
    results: list[SupervisedRun] = []
    thread = threading.Thread(target=lambda: results.append(supervise(engine, spec, ledger, url, PRICE, poll_s=0.2)))
    thread.start()
    try:
        wait_for_steps(progress, 8, limit_s=180)
        os.kill(int(pid_file.read_text(encoding="utf-8")), signal.SIGKILL)  # the node's process dies: no warning
    finally:
        thread.join(timeout=300)
    assert results, "supervise did not return"
    run = results[0]
    assert run.status == "succeeded", run.log_tail
    assert [a.outcome for a in run.attempts] == ["failed", "succeeded"]
    assert run.attempts[0].exit_code not in (0, 75, None)
    assert all(a.backend == "ray" for a in run.attempts)
    assert final_loss(run.log_tail) == spot_reference_loss
    steps = ledger.steps(run.run_id)
    assert {step.step for step in steps} == set(range(SPOT_STEPS))
    assert run.interruption.interruptions == 1
    assert run.interruption.added_usd is not None and run.interruption.added_usd > 0
    assert run.cost.cost_usd == pytest.approx(run.interruption.billed_s * 4.0 / 3600, rel=1e-6)
    metadata = engine.metadata(last_handle(run))
    assert metadata["computewise_run_id"] == str(run.run_id)


def last_handle(run: SupervisedRun) -> object:
    from computewise.scale.engine import JobHandle

    return JobHandle("ray", run.attempts[-1].job_id, run.name)


def test_two_jobs_share_one_gpu_each_capped_to_its_half(engine: RayJobsEngine, tmp_path: Path) -> None:
    script = tmp_path / "shared_gpu_job.py"
    script.write_text(_SHARED_GPU_JOB, encoding="utf-8")
    outputs = [tmp_path / "a.json", tmp_path / "b.json"]
    rendezvous = tmp_path / "running"
    rendezvous.mkdir()
    handles = [
        engine.submit(
            JobSpec(
                name=f"half-gpu-{i}",
                command=(sys.executable, str(script), str(out), str(rendezvous)),
                resources=Resources(gpus=0.5),
            )
        )
        for i, out in enumerate(outputs)
    ]
    deadline = time.monotonic() + 180
    while any(engine.status(h) not in ("succeeded", "failed", "stopped") for h in handles):
        assert time.monotonic() < deadline, "the half-GPU jobs did not finish"
        time.sleep(0.25)
    for handle in handles:
        assert engine.status(handle) == "succeeded", engine.logs(handle)
        assert "PyTorch memory is capped to 50% of the device" in engine.logs(handle)
    for out in outputs:
        result = json.loads(out.read_text(encoding="utf-8"))
        assert result["applied"] == 0.5 and result["calls"] == [[0.5, 0]]
        assert result["visible"] == "0"  # Ray placed both on the one logical GPU
        assert result["met"], "the two half-GPU jobs did not run side by side"


def test_run_cli_on_ray_records_the_cost_and_says_when_a_gpu_is_shared(
    ray_cluster: object, tmp_path: Path, json_schema: Callable[[object, str], None]
) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "COMPUTEWISE_DB": str(tmp_path / "l.sqlite")}
    done = subprocess.run(
        [
            sys.executable, "-m", "computewise.cli.app", "run", "--engine", "ray",
            "--address", ray_cluster.address,  # type: ignore[attr-defined]
            "--name", "cli-ray", "--hourly-usd", "2.5", "--interval", "200ms", "--json",
            "--", sys.executable, "-c", "print('hello from ray')",
        ],
        capture_output=True, text=True, env=env, timeout=180, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["status"] == "succeeded" and data["backend"] == "ray"
    assert [a["outcome"] for a in data["attempts"]] == ["succeeded"]
    assert data["cost"]["cost_usd"] == pytest.approx(data["interruption"]["billed_s"] * 2.5 / 3600, rel=1e-6)
    with Ledger.open(str(tmp_path / "l.sqlite")) as ledger:
        run = ledger.run(data["run_id"])
        assert run.status == "succeeded" and run.tags["run_name"] == "cli-ray"

    shared = subprocess.run(
        [
            sys.executable, "-m", "computewise.cli.app", "submit", "--engine", "ray",
            "--address", ray_cluster.address,  # type: ignore[attr-defined]
            "--name", "cli-half", "--gpus", "0.5", "--", sys.executable, "-c", "pass",
        ],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert shared.returncode == 0, shared.stderr
    assert "capped to 50% of the device" in shared.stdout
    shared_json = subprocess.run(
        [
            sys.executable, "-m", "computewise.cli.app", "submit", "--engine", "ray",
            "--address", ray_cluster.address,  # type: ignore[attr-defined]
            "--name", "cli-half-json", "--gpus", "0.5", "--json", "--", sys.executable, "-c", "pass",
        ],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert shared_json.returncode == 0, shared_json.stderr
    submitted = json.loads(shared_json.stdout)
    json_schema(submitted, "submit")
    assert submitted["engine"] == "ray" and submitted["gpu_memory_fraction"] == 0.5
