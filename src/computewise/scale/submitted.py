"""What ``computewise submit --json`` prints: the job handed to an engine, or with ``--dry-run`` what would be.

Typed here rather than assembled in the CLI, so the document has a version and a generated schema, and
a script can read the handle back (``SubmittedJob.from_dict``) to ask the same engine about the job.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from computewise.scale.engine import JobHandle
from computewise.specs.codec import Document, Jsonable, json_field

__all__ = ["SubmitDryRun", "SubmittedJob"]

_SUBMIT = Document(
    "submit",
    "submit --json",
    "The job handed to an engine (SubmittedJob: the engine's handle) or, with --dry-run, what would be handed "
    "(SubmitDryRun: the engine's manifest, nothing submitted).",
)


@dataclass(frozen=True)
class SubmittedJob(Jsonable):
    """``submit --json``: the engine's handle, and on Ray the GPU share a fractional job is capped to."""

    json_document: ClassVar[Document] = _SUBMIT
    json_description: ClassVar[str] = "`submit --json`: the job as the engine took it."

    handle: JobHandle = field(metadata=json_field(inline=True))
    gpu_memory_fraction: float | None = field(
        default=None,
        metadata=json_field(
            omit_empty=True,
            description="On Ray, a job given a fraction of a GPU: the share of the device's memory its PyTorch "
            "is capped to (absent when the job has whole GPUs or runs elsewhere).",
            exclusive_minimum=0,
            exclusive_maximum=1,
        ),
    )


@dataclass(frozen=True)
class SubmitDryRun(Jsonable):
    """``submit --dry-run --json``: the manifest the engine would be given; nothing was submitted."""

    json_document: ClassVar[Document] = _SUBMIT
    json_description: ClassVar[str] = "`submit --dry-run --json`: what would be submitted, nothing was."

    engine: str = field(metadata=json_field(description="The engine the manifest is for."))
    name: str = field(metadata=json_field(description="The job's name, as given to --name."))
    manifest: str = field(
        metadata=json_field(
            description="The engine's own text: an sbatch script, a Kubernetes Job or SkyPilot task in YAML, or "
            "the Ray job request as JSON."
        )
    )
