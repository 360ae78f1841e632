"""The small contract every scale-out engine implements: submit, status, logs, cancel.

computewise does not schedule: it sizes, prices and names a job (``JobSpec``) and hands it to an
engine the team already trusts. Each engine (local subprocess, Ray Jobs, Kubernetes, Slurm,
SkyPilot) is a ``JobEngine``; the same ``JobSpec`` renders to all of them, so a job moves between
engines without rewriting it.

Preemption: training stopped by preemption exits with ``PREEMPTED_EXIT_CODE`` (75) after saving a
checkpoint. Every engine and manifest treats that code as "restart the same command", never as a
failure, and the restarted command resumes from ``checkpoint_uri``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

from computewise.errors import InputError
from computewise.ledger import PREEMPTED_EXIT_CODE
from computewise.specs.codec import Jsonable, json_field

__all__ = [
    "JOB_STATUSES",
    "PREEMPTED_EXIT_CODE",
    "JobEngine",
    "JobExit",
    "JobHandle",
    "JobSpec",
    "JobStatus",
    "Resources",
    "Supervisable",
    "sanitize_name",
    "validate_name",
]

# A DNS-1123 label: what Kubernetes accepts as a Job name, and safe for Slurm, Ray and SkyPilot too.
# One rule for every engine keeps the run name stable when a job moves between engines.
_NAME_RE = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?")
_MAX_NAME_CHARS = 63

JobStatus = Literal["pending", "running", "succeeded", "failed", "stopped"]
JOB_STATUSES: tuple[JobStatus, ...] = ("pending", "running", "succeeded", "failed", "stopped")


@dataclass(frozen=True)
class Resources:
    """What one job asks for: ``gpus`` may be a fraction (shared pools on Ray); ``accelerator`` is a catalog slug.

    ``spot``: rent preemptible capacity where the engine rents (SkyPilot); Kubernetes, Slurm and Ray run on
    the nodes the cluster already has.
    """

    gpus: float = 0
    accelerator: str | None = None
    cpus: float = 1
    memory_bytes: int | None = None
    spot: bool = False

    def __post_init__(self) -> None:
        if self.gpus < 0:
            raise InputError(f"gpus must be >= 0, got {self.gpus}", "ask for 0, a fraction such as 0.25, or a count")
        if self.gpus > 1 and self.gpus != int(self.gpus):
            raise InputError(
                f"gpus {self.gpus} mixes whole and fractional GPUs",
                "ask for a fraction below 1 (shared GPU) or a whole number of GPUs",
            )
        if self.cpus <= 0:
            raise InputError(f"cpus must be > 0, got {self.cpus}", "ask for at least a fraction of a CPU, e.g. 1")
        if self.memory_bytes is not None and self.memory_bytes <= 0:
            raise InputError(f"memory must be > 0 bytes, got {self.memory_bytes}", "write it like 16GB")


@dataclass(frozen=True)
class JobSpec:
    """One job, engine-neutral. ``name`` is the stable run name: a resubmitted (preempted) job keeps it.

    ``resume_command`` defaults to ``command``: computewise.train resumes from the newest
    checkpoint by itself, so re-running the same command is the resume.
    """

    name: str
    command: tuple[str, ...]
    resources: Resources = field(default_factory=Resources)
    tags: dict[str, str] = field(default_factory=dict)
    checkpoint_uri: str | None = None
    resume_command: tuple[str, ...] | None = None
    env: dict[str, str] = field(default_factory=dict)
    image: str | None = None
    hourly_usd: float | None = None
    max_restarts: int = 3
    processes: int = 1

    def __post_init__(self) -> None:
        validate_name(self.name)
        if self.processes < 1:
            raise InputError(f"processes must be >= 1, got {self.processes}", "e.g. --nproc 2 for two processes")
        if not self.command:
            raise InputError("the job has no command", "put the command after `--`, e.g. -- python train.py")
        if self.max_restarts < 0:
            raise InputError(f"max_restarts must be >= 0, got {self.max_restarts}", "use 0 to never restart")
        if self.hourly_usd is not None and self.hourly_usd < 0:
            raise InputError(f"hourly price must be >= 0, got {self.hourly_usd}", "give the price in USD per hour")

    def launch(self, command: tuple[str, ...] | None = None, python: str = "python") -> tuple[str, ...]:
        """``command`` (default: the job's) as one process, or under torchrun as ``processes`` on one node
        (``--no-python``: the command runs as given, so ``python train.py`` and a console script both work).

        ``python`` is the interpreter that runs torchrun on the node: this one's for a local job.
        """
        command = self.command if command is None else command
        if self.processes == 1:
            return command
        return (
            python, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={self.processes}",
            "--no-python", *command,
        )  # fmt: skip

    @property
    def effective_resume_command(self) -> tuple[str, ...]:
        """The command a restart runs: the explicit resume command, else the command itself."""
        return self.resume_command if self.resume_command is not None else self.command


@dataclass(frozen=True)
class JobHandle(Jsonable):
    """What ``submit`` returns: enough to ask the same engine about the job later (``submit --json``
    writes it, and ``SubmittedJob.from_dict`` reads it back)."""

    engine: str = field(metadata=json_field(description="The engine that runs the job (local, ray, kubernetes, ...)."))
    job_id: str = field(metadata=json_field(description="The engine's own id for the job."))
    name: str = field(metadata=json_field(description="The job's name, as given to --name."))


@runtime_checkable
class JobEngine(Protocol):
    """An engine that runs ``JobSpec``s. Implementations raise ``JobEngineError`` with a fix, never hang."""

    name: str

    def submit(self, spec: JobSpec) -> JobHandle: ...

    def status(self, handle: JobHandle) -> JobStatus: ...

    def logs(self, handle: JobHandle) -> str: ...

    def cancel(self, handle: JobHandle) -> None: ...


@dataclass(frozen=True)
class JobExit:
    """How a finished job ended, as the engine saw it; times are the engine's own, so billing skips our polling.

    ``exit_code`` is None when the engine does not know it (the node vanished); the times are None
    when the engine does not report them.
    """

    exit_code: int | None
    started_at_s: float | None
    ended_at_s: float | None


@runtime_checkable
class Supervisable(JobEngine, Protocol):
    """An engine whose finished jobs report their exit code: what resubmitting after a preemption needs.

    Kubernetes and Slurm restart preempted jobs themselves (the Job's pod failure policy, ``--requeue``),
    so only engines that do not (a local process, a Ray job) implement it.
    """

    def job_exit(self, handle: JobHandle) -> JobExit: ...


def validate_name(name: str) -> str:
    """Check a run name is a DNS-1123 label (``[a-z0-9-]``, <= 63 chars) and return it."""
    if len(name) > _MAX_NAME_CHARS or not _NAME_RE.fullmatch(name):
        raise InputError(
            f"invalid job name {name!r}",
            "use lowercase letters, digits and '-', start and end with a letter or digit, at most 63 characters "
            f"(e.g. {sanitize_name(name) or 'my-run'!r})",
        )
    return name


def sanitize_name(text: str) -> str:
    """Best-effort DNS-1123 label from free text: used for hints and for tag values as labels."""
    cleaned = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return cleaned[:_MAX_NAME_CHARS].strip("-")
