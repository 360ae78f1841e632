"""``computewise submit`` end to end: the real CLI in a child process, dry runs, a local job, refusals (exit 2)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from computewise.scale.local import LocalEngine
from computewise.scale.submitted import SubmitDryRun, SubmittedJob

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "computewise.cli.app", "submit"]


def submit(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), **(env or {})}
    return subprocess.run([*CLI, *args], capture_output=True, text=True, env=full_env, timeout=60, check=False)


def test_dry_run_prints_the_kubernetes_job() -> None:
    done = submit(
        "--engine", "kubernetes", "--name", "llama-ft", "--gpus", "2", "--accelerator", "h100",
        "--memory", "64GiB", "--image", "ghcr.io/acme/train:1", "--tag", "team=nlp", "--dry-run",
        "--", "python", "train.py", "--lr", "0.1",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "kind: Job" in done.stdout
    assert 'nvidia.com/gpu: "2"' in done.stdout  # a quantity string, as the API's models want
    assert "nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3" in done.stdout
    assert 'memory: "68719476736"' in done.stdout
    assert '- "--lr"' in done.stdout  # options after -- belong to the job, not to submit


def test_processes_under_torchrun_get_a_cpu_each_by_default() -> None:
    done = submit(
        "--engine", "slurm", "--name", "s8", "--gpus", "8", "--nproc", "8", "--dry-run", "--", "python", "t.py"
    )
    assert done.returncode == 0, done.stderr
    assert "#SBATCH --cpus-per-task=8" in done.stdout and "--nproc-per-node=8" in done.stdout


def test_dry_run_json_for_slurm_and_ray(json_schema: Callable[[object, str], None]) -> None:
    slurm = submit("--engine", "slurm", "--name", "s1", "--gpus", "1", "--dry-run", "--json", "--", "python", "t.py")
    assert slurm.returncode == 0, slurm.stderr
    data = json.loads(slurm.stdout)
    json_schema(data, "submit")
    assert data["engine"] == "slurm" and "#SBATCH --gres=gpu:1" in data["manifest"]
    assert SubmitDryRun.from_dict(data).name == "s1"
    ray = submit("--engine", "ray", "--name", "r1", "--gpus", "0.25", "--dry-run", "--", "python", "t.py")
    assert ray.returncode == 0, ray.stderr
    request = json.loads(ray.stdout)
    assert request["resources"]["gpus"] == 0.25 and request["command"] == ["python", "t.py"]


def test_local_submit_runs_the_job(tmp_path: Path, json_schema: Callable[[object, str], None]) -> None:
    done = submit(
        "--name", "cli-local", "--json", "--", sys.executable, "-c", "print('from the job')",
        env={"COMPUTEWISE_HOME": str(tmp_path)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    json_schema(data, "submit")
    assert "gpu_memory_fraction" not in data  # only a Ray job sharing a GPU is capped
    handle = SubmittedJob.from_dict(data).handle  # the handle read back asks the same engine about the job
    engine = LocalEngine(tmp_path / "jobs")
    deadline = time.monotonic() + 20
    while engine.status(handle) == "running":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert engine.status(handle) == "succeeded"
    assert engine.logs(handle) == "from the job\n"


def test_refusals_exit_2_with_a_fix(tmp_path: Path) -> None:
    cases = [
        (("--engine", "kubernetes", "--name", "a", "--gpus", "0.5", "--image", "i", "--dry-run"), "whole devices"),
        (("--engine", "local", "--name", "Bad_Name"), "invalid job name"),
        (("--engine", "slurmm", "--name", "a"), "--engine must be one of"),
        (("--engine", "local"), "Missing option '--name'"),
        (("--engine", "kubernetes", "--name", "a", "--spot", "--image", "i", "--dry-run"), "--engine skypilot only"),
        (("--engine", "slurm", "--name", "a", "--memory", "lots", "--dry-run"), "cannot read --memory"),
        (("--engine", "slurm", "--name", "a"), "sbatch not found"),
        (("--engine", "ray", "--name", "a"), "needs the cluster's address"),
    ]
    if importlib.util.find_spec("kubernetes") is None:
        cases.append((("--engine", "kubernetes", "--name", "a", "--image", "i"), "computewise[kubernetes]"))
    for args, expected in cases:
        done = submit(*args, "--", "python", "t.py", env={"PATH": str(tmp_path)})
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert expected in done.stderr, (args, done.stderr)
        assert "Traceback" not in done.stderr
        assert "To fix:" in done.stderr or "Missing option" in expected


def test_help_marks_the_name_required_and_spells_its_rule() -> None:
    said = " ".join(submit("--help", env={"COLUMNS": "200"}).stdout.split())
    assert "[required]" in said and "lowercase letters, digits and '-', at most 63 characters" in said
    assert "--spot / --no-spot" in said


def test_an_option_after_the_last_known_one_is_refused_not_submitted_as_the_command(tmp_path: Path) -> None:
    """Words after the last known option belong to the job, so the old ``--backend`` would become the
    program to start; it is refused (exit 2) and nothing is submitted."""
    state_dir = tmp_path / "state"
    for args in (("--name", "x", "--backend", "ray"), ("--name", "x", "--enigne", "local")):
        done = submit(*args, "--", "python", "t.py", env={"COMPUTEWISE_HOME": str(state_dir)})
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        said = " ".join(done.stderr.split())
        assert f"unknown option {args[2]!r} for computewise submit" in said and "--engine" in said
        assert "submitted" not in done.stdout
    assert not state_dir.exists()


def test_a_plan_file_sets_the_gpus_the_accelerator_the_processes_and_the_price(tmp_path: Path) -> None:
    planned = subprocess.run(
        [sys.executable, "-m", "computewise.cli.app", "plan", "train", "--model", "llama-3-8b", "--tokens", "1B",
         "--deadline", "7d", "--max-gpus", "8", "--json"],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )  # fmt: skip
    assert planned.returncode == 0, planned.stderr
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(planned.stdout, encoding="utf-8")
    best = json.loads(planned.stdout)["recommended"]
    done = submit(
        "--engine", "ray", "--name", "ft", "--plan", str(plan_file), "--dry-run", "--json", "--", "python", "t.py"
    )
    assert done.returncode == 0, done.stderr
    job = json.loads(json.loads(done.stdout)["manifest"])
    assert job["resources"]["gpus"] == best["gpus"] and job["resources"]["accelerator"] == best["accelerator"]
    assert job["processes"] == best["gpus"]
    assert job["hourly_usd"] == best["cost"]["usd_per_hour"]
    assert f"from {plan_file}: {best['gpus']} x {best['accelerator']}" in done.stderr
    assert job["resources"]["cpus"] >= best["gpus"] and job["resources"]["spot"] == (best["cost"]["pricing"] == "spot")
    sky = submit(
        "--engine", "skypilot", "--name", "ft", "--plan", str(plan_file), "--no-spot", "--cpus", "4", "--dry-run",
        "--", "python", "t.py",
    )  # fmt: skip
    assert sky.returncode == 0, sky.stderr
    assert "use_spot: false" in sky.stdout and 'cpus: "4+"' in sky.stdout
    assert best["cost"]["pricing"] == "spot"  # the cheapest 8-GPU plan: its summary says the job runs on demand
    assert "run on demand as asked" in sky.stderr, sky.stderr

    clash = submit("--name", "ft", "--plan", str(plan_file), "--gpus", "2", "--dry-run", "--", "python", "t.py")
    assert clash.returncode == 2 and "--plan sets --gpus already" in clash.stderr
    not_a_plan = tmp_path / "other.json"
    not_a_plan.write_text('{"recommended": null}', encoding="utf-8")
    refused = submit("--name", "ft", "--plan", str(not_a_plan), "--dry-run", "--", "python", "t.py")
    assert refused.returncode == 2 and "has no recommended option" in refused.stderr


def test_an_amd_plan_renders_for_kubernetes_and_a_tpu_plan_is_refused_by_slurm_with_the_reason(
    tmp_path: Path,
) -> None:
    """`submit --plan` refused every AMD, TPU and Trainium plan; an AMD plan now asks for amd.com/gpu on MI300X
    nodes, and Slurm, which schedules no Cloud TPU, says so (exit 2) instead of writing a script that cannot run."""
    for gpu, extra in (("mi300x", ("--pricing", "on-prem")), ("tpu-v5e", ())):
        planned = subprocess.run(
            [sys.executable, "-m", "computewise.cli.app", "plan", "train", "--model", "gpt2", "--tokens", "100M",
             "--gpu", gpu, *extra, "--json"],
            capture_output=True, text=True, timeout=120, check=False,
            env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        )  # fmt: skip
        assert planned.returncode == 0, planned.stderr
        (tmp_path / f"{gpu}.json").write_text(planned.stdout, encoding="utf-8")
    amd = submit(
        "--engine", "kubernetes", "--name", "amd", "--plan", str(tmp_path / "mi300x.json"), "--image", "i",
        "--dry-run", "--", "python", "t.py",
    )  # fmt: skip
    assert amd.returncode == 0, amd.stderr
    assert 'amd.com/gpu: "8"' in amd.stdout and 'amd.com/gpu.device-id: "74a1"' in amd.stdout
    tpu = submit("--engine", "slurm", "--name", "tpu", "--plan", str(tmp_path / "tpu-v5e.json"), "--dry-run", "--", "x")
    assert tpu.returncode == 2 and "Traceback" not in tpu.stderr
    assert "error: Slurm does not schedule Cloud TPUs" in tpu.stderr and "To fix:" in tpu.stderr
