"""``computewise submit --engine NAME --name RUN -- CMD``: hand a job to Ray, Kubernetes, Slurm, SkyPilot or local.

``--dry-run`` prints what would be submitted (the Job YAML, the sbatch script, the SkyPilot task, or
the job request for ray/local) so a team can review it or apply it with their own tools.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from computewise.cli.common import JsonOption, bounded_float, bounded_int, emit_json, refuse_option_as_command
from computewise.limits import ACCELERATOR_SHARE

if TYPE_CHECKING:
    from computewise.scale.engine import JobSpec

_ENGINE_HELP = "Job engine: local (a child process), ray, kubernetes, slurm or skypilot (render only)."


def submit(
    command: Annotated[list[str], typer.Argument(help="The command to run, after --: -- python train.py")],
    name: Annotated[
        str,
        typer.Option(
            help="Stable run name: lowercase letters, digits and '-', at most 63 characters; "
            "a resubmitted job keeps it.",
        ),
    ],
    engine: Annotated[str, typer.Option(help=_ENGINE_HELP)] = "local",
    gpus: Annotated[
        float,
        typer.Option(
            parser=bounded_float("--gpus", ACCELERATOR_SHARE),
            help="GPUs: a count, or a fraction below 1 to share one (ray).",
        ),
    ] = 0,
    accelerator: Annotated[
        str | None, typer.Option("--gpu", "-g", "--accelerator", help="Catalog accelerator, e.g. h100, a100-80gb.")
    ] = None,
    cpus: Annotated[
        float | None,
        typer.Option(
            parser=bounded_float("--cpus"),
            help="CPU cores. Default: with --plan, the plan's share of its instance's vCPUs; else one per process.",
        ),
    ] = None,
    nproc: Annotated[
        int,
        typer.Option(parser=bounded_int("--nproc"), help="Processes on one node under torchrun (DDP/FSDP); 1: plain."),
    ] = 1,
    plan: Annotated[
        Path | None,
        typer.Option(help="Take GPUs, accelerator, processes and price from `computewise plan train ... --json`."),
    ] = None,
    memory: Annotated[str | None, typer.Option(help="Memory: 32GB, 64GiB.")] = None,
    checkpoint_uri: Annotated[
        str | None, typer.Option(help="Checkpoint storage that survives the node: a shared path or a bucket URL.")
    ] = None,
    image: Annotated[str | None, typer.Option(help="Container image (kubernetes, skypilot).")] = None,
    spot: Annotated[
        bool | None,
        typer.Option(
            "--spot/--no-spot",
            help="Rent spot capacity (skypilot; the job resumes after a preemption). Default: as the plan priced it "
            "with --plan, else on-demand.",
        ),
    ] = None,
    tag: Annotated[list[str] | None, typer.Option("--tag", help="KEY=VALUE label (repeatable).")] = None,
    hourly_usd: Annotated[str | None, typer.Option(help="Price per hour, carried to the ledger.")] = None,
    max_restarts: Annotated[
        int,
        typer.Option(parser=bounded_int("--max-restarts"), help="Restarts after real failures (preemptions are free)."),
    ] = 3,
    address: Annotated[
        str | None,
        typer.Option(envvar="RAY_ADDRESS", help="Ray dashboard address, e.g. http://127.0.0.1:8265 (or $RAY_ADDRESS)."),
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print what would be submitted; submit nothing.")] = False,
    as_json: JsonOption = False,
) -> None:
    """Submit a job to an engine; print its id (or, with --dry-run, the manifest)."""
    from computewise.errors import InputError
    from computewise.scale.registry import ENGINE_NAMES, get_engine
    from computewise.train.memory_cap import fraction_memory_cap
    from computewise.units import parse_usd

    refuse_option_as_command(command, "submit")
    if engine not in ENGINE_NAMES:
        raise InputError(f"--engine must be one of {', '.join(ENGINE_NAMES)}, got {engine!r}", "e.g. --engine local")
    if spot is not None and engine != "skypilot":
        raise InputError(
            f"--{'' if spot else 'no-'}spot applies to --engine skypilot only",
            f"drop it: {engine} runs the job on the nodes the cluster has (select spot nodes there)",
        )
    resources, planned_usd = with_plan(plan, JobResources(gpus, accelerator, cpus, memory, nproc, spot))
    spec = job_spec(
        name,
        command,
        resources,
        tag,
        checkpoint_uri=checkpoint_uri,
        image=image,
        hourly_usd=parse_usd(hourly_usd, "--hourly-usd") if hourly_usd is not None else planned_usd,
        max_restarts=max_restarts,
    )
    if dry_run:
        manifest = render(engine, spec)
        if as_json:
            emit_json({"engine": engine, "name": name, "manifest": manifest})
        else:
            sys.stdout.write(manifest)
        return
    handle = get_engine(engine, address).submit(spec)
    cap = fraction_memory_cap(spec.resources.gpus) if engine == "ray" else {}  # Ray alone packs jobs on a GPU
    if as_json:
        memory_cap = {"gpu_memory_fraction": spec.resources.gpus} if cap else {}
        emit_json({**dataclasses.asdict(handle), **memory_cap})
    else:
        sys.stdout.write(f"submitted {handle.name} to {handle.engine}: job id {handle.job_id}\n")
        if cap:
            sys.stdout.write(
                f"it shares a GPU: its PyTorch memory is capped to {spec.resources.gpus:.0%} of the device "
                f"({', '.join(f'{k}={v}' for k, v in cap.items())}; computewise.train applies it, other programs "
                "call computewise.train.memory_cap.apply_gpu_memory_cap())\n"
            )


@dataclasses.dataclass(frozen=True)
class JobResources:
    """The resource flags ``submit`` and ``run --engine`` share, as typed."""

    gpus: float
    accelerator: str | None
    cpus: float | None  # None: the plan's share of its instance, else one per process
    memory: str | None
    processes: int = 1
    spot: bool | None = None  # None: as the plan priced it, else on-demand


def with_plan(plan: Path | None, resources: JobResources) -> tuple[JobResources, float | None]:
    """The resources the plan file's recommended option asks for, and its hourly price; as given without one.

    CPUs and spot capacity the user gave win over the plan's; GPUs, accelerator and processes must not be given.
    """
    if plan is None:
        return resources, None
    from computewise.errors import InputError
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
    sys.stderr.write(f"computewise: from {plan}: {job.summary}\n")
    planned = dataclasses.replace(
        resources,
        gpus=job.gpus,
        accelerator=job.accelerator,
        processes=job.processes,
        cpus=job.cpus if resources.cpus is None else resources.cpus,
        spot=job.spot if resources.spot is None else resources.spot,
    )
    return planned, job.hourly_usd


def job_spec(
    name: str,
    command: list[str],
    resources: JobResources,
    tags: list[str] | None,
    *,
    checkpoint_uri: str | None,
    max_restarts: int,
    image: str | None = None,
    hourly_usd: float | None = None,
) -> JobSpec:
    """A ``JobSpec`` from command-line flags; bad values raise ``InputError`` naming the flag."""
    from computewise.account.tags import parse_tags
    from computewise.scale.engine import JobSpec, Resources
    from computewise.units import parse_bytes

    return JobSpec(
        name=name,
        command=tuple(command),
        resources=Resources(
            gpus=resources.gpus,
            accelerator=resources.accelerator,
            cpus=resources.processes if resources.cpus is None else resources.cpus,
            spot=bool(resources.spot),
            memory_bytes=round(parse_bytes(resources.memory, "--memory")) if resources.memory is not None else None,
        ),
        tags=parse_tags(tags or []),
        checkpoint_uri=checkpoint_uri,
        image=image,
        hourly_usd=hourly_usd,
        max_restarts=max_restarts,
        processes=resources.processes,
    )


def render(engine: str, spec: JobSpec) -> str:
    """The text ``--dry-run`` prints: the engine's manifest, or the job request as JSON for ray/local."""
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
