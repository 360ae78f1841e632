"""``computewise submit --engine NAME --name RUN -- CMD``: hand a job to Ray, Kubernetes, Slurm, SkyPilot or local.

``--dry-run`` prints what would be submitted (the Job YAML, the sbatch script, the SkyPilot task, or
the job request for ray/local) so a team can review it or apply it with their own tools. The flags
become a :class:`computewise.scale.job_request.JobRequest`, read as ``run --engine`` reads them.
"""

from __future__ import annotations

import sys
from functools import partial
from typing import TYPE_CHECKING, Annotated

import typer

from computewise.cli.common import JobFlags, JsonOption, bounded_int, emit_json, flag_groups, refuse_option_as_command

if TYPE_CHECKING:
    from computewise.scale.engine import JobHandle, JobSpec

# The flags, one type each, so the verb's signature reads in a screen.
_Command = Annotated[list[str], typer.Argument(help="The command to run, after --: -- python train.py")]
_Name = Annotated[
    str,
    typer.Option(
        help="Stable run name: lowercase letters, digits and '-', at most 63 characters; a resubmitted job keeps it.",
    ),
]
_Engine = Annotated[
    str, typer.Option(help="Job engine: local (a child process), ray, kubernetes, slurm or skypilot (render only).")
]
_Image = Annotated[str | None, typer.Option(help="Container image (kubernetes, skypilot).")]
_Spot = Annotated[
    bool | None,
    typer.Option(
        "--spot/--no-spot",
        help="Rent spot capacity (skypilot; the job resumes after a preemption). Default: as the plan priced it "
        "with --plan, else on-demand.",
    ),
]
_Tag = Annotated[list[str] | None, typer.Option("--tag", help="KEY=VALUE label (repeatable).")]
_HourlyUsd = Annotated[str | None, typer.Option(help="Price per hour, carried to the ledger.")]
_MaxRestarts = Annotated[
    int,
    typer.Option(parser=bounded_int("--max-restarts"), help="Restarts after real failures (preemptions are free)."),
]
_Address = Annotated[
    str | None,
    typer.Option(envvar="RAY_ADDRESS", help="Ray dashboard address, e.g. http://127.0.0.1:8265 (or $RAY_ADDRESS)."),
]
_DryRun = Annotated[bool, typer.Option("--dry-run", help="Print what would be submitted; submit nothing.")]


@flag_groups
def submit(
    *,
    command: _Command,
    name: _Name,
    engine: _Engine = "local",
    resources: JobFlags,
    image: _Image = None,
    spot: _Spot = None,
    tag: _Tag = None,
    hourly_usd: _HourlyUsd = None,
    max_restarts: _MaxRestarts = 3,
    address: _Address = None,
    dry_run: _DryRun = False,
    as_json: JsonOption = False,
) -> None:
    """Submit a job to an engine; print its id (or, with --dry-run, the manifest)."""
    from computewise.errors import InputError
    from computewise.monitor.watch import say
    from computewise.scale.job_request import job_spec, render
    from computewise.scale.registry import ENGINE_NAMES, get_engine
    from computewise.units import parse_usd

    refuse_option_as_command(command, "submit")
    if engine not in ENGINE_NAMES:
        raise InputError(f"--engine must be one of {', '.join(ENGINE_NAMES)}, got {engine!r}", "e.g. --engine local")
    if spot is not None and engine != "skypilot":
        raise InputError(
            f"--{'' if spot else 'no-'}spot applies to --engine skypilot only",
            f"drop it: {engine} runs the job on the nodes the cluster has (select spot nodes there)",
        )
    price = parse_usd(hourly_usd, "--hourly-usd") if hourly_usd is not None else None
    request = resources.request(name, command, tag, max_restarts, image=image, spot=spot, hourly_usd=price)
    spec, _ = job_spec(request, partial(say, sys.stderr))
    if dry_run:
        manifest = render(engine, spec)
        if as_json:
            from computewise.scale.submitted import SubmitDryRun

            emit_json(SubmitDryRun(engine, name, manifest).to_dict())
        else:
            sys.stdout.write(manifest)
        return
    _print_submitted(engine, get_engine(engine, address).submit(spec), spec, as_json)


def _print_submitted(engine: str, handle: JobHandle, spec: JobSpec, as_json: bool) -> None:
    """The job's id; on Ray, a job sharing a GPU is told the memory cap it runs under."""
    from computewise.train.memory_cap import fraction_memory_cap

    cap = fraction_memory_cap(spec.resources.gpus) if engine == "ray" else {}  # Ray alone packs jobs on a GPU
    if as_json:
        from computewise.scale.submitted import SubmittedJob

        emit_json(SubmittedJob(handle, spec.resources.gpus if cap else None).to_dict())
    else:
        sys.stdout.write(f"submitted {handle.name} to {handle.engine}: job id {handle.job_id}\n")
        if cap:
            sys.stdout.write(
                f"it shares a GPU: its PyTorch memory is capped to {spec.resources.gpus:.0%} of the device "
                f"({', '.join(f'{k}={v}' for k, v in cap.items())}; computewise.train applies it, other programs "
                "call computewise.train.memory_cap.apply_gpu_memory_cap())\n"
            )
