"""A plan's recommended option as one job's resources; plans that cannot be one job are refused by name."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from computewise.catalog import Catalog
from computewise.errors import InputError
from computewise.estimate import Assumptions
from computewise.models import preset
from computewise.plan import Option, Plan, TrainConstraints, plan_train
from computewise.scale.from_plan import DEFAULT_CPUS_PER_GPU, planned_job

# One machine of eight H100s at a spot price, as `computewise plan train` recommends it.
OPTION = Option(
    accelerator="h100-sxm",
    gpus=8,
    instances=1,
    cloud="gcp",
    instance_type="a3-highgpu-8g",
    region="us-east4",
    pricing="spot",
    usd_per_h=15.80912,
    tp=8,
    pp=1,
    dp=1,
    zero=0,
    precision="bf16",
    micro_batch=1,
    recompute="none",
    memory_bytes={"weights": 2e9, "total": 6e10},
    capacity_bytes=8e10,
    flops=1e20,
    time_s=15_266.0,
    cost_usd=67.04,
    energy_kwh=40.0,
    co2_kg=12.0,
    mfu=0.41,
)


def plan_of(option: Option) -> Plan:
    return Plan(recommended=option, pareto=(option,), candidates=(option,), rejected=(), considered=1)


def test_the_recommended_option_becomes_gpus_processes_and_price() -> None:
    job = planned_job(plan_of(OPTION), "plan.json")
    assert (job.gpus, job.accelerator, job.processes, job.hourly_usd, job.spot) == (8, "h100-sxm", 8, 15.80912, True)
    assert job.cpus == 187  # a3-highgpu-8g's 208 vCPUs less a tenth for the node's daemons
    assert job.summary == (
        "8 x h100-sxm (gcp a3-highgpu-8g, spot), one process per GPU, "
        "187 CPUs (208 vCPUs of the instance for these GPUs, less 10% for its daemons)"
    )


def test_an_owned_server_gets_the_default_cpus_per_gpu() -> None:
    owned = replace(OPTION, cloud="on-prem", instance_type="8x H100 SXM server", pricing="on-prem")
    job = planned_job(plan_of(owned), "plan.json")
    assert (job.cpus, job.spot) == (8 * DEFAULT_CPUS_PER_GPU, False)
    assert "the instance is not in the catalog" in job.summary


def test_a_real_plan_file_becomes_its_recommended_job(catalog: Catalog, assumptions: Assumptions) -> None:
    """What `plan train --json` writes, read back as `submit --plan` reads it."""
    constraints = TrainConstraints(tokens=2e9, seq_len=1024, global_batch=64, accelerators=("a10g", "l4"), max_gpus=8)
    plan = plan_train(preset("gpt2-medium"), catalog, assumptions, constraints)
    text = json.dumps(replace(plan, top=3).to_dict())
    job = planned_job(Plan.from_dict(json.loads(text), "plan.json"), "plan.json")
    best = plan.recommended
    assert (job.gpus, job.accelerator, job.hourly_usd) == (best.gpus, best.accelerator, best.usd_per_h)


def test_a_plan_over_several_machines_is_refused() -> None:
    with pytest.raises(InputError, match="spans 2 machines") as caught:
        planned_job(plan_of(replace(OPTION, gpus=16, instances=2)), "plan.json")
    assert caught.value.hint is not None and "--max-gpus" in caught.value.hint


@pytest.mark.parametrize(
    ("plan", "fragment"),
    [
        ({}, "no recommended option"),
        ({"recommended": None}, "no recommended option"),
        ({**plan_of(OPTION).to_dict(), "recommended": {"gpus": "many"}}, "hardware must be a JSON object"),
        ([], "expected a JSON object"),
        ({**plan_of(OPTION).to_dict(), "schema_version": 7}, "schema_version 7"),
    ],
)
def test_what_is_not_a_plan_is_refused(plan: object, fragment: str) -> None:
    with pytest.raises(InputError, match=fragment) as caught:
        Plan.from_dict(plan, "plan.json")
    assert "plan.json" in str(caught.value)


@pytest.mark.parametrize(("slug", "chips", "instance_type", "vcpus_per_chip"), [
    ("tpu-v4", 4, "tpu-v4-chip", 60), ("tpu-v5e", 8, "tpu-v5e-chip", 28),
])  # fmt: skip
def test_cloud_tpu_chips_priced_one_by_one_are_one_host(
    slug: str, chips: int, instance_type: str, vcpus_per_chip: int
) -> None:
    """The catalog prices Cloud TPUs per chip, so a plan of four v4 chips reads as four one-chip "instances";
    they were refused as four machines although one TPU VM holds them."""
    tpu = replace(
        OPTION, accelerator=slug, gpus=chips, instances=chips, instance_type=instance_type, pricing="on-demand"
    )
    job = planned_job(plan_of(tpu), "plan.json")
    assert (job.gpus, job.accelerator, job.processes) == (chips, slug, chips)
    assert job.cpus == int(vcpus_per_chip * chips * 0.9)  # the host's vCPUs less its daemons' tenth
    with pytest.raises(InputError, match=f"spans {2 * chips} machines"):  # a slice over two hosts is not one job
        planned_job(plan_of(replace(tpu, gpus=2 * chips, instances=2 * chips)), "plan.json")


def test_a_trainium_plan_runs_a_process_per_neuroncore() -> None:
    """PyTorch NeuronX gives each process one NeuronCore, two per Trainium device: 16 devices were given 16
    torchrun processes, which leaves half of every chip idle."""
    trn = replace(
        OPTION, accelerator="trainium", gpus=16, cloud="aws", instance_type="trn1.32xlarge", pricing="on-demand"
    )
    job = planned_job(plan_of(trn), "plan.json")
    assert (job.gpus, job.processes) == (16, 32) and "one process per NeuronCore (2 per device)" in job.summary
    assert job.cpus >= job.processes
