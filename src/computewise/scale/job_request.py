"""A job as ``submit`` and ``run --engine`` ask for it: resources (or a plan file's), then the engine's ``JobSpec``.

Both verbs take the same resource flags and the same ``--plan`` file, so both read them here, the one
way: the plan decides GPUs, accelerator and processes (and the price, when none is given); CPUs and
spot capacity the user gave win over the plan's.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from computewise.account.tags import parse_tags
from computewise.errors import InputError
from computewise.scale.engine import JobSpec, Resources
from computewise.units import parse_bytes

__all__ = ["JobRequest", "JobResources", "job_spec", "render"]


@dataclass(frozen=True)
class JobResources:
    """The resource flags ``submit`` and ``run --engine`` share, as typed."""

    gpus: float
    accelerator: str | None
    cpus: float | None  # None: the plan's share of its instance, else one per process
    memory: str | None
    processes: int = 1
    spot: bool | None = None  # None: as the plan priced it, else on-demand


@dataclass(frozen=True)
class JobRequest:
    """What runs, on what, from which plan, and how often it may restart."""

    name: str
    command: tuple[str, ...]
    resources: JobResources
    plan: Path | None = None
    tags: tuple[str, ...] = ()
    checkpoint_uri: str | None = None
    max_restarts: int = 3
    image: str | None = None
    hourly_usd: float | None = None  # the price the engine carries with the job; None: the plan's, if any


def job_spec(request: JobRequest, say: Callable[[str], None]) -> tuple[JobSpec, float | None]:
    """The ``JobSpec`` the request asks for and the plan's hourly price (None without ``--plan``).

    ``say`` gets one line on what the plan decided. Bad values raise ``InputError`` naming the flag."""
    resources, planned_usd = _with_plan(request.plan, request.resources, say)
    spec = JobSpec(
        name=request.name,
        command=request.command,
        resources=Resources(
            gpus=resources.gpus,
            accelerator=resources.accelerator,
            cpus=resources.processes if resources.cpus is None else resources.cpus,
            spot=bool(resources.spot),
            memory_bytes=round(parse_bytes(resources.memory, "--memory")) if resources.memory is not None else None,
        ),
        tags=parse_tags(request.tags),
        checkpoint_uri=request.checkpoint_uri,
        image=request.image,
        hourly_usd=planned_usd if request.hourly_usd is None else request.hourly_usd,
        max_restarts=request.max_restarts,
        processes=resources.processes,
    )
    return spec, planned_usd


def _with_plan(
    plan: Path | None, resources: JobResources, say: Callable[[str], None]
) -> tuple[JobResources, float | None]:
    """The resources the plan file's recommended option asks for, and its hourly price; as given without one."""
    if plan is None:
        return resources, None
    from computewise.plan.result import Plan
    from computewise.scale.from_plan import planned_job

    given = [
        flag
        for flag, used in (
            ("--gpus", resources.gpus != 0),
            ("--gpu", resources.accelerator is not None),
            ("--nproc", resources.processes != 1),
        )
        if used
    ]
    if given:
        raise InputError(f"--plan sets {', '.join(given)} already", "drop them, or drop --plan")
    try:
        data = json.loads(plan.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise InputError(
            f"cannot read the plan {plan}: {err}", "write it with `computewise plan train ... --json`"
        ) from err
    job = planned_job(Plan.from_dict(data, str(plan)), str(plan))
    overridden = resources.spot is not None and resources.spot != job.spot
    say(
        f"from {plan}: {job.summary}"
        + (f"; run {'on spot' if resources.spot else 'on demand'} as asked" if overridden else "")
    )
    planned = dataclasses.replace(
        resources,
        gpus=job.gpus,
        accelerator=job.accelerator,
        processes=job.processes,
        cpus=job.cpus if resources.cpus is None else resources.cpus,
        spot=job.spot if resources.spot is None else resources.spot,
    )
    return planned, job.hourly_usd


def render(engine: str, spec: JobSpec) -> str:
    """What ``submit --dry-run`` prints: the engine's manifest, or the job request as JSON for ray/local."""
    if engine == "kubernetes":
        from computewise.scale.kubernetes import render_job

        return render_job(spec)
    if engine == "slurm":
        from computewise.scale.slurm import render_sbatch

        return render_sbatch(spec)
    if engine == "skypilot":
        from computewise.scale.skypilot import render_task

        return render_task(spec)
    return json.dumps({"engine": engine, **dataclasses.asdict(spec)}, indent=2) + "\n"
