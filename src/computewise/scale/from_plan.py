"""A job's resources from a plan: ``computewise plan train --json``'s recommended option, ready to submit.

The planner already chose the accelerator, how many, and what they cost per hour; ``submit --plan``
and ``run --engine ... --plan`` take those instead of asking the user to copy them into flags.
One machine per job: a plan that spans several is refused (the engines here run one node's worth
per job; multi-node launches are the engine's own, e.g. a Ray Train or PyTorchJob).
"""

from __future__ import annotations

from dataclasses import dataclass

from computewise.errors import InputError
from computewise.plan.result import Plan

__all__ = ["PlannedJob", "planned_job"]


@dataclass(frozen=True)
class PlannedJob:
    """What the plan's option asks for on its one machine: GPUs (one process each), their type, the price."""

    gpus: int
    accelerator: str
    processes: int
    hourly_usd: float
    summary: str


def planned_job(plan: Plan, source: str = "the plan") -> PlannedJob:
    """The recommended option of ``plan`` (read with ``Plan.from_dict``) as one job's resources."""
    option = plan.recommended
    what = f"{option.gpus} x {option.accelerator}"
    if option.instances != 1:
        raise InputError(
            f"{source} spans {option.instances} machines ({what}); a job here runs on one",
            "plan for one machine (e.g. --max-gpus 8), or launch multi-node training with the engine's own tool",
        )
    if option.gpus < 1:
        raise InputError(f"{source} asks for {option.gpus} GPUs", "write it with `computewise plan train ... --json`")
    return PlannedJob(
        gpus=option.gpus,
        accelerator=option.accelerator,
        processes=option.gpus,
        hourly_usd=option.usd_per_h,
        summary=f"{option.gpus} x {option.accelerator} ({option.cloud} {option.instance_type}), one process per GPU",
    )
