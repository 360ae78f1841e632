"""The Ray Jobs engine: a ``JobSpec`` becomes one Ray job, submitted through the Ray Jobs SDK.

Ray already schedules, retries and reports; computewise adds the sizing, the stable run name in
the job metadata, and a refusal up front when the cluster can never run the request (Ray itself
would leave such a job PENDING forever). The address is the dashboard's HTTP address
(``http://HOST:8265``), the one ``ray job submit --address`` takes.

Fractional GPUs are logical in Ray: four jobs at 0.25 GPU all see the whole device. So a job asking
for a fraction gets ``COMPUTEWISE_GPU_MEMORY_FRACTION`` in its environment; ``computewise.train``
caps its PyTorch allocator to that share before training (``computewise.train.memory_cap``), and
other programs call ``apply_gpu_memory_cap()`` themselves (without it the cap is advisory only).

The feasibility check reads the nodes alive now. On an autoscaling cluster a node type that is not
up yet counts as missing: start it (or submit with ``ray job submit``) if the autoscaler would add it.

``ray`` is imported inside functions: it is the optional ``ray`` extra.
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from computewise.catalog import load_catalog
from computewise.errors import InputError, JobEngineError, MissingExtraError, UnknownNameError
from computewise.monitor.recorded import RUN_ID_ENV
from computewise.scale.accelerators import NEURON_CORES_PER_DEVICE
from computewise.scale.engine import JobExit, JobHandle, JobSpec, JobStatus
from computewise.train.memory_cap import fraction_memory_cap
from computewise.units import plural

if TYPE_CHECKING:
    from ray.job_submission import JobSubmissionClient

__all__ = ["ClusterNode", "RayJobsEngine", "ray_accelerator_type", "ray_device_resource", "submit_while_agent_starts"]

# Long enough for a loaded head node on a slow link, short enough that a wrong address fails fast.
_PROBE_TIMEOUT_S = 3.0
_SUBMISSION_SUFFIX_HEX_CHARS = 8

# Catalog slug -> the accelerator type Ray detects on a node (ray.util.accelerators). Families share
# one Ray type: Ray names an H100 SXM and an H100 PCIe both "H100". Unlisted names pass through as
# given, so a Ray type written directly (e.g. "RTX-PRO-6000") also works.
_RAY_ACCELERATOR_TYPES: dict[str, str] = {
    "v100-16gb": "V100",
    "v100-32gb": "V100",
    "t4": "T4",
    "a10g": "A10G",
    "l4": "L4",
    "l40s": "L40S",
    "a100-40gb": "A100",
    "a100-80gb": "A100",
    "a100-80gb-pcie": "A100",
    "h100-sxm": "H100",
    "h100-pcie": "H100",
    "h100-nvl": "H100",
    "h100": "H100",
    "h200": "H200",
    "gh200": "GH200",
    "b200": "B200",
    "mi250x": "AMD-Instinct-MI250X",
    "mi300x": "AMD-Instinct-MI300X-OAM",
    "tpu-v4": "TPU-V4",
    "tpu-v5e": "TPU-V5LITEPOD",
    "tpu-v5p": "TPU-V5P",
    "gaudi2": "Intel-GAUDI",
    "gaudi3": "Intel-GAUDI",
}

# The Ray resource that counts a device, and how many of it one device is (docs.ray.io, "Accelerator Support"):
# NVIDIA and AMD GPUs are "GPU", Cloud TPU chips "TPU", Intel Gaudi "HPU", and AWS Neuron devices are
# counted in cores, two per Trainium or Inferentia2 device.
_DEVICE_RESOURCES: dict[tuple[str, str], tuple[str, int]] = {
    ("Google", "tpu"): ("TPU", 1),
    ("AWS", "npu"): ("neuron_cores", NEURON_CORES_PER_DEVICE),
    ("Intel", "npu"): ("HPU", 1),
}

# Ray Jobs SDK status values -> ours; they are the same five words in upper case.
_STATUS: dict[str, JobStatus] = {
    "PENDING": "pending",
    "RUNNING": "running",
    "SUCCEEDED": "succeeded",
    "FAILED": "failed",
    "STOPPED": "stopped",
}


def ray_accelerator_type(accelerator: str) -> str:
    """The Ray accelerator type for a catalog slug or alias (``h100-sxm`` -> ``H100``); other names pass through."""
    known = _RAY_ACCELERATOR_TYPES.get(accelerator.lower())
    if known is not None:
        return known
    try:
        slug = load_catalog().accelerator(accelerator).slug
    except UnknownNameError:
        return accelerator
    return _RAY_ACCELERATOR_TYPES.get(slug, accelerator)


def ray_device_resource(accelerator: str | None) -> tuple[str, int]:
    """The Ray resource ``accelerator``'s devices are counted in, and its amount per device; GPUs by default."""
    try:
        device = load_catalog().accelerator(accelerator) if accelerator else None
    except UnknownNameError:  # a Ray accelerator type written directly: a GPU, as ray_accelerator_type lets it be
        device = None
    return _DEVICE_RESOURCES.get((device.vendor, device.kind), ("GPU", 1)) if device else ("GPU", 1)


@dataclass(frozen=True)
class ClusterNode:
    """One alive node's total resources, as Ray counts them (``CPU``, ``GPU``, ``memory``, ``accelerator_type:X``)."""

    node_id: str
    resources: dict[str, float]

    def amount(self, resource: str) -> float:
        return self.resources.get(resource, 0.0)


# A freshly started head node answers "No available agent to submit job, please try again later"
# (HTTP 500) until its job agent is up, seconds after the dashboard already serves; a loaded one
# answers the same when the agent takes over 10 s to start the job's supervisor (Ray's
# WAIT_AVAILABLE_AGENT_TIMEOUT). Ray's message asks for a retry; one with back-off, bounded in
# time and said on stderr, keeps users and CI from seeing a transient refusal as a failure. A
# retry after such a timeout may find the first attempt went through: the same submission id
# "already exists", which is then the job.
_AGENT_STARTING = "No available agent to submit job"
_ALREADY_SUBMITTED = "already exists"
_AGENT_WAIT_S = 120.0
_FIRST_RETRY_S = 0.5
_LONGEST_RETRY_S = 8.0


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def submit_while_agent_starts(
    submit: Callable[[], str],
    name: str,
    say: Callable[[str], None] = _say,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    submission_id: str = "",
) -> str:
    """``submit()``, retried with doubling waits while Ray's job agent is still starting, for at most
    ``_AGENT_WAIT_S``; any other refusal, or the agent still missing after that, is a JobEngineError."""
    deadline_s = clock() + _AGENT_WAIT_S
    wait_s = _FIRST_RETRY_S
    retried = False
    while True:
        try:
            return submit()
        except (RuntimeError, ConnectionError, OSError) as err:
            if retried and submission_id and submission_id in str(err) and _ALREADY_SUBMITTED in str(err):
                return submission_id
            transient = _AGENT_STARTING in str(err)
            if not transient or clock() + wait_s > deadline_s:
                fix = "check the cluster with `ray status`"
                if transient:
                    fix = (
                        f"its job agent did not start within {_AGENT_WAIT_S:.0f} s; the usual cause is another Ray "
                        "cluster on the same machine holding the agent's port 52365: start this one with "
                        f"`ray start --head --dashboard-agent-listen-port=PORT` (a free port), or {fix}"
                    )
                raise JobEngineError(f"Ray refused job {name!r}: {err}", fix) from err
            say(f"Ray's job agent is still starting; submitting {name!r} again in {wait_s:g} s")
            sleep(wait_s)
            retried = True
            wait_s = min(2.0 * wait_s, _LONGEST_RETRY_S)


class RayJobsEngine:
    """Submit ``JobSpec``s to a running Ray cluster through its Jobs API (the dashboard address)."""

    name = "ray"

    def __init__(self, address: str) -> None:
        self.address = _normalize_address(address)
        _refuse_env_override(self.address)
        client_class = _client_class()
        self._ray_version = _probe(self.address)
        try:
            self._client = client_class(self.address)
        except (RuntimeError, ConnectionError, OSError) as err:
            raise JobEngineError(
                f"the Ray Jobs API at {self.address} refused: {err}", "check the cluster with `ray status`"
            ) from err

    def nodes(self) -> list[ClusterNode]:
        """The cluster's alive nodes and their total resources (Ray's state API, what ``ray list nodes`` reads)."""
        body = _get_json(self.address, "/api/v0/nodes?limit=10000&detail=false")
        try:
            rows = body["data"]["result"]["result"]
            return [
                ClusterNode(str(row["node_id"]), {k: float(v) for k, v in row["resources_total"].items()})
                for row in rows
                if row.get("state") == "ALIVE"
            ]
        except (KeyError, TypeError, ValueError) as err:
            raise JobEngineError(
                f"the Ray cluster at {self.address} (Ray {self._ray_version}) sent its node list in an unknown shape",
                "use a Ray version whose state API serves /api/v0/nodes (Ray 2.x)",
            ) from err

    def check_feasible(self, spec: JobSpec) -> None:
        """Refuse a request no node of the cluster can ever hold, instead of leaving it pending forever.

        A job's entrypoint runs on one node, so each resource is compared with the largest node.
        """
        nodes = self.nodes()
        request = _entrypoint_request(spec)
        problems: list[str] = []
        for resource, wanted in request.items():
            largest = max((node.amount(resource) for node in nodes), default=0.0)
            if wanted > largest + 1e-9:
                total = sum(node.amount(resource) for node in nodes)
                problems.append(_shortfall(resource, wanted, largest, total))
        if not problems and not any(_fits(node, request) for node in nodes):
            problems.append("no single node has all of them at once")
        if problems:
            raise JobEngineError(
                f"the Ray cluster at {self.address} can never run job {spec.name!r} "
                f"({plural(len(nodes), 'node')} alive): " + "; ".join(problems),
                "ask for less (see `computewise plan` for a layout that fits), or add a node that has it",
            )

    def submit(self, spec: JobSpec) -> JobHandle:
        """Submit after the feasibility check; the job id is the run name plus a random suffix."""
        self.check_feasible(spec)
        resources = spec.resources
        request = _entrypoint_request(spec)
        env = {
            **spec.env,
            "COMPUTEWISE_RUN_NAME": spec.name,
            **({"COMPUTEWISE_CHECKPOINT_URI": spec.checkpoint_uri} if spec.checkpoint_uri else {}),
            **fraction_memory_cap(resources.gpus),
        }
        metadata = {
            "computewise_run_name": spec.name,
            **({"computewise_run_id": spec.env[RUN_ID_ENV]} if RUN_ID_ENV in spec.env else {}),
            **({"computewise_hourly_usd": f"{spec.hourly_usd:g}"} if spec.hourly_usd is not None else {}),
            **({"computewise_accelerator": resources.accelerator} if resources.accelerator else {}),
            **{f"computewise_tag_{key}": value for key, value in spec.tags.items()},
        }
        submission_id = f"{spec.name}-{secrets.token_hex(_SUBMISSION_SUFFIX_HEX_CHARS // 2)}"

        def submit() -> str:
            job_id: str = self._client.submit_job(
                entrypoint=shlex.join(spec.launch()),
                submission_id=submission_id,
                runtime_env={"env_vars": env},
                metadata=metadata,
                entrypoint_num_cpus=resources.cpus,
                entrypoint_num_gpus=request.get("GPU", 0),
                entrypoint_memory=resources.memory_bytes,
                entrypoint_resources={name: amount for name, amount in request.items() if name not in _BUILT_IN}
                or None,
            )
            return job_id

        job_id = submit_while_agent_starts(submit, spec.name, submission_id=submission_id)
        return JobHandle(engine=self.name, job_id=job_id, name=spec.name)

    def status(self, handle: JobHandle) -> JobStatus:
        try:
            ray_status = self._client.get_job_status(handle.job_id)
        except (RuntimeError, ConnectionError, OSError) as err:
            raise _job_error(handle, self.address, err) from err
        return _STATUS[ray_status.value]

    def logs(self, handle: JobHandle) -> str:
        try:
            return self._client.get_job_logs(handle.job_id)
        except (RuntimeError, ConnectionError, OSError) as err:
            raise _job_error(handle, self.address, err) from err

    def metadata(self, handle: JobHandle) -> dict[str, str]:
        """The job's metadata as Ray stores it: the run name, price and tags computewise put there."""
        try:
            info = self._client.get_job_info(handle.job_id)
        except (RuntimeError, ConnectionError, OSError) as err:
            raise _job_error(handle, self.address, err) from err
        return dict(info.metadata or {})

    def job_exit(self, handle: JobHandle) -> JobExit:
        """The entrypoint's exit code and Ray's start and end times (milliseconds in Ray, seconds here).

        Ray marks a job FAILED for any non-zero exit, including 75 (preempted after saving): the code
        tells a preemption from a failure. A driver killed by a signal reports -N, as Python's
        ``subprocess`` does; a job whose node died has no code at all.
        """
        try:
            info = self._client.get_job_info(handle.job_id)
        except (RuntimeError, ConnectionError, OSError) as err:
            raise _job_error(handle, self.address, err) from err
        return JobExit(
            exit_code=info.driver_exit_code,
            started_at_s=info.start_time / 1000 if info.start_time else None,
            ended_at_s=info.end_time / 1000 if info.end_time else None,
        )

    def cancel(self, handle: JobHandle) -> None:
        """Ask Ray to stop the job (SIGTERM, then SIGKILL after Ray's grace period); a finished job is left alone."""
        try:
            self._client.stop_job(handle.job_id)
        except (RuntimeError, ConnectionError, OSError) as err:
            raise _job_error(handle, self.address, err) from err


# Resources the Jobs SDK takes as their own arguments (entrypoint_num_cpus, _num_gpus, _memory), not in a dict.
_BUILT_IN = ("CPU", "GPU", "memory")


def _entrypoint_request(spec: JobSpec) -> dict[str, float]:
    """What the entrypoint reserves, in Ray's resource names; zero amounts are left out."""
    resources = spec.resources
    request: dict[str, float] = {"CPU": float(resources.cpus)}
    if resources.gpus > 0:
        device, per_device = ray_device_resource(resources.accelerator)
        request[device] = float(resources.gpus * per_device)
    if resources.memory_bytes is not None:
        request["memory"] = float(resources.memory_bytes)
    if resources.accelerator:
        request[f"accelerator_type:{ray_accelerator_type(resources.accelerator)}"] = 0.001
    return request


def _fits(node: ClusterNode, request: Mapping[str, float]) -> bool:
    return all(node.amount(resource) + 1e-9 >= wanted for resource, wanted in request.items())


def _shortfall(resource: str, wanted: float, largest: float, total: float) -> str:
    if resource.startswith("accelerator_type:"):
        return f"it asks for accelerator type {resource.split(':', 1)[1]!r} and no node has one"
    if resource == "memory":
        return (
            f"it asks for {wanted / 1e9:.3g} GB of memory but the largest node has {largest / 1e9:.3g} GB "
            f"(whole cluster {total / 1e9:.3g} GB), {(wanted - largest) / 1e9:.3g} GB short"
        )
    unit = {"CPU": "CPU(s)", "GPU": "GPU(s)"}.get(resource, f"of {resource!r}")
    return (
        f"it asks for {wanted:g} {unit} but the largest node has {largest:g} "
        f"(whole cluster {total:g}), {wanted - largest:g} short"
    )


def _job_error(handle: JobHandle, address: str, err: Exception) -> JobEngineError:
    if "404" in str(err):
        return JobEngineError(
            f"no Ray job {handle.job_id!r} on the cluster at {address}",
            "check the job id (`ray job list`) and that the address is the cluster it was submitted to",
        )
    return JobEngineError(
        f"Ray could not answer about job {handle.job_id!r}: {err}", "check the cluster with `ray status`"
    )


def _normalize_address(address: str) -> str:
    address = address.strip().rstrip("/")
    if not address:
        raise InputError("the Ray address is empty", "pass the dashboard address, e.g. --address http://127.0.0.1:8265")
    if "://" not in address:
        address = f"http://{address}"
    if not address.startswith(("http://", "https://")):
        raise InputError(
            f"Ray address {address!r} is not an HTTP address",
            "pass the dashboard address (http://HOST:8265), not a ray:// client or GCS address",
        )
    return address


def _refuse_env_override(address: str) -> None:
    """The Ray SDK silently prefers RAY_API_SERVER_ADDRESS / RAY_ADDRESS over the address it is given."""
    for variable in ("RAY_API_SERVER_ADDRESS", "RAY_ADDRESS"):
        value = os.environ.get(variable)
        if value:
            if _normalize_address(value) != address:
                raise JobEngineError(
                    f"{variable}={value} would make Ray submit to another cluster than {address}",
                    f"unset {variable}, or pass the same address",
                )
            return


def _get_json(address: str, path: str) -> Any:
    try:
        with urllib.request.urlopen(address + path, timeout=_PROBE_TIMEOUT_S) as response:
            return json.loads(response.read())
    except (urllib.error.URLError, OSError, ValueError) as err:
        raise JobEngineError(
            f"no Ray cluster reachable at {address} ({err})",
            "start one (`ray start --head --dashboard-host=127.0.0.1`) or pass its dashboard address, "
            "e.g. --address http://127.0.0.1:8265",
        ) from err


def _probe(address: str) -> str:
    """The cluster's Ray version, fast; raises before anything is submitted when nothing answers."""
    body = _get_json(address, "/api/version")
    version = body.get("ray_version") if isinstance(body, dict) else None
    if not isinstance(version, str):
        raise JobEngineError(
            f"{address} answers but is not a Ray dashboard",
            "pass the Ray dashboard address (port 8265 by default), not the GCS port (6379)",
        )
    return version


def _client_class() -> type[JobSubmissionClient]:
    """The SDK class, imported here because ``ray`` is an optional extra."""
    try:
        from ray.job_submission import JobSubmissionClient
    except ImportError as err:
        raise MissingExtraError("ray", "ray", "the Ray Jobs engine") from err
    return JobSubmissionClient
