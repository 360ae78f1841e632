"""``computewise plan federated``: time, bytes, server cost and client energy of federated averaging rounds.

Parses the flags (link speeds, the compression, the model and its sequence length) into a
``plan.federated_request.FederatedRequest``; ``plan_federated_request`` looks the devices, the server's
price and the radio up in the catalog and ``plan.federated`` does the arithmetic.
"""

from __future__ import annotations

from typing import Annotated

import typer

from computewise.cli.common import (
    CatalogOption,
    JsonOption,
    ModelOption,
    SeqLenOption,
    bounded_float,
    bounded_int,
    print_document,
)

_COMPRESSION_HELP = "Upload compression: none (fp32), int8 (1/4 of the bytes) or topk (--topk-ratio of the values)."

# The flags, one type each, so the verb's signature reads in a screen.
_Clients = Annotated[int, typer.Option("--clients", parser=bounded_int("--clients"), help="Clients in the federation.")]
_ClientDevice = Annotated[
    str, typer.Option("--client-device", help="Catalog device of a client: apple-a17-pro (phone), apple-m2, a CPU.")
]
_Uplink = Annotated[str, typer.Option("--uplink", help="Client upload speed in bits/s: 20Mbps, 1Gbps.")]
_Rounds = Annotated[int, typer.Option("--rounds", parser=bounded_int("--rounds"), help="Federated averaging rounds.")]
_LocalSteps = Annotated[
    int,
    typer.Option("--local-steps", parser=bounded_int("--local-steps"), help="Optimizer steps per client per round."),
]
_Downlink = Annotated[
    str | None, typer.Option("--downlink", help="Client download speed in bits/s (default: the uplink's).")
]
_Participation = Annotated[
    float,
    typer.Option(
        "--participation",
        parser=bounded_float("--participation"),
        help="Share of the clients in each round, in (0, 1].",
    ),
]
_Compression = Annotated[str, typer.Option("--compression", help=_COMPRESSION_HELP)]
_TopkRatio = Annotated[
    float,
    typer.Option("--topk-ratio", parser=bounded_float("--topk-ratio"), help="Share of values topk sends."),
]
_LocalBatch = Annotated[
    int, typer.Option("--local-batch", parser=bounded_int("--local-batch"), help="Samples per local step.")
]
_Mfu = Annotated[
    float | None,
    typer.Option(
        "--mfu",
        parser=bounded_float("--mfu"),
        help="Share of the client's peak FLOP/s reached (default: the catalog's client_training_mfu).",
    ),
]
_ServerDevice = Annotated[
    str, typer.Option("--server-device", help="Catalog CPU whose memory bandwidth averages the updates.")
]
_ServerVcpus = Annotated[
    int,
    typer.Option(
        "--server-vcpus", parser=bounded_int("--server-vcpus"), help="vCPUs of the server, priced per vCPU-hour."
    ),
]
_HourlyUsd = Annotated[
    float | None,
    typer.Option("--hourly-usd", parser=bounded_float("--hourly-usd"), help="The server's price per hour."),
]
_Instance = Annotated[str | None, typer.Option("--instance", help="Price the server as this catalog instance.")]


def plan_federated(
    model_name: ModelOption,
    clients: _Clients,
    client_device: _ClientDevice,
    uplink: _Uplink,
    rounds: _Rounds,
    local_steps: _LocalSteps,
    downlink: _Downlink = None,
    participation: _Participation = 1.0,
    compression: _Compression = "none",
    topk_ratio: _TopkRatio = 0.01,
    local_batch: _LocalBatch = 16,
    seq_len: SeqLenOption = None,
    mfu: _Mfu = None,
    server_device: _ServerDevice = "xeon-8488c",
    server_vcpus: _ServerVcpus = 8,
    hourly_usd: _HourlyUsd = None,
    instance: _Instance = None,
    catalog_paths: CatalogOption = None,
    as_json: JsonOption = False,
) -> None:
    """Time and bytes per round, total wall time, server cost and client energy; compression and participation."""
    from computewise.cli.common import choice, load, model, sequence_length
    from computewise.plan.federated import COMPRESSIONS
    from computewise.plan.federated_request import FederatedRequest, plan_federated_request
    from computewise.report.federated import print_federated
    from computewise.units import parse_bits_per_s

    up = parse_bits_per_s(uplink, "--uplink")
    down = parse_bits_per_s(downlink, "--downlink") if downlink is not None else up
    chosen = choice(compression, COMPRESSIONS, "--compression")
    catalog, _ = load(catalog_paths)
    spec = model(model_name)
    request = FederatedRequest(
        spec, sequence_length(seq_len, spec), clients, client_device, up, down, rounds, local_steps,
        participation, chosen, topk_ratio, local_batch, mfu, server_device, server_vcpus, hourly_usd, instance,
    )  # fmt: skip
    planned = plan_federated_request(catalog, request)
    print_document(planned.to_dict(), as_json, lambda _, console: print_federated(planned, console))
