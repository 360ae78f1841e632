"""``computewise serve ARTIFACT``: a dynamic-batching HTTP server for one model, until SIGTERM.

With ``--backend ray`` the same API is deployed as a Ray Serve application on an existing cluster
(``--address`` its GCS HOST:PORT), scaled by the file ``computewise plan serve --ray-config`` writes;
the command prints the URL and returns, the app keeps running until ``--delete``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from computewise.cli.common import DbOption, JsonOption, bounded_float, bounded_int

TOKEN_ENV = "COMPUTEWISE_SERVE_TOKEN"
_BACKENDS = ("local", "ray")


def serve(
    artifact: Annotated[
        str,
        typer.Argument(
            help="A directory exported by `computewise optimize --out`, package.module:function returning a "
            "callable list -> list, or 'echo' (returns its inputs; measures the server itself)."
        ),
    ],
    host: Annotated[
        str, typer.Option(help="Address to listen on; anything but loopback needs --token or --insecure.")
    ] = "127.0.0.1",
    port: Annotated[
        int,
        typer.Option(parser=bounded_int("--port"), help="TCP port (0: any free port; the --ready-file says which)."),
    ] = 8000,
    max_batch_size: Annotated[
        int, typer.Option(parser=bounded_int("--max-batch-size"), help="Most inputs in one model call.")
    ] = 32,
    max_queue_delay_ms: Annotated[
        float,
        typer.Option(
            parser=bounded_float("--max-queue-delay-ms"), help="Longest wait to fill a batch (greedy batching only)."
        ),
    ] = 10.0,
    batching: Annotated[
        str,
        typer.Option(
            help="cost (batches of similar length while they lower the cost per input; never waits), "
            "greedy (fill up to --max-batch-size or --max-queue-delay-ms, like Ray Serve), or none."
        ),
    ] = "cost",
    slo_p99_ms: Annotated[
        float | None,
        typer.Option(
            parser=bounded_float("--slo-p99-ms"),
            help="Latency objective: refuse (429) requests predicted to miss it, and size batches for it.",
        ),
    ] = None,
    queue_limit: Annotated[
        int, typer.Option(parser=bounded_int("--queue-limit"), help="Most inputs waiting; beyond it requests get 429.")
    ] = 256,
    timeout_s: Annotated[
        float,
        typer.Option(parser=bounded_float("--timeout-s"), help="Seconds a request may wait for its answer before 504."),
    ] = 30.0,
    token: Annotated[
        str | None,
        typer.Option(
            envvar=TOKEN_ENV, help="Require 'Authorization: Bearer TOKEN' on every route but /healthz and /readyz."
        ),
    ] = None,
    insecure: Annotated[
        bool, typer.Option("--insecure", help="Allow a non-loopback --host without a token (trusted networks only).")
    ] = False,
    max_body_bytes: Annotated[
        int, typer.Option(parser=bounded_int("--max-body-bytes"), help="Largest request body; larger ones get 413.")
    ] = 1 << 20,
    hourly_usd: Annotated[
        str | None, typer.Option(help="Price per hour of this machine for the ledger run. Default: from the hardware.")
    ] = None,
    db: DbOption = None,
    tag: Annotated[
        list[str] | None, typer.Option("--tag", help="KEY=VALUE label of the ledger run (repeatable).")
    ] = None,
    ready_file: Annotated[
        Path | None, typer.Option(help="Write {url, model, pid} as JSON to FILE once ready; removed at exit.")
    ] = None,
    backend: Annotated[
        str,
        typer.Option(
            help="local (this process serves until SIGTERM) or ray (deploy on a Ray cluster with Ray Serve, "
            "print the URL and return)."
        ),
    ] = "local",
    address: Annotated[
        str | None,
        typer.Option(
            envvar="RAY_ADDRESS", help="--backend ray: the cluster's GCS address HOST:PORT (or $RAY_ADDRESS)."
        ),
    ] = None,
    ray_config: Annotated[
        Path | None,
        typer.Option(
            "--ray-config",
            help="--backend ray: replicas and autoscaling from the file `computewise plan serve --ray-config` wrote. "
            "Default: one replica.",
        ),
    ] = None,
    replica_cpus: Annotated[
        float,
        typer.Option(
            parser=bounded_float("--replica-cpus"),
            help="--backend ray: logical CPUs Ray reserves for each replica (may be a fraction).",
        ),
    ] = 1.0,
    route_prefix: Annotated[
        str,
        typer.Option(
            help="--backend ray: serve the routes under this path, e.g. /minilm, to share the cluster's proxy."
        ),
    ] = "/",
    delete: Annotated[
        bool, typer.Option("--delete", help="--backend ray: delete the model's application from the cluster instead.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Serve a model over HTTP with dynamic batching, back-pressure (429), metrics and a graceful SIGTERM drain.

    POST /v1/models/NAME/infer with {"inputs": [...]}; GET /v1/models, /healthz, /readyz, /metrics,
    /openapi.json. The serving run is recorded in the ledger with the inferences it served.

    With --backend ray the same API runs as a Ray Serve application named after the model, batched by
    @serve.batch (--max-batch-size items or --max-queue-delay-ms), until
    `computewise serve ARTIFACT --backend ray --address HOST:PORT --delete`.
    """
    from computewise.account.tags import parse_tags
    from computewise.errors import InputError, MissingExtraError
    from computewise.units import parse_usd

    if backend not in _BACKENDS:
        raise InputError(f"--backend must be one of {', '.join(_BACKENDS)}, got {backend!r}", "e.g. --backend ray")
    if backend == "ray":
        local_only = {
            "--slo-p99-ms": slo_p99_ms is not None,
            "--ready-file": ready_file is not None,
            "--tag": bool(tag),
            "--hourly-usd": hourly_usd is not None,
        }
        given = [flag for flag, used in local_only.items() if used]
        if given:
            raise InputError(
                f"{', '.join(given)} apply to --backend local only",
                "drop them: Ray Serve has no SLO admission, and no computewise ledger run is kept for it",
            )
        _serve_on_ray(
            artifact,
            address,
            host=host,
            port=port,
            insecure=insecure,
            delete=delete,
            as_json=as_json,
            ray_config=ray_config,
            settings={
                "max_batch_size": max_batch_size,
                "max_queue_delay_ms": max_queue_delay_ms,
                "batching": batching,
                "queue_limit": queue_limit,
                "timeout_s": timeout_s,
                "replica_cpus": replica_cpus,
                "token": token,
                "max_body_bytes": max_body_bytes,
                "route_prefix": route_prefix,
            },
        )
        return
    ray_only = {
        "--ray-config": ray_config is not None,
        "--delete": delete,
        "--json": as_json,
        "--route-prefix": route_prefix != "/",
        "--replica-cpus": replica_cpus != 1.0,
    }
    given = [flag for flag, used in ray_only.items() if used]
    if given:
        raise InputError(f"{', '.join(given)} apply to --backend ray only", "add --backend ray, or drop them")

    try:
        from computewise.serve.batcher import POLICIES, BatchPolicy
        from computewise.serve.server import serve as run_server
    except ImportError as error:  # starlette, uvicorn and prometheus-client come with the serve extra
        raise MissingExtraError(error.name or "starlette", "serve", "computewise serve") from error

    if batching not in POLICIES:
        raise InputError(f"--batching must be one of {', '.join(POLICIES)}, got {batching!r}", "e.g. --batching cost")
    policy = BatchPolicy(
        mode=batching, max_batch_size=max_batch_size, max_queue_delay_ms=max_queue_delay_ms, slo_p99_ms=slo_p99_ms
    )
    code = run_server(
        artifact,
        host=host,
        port=port,
        policy=policy,
        token=token,
        insecure=insecure,
        queue_limit=queue_limit,
        timeout_s=timeout_s,
        db=db,
        tags=parse_tags(tag or []),
        ready_file=ready_file,
        max_body_bytes=max_body_bytes,
        hourly_usd=parse_usd(hourly_usd, "--hourly-usd") if hourly_usd is not None else None,
    )
    if code != 0:
        raise typer.Exit(code)


def _serve_on_ray(
    target: str,
    address: str | None,
    host: str,
    port: int,
    insecure: bool,
    delete: bool,
    as_json: bool,
    ray_config: Path | None,
    settings: dict[str, Any],
) -> None:
    """Deploy (or delete) the Ray Serve application and say where it is; the app outlives this command."""
    import json
    import shlex
    import sys

    from computewise.errors import InputError, MissingExtraError
    from computewise.serve.batcher import POLICIES

    try:
        from computewise.scale.ray_serve import (
            RayServeOptions,
            application_name,
            delete_application,
            deploy,
            read_ray_config,
        )
    except ImportError as error:  # starlette and uvicorn come with ray[serve]
        raise MissingExtraError(error.name or "ray[serve]", "ray", "computewise serve --backend ray") from error

    if not address:
        raise InputError(
            "--backend ray needs the cluster's address",
            "pass --address HOST:PORT (the GCS address `ray status` prints, 6379 by default) or set $RAY_ADDRESS",
        )
    if delete:
        name = application_name(target)
        deleted = delete_application(address, name)
        if as_json:
            sys.stdout.write(json.dumps({"app_name": name, "address": address, "deleted": deleted}) + "\n")
        else:
            sys.stdout.write(f"deleted {name!r} from {address}\n" if deleted else f"no app {name!r} on {address}\n")
        return
    batching = settings["batching"]
    if batching not in POLICIES:
        raise InputError(f"--batching must be one of {', '.join(POLICIES)}, got {batching!r}", "e.g. --batching greedy")
    options = RayServeOptions(
        # @serve.batch batches greedily: "cost" has no Ray counterpart and runs as greedy; "none" is batches of one.
        max_batch_size=1 if batching == "none" else settings["max_batch_size"],
        batch_wait_s=settings["max_queue_delay_ms"] / 1000.0,
        queue_limit=settings["queue_limit"],
        timeout_s=settings["timeout_s"],
        replica_cpus=settings["replica_cpus"],
        token=settings["token"],
        max_body_bytes=settings["max_body_bytes"],
        route_prefix=settings["route_prefix"],
        scaling=read_ray_config(ray_config) if ray_config is not None else None,
    )
    deployment = deploy(target, address, host=host, port=port, options=options, insecure=insecure)
    delete_command = shlex.join(["computewise", "serve", target, "--backend", "ray", "--address", address, "--delete"])
    if as_json:
        sys.stdout.write(json.dumps({**deployment.to_dict(), "delete_command": delete_command}, indent=2) + "\n")
        return
    for note in deployment.notes:
        sys.stderr.write(f"computewise: {note}\n")
    sys.stdout.write(
        f"serving {deployment.app_name!r} on Ray Serve at {deployment.url} "
        f"(deployed in {deployment.deploy_s:.1f} s)\n"
        f"POST {deployment.url}/v1/models/{deployment.app_name}/infer\n"
        f"delete it with: {delete_command}\n"
    )
