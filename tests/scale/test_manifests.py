"""Rendered manifests against golden files, the Slurm script's signal handling run for real, and refusals.

COMPUTEWISE_UPDATE_GOLDEN=1 rewrites the golden files from the current output (review the diff).
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from computewise.errors import InputError, JobEngineError, UnknownNameError
from computewise.scale.engine import JobSpec, Resources
from computewise.scale.kubernetes import job_manifest, render_job
from computewise.scale.registry import get_engine
from computewise.scale.skypilot import render_task
from computewise.scale.slurm import render_sbatch
from computewise.scale.yaml_text import YamlValue, dump_yaml
from computewise.units import GIB

GOLDEN = Path(__file__).parent / "golden"

TRAIN = JobSpec(
    name="llama-ft-7b",
    command=("python", "-m", "train", "--config", "run config.json"),
    resources=Resources(gpus=2, accelerator="h100", cpus=8, memory_bytes=64 * GIB, spot=True),
    tags={"team": "nlp", "cost center": "R&D/42"},
    checkpoint_uri="s3://ckpt-bucket/llama-ft-7b",
    env={"NCCL_DEBUG": "WARN"},
    image="ghcr.io/acme/train:1.2",
    hourly_usd=8.5,
    max_restarts=2,
)
CPU_ONLY = JobSpec(name="etl-1", command=("python", "etl.py"))
RESUMING = JobSpec(
    name="resume-me",
    command=("python", "train.py"),
    resume_command=("python", "train.py", "--resume"),
    resources=Resources(gpus=1, cpus=0.5),
)


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("COMPUTEWISE_UPDATE_GOLDEN") == "1":
        path.write_text(text, encoding="utf-8")
    assert path.read_text(encoding="utf-8") == text, f"{name} changed; rerun with COMPUTEWISE_UPDATE_GOLDEN=1"


@pytest.mark.parametrize(
    ("golden", "render"),
    [
        ("kubernetes_job.yaml", lambda: render_job(TRAIN)),
        ("kubernetes_cpu_job.yaml", lambda: render_job(JobSpec(name="etl-1", command=("etl",), image="etl:1"))),
        ("slurm_job.sh", lambda: render_sbatch(TRAIN)),
        ("slurm_cpu.sh", lambda: render_sbatch(CPU_ONLY)),
        ("slurm_resume.sh", lambda: render_sbatch(RESUMING)),
        ("skypilot_task.yaml", lambda: render_task(TRAIN)),
    ],
)
def test_rendered_text_matches_golden(golden: str, render: Callable[[], str]) -> None:
    check_golden(golden, render())


def test_yaml_reads_back_as_the_manifest() -> None:
    yaml = pytest.importorskip("yaml")
    manifest = job_manifest(TRAIN)
    assert yaml.safe_load(render_job(TRAIN)) == manifest
    tricky: dict[str, YamlValue] = {
        "s": ["yes", "075", "1e3", "a: b", "#x", "", "null", "-m", "ok/path-1.2"],
        "n": {"e": {}, "l": []},
        "block": {"a": "x\ny", "b": "x\n\ny\n", "c": " lead\nz", "d": "t\tab\nz"},
    }
    assert yaml.safe_load(dump_yaml(tricky)) == tricky


def test_kubernetes_job_treats_exit_75_and_disruption_as_restarts() -> None:
    spec = job_manifest(TRAIN)["spec"]
    assert isinstance(spec, dict)
    assert spec["backoffLimit"] == 2
    rules = spec["podFailurePolicy"]["rules"]
    assert rules[0]["onExitCodes"]["values"] == [75] and rules[0]["action"] == "Ignore"
    assert rules[1] == {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}


def test_several_processes_run_under_torchrun_in_every_manifest() -> None:
    spec = dataclasses.replace(TRAIN, processes=4)
    torchrun = "python -m torch.distributed.run --standalone --nproc-per-node=4 --no-python"
    container = job_manifest(spec)["spec"]["template"]["spec"]["containers"][0]  # type: ignore[index]
    assert " ".join(container["command"]).startswith(torchrun)
    assert f"srun {torchrun} " in render_sbatch(spec)
    assert torchrun in render_task(dataclasses.replace(spec, checkpoint_uri="s3://bucket/ckpt"))


def test_kubernetes_refuses_a_fraction_of_a_gpu() -> None:
    spec = JobSpec(name="share", command=("x",), resources=Resources(gpus=0.25), image="img")
    with pytest.raises(JobEngineError, match="whole devices") as error:
        render_job(spec)
    assert error.value.hint is not None and "MIG" in error.value.hint


def test_kubernetes_needs_an_image() -> None:
    with pytest.raises(JobEngineError, match="container image"):
        render_job(CPU_ONLY)


def test_unknown_and_unschedulable_accelerators() -> None:
    with pytest.raises(UnknownNameError, match="h1000"):
        render_sbatch(JobSpec(name="a", command=("x",), resources=Resources(gpus=1, accelerator="h1000")))
    with pytest.raises(JobEngineError, match="gaudi2") as refused:
        render_job(JobSpec(name="a", command=("x",), resources=Resources(gpus=1, accelerator="gaudi2"), image="i"))
    assert refused.value.hint is not None and "mi300x" in refused.value.hint and "tpu-v5e" in refused.value.hint


def _pod(accelerator: str, gpus: int) -> Any:
    spec = JobSpec(name="a", command=("x",), resources=Resources(gpus=gpus, accelerator=accelerator), image="i")
    manifest: Any = job_manifest(spec)
    return manifest["spec"]["template"]["spec"]


@pytest.mark.parametrize(
    ("accelerator", "gpus", "resource", "selector"),
    [
        ("mi300x", 8, "amd.com/gpu", {"amd.com/gpu.device-id": "74a1"}),
        ("tpu-v5e", 1, "google.com/tpu", {"cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
                                          "cloud.google.com/gke-tpu-topology": "1x1"}),
        ("tpu-v5e", 8, "google.com/tpu", {"cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
                                          "cloud.google.com/gke-tpu-topology": "2x4"}),
        ("tpu-v4", 4, "google.com/tpu", {"cloud.google.com/gke-tpu-accelerator": "tpu-v4-podslice",
                                         "cloud.google.com/gke-tpu-topology": "2x2x1"}),
        ("tpu-v5p", 4, "google.com/tpu", {"cloud.google.com/gke-tpu-accelerator": "tpu-v5p-slice",
                                          "cloud.google.com/gke-tpu-topology": "2x2x1"}),
    ],
)  # fmt: skip
def test_kubernetes_asks_each_vendors_device_plugin_on_the_nodes_that_have_the_model(
    accelerator: str, gpus: int, resource: str, selector: dict[str, str]
) -> None:
    """AMD, TPU and Trainium plans were refused; each now asks its device plugin's resource where the model is."""
    pod = _pod(accelerator, gpus)
    assert pod["containers"][0]["resources"]["limits"] == {resource: str(gpus)}
    assert pod["nodeSelector"] == selector and "affinity" not in pod
    assert pod["tolerations"] == [{"key": resource, "operator": "Exists", "effect": "NoSchedule"}]


def test_kubernetes_picks_aws_neuron_nodes_by_the_instance_types_that_hold_the_devices() -> None:
    pod = _pod("trainium", 16)
    assert pod["containers"][0]["resources"]["limits"] == {"aws.amazon.com/neuron": "16"}
    [term] = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term["matchExpressions"] == [
        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["trn1.32xlarge", "trn1n.32xlarge"]}
    ]
    assert "nodeSelector" not in pod
    one = _pod("inferentia2", 1)["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert one["nodeSelectorTerms"][0]["matchExpressions"][0]["values"][0] == "inf2.xlarge"
    with pytest.raises(JobEngineError, match="no trainium instance holds 32"):
        _pod("trainium", 32)


@pytest.mark.parametrize(
    ("accelerator", "gpus", "fragment"),
    [("tpu-v4", 1, "4 chips on one host, not 1"), ("tpu-v5e", 2, "1, 4 or 8 chips on one host, not 2")],
)
def test_a_tpu_job_takes_whole_tpu_vms(accelerator: str, gpus: int, fragment: str) -> None:
    """GKE gives a pod every chip of its TPU VM: a count no single host has is refused with the counts that are."""
    spec = JobSpec(name="a", command=("x",), resources=Resources(gpus=gpus, accelerator=accelerator), image="i")
    for render in (render_job, render_task):
        with pytest.raises(JobEngineError, match=fragment) as refused:
            render(spec)
        assert refused.value.hint is not None and f"--gpu {accelerator} --gpus" in refused.value.hint


def test_slurm_asks_amd_gpus_as_gres_and_refuses_what_slurm_does_not_schedule() -> None:
    amd = JobSpec(name="a", command=("x",), resources=Resources(gpus=8, accelerator="mi300x"))
    assert "#SBATCH --gres=gpu:mi300x:8" in render_sbatch(amd)
    for accelerator, gpus, fragment in (("tpu-v5e", 4, "does not schedule Cloud TPUs"),
                                        ("trainium", 16, "no GRES for AWS Neuron devices")):  # fmt: skip
        spec = JobSpec(name="a", command=("x",), resources=Resources(gpus=gpus, accelerator=accelerator))
        with pytest.raises(JobEngineError, match=fragment) as refused:
            render_sbatch(spec)
        assert refused.value.hint is not None and "--engine kubernetes" in refused.value.hint


def test_skypilot_names_tpu_slices_by_size_and_neuron_devices_by_instance() -> None:
    yaml = pytest.importorskip("yaml")

    def resources(accelerator: str, gpus: int) -> Any:
        spec = JobSpec(name="a", command=("x",), resources=Resources(gpus=gpus, accelerator=accelerator))
        return yaml.safe_load(render_task(spec))["resources"]

    # as `sky show-gpus` lists them: v5e by chips, v4 and v5p by TensorCores (two per chip)
    assert resources("tpu-v5e", 8)["accelerators"] == "tpu-v5litepod-8"
    assert resources("tpu-v4", 4)["accelerators"] == "tpu-v4-8"
    assert resources("tpu-v5p", 4)["accelerators"] == "tpu-v5p-8"
    assert resources("mi300x", 8)["accelerators"] == "MI300X:8"
    trainium = resources("trainium", 16)
    assert trainium["instance_type"] == "trn1.32xlarge" and "accelerators" not in trainium
    with pytest.raises(JobEngineError, match=r"whole trainium devices, not 0\.5 of one"):
        render_task(JobSpec(name="a", command=("x",), resources=Resources(gpus=0.5, accelerator="trainium")))


@pytest.mark.parametrize("name", ["Bad_Name", "-lead", "trail-", "x" * 64, "", "a.b"])
def test_bad_run_names_are_refused(name: str) -> None:
    with pytest.raises(InputError, match="invalid job name"):
        JobSpec(name=name, command=("x",))


def test_bad_resources_are_refused() -> None:
    with pytest.raises(InputError, match="mixes whole and fractional"):
        Resources(gpus=1.5)
    with pytest.raises(InputError, match="no command"):
        JobSpec(name="a", command=())


def test_skypilot_rents_spot_only_when_the_job_asks() -> None:
    """A task that asks for nothing is rented on demand: the price the user saw, not a preemptible one."""
    assert "use_spot: false" in render_task(dataclasses.replace(TRAIN, resources=Resources(gpus=2, accelerator="h100")))
    assert "use_spot: true" in render_task(TRAIN)


def test_skypilot_needs_a_bucket_and_an_accelerator() -> None:
    with pytest.raises(JobEngineError, match="not a bucket"):
        render_task(JobSpec(name="a", command=("x",), checkpoint_uri="/local/disk"))
    with pytest.raises(JobEngineError, match="which GPU"):
        render_task(JobSpec(name="a", command=("x",), resources=Resources(gpus=1)))
    with pytest.raises(JobEngineError, match="sky jobs launch"):
        get_engine("skypilot").submit(CPU_ONLY)


def test_missing_sbatch_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(JobEngineError, match="sbatch not found"):
        get_engine("slurm")


def test_unknown_engine_suggests() -> None:
    with pytest.raises(UnknownNameError, match="slurm"):
        get_engine("slurn")


def fake_slurm(bin_dir: Path, log: Path) -> None:
    """Stand-ins for Slurm's srun (runs the step) and scontrol (records the requeue) on PATH."""
    bin_dir.mkdir()
    (bin_dir / "srun").write_text('#!/bin/bash\nexec "$@"\n', encoding="utf-8")
    (bin_dir / "scontrol").write_text(f'#!/bin/bash\necho "$@" >> {log}\n', encoding="utf-8")
    for tool in ("srun", "scontrol"):
        (bin_dir / tool).chmod(0o755)


# A training step that saves and exits 75 on SIGUSR1, as computewise.train does.
STEP = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGUSR1, lambda s, f: (print('saved', flush=True), sys.exit(75)))\n"
    "print('started', flush=True)\n"
    "time.sleep(30)\n"
)


@pytest.mark.parametrize(("restart_count", "requeued"), [("0", True), ("2", False)])
def test_sbatch_script_forwards_usr1_and_requeues_on_75(tmp_path: Path, restart_count: str, requeued: bool) -> None:
    requeue_log = tmp_path / "scontrol.log"
    fake_slurm(tmp_path / "bin", requeue_log)
    spec = JobSpec(name="sig", command=(sys.executable, "-c", STEP), max_restarts=2)
    script = tmp_path / "job.sh"
    script.write_text(render_sbatch(spec), encoding="utf-8")
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}", "SLURM_JOB_ID": "4242"}
    env["SLURM_RESTART_COUNT"] = restart_count
    batch = subprocess.Popen(["bash", str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert batch.stdout is not None
    assert batch.stdout.readline().strip() == "started"
    batch.send_signal(signal.SIGUSR1)  # what --signal=B:USR1@90 does
    started = time.monotonic()
    out, err = batch.communicate(timeout=20)
    assert time.monotonic() - started < 10
    assert batch.returncode == 75
    assert "saved" in out
    if requeued:
        assert requeue_log.read_text(encoding="utf-8").split() == ["requeue", "4242"]
        assert "requeueing job 4242" in err
    else:
        assert not requeue_log.exists()


def test_sbatch_script_passes_through_other_exit_codes(tmp_path: Path) -> None:
    requeue_log = tmp_path / "scontrol.log"
    fake_slurm(tmp_path / "bin", requeue_log)
    spec = JobSpec(name="fail", command=(sys.executable, "-c", "import sys; sys.exit(3)"), env={"A": "it's"})
    script = tmp_path / "job.sh"
    script.write_text(render_sbatch(spec), encoding="utf-8")
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}", "SLURM_JOB_ID": "7"}
    done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=20, check=False)
    assert done.returncode == 3
    assert not requeue_log.exists()
