"""A ``JobSpec`` as a Kubernetes batch/v1 Job that survives preemption, and an engine that submits it.

Preemption on Kubernetes reaches a pod two ways: the node is drained or reclaimed (the pod gets
the ``DisruptionTarget`` condition) or computewise.train catches SIGTERM, saves and exits 75. The
Job's ``podFailurePolicy`` ignores both, so a replacement pod is created without using up
``backoffLimit``; only real failures count against ``max_restarts``. The replacement runs the same
(resume) command, and computewise.train resumes from the newest checkpoint under ``checkpoint_uri``.
"""

from __future__ import annotations

import math
import re
from typing import Any

from computewise.errors import JobEngineError, MissingExtraError
from computewise.scale.accelerators import KubernetesRequest, kubernetes_request
from computewise.scale.engine import PREEMPTED_EXIT_CODE, JobHandle, JobSpec, JobStatus, Resources
from computewise.scale.yaml_text import YamlValue, dump_yaml

__all__ = ["CONTAINER_NAME", "KubernetesEngine", "job_manifest", "render_job"]

CONTAINER_NAME = "job"
# computewise.train needs a step to finish and a checkpoint to be written after SIGTERM; the
# Kubernetes default of 30 s is too short for a large model's checkpoint.
TERMINATION_GRACE_S = 120
_LABEL_PREFIX = "computewise.io/"
# The well-known label of a node's cloud instance type: what picks AWS Neuron nodes, which no device label names.
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
# GPUs asked for without a model (--gpus without --gpu): NVIDIA's, the device most clusters have.
_DEFAULT_DEVICE = "nvidia.com/gpu"
_LABEL_VALUE_RE = re.compile(r"[^A-Za-z0-9_.-]+")


def _label_value(text: str) -> str:
    """A label value: <= 63 chars of [A-Za-z0-9_.-], starting and ending alphanumeric (or empty)."""
    return _LABEL_VALUE_RE.sub("-", text)[:63].strip("-_.")


def _label_key(text: str) -> str:
    return _LABEL_PREFIX + (_label_value(text) or "tag")


def _cpu_quantity(cpus: float) -> str:
    return str(int(cpus)) if cpus == int(cpus) else f"{math.ceil(cpus * 1000)}m"


def _whole_gpus(resources: Resources) -> int:
    if resources.gpus != int(resources.gpus):
        raise JobEngineError(
            f"Kubernetes cannot give a job {resources.gpus} of a GPU: device plugins count whole devices",
            "ask for whole GPUs (--gpus 1), use MIG or time-slicing on the cluster and request that resource in the "
            "rendered manifest, or share GPUs with the ray engine",
        )
    return int(resources.gpus)


def _on_instance_types(instance_types: tuple[str, ...]) -> dict[str, YamlValue]:
    """Node affinity to any of the instance types, by the label every cloud's nodes carry."""
    term: dict[str, YamlValue] = {
        "matchExpressions": [{"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": list(instance_types)}]
    }
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


def job_manifest(spec: JobSpec, namespace: str = "default") -> dict[str, YamlValue]:
    """The Job as plain data: what ``render_job`` prints and ``KubernetesEngine.submit`` sends."""
    if spec.image is None:
        raise JobEngineError(
            f"the Kubernetes Job {spec.name!r} needs a container image",
            "pass --image, e.g. --image ghcr.io/org/train:1.0 (an image with your code and computewise installed)",
        )
    gpus = _whole_gpus(spec.resources)
    labels: dict[str, YamlValue] = {"app.kubernetes.io/managed-by": "computewise", _LABEL_PREFIX + "run": spec.name}
    labels.update({_label_key(key): _label_value(value) for key, value in sorted(spec.tags.items())})
    annotations: dict[str, YamlValue] = {}
    if spec.checkpoint_uri is not None:
        annotations[_LABEL_PREFIX + "checkpoint-uri"] = spec.checkpoint_uri
    if spec.hourly_usd is not None:
        annotations[_LABEL_PREFIX + "hourly-usd"] = str(spec.hourly_usd)
    env: dict[str, str] = {"COMPUTEWISE_RUN_NAME": spec.name}
    if spec.checkpoint_uri is not None:
        env["COMPUTEWISE_CHECKPOINT_URI"] = spec.checkpoint_uri
    env.update(spec.env)
    device = (
        kubernetes_request(spec.resources.accelerator, gpus)
        if spec.resources.accelerator is not None
        else KubernetesRequest(_DEFAULT_DEVICE)
    )
    requests: dict[str, YamlValue] = {"cpu": _cpu_quantity(spec.resources.cpus)}
    limits: dict[str, YamlValue] = {}
    if spec.resources.memory_bytes is not None:
        requests["memory"] = str(spec.resources.memory_bytes)
        limits["memory"] = str(spec.resources.memory_bytes)
    if gpus:
        limits[device.resource] = str(gpus)  # a quantity: a string in the API, like "2" or "500m"
    container: dict[str, YamlValue] = {
        "name": CONTAINER_NAME,
        "image": spec.image,
        "command": list(spec.launch(spec.effective_resume_command)),
        "env": [{"name": key, "value": value} for key, value in env.items()],
        "resources": {"requests": requests, "limits": limits} if limits else {"requests": requests},
    }
    pod_spec: dict[str, YamlValue] = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": TERMINATION_GRACE_S,
    }
    if device.node_selector:
        pod_spec["nodeSelector"] = dict(device.node_selector)
    if device.instance_types:
        pod_spec["affinity"] = _on_instance_types(device.instance_types)
    if gpus:
        # Device nodes are commonly tainted with the device's resource name (GKE taints TPU nodes google.com/tpu).
        pod_spec["tolerations"] = [{"key": device.resource, "operator": "Exists", "effect": "NoSchedule"}]
    pod_spec["containers"] = [container]
    metadata: dict[str, YamlValue] = {"name": spec.name, "namespace": namespace, "labels": labels}
    if annotations:
        metadata["annotations"] = annotations
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {
            "backoffLimit": spec.max_restarts,
            "podFailurePolicy": {
                "rules": [
                    # Preempted after saving a checkpoint: start a new pod, do not count a failure.
                    {
                        "action": "Ignore",
                        "onExitCodes": {
                            "containerName": CONTAINER_NAME,
                            "operator": "In",
                            "values": [PREEMPTED_EXIT_CODE],
                        },
                    },
                    # Node drained, spot node reclaimed, pod evicted: not the job's fault either.
                    {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
                ]
            },
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
        },
    }


def render_job(spec: JobSpec, namespace: str = "default") -> str:
    """The Job as YAML text, for ``kubectl apply -f`` or review (``computewise submit --dry-run``)."""
    return dump_yaml(job_manifest(spec, namespace))


class KubernetesEngine:
    """Submits Jobs with the official ``kubernetes`` client, using the current kubeconfig context."""

    name = "kubernetes"

    def __init__(self, namespace: str = "default") -> None:
        try:
            from kubernetes import client, config  # type: ignore[import-not-found,unused-ignore]
        except ImportError as error:
            raise MissingExtraError("kubernetes", "kubernetes", "submitting to Kubernetes") from error
        try:
            config.load_kube_config()  # type: ignore[no-untyped-call,unused-ignore]
        except Exception as error:  # the client raises several unrelated types for a missing or bad kubeconfig
            raise JobEngineError(
                f"cannot load a Kubernetes configuration: {error}",
                "set KUBECONFIG or run `kubectl config use-context NAME`; or use --dry-run and kubectl apply -f",
            ) from error
        self.namespace = namespace
        self._batch: Any = client.BatchV1Api()
        self._core: Any = client.CoreV1Api()

    def submit(self, spec: JobSpec) -> JobHandle:
        self._batch.create_namespaced_job(self.namespace, job_manifest(spec, self.namespace))
        return JobHandle(self.name, spec.name, spec.name)

    def status(self, handle: JobHandle) -> JobStatus:
        job_status = self._batch.read_namespaced_job_status(handle.job_id, self.namespace).status
        for condition in job_status.conditions or []:
            if condition.status == "True" and condition.type == "Complete":
                return "succeeded"
            if condition.status == "True" and condition.type == "Failed":
                return "failed"
        return "running" if job_status.active else "pending"

    def logs(self, handle: JobHandle) -> str:
        pods = self._core.list_namespaced_pod(self.namespace, label_selector=f"job-name={handle.job_id}").items
        return "".join(
            str(self._core.read_namespaced_pod_log(pod.metadata.name, self.namespace, container=CONTAINER_NAME))
            for pod in sorted(pods, key=lambda pod: pod.metadata.creation_timestamp)
        )

    def cancel(self, handle: JobHandle) -> None:
        self._batch.delete_namespaced_job(handle.job_id, self.namespace, propagation_policy="Background")
