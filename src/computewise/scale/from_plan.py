"""A job's resources from a plan: ``computewise plan train --json``'s recommended option, ready to submit.

The planner already chose the accelerator, how many, and what they cost per hour; ``submit --plan``
and ``run --engine ... --plan`` take those instead of asking the user to copy them into flags.
One machine per job: a plan that spans several is refused (the engines here run one node's worth
per job; multi-node launches are the engine's own, e.g. a Ray Train or PyTorchJob).

CPUs: one process per GPU feeds its GPU from a data loader, so a job gets its share of the
instance's vCPUs (``vcpus * gpus / accelerator_count``) less ``NODE_RESERVE`` for the node's own
daemons (a Kubernetes pod asking for every vCPU is never scheduled: kubelet and system
reservations come first). Where the plan's instance is not in the catalog (an owned server),
``DEFAULT_CPUS_PER_GPU`` per GPU. A plan on a CPU (``xeon-8488c``) is a CPU job: no GPU asked for.
Cloud TPUs are priced per chip, so a plan of four v4 chips reads as four "instances" of one chip: they
are one TPU VM when a single host holds them, and one job.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from computewise.catalog import Catalog, load_catalog
from computewise.errors import InputError
from computewise.plan.result import Option, Plan
from computewise.scale.accelerators import processes_per_device, single_host_tpu_chips
from computewise.specs import Offering

__all__ = ["DEFAULT_CPUS_PER_GPU", "NODE_RESERVE", "PlannedJob", "planned_job"]

# A DGX H100 has 2 x 56 cores for 8 GPUs (14 each); 8 is a conservative share that still feeds a loader.
DEFAULT_CPUS_PER_GPU = 8
# The share of a node's vCPUs left to its daemons (kubelet, slurmd, sshd, the container runtime).
NODE_RESERVE = 0.1


@dataclass(frozen=True)
class PlannedJob:
    """What the plan's option asks for on its one machine: GPUs (one process each, or one per NeuronCore on
    Trainium and Inferentia2), their type, CPUs, the price.

    ``accelerator`` is None and ``gpus`` 0 for a plan on a CPU; ``spot`` says the plan priced spot capacity.
    """

    gpus: int
    accelerator: str | None
    processes: int
    cpus: int
    spot: bool
    hourly_usd: float
    summary: str


def planned_job(plan: Plan, source: str = "the plan", catalog: Catalog | None = None) -> PlannedJob:
    """The recommended option of ``plan`` (read with ``Plan.from_dict``) as one job's resources."""
    option = plan.recommended
    what = f"{option.gpus} x {option.accelerator}"
    catalog = catalog if catalog is not None else load_catalog()
    offering = next(
        (o for o in catalog.offerings if (o.cloud, o.instance_type) == (option.cloud, option.instance_type)), None
    )
    if option.instances != 1 and not _one_tpu_host(offering, option):
        raise InputError(
            f"{source} spans {option.instances} machines ({what}); a job here runs on one",
            "plan for one machine (e.g. --max-gpus 8), or launch multi-node training with the engine's own tool",
        )
    if option.gpus < 1:
        raise InputError(f"{source} asks for {option.gpus} GPUs", "write it with `computewise plan train ... --json`")
    cpus, cpus_why = _cpus(offering, option)
    on_cpu = catalog.accelerator(option.accelerator).kind == "cpu"
    per_device = 1 if on_cpu else processes_per_device(option.accelerator)
    workers = "one process per GPU" if per_device == 1 else f"one process per NeuronCore ({per_device} per device)"
    where = f"{option.cloud} {option.instance_type}, {option.pricing}"
    return PlannedJob(
        gpus=0 if on_cpu else option.gpus,
        accelerator=None if on_cpu else option.accelerator,
        processes=1 if on_cpu else option.gpus * per_device,
        cpus=cpus,
        spot=option.pricing == "spot",
        hourly_usd=option.usd_per_h,
        summary=f"{what} ({where}), {'a CPU job, no GPU' if on_cpu else workers}, {cpus_why}",
    )


def _one_tpu_host(offering: Offering | None, option: Option) -> bool:
    """Whether the option's "instances" are chips of one TPU VM: Cloud TPUs are priced per chip (an offering of
    one), and the chips of a single-host slice (up to 4 of v4 or v5p, 8 of v5e) are one machine, not several."""
    return (
        offering is not None
        and offering.accelerator_count == 1
        and option.gpus <= max(single_host_tpu_chips(option.accelerator), default=0)
    )


def _cpus(offering: Offering | None, option: Option) -> tuple[int, str]:
    """The CPUs the job asks for, and in words where the count comes from."""
    if offering is None:
        cpus = DEFAULT_CPUS_PER_GPU * option.gpus
        return cpus, f"{cpus} CPUs ({DEFAULT_CPUS_PER_GPU} per GPU: the instance is not in the catalog)"
    vcpus = offering.vcpus * option.gpus / offering.accelerator_count
    cpus = max(option.gpus, math.floor(vcpus * (1 - NODE_RESERVE)))
    return (
        cpus,
        f"{cpus} CPUs ({vcpus:g} vCPUs of the instance for these GPUs, less {NODE_RESERVE:.0%} for its daemons)",
    )
