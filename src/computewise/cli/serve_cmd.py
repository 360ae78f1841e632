"""``computewise serve ARTIFACT``: a dynamic-batching HTTP server for one model, here, until SIGTERM.

The batching and limit flags are shared with ``computewise deploy`` (the same API on Ray Serve),
so each is declared once, in ``cli.common``, and both commands read the same words.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from computewise.cli.common import (
    ArtifactArgument,
    DbOption,
    InsecureOption,
    MaxBatchSizeOption,
    MaxBodyBytesOption,
    MaxQueueDelayOption,
    QueueLimitOption,
    TimeoutOption,
    TokenOption,
    bounded_float,
    bounded_int,
)

# The flags of this verb alone, one type each, so its signature reads in a screen.
_Host = Annotated[str, typer.Option(help="Address to listen on; anything but loopback needs --token or --insecure.")]
_Port = Annotated[
    int, typer.Option(parser=bounded_int("--port"), help="TCP port (0: any free port; the --ready-file says which).")
]
_Batching = Annotated[
    str,
    typer.Option(
        help="cost (batches of similar length while they lower the cost per input; never waits), "
        "greedy (fill up to --max-batch-size or --max-queue-delay-ms, like Ray Serve), or none."
    ),
]
_SloP99Ms = Annotated[
    float | None,
    typer.Option(
        parser=bounded_float("--slo-p99-ms"),
        help="Latency objective: refuse (429) requests predicted to miss it, and size batches for it.",
    ),
]
_HourlyUsd = Annotated[
    str | None, typer.Option(help="Price per hour of this machine for the ledger run. Default: from the hardware.")
]
_Tag = Annotated[list[str] | None, typer.Option("--tag", help="KEY=VALUE label of the ledger run (repeatable).")]
_ReadyFile = Annotated[
    Path | None, typer.Option(help="Write {url, model, pid} as JSON to FILE once ready; removed at exit.")
]
_CacheSize = Annotated[
    str | None,
    typer.Option(
        "--cache-size",
        help="Answer repeated inputs from a prediction cache of this many bytes (256MB; LRU). Off by default; "
        "only batch-invariant artifacts may be cached.",
    ),
]
_CacheTtl = Annotated[
    str | None,
    typer.Option("--cache-ttl", help="Forget cached outputs this long after they were stored (10m). Default: never."),
]


def serve(
    artifact: ArtifactArgument,
    host: _Host = "127.0.0.1",
    port: _Port = 8000,
    max_batch_size: MaxBatchSizeOption = 32,
    max_queue_delay_ms: MaxQueueDelayOption = 10.0,
    batching: _Batching = "cost",
    slo_p99_ms: _SloP99Ms = None,
    queue_limit: QueueLimitOption = 256,
    timeout_s: TimeoutOption = 30.0,
    token: TokenOption = None,
    insecure: InsecureOption = False,
    max_body_bytes: MaxBodyBytesOption = 1 << 20,
    hourly_usd: _HourlyUsd = None,
    db: DbOption = None,
    tag: _Tag = None,
    ready_file: _ReadyFile = None,
    cache_size: _CacheSize = None,
    cache_ttl: _CacheTtl = None,
) -> None:
    """Serve a model here over HTTP with dynamic batching, back-pressure (429), metrics and a graceful SIGTERM drain.

    POST /v1/models/NAME/infer with {"inputs": [...]}; GET /v1/models, /healthz, /readyz, /metrics,
    /openapi.json. The serving run is recorded in the ledger with the inferences it served.
    To run the same API on a Ray cluster, use `computewise deploy`.
    """
    from computewise.account.tags import parse_tags
    from computewise.errors import InputError, MissingExtraError
    from computewise.units import parse_bytes, parse_duration_s, parse_usd

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
        artifact, host=host, port=port, policy=policy, token=token, insecure=insecure, queue_limit=queue_limit,
        timeout_s=timeout_s, db=db, tags=parse_tags(tag or []), ready_file=ready_file, max_body_bytes=max_body_bytes,
        hourly_usd=parse_usd(hourly_usd, "--hourly-usd") if hourly_usd is not None else None,
        cache_bytes=int(parse_bytes(cache_size, "--cache-size")) if cache_size is not None else None,
        cache_ttl_s=parse_duration_s(cache_ttl, "--cache-ttl") if cache_ttl is not None else None,
    )  # fmt: skip
    if code != 0:
        raise typer.Exit(code)
