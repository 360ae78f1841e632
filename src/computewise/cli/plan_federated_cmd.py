"""``computewise plan federated``: time, bytes, server cost and client energy of federated averaging rounds.

Resolves the model (its training FLOPs per sample from ``estimate.flops``), the client device and the
server's memory bandwidth from the catalog, the server's price from ``estimate.quote``, and the radio
and on-device utilization from the catalog's assumptions; ``plan.federated`` does the arithmetic.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from computewise.cli.common import (
    CatalogOption,
    JsonOption,
    ModelOption,
    SeqLenOption,
    bounded_float,
    bounded_int,
    emit_json,
)

if TYPE_CHECKING:
    from computewise.specs.hardware import Dtype

_COMPRESSION_HELP = "Upload compression: none (fp32), int8 (1/4 of the bytes) or topk (--topk-ratio of the values)."


def plan_federated(
    model_name: ModelOption,
    clients: Annotated[
        int, typer.Option("--clients", parser=bounded_int("--clients"), help="Clients in the federation.")
    ],
    client_device: Annotated[
        str, typer.Option("--client-device", help="Catalog device of a client: apple-a17-pro (phone), apple-m2, a CPU.")
    ],
    uplink: Annotated[str, typer.Option("--uplink", help="Client upload speed in bits/s: 20Mbps, 1Gbps.")],
    rounds: Annotated[
        int, typer.Option("--rounds", parser=bounded_int("--rounds"), help="Federated averaging rounds.")
    ],
    local_steps: Annotated[
        int,
        typer.Option(
            "--local-steps", parser=bounded_int("--local-steps"), help="Optimizer steps per client per round."
        ),
    ],
    downlink: Annotated[
        str | None, typer.Option("--downlink", help="Client download speed in bits/s (default: the uplink's).")
    ] = None,
    participation: Annotated[
        float,
        typer.Option(
            "--participation",
            parser=bounded_float("--participation"),
            help="Share of the clients in each round, in (0, 1].",
        ),
    ] = 1.0,
    compression: Annotated[str, typer.Option("--compression", help=_COMPRESSION_HELP)] = "none",
    topk_ratio: Annotated[
        float,
        typer.Option("--topk-ratio", parser=bounded_float("--topk-ratio"), help="Share of values topk sends."),
    ] = 0.01,
    local_batch: Annotated[
        int, typer.Option("--local-batch", parser=bounded_int("--local-batch"), help="Samples per local step.")
    ] = 16,
    seq_len: SeqLenOption = None,
    mfu: Annotated[
        float | None,
        typer.Option(
            "--mfu",
            parser=bounded_float("--mfu"),
            help="Share of the client's peak FLOP/s reached (default: the catalog's client_training_mfu).",
        ),
    ] = None,
    server_device: Annotated[
        str, typer.Option("--server-device", help="Catalog CPU whose memory bandwidth averages the updates.")
    ] = "xeon-8488c",
    server_vcpus: Annotated[
        int,
        typer.Option(
            "--server-vcpus", parser=bounded_int("--server-vcpus"), help="vCPUs of the server, priced per vCPU-hour."
        ),
    ] = 8,
    hourly_usd: Annotated[
        float | None,
        typer.Option("--hourly-usd", parser=bounded_float("--hourly-usd"), help="The server's price per hour."),
    ] = None,
    instance: Annotated[
        str | None, typer.Option("--instance", help="Price the server as this catalog instance.")
    ] = None,
    catalog_paths: CatalogOption = None,
    as_json: JsonOption = False,
) -> None:
    """Time and bytes per round, total wall time, server cost and client energy; compression and participation."""
    from computewise.cli.common import choice, load, model, sequence_length
    from computewise.estimate.arrays import col
    from computewise.estimate.flops import training_flops_per_token
    from computewise.estimate.quote import Ask, PriceRequest, quote
    from computewise.plan.federated import COMPRESSIONS, FederatedJob, RadioModel, plan_federated
    from computewise.units import parse_bits_per_s

    up = parse_bits_per_s(uplink, "--uplink")
    down = parse_bits_per_s(downlink, "--downlink") if downlink is not None else up
    chosen = choice(compression, COMPRESSIONS, "--compression")
    catalog, _ = load(catalog_paths)
    spec = model(model_name)
    device = catalog.accelerator(client_device)
    server = catalog.accelerator(server_device)
    seq = sequence_length(seq_len, spec)
    flops_per_token = float(training_flops_per_token(spec, col(seq), col(0.0))[0].reshape(-1)[0])
    tokens_per_sample = seq if spec.is_transformer else 1
    price = quote(catalog, Ask(vcpus=server_vcpus), PriceRequest(hourly_usd=hourly_usd, instance_type=instance))
    precision: Dtype = "fp16" if device.peak_flops.get("fp16", 0.0) > 0 else "fp32"
    job = FederatedJob(
        model_name=spec.name,
        params=float(spec.params),
        flops_per_sample=flops_per_token * tokens_per_sample,
        clients=clients,
        participation=participation,
        rounds=rounds,
        local_steps=local_steps,
        local_batch=local_batch,
        client_device=device.slug,
        client_memory_bytes=device.memory_bytes,
        client_peak_flops=device.peak_flops_for(precision),
        client_mfu=catalog.assumption("client_training_mfu") if mfu is None else mfu,
        client_power_w=device.tdp_w,
        uplink_bits_per_s=up,
        downlink_bits_per_s=down,
        compression=chosen,
        topk_ratio=topk_ratio,
        server_memory_bytes_per_s=server.memory_bandwidth_bytes_per_s,
        server_usd_per_h=price.hourly_usd,
        radio=RadioModel(
            catalog.assumption("radio_uplink_j_per_byte"),
            catalog.assumption("radio_downlink_j_per_byte"),
            catalog.assumption("radio_active_w"),
        ),
    )
    plan = plan_federated(job)
    data = plan.to_dict()
    data["assumed"] = {
        "client_precision": precision,
        "client_power_w": device.tdp_w,
        "client_source": device.source,
        "sequence_tokens": seq,
        "server_price": price.explanation,
        "radio_source": catalog.assumption_row("radio_uplink_j_per_byte").source,
    }
    if as_json:
        emit_json(data)
    else:
        from computewise.report.federated import print_federated

        print_federated(data, Console())
