"""A ``JobSpec`` as a SkyPilot task YAML for managed jobs that recover from preemption.

Spot capacity is asked for only when the job says so (``Resources.spot``: ``submit --spot``, or a
plan priced at spot), so the task never rents at a price the user did not see. SkyPilot's managed
jobs (``sky jobs launch``) relaunch a preempted spot cluster, in another zone
or cloud if needed (``job_recovery``), and rerun ``run:``; the checkpoint bucket is mounted at
the same path on every attempt, so computewise.train resumes from it. computewise only renders
the task: launching needs SkyPilot's own cloud credentials and CLI.
"""

from __future__ import annotations

import math
import re
import shlex

from computewise.errors import JobEngineError
from computewise.scale.accelerators import skypilot_resources
from computewise.scale.engine import PREEMPTED_EXIT_CODE, JobHandle, JobSpec, JobStatus
from computewise.scale.yaml_text import YamlValue, dump_yaml
from computewise.units import GIB

__all__ = ["CHECKPOINT_MOUNT", "SkyPilotEngine", "render_task"]

CHECKPOINT_MOUNT = "/checkpoints"
_BUCKET_SCHEMES = ("s3://", "gs://", "r2://", "cos://", "oci://", "https://")
_NOT_IN_A_LABEL = re.compile(r"[^a-z0-9_-]+")


def _label_value(text: str) -> str:
    """``text`` as a label value every cloud SkyPilot may fail over to accepts (it refuses the task otherwise).

    GCP's rule is the narrowest: lowercase letters, digits, '-' and '_', at most 63; Kubernetes adds that
    a value starts and ends with a letter or digit.
    """
    return _NOT_IN_A_LABEL.sub("-", text.lower())[:63].strip("-_")


def _label_key(text: str) -> str:
    """A label key: a label value that starts with a letter (GCP), so ``2024`` becomes ``tag-2024``."""
    key = _label_value(text)
    return key if key[:1].isalpha() else _label_value(f"tag-{text}")


def render_task(spec: JobSpec) -> str:
    """The task as YAML text, for ``sky jobs launch FILE``."""
    resources: dict[str, YamlValue] = {}
    gpus = spec.resources.gpus
    if gpus:
        if spec.resources.accelerator is None:
            raise JobEngineError(
                "SkyPilot needs to know which GPU to rent",
                "pass --gpu, e.g. --gpu h100",
            )
        resources.update(skypilot_resources(spec.resources.accelerator, gpus))
    resources["cpus"] = f"{math.ceil(spec.resources.cpus)}+"
    if spec.resources.memory_bytes is not None:
        resources["memory"] = f"{math.ceil(spec.resources.memory_bytes / GIB)}+"
    resources["use_spot"] = spec.resources.spot
    if spec.image is not None:
        resources["image_id"] = f"docker:{spec.image}"
    # Retry a failed run (not only a preempted cluster) up to max_restarts times: computewise.train
    # exits 75 after saving when it is signalled, and that must not end the managed job.
    resources["job_recovery"] = {"strategy": "EAGER_NEXT_REGION", "max_restarts_on_errors": spec.max_restarts}
    envs: dict[str, YamlValue] = {"COMPUTEWISE_RUN_NAME": spec.name}
    task: dict[str, YamlValue] = {"name": spec.name, "resources": resources}
    if spec.checkpoint_uri is not None:
        if not spec.checkpoint_uri.startswith(_BUCKET_SCHEMES):
            raise JobEngineError(
                f"checkpoint URI {spec.checkpoint_uri!r} is not a bucket, and a spot node's disk dies with it",
                "use a bucket URL such as s3://my-bucket/run-name or gs://my-bucket/run-name",
            )
        task["file_mounts"] = {CHECKPOINT_MOUNT: {"source": spec.checkpoint_uri, "mode": "MOUNT"}}
        envs["COMPUTEWISE_CHECKPOINT_URI"] = CHECKPOINT_MOUNT
    envs.update(spec.env)
    task["envs"] = envs
    if spec.tags:
        resources["labels"] = dict(sorted((_label_key(key), _label_value(value)) for key, value in spec.tags.items()))
    command = shlex.join(spec.launch(spec.effective_resume_command))
    task["run"] = (
        f"{command}\ncode=$?\n"
        f'if [ "$code" -eq {PREEMPTED_EXIT_CODE} ]; then echo "computewise: preempted, checkpoint saved" >&2; fi\n'
        'exit "$code"'
    )
    return dump_yaml(task)


class SkyPilotEngine:
    """Render-only: SkyPilot launches from its own CLI with the user's cloud credentials."""

    name = "skypilot"

    def _refuse(self) -> JobEngineError:
        return JobEngineError(
            "computewise renders SkyPilot tasks but does not launch them",
            "run computewise submit --engine skypilot --dry-run ... > task.yaml, then: sky jobs launch task.yaml",
        )

    def submit(self, spec: JobSpec) -> JobHandle:
        raise self._refuse()

    def status(self, handle: JobHandle) -> JobStatus:
        raise self._refuse()

    def logs(self, handle: JobHandle) -> str:
        raise self._refuse()

    def cancel(self, handle: JobHandle) -> None:
        raise self._refuse()
