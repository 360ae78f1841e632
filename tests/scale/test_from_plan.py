"""A plan's recommended option as one job's resources; plans that cannot be one job are refused by name."""

from __future__ import annotations

import pytest

from computewise.errors import InputError
from computewise.scale.from_plan import planned_job

# The shape `computewise plan train --json` prints (recommended option, trimmed to what is read).
PLAN = {
    "recommended": {
        "accelerator": "h100-sxm",
        "gpus": 8,
        "hardware": {"cloud": "gcp", "instance_type": "a3-highgpu-8g", "instances": 1, "region": "us-east4"},
        "cost": {"usd": 67.04, "pricing": "spot", "usd_per_hour": 15.80912},
    }
}


def test_the_recommended_option_becomes_gpus_processes_and_price() -> None:
    job = planned_job(PLAN, "plan.json")
    assert (job.gpus, job.accelerator, job.processes, job.hourly_usd) == (8, "h100-sxm", 8, 15.80912)
    assert job.summary == "8 x h100-sxm (gcp a3-highgpu-8g), one process per GPU"


def test_a_plan_over_several_machines_is_refused() -> None:
    plan = {"recommended": {**PLAN["recommended"], "gpus": 16, "hardware": {"instances": 2}}}
    with pytest.raises(InputError, match="spans 2 machines") as caught:
        planned_job(plan, "plan.json")
    assert caught.value.hint is not None and "--max-gpus" in caught.value.hint


@pytest.mark.parametrize("plan", [{}, {"recommended": None}, {"recommended": {"gpus": "many"}}, []])
def test_what_is_not_a_plan_is_refused(plan: object) -> None:
    with pytest.raises(InputError, match=r"plan\.json"):
        planned_job(plan, "plan.json")  # type: ignore[arg-type]
