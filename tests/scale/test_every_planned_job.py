"""Every plan the planner can recommend, rendered for every engine and checked by the engine's own rules.

For each accelerator the catalog trains on and sells (an offering or an owned server), the real
planner recommends a job for a small model; that recommendation becomes a ``JobSpec`` the way
``submit --plan`` makes it, and each engine renders it: NVIDIA and AMD GPUs, Cloud TPUs, AWS
Trainium and CPUs. Where an engine cannot run a plan (Slurm schedules no Cloud TPU and no AWS Neuron
device; GKE and SkyPilot give TPU v4 and v5p in hosts of four chips, where the planner prices one)
the refusal gives the reason and a fix that does not blame a flag.

The checks are the engines' own where they are installed: the ``kubernetes`` client's models (the
``kubernetes`` extra; run once with kubernetes 37.0.2 on PYTHONPATH, they caught a GPU count
rendered as an integer where the API wants a quantity string), ``sbatch --test-only`` (a Slurm
login node), and SkyPilot's own parser, for spot and on-demand alike, in a child process of
SkyPilot's venv (``make install-skypilot``; skypilot's pins conflict with the project's lock).
Without them, ``bash -n`` parses the batch script and a structural check reads each manifest back
as YAML and holds it to the fields those engines require.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from computewise.catalog import Catalog
from computewise.errors import JobEngineError
from computewise.estimate import Assumptions
from computewise.models import preset
from computewise.plan import TrainConstraints, plan_train
from computewise.scale.engine import JobSpec, Resources
from computewise.scale.from_plan import planned_job
from computewise.scale.kubernetes import job_manifest, render_job
from computewise.scale.skypilot import render_task
from computewise.scale.slurm import render_sbatch
from computewise.units import GIB

yaml = pytest.importorskip("yaml")

HERE = Path(__file__).resolve().parent
# SkyPilot's venv, as `make install-skypilot` makes it; `make test` names it in COMPUTEWISE_SKYPILOT_PYTHON.
SKYPILOT_VENV_PYTHON = HERE.parents[1] / ".venv-skypilot" / "bin" / "python"

# The engines that refuse a plan on the accelerator: Slurm runs no TPU VM (the planner plans TPUs in the chip
# counts of their slices, catalog ``slice_sizes``, so Kubernetes and SkyPilot render every TPU plan).
REFUSED = {
    "tpu-v4": {"slurm"},
    "tpu-v5p": {"slurm"},
    "tpu-v5e": {"slurm"},
    "trainium": {"slurm"},
}
# Whole hosts of TPU chips and Neuron devices: what several per-chip TPU "instances" or an inf2 serving job ask for.
WHOLE_HOSTS = [("tpu-v4", 4), ("tpu-v5p", 4), ("tpu-v5e", 8), ("inferentia2", 12)]
# Tags as `submit --tag` lets them through (letters, digits and _ . : / - in a key; any value): SkyPilot puts them
# on the instances as labels, and every cloud it may fail over to must take them.
TAGS = {"team": "NLP", "cost/center": "R&D 42", "2024": "q1", "aws:owner": "a.b@example.com"}
# A checkpoint bucket of each kind SkyPilot mounts (skypilot.py's schemes; https:// for Azure Blob).
BUCKETS = ("s3://", "gs://", "r2://", "cos://us-east/", "oci://", "https://acct.blob.core.windows.net/")
# Each device plugin's resource (accelerators.py cites where the names come from).
DEVICE_RESOURCES = {"nvidia.com/gpu", "amd.com/gpu", "google.com/tpu", "aws.amazon.com/neuron"}
# sbatch options the rendered script may use (man sbatch); anything else is a typo sbatch would refuse.
SBATCH_OPTIONS = {"job-name", "gres", "cpus-per-task", "mem", "signal", "requeue", "open-mode", "output", "comment"}
# SkyPilot task and resources keys (sky/utils/schemas.py) the rendered task may use.
SKY_TASK_KEYS = {"name", "resources", "file_mounts", "envs", "run"}
SKY_RESOURCE_KEYS = {
    "accelerators",
    "instance_type",
    "cpus",
    "memory",
    "use_spot",
    "image_id",
    "job_recovery",
    "labels",
}


def planned_accelerators(catalog: Catalog) -> list[str]:
    """Every accelerator a plan can recommend: sold or owned, and marked as training."""
    sold = {o.accelerator for o in catalog.offerings} | {s.accelerator for s in catalog.onprem}
    return sorted(slug for slug in sold if catalog.accelerator(slug).trains)


def planned_spec(slug: str, catalog: Catalog, assumptions: Assumptions) -> JobSpec:
    """The real planner's recommendation on ``slug`` for GPT-2, as ``submit --plan`` turns it into a job."""
    constraints = TrainConstraints(
        tokens=1e8,
        seq_len=1024,
        global_batch=32,
        accelerators=(slug,),
        max_gpus=16,
        pricings=("on-demand", "spot", "on-prem"),
    )
    job = planned_job(plan_train(preset("gpt2"), catalog, assumptions, constraints), slug, catalog)
    return JobSpec(
        name=f"plan-{slug}",
        command=("python", "train.py"),
        resources=Resources(gpus=job.gpus, accelerator=job.accelerator, cpus=job.cpus, spot=job.spot),
        checkpoint_uri="s3://ckpt/run",
        image="ghcr.io/acme/train:1",
        hourly_usd=job.hourly_usd,
        processes=job.processes,
    )


def host_spec(slug: str, devices: int) -> JobSpec:
    """A job on one whole host of ``slug``: several TPU chips or AWS Neuron devices."""
    return JobSpec(
        name=f"host-{slug}",
        command=("python", "train.py"),
        resources=Resources(gpus=devices, accelerator=slug, cpus=devices),
        image="ghcr.io/acme/train:1",
        processes=devices,
    )


def check_kubernetes(spec: JobSpec) -> None:
    manifest: Any = job_manifest(spec)
    assert yaml.safe_load(render_job(spec)) == manifest
    if importlib.util.find_spec("kubernetes") is not None:
        from kubernetes import client  # type: ignore[import-not-found,unused-ignore]

        # The client's models check required fields and enums as the API server's schema does.
        job: Any = client.ApiClient()._ApiClient__deserialize(manifest, "V1Job")
        assert job.spec.template.spec.containers[0].name == "job"
    template = manifest["spec"]["template"]
    container = template["spec"]["containers"][0]
    assert manifest["apiVersion"] == "batch/v1" and manifest["kind"] == "Job"
    assert template["spec"]["restartPolicy"] == "Never" and container["image"]
    assert float(container["resources"]["requests"]["cpu"]) >= spec.processes
    limits = container["resources"].get("limits", {})
    # quantities are strings in the API's models (the client refuses the integer 8 for nvidia.com/gpu)
    assert all(isinstance(value, str) for value in {**container["resources"]["requests"], **limits}.values())
    devices = {name: float(value) for name, value in limits.items() if name != "memory"}
    assert set(devices) <= DEVICE_RESOURCES and sum(devices.values()) == spec.resources.gpus
    if spec.resources.accelerator is not None:
        # the model is picked by a node label or, where no label names it (AWS Neuron), by instance type
        affinity = template["spec"].get("affinity", {}).get("nodeAffinity", {})
        assert template["spec"].get("nodeSelector") or affinity
        product = template["spec"].get("nodeSelector", {}).get("nvidia.com/gpu.product")
        assert product is None or re.fullmatch(r"(NVIDIA|Tesla)-[A-Za-z0-9-]+", product)


def check_slurm(spec: JobSpec, tmp_path: Path) -> None:
    script = tmp_path / f"{spec.name}.sh"
    script.write_text(render_sbatch(spec), encoding="utf-8")
    assert subprocess.run(["bash", "-n", str(script)], check=False).returncode == 0
    if shutil.which("sbatch") is not None:
        done = subprocess.run(["sbatch", "--test-only", str(script)], capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
    lines = [line for line in script.read_text(encoding="utf-8").splitlines() if line.startswith("#SBATCH")]
    options: dict[str, str] = {}
    for line in lines:
        key, _, value = line.removeprefix("#SBATCH --").partition("=")
        options[key] = value
    assert set(options) <= SBATCH_OPTIONS
    assert int(options["cpus-per-task"]) >= spec.processes
    if spec.resources.gpus:
        assert re.fullmatch(rf"gpu:[a-z0-9]+:{int(spec.resources.gpus)}", options["gres"])
    else:
        assert "gres" not in options


def check_skypilot(spec: JobSpec) -> None:
    task = yaml.safe_load(render_task(spec))
    assert set(task) <= SKY_TASK_KEYS and set(task["resources"]) <= SKY_RESOURCE_KEYS
    assert task["resources"]["use_spot"] is spec.resources.spot
    assert re.fullmatch(r"\d+\+", task["resources"]["cpus"])
    if spec.resources.gpus:  # a GPU and its count, a TPU slice by its size (tpu-v5litepod-1), or an instance type
        wanted = task["resources"].get("accelerators") or task["resources"]["instance_type"]
        assert re.fullmatch(rf"[A-Z][A-Za-z0-9-]*:{int(spec.resources.gpus)}|tpu-v[0-9a-z]+-\d+|[a-z0-9]+\.\w+", wanted)


def test_every_accelerator_a_plan_recommends_renders_or_is_refused_with_a_reason(
    catalog: Catalog, assumptions: Assumptions, tmp_path: Path
) -> None:
    slugs = planned_accelerators(catalog)
    assert {"gh200", "h100-sxm", "mi300x", "trainium", "xeon-8488c"} <= set(slugs) and set(slugs) >= set(REFUSED)
    checks: dict[str, Callable[[JobSpec], None]] = {
        "kubernetes": check_kubernetes,
        "slurm": lambda spec: check_slurm(spec, tmp_path),
        "skypilot": check_skypilot,
    }
    for slug in slugs:
        spec = planned_spec(slug, catalog, assumptions)
        for engine, check in checks.items():
            if engine not in REFUSED.get(slug, set()):
                check(spec)
                continue
            with pytest.raises(JobEngineError, match=slug) as refused:
                check(spec)
            assert refused.value.hint is not None and "leave out --accelerator" not in refused.value.hint


def test_a_plan_of_eight_gpus_gives_torchrun_its_share_of_the_instances_cpus(
    catalog: Catalog, assumptions: Assumptions
) -> None:
    """p5en.48xlarge: 192 vCPUs for 8 H200s; 8 processes under torchrun, never one CPU between them."""
    spec = planned_spec("h200", catalog, assumptions)
    assert (spec.resources.gpus, spec.processes) == (8, 8)
    script = render_sbatch(spec)
    assert "--nproc-per-node=8" in script
    cpus = int(re.search(r"--cpus-per-task=(\d+)", script).group(1))  # type: ignore[union-attr]
    assert 8 * 8 <= cpus < 192


def test_a_cpu_plan_asks_for_cpus_and_no_gpu(catalog: Catalog, assumptions: Assumptions) -> None:
    spec = planned_spec("xeon-8488c", catalog, assumptions)
    assert (spec.resources.gpus, spec.resources.accelerator, spec.processes) == (0, None, 1)
    assert spec.resources.cpus >= 64
    assert "--gres" not in render_sbatch(spec)


@pytest.mark.parametrize(("slug", "devices"), WHOLE_HOSTS)
def test_a_whole_host_of_tpu_chips_or_neuron_devices_renders(slug: str, devices: int) -> None:
    """What a plan of several per-chip TPU "instances" (one host) or an inf2 serving job asks for, checked by the
    kubernetes client's models and the SkyPilot task rules, as every planned job is."""
    spec = host_spec(slug, devices)
    check_kubernetes(spec)
    check_skypilot(spec)


def skypilot_python() -> str:
    """SkyPilot's interpreter: required where ``make test`` names it, else used where ``make install-skypilot`` ran."""
    named = os.environ.get("COMPUTEWISE_SKYPILOT_PYTHON")
    if named is not None:
        if not Path(named).is_file():
            pytest.fail(f"COMPUTEWISE_SKYPILOT_PYTHON={named} does not exist: run make install-skypilot")
        return named
    if not SKYPILOT_VENV_PYTHON.is_file():
        pytest.skip("SkyPilot's validator runs in its own venv: make install-skypilot (make test does)")
    return str(SKYPILOT_VENV_PYTHON)


def test_every_skypilot_task_a_plan_renders_passes_skypilot_own_checks(
    catalog: Catalog, assumptions: Assumptions, tmp_path: Path
) -> None:
    """Each planned job and whole host, spot and on-demand, with tags, memory and each kind of checkpoint
    bucket, loaded by SkyPilot as ``sky jobs launch`` loads it.

    One task is broken on purpose (a recovery strategy SkyPilot does not have): SkyPilot must name it and
    only it, so a validator that checks nothing cannot pass.
    """
    python = skypilot_python()
    specs = [
        planned_spec(slug, catalog, assumptions)
        for slug in planned_accelerators(catalog)
        if "skypilot" not in REFUSED.get(slug, set())
    ] + [host_spec(slug, devices) for slug, devices in WHOLE_HOSTS]
    h100 = planned_spec("h100-sxm", catalog, assumptions)
    specs += [
        dataclasses.replace(h100, name=f"bucket-{i}", checkpoint_uri=f"{b}ckpt/run") for i, b in enumerate(BUCKETS)
    ]
    paths = []
    for spec in specs:
        for spot in (False, True):
            path = tmp_path / f"{spec.name}-{'spot' if spot else 'on-demand'}.yaml"
            resources = dataclasses.replace(spec.resources, spot=spot, memory_bytes=64 * GIB)
            path.write_text(render_task(dataclasses.replace(spec, resources=resources, tags=TAGS)))
            paths.append(path)
    broken = tmp_path / "broken.yaml"
    broken.write_text(paths[0].read_text().replace("EAGER_NEXT_REGION", "EAGER"))
    environment = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    done = subprocess.run(
        [python, str(HERE / "skypilot_validate.py"), str(broken), *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        # SkyPilot keeps its state in ~/.sky: a scratch home, so the test leaves none behind
        env={**environment, "HOME": str(tmp_path), "SKYPILOT_DISABLE_USAGE_COLLECTION": "1"},
    )
    refused = [line.partition(": ")[0] for line in done.stdout.splitlines() if line.startswith(f"{tmp_path}/")]
    assert refused == [str(broken)], f"SkyPilot's answer:\n{done.stdout}{done.stderr}"
    assert done.returncode == 1 and "'EAGER' is not a valid jobs recovery strategy" in done.stdout
