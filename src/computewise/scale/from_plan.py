"""A job's resources from a plan: ``computewise plan train --json``'s recommended option, ready to submit.

The planner already chose the accelerator, how many, and what they cost per hour; ``submit --plan``
and ``run --backend ... --plan`` take those instead of asking the user to copy them into flags.
One machine per job: a plan that spans several is refused (the engines here run one node's worth
per job; multi-node launches are the engine's own, e.g. a Ray Train or PyTorchJob).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from computewise.errors import InputError

__all__ = ["PlannedJob", "planned_job"]

_HINT = "write it with `computewise plan train ... --json > plan.json`"


@dataclass(frozen=True)
class PlannedJob:
    """What the plan's option asks for on its one machine: GPUs (one process each), their type, the price."""

    gpus: int
    accelerator: str
    processes: int
    hourly_usd: float | None
    summary: str


def planned_job(plan: Mapping[str, Any], source: str = "the plan") -> PlannedJob:
    """The recommended option of ``plan`` (the JSON ``computewise plan train`` prints) as one job's resources."""
    option = plan.get("recommended") if isinstance(plan, Mapping) else None
    if not isinstance(option, Mapping):
        raise InputError(f"{source} has no recommended option", f"{_HINT}; a plan that found none cannot be run")
    try:
        gpus, accelerator = int(option["gpus"]), str(option["accelerator"])
        hardware = option.get("hardware") or {}
        instances = int(hardware.get("instances", 1))
        hourly = option.get("cost", {}).get("usd_per_hour")
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise InputError(f"{source} is not a computewise training plan ({err})", _HINT) from err
    if instances != 1:
        raise InputError(
            f"{source} spans {instances} machines ({gpus} x {accelerator}); a job here runs on one",
            "plan for one machine (e.g. --max-gpus 8), or launch multi-node training with the engine's own tool",
        )
    if gpus < 1:
        raise InputError(f"{source} asks for {gpus} GPUs", _HINT)
    where = " ".join(str(hardware[key]) for key in ("cloud", "instance_type") if hardware.get(key))
    return PlannedJob(
        gpus=gpus,
        accelerator=accelerator,
        processes=gpus,
        hourly_usd=float(hourly) if hourly is not None else None,
        summary=f"{gpus} x {accelerator}{f' ({where})' if where else ''}, one process per GPU",
    )
