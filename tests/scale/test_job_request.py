"""The job flags ``submit`` and ``run --engine`` share, read in one place (``scale.job_request``)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from computewise.catalog import Catalog
from computewise.errors import InputError
from computewise.estimate import Assumptions
from computewise.models import preset
from computewise.plan import TrainConstraints, plan_train
from computewise.plan.result import Plan
from computewise.scale.from_plan import planned_job
from computewise.scale.job_request import JobRequest, JobResources, job_spec


@pytest.fixture
def plan_file(tmp_path: Path, catalog: Catalog, assumptions: Assumptions) -> Path:
    """``plan train --json`` for GPT-2 on H100s, as a user saves it for ``--plan``."""
    constraints = TrainConstraints(
        tokens=1e8, seq_len=1024, global_batch=32, accelerators=("h100-sxm",), max_gpus=8, pricings=("on-demand",)
    )
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan_train(preset("gpt2"), catalog, assumptions, constraints).to_dict()))
    return path


def test_a_plan_sets_the_resources_and_its_price_goes_with_the_job(plan_file: Path) -> None:
    notes: list[str] = []
    request = JobRequest("gpt2", ("python", "train.py"), JobResources(0, None, None, None), plan=plan_file)
    spec, planned_usd = job_spec(request, notes.append)
    job = planned_job(Plan.from_dict(json.loads(plan_file.read_text()), str(plan_file)), str(plan_file))
    assert (spec.resources.gpus, spec.resources.accelerator, spec.processes) == (
        job.gpus,
        job.accelerator,
        job.processes,
    )
    assert planned_usd == job.hourly_usd and spec.hourly_usd == job.hourly_usd
    assert notes == [f"from {plan_file}: {job.summary}"]
    told, _ = job_spec(dataclasses.replace(request, hourly_usd=2.5), notes.append)
    assert told.hourly_usd == 2.5  # a price the user gave wins over the plan's


def test_flags_the_plan_sets_are_refused_beside_it(plan_file: Path) -> None:
    request = JobRequest("gpt2", ("python", "train.py"), JobResources(2, "h100", None, None), plan=plan_file)
    with pytest.raises(InputError, match=r"--plan sets --gpus, --gpu already"):
        job_spec(request, print)
