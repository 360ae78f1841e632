"""``computewise deploy ARTIFACT --address HOST:PORT``: the API of ``computewise serve`` on Ray Serve.

The model is deployed as a Ray Serve application on an existing cluster (``--address``, its GCS
HOST:PORT), scaled by the file ``computewise plan serve --ray-config`` writes; the command prints
the URL and returns, and the application keeps running until ``--delete``. Serving here, with a
ledger run and SLO admission, is ``computewise serve``.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from computewise.cli.common import (
    ArtifactArgument,
    InsecureOption,
    JsonOption,
    MaxBatchSizeOption,
    MaxBodyBytesOption,
    MaxQueueDelayOption,
    QueueLimitOption,
    TimeoutOption,
    TokenOption,
    bounded_float,
    bounded_int,
    emit_json,
)

if TYPE_CHECKING:
    from computewise.scale.deployment import RayServeDeployment


# The flags of this verb alone, one type each, so its signature reads in a screen.
_Address = Annotated[
    str | None, typer.Option(envvar="RAY_ADDRESS", help="The cluster's GCS address HOST:PORT (or $RAY_ADDRESS).")
]
_Host = Annotated[
    str,
    typer.Option(help="Address Ray Serve's HTTP proxy listens on; anything but loopback needs --token or --insecure."),
]
_Port = Annotated[int, typer.Option(parser=bounded_int("--port"), help="TCP port of Ray Serve's HTTP proxy.")]
_Batching = Annotated[
    str,
    typer.Option(
        help="greedy (@serve.batch: fill up to --max-batch-size or --max-queue-delay-ms), none (one input per "
        "call), or cost (runs as greedy: Ray Serve has no cost-aware batching)."
    ),
]
_RayConfig = Annotated[
    Path | None,
    typer.Option(
        "--ray-config",
        help="Replicas and autoscaling from the file `computewise plan serve ... --ray-config FILE` wrote. "
        "Default: one replica.",
    ),
]
_ReplicaCpus = Annotated[
    float,
    typer.Option(
        parser=bounded_float("--replica-cpus"),
        help="Logical CPUs Ray reserves for each replica (may be a fraction).",
    ),
]
_RoutePrefix = Annotated[
    str, typer.Option(help="Serve the routes under this path, e.g. /minilm, to share the cluster's proxy.")
]
_Delete = Annotated[bool, typer.Option("--delete", help="Delete the model's application from the cluster instead.")]


def deploy(
    artifact: ArtifactArgument,
    address: _Address = None,
    host: _Host = "127.0.0.1",
    port: _Port = 8000,
    max_batch_size: MaxBatchSizeOption = 32,
    max_queue_delay_ms: MaxQueueDelayOption = 10.0,
    batching: _Batching = "cost",
    queue_limit: QueueLimitOption = 256,
    timeout_s: TimeoutOption = 30.0,
    token: TokenOption = None,
    insecure: InsecureOption = False,
    max_body_bytes: MaxBodyBytesOption = 1 << 20,
    ray_config: _RayConfig = None,
    replica_cpus: _ReplicaCpus = 1.0,
    route_prefix: _RoutePrefix = "/",
    delete: _Delete = False,
    as_json: JsonOption = False,
) -> None:
    """Deploy a model's serving API on a Ray cluster with Ray Serve, print its URL and return.

    The same routes, request checks and JSON bodies as `computewise serve`, as a Ray Serve application
    named after the model, batched by @serve.batch (--max-batch-size items or --max-queue-delay-ms);
    it runs until `computewise deploy ARTIFACT --address HOST:PORT --delete`.
    """
    from computewise.errors import InputError, MissingExtraError
    from computewise.serve.batcher import POLICIES

    try:
        from computewise.scale.ray_serve import RayServeOptions, read_ray_config
        from computewise.scale.ray_serve import deploy as deploy_on_ray
    except ImportError as error:  # starlette and uvicorn come with ray[serve]
        raise MissingExtraError(error.name or "ray[serve]", "ray", "computewise deploy") from error
    if not address:
        raise InputError(
            "computewise deploy needs the cluster's address",
            "pass --address HOST:PORT (the GCS address `ray status` prints, 6379 by default) or set $RAY_ADDRESS",
        )
    if delete:
        _delete(artifact, address, as_json)
        return
    if batching not in POLICIES:
        raise InputError(f"--batching must be one of {', '.join(POLICIES)}, got {batching!r}", "e.g. --batching greedy")
    options = RayServeOptions(
        # @serve.batch batches greedily: "cost" has no Ray counterpart and runs as greedy; "none" is batches of one.
        max_batch_size=1 if batching == "none" else max_batch_size,
        batch_wait_s=max_queue_delay_ms / 1000.0,
        queue_limit=queue_limit,
        timeout_s=timeout_s,
        replica_cpus=replica_cpus,
        token=token,
        max_body_bytes=max_body_bytes,
        route_prefix=route_prefix,
        scaling=read_ray_config(ray_config) if ray_config is not None else None,
    )
    deployment = deploy_on_ray(artifact, address, host=host, port=port, options=options, insecure=insecure)
    delete_command = shlex.join(["computewise", "deploy", artifact, "--address", address, "--delete"])
    _print_deployment(deployment, delete_command, as_json)


def _delete(artifact: str, address: str, as_json: bool) -> None:
    """``--delete``: remove the model's application from the cluster, and say whether there was one."""
    from computewise.scale.ray_serve import application_name, delete_application

    name = application_name(artifact)
    deleted = delete_application(address, name)
    if as_json:
        from computewise.scale.deployment import DeletedApp

        emit_json(DeletedApp(name, address, deleted).to_dict())
    else:
        sys.stdout.write(f"deleted {name!r} from {address}\n" if deleted else f"no app {name!r} on {address}\n")


def _print_deployment(deployment: RayServeDeployment, delete_command: str, as_json: bool) -> None:
    """The URL to POST to and the command that deletes it (or the --json document); notes on stderr."""
    if as_json:
        from computewise.scale.deployment import DeployedApp

        emit_json(DeployedApp(deployment, delete_command).to_dict())
        return
    for note in deployment.notes:
        sys.stderr.write(f"computewise: {note}\n")
    sys.stdout.write(
        f"serving {deployment.app_name!r} on Ray Serve at {deployment.url} "
        f"(deployed in {deployment.deploy_s:.1f} s)\n"
        f"POST {deployment.url}/v1/models/{deployment.app_name}/infer\n"
        f"delete it with: {delete_command}\n"
    )
