"""``computewise deploy ARTIFACT --address HOST:PORT``: the API of ``computewise serve`` on Ray Serve.

The model is deployed as a Ray Serve application on an existing cluster (``--address``, its GCS
HOST:PORT), scaled by the file ``computewise plan serve --ray-config`` writes; the command prints
the URL and returns, and the application keeps running until ``--delete``. Serving here, with a
ledger run and SLO admission, is ``computewise serve``.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Annotated

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


def deploy(
    artifact: ArtifactArgument,
    address: Annotated[
        str | None, typer.Option(envvar="RAY_ADDRESS", help="The cluster's GCS address HOST:PORT (or $RAY_ADDRESS).")
    ] = None,
    host: Annotated[
        str,
        typer.Option(
            help="Address Ray Serve's HTTP proxy listens on; anything but loopback needs --token or --insecure."
        ),
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(parser=bounded_int("--port"), help="TCP port of Ray Serve's HTTP proxy.")] = 8000,
    max_batch_size: MaxBatchSizeOption = 32,
    max_queue_delay_ms: MaxQueueDelayOption = 10.0,
    batching: Annotated[
        str,
        typer.Option(
            help="greedy (@serve.batch: fill up to --max-batch-size or --max-queue-delay-ms), none (one input per "
            "call), or cost (runs as greedy: Ray Serve has no cost-aware batching)."
        ),
    ] = "cost",
    queue_limit: QueueLimitOption = 256,
    timeout_s: TimeoutOption = 30.0,
    token: TokenOption = None,
    insecure: InsecureOption = False,
    max_body_bytes: MaxBodyBytesOption = 1 << 20,
    ray_config: Annotated[
        Path | None,
        typer.Option(
            "--ray-config",
            help="Replicas and autoscaling from the file `computewise plan serve ... --ray-config FILE` wrote. "
            "Default: one replica.",
        ),
    ] = None,
    replica_cpus: Annotated[
        float,
        typer.Option(
            parser=bounded_float("--replica-cpus"),
            help="Logical CPUs Ray reserves for each replica (may be a fraction).",
        ),
    ] = 1.0,
    route_prefix: Annotated[
        str, typer.Option(help="Serve the routes under this path, e.g. /minilm, to share the cluster's proxy.")
    ] = "/",
    delete: Annotated[
        bool, typer.Option("--delete", help="Delete the model's application from the cluster instead.")
    ] = False,
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
        from computewise.scale.ray_serve import (
            RayServeOptions,
            application_name,
            delete_application,
            read_ray_config,
        )
        from computewise.scale.ray_serve import deploy as deploy_on_ray
    except ImportError as error:  # starlette and uvicorn come with ray[serve]
        raise MissingExtraError(error.name or "ray[serve]", "ray", "computewise deploy") from error

    if not address:
        raise InputError(
            "computewise deploy needs the cluster's address",
            "pass --address HOST:PORT (the GCS address `ray status` prints, 6379 by default) or set $RAY_ADDRESS",
        )
    if delete:
        name = application_name(artifact)
        deleted = delete_application(address, name)
        if as_json:
            sys.stdout.write(json.dumps({"app_name": name, "address": address, "deleted": deleted}) + "\n")
        else:
            sys.stdout.write(f"deleted {name!r} from {address}\n" if deleted else f"no app {name!r} on {address}\n")
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
    if as_json:
        emit_json({**deployment.to_dict(), "delete_command": delete_command})
        return
    for note in deployment.notes:
        sys.stderr.write(f"computewise: {note}\n")
    sys.stdout.write(
        f"serving {deployment.app_name!r} on Ray Serve at {deployment.url} "
        f"(deployed in {deployment.deploy_s:.1f} s)\n"
        f"POST {deployment.url}/v1/models/{deployment.app_name}/infer\n"
        f"delete it with: {delete_command}\n"
    )
