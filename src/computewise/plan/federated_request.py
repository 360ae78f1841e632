"""``plan federated`` as one call: the typed request in, the plan and what it assumed out.

The CLI parses the flags (speeds, the compression, the model and its sequence length) into a
:class:`FederatedRequest`; :func:`plan_federated_request` looks the devices and the server's price up in
the catalog, builds the :class:`~computewise.plan.federated.FederatedJob` and plans it. The result's
``to_dict`` is the ``plan federated --json`` document: the plan and, under ``assumed``, what the catalog
supplied.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from computewise.estimate.arrays import col
from computewise.estimate.flops import training_flops_per_token
from computewise.estimate.quote import Ask, PriceRequest, quote
from computewise.plan.federated import Compression, FederatedJob, FederatedPlan, RadioModel, plan_federated
from computewise.specs.codec import Document, Jsonable, Layout, json_field
from computewise.specs.hardware import Dtype

if TYPE_CHECKING:
    from computewise.catalog import Catalog
    from computewise.specs import ModelSpec

__all__ = ["FederatedRequest", "PlannedFederation", "plan_federated_request"]


@dataclass(frozen=True)
class FederatedRequest:
    """What ``plan federated`` is asked; ``mfu`` None takes the catalog's ``client_training_mfu``."""

    spec: ModelSpec
    seq_len: int
    clients: int
    client_device: str
    uplink_bits_per_s: float
    downlink_bits_per_s: float
    rounds: int
    local_steps: int
    participation: float = 1.0
    compression: Compression = "none"
    topk_ratio: float = 0.01
    local_batch: int = 16
    mfu: float | None = None
    server_device: str = "xeon-8488c"
    server_vcpus: int = 8
    hourly_usd: float | None = None
    instance: str | None = None


_ASSUMED = ("client_precision", "client_power_w", "client_source", "sequence_tokens", "server_price", "radio_source")


@dataclass(frozen=True)
class PlannedFederation(Jsonable):
    """The plan and what the catalog supplied for it (the client's precision and power, the server's price)."""

    json_document: ClassVar[Document] = Document(
        "plan-federated",
        "plan federated --json",
        "Time, bytes, server cost and client energy of federated averaging rounds (plan.federated.FederatedPlan), "
        "with what was assumed.",
    )
    json_layout: ClassVar[Layout] = ("plan", ("assumed", _ASSUMED))

    plan: FederatedPlan = field(metadata=json_field(inline=True))
    client_precision: Dtype = field(
        metadata=json_field(
            description="Assumed: the client trains in fp16 where its device has fp16 peaks, else in fp32."
        )
    )
    client_power_w: float = field(metadata=json_field(description="Assumed: the client device's power (its TDP)."))
    client_source: str = field(metadata=json_field(description="Where the client device's figures come from."))
    sequence_tokens: int = field(metadata=json_field(description="Tokens per sample the FLOPs were counted for."))
    server_price: str = field(metadata=json_field(description="How the server was priced."))
    radio_source: str = field(metadata=json_field(description="Where the radio energy model comes from."))

    @property
    def assumed(self) -> dict[str, object]:
        """What the catalog supplied, by name: the ``assumed`` object of ``--json`` and the notes under the tables."""
        return {name: getattr(self, name) for name in _ASSUMED}


def plan_federated_request(catalog: Catalog, request: FederatedRequest) -> PlannedFederation:
    """Plan ``request``: a client trains in fp16 where its device has fp16 peaks, else in fp32."""
    spec, seq = request.spec, request.seq_len
    device = catalog.accelerator(request.client_device)
    server = catalog.accelerator(request.server_device)
    flops_per_token = float(training_flops_per_token(spec, col(seq), col(0.0))[0].reshape(-1)[0])
    tokens_per_sample = seq if spec.is_transformer else 1
    price = quote(
        catalog,
        Ask(vcpus=request.server_vcpus),
        PriceRequest(hourly_usd=request.hourly_usd, instance_type=request.instance),
    )
    precision: Dtype = "fp16" if device.peak_flops.get("fp16", 0.0) > 0 else "fp32"
    job = FederatedJob(
        model_name=spec.name,
        params=float(spec.params),
        flops_per_sample=flops_per_token * tokens_per_sample,
        clients=request.clients,
        participation=request.participation,
        rounds=request.rounds,
        local_steps=request.local_steps,
        local_batch=request.local_batch,
        client_device=device.slug,
        client_memory_bytes=device.memory_bytes,
        client_peak_flops=device.peak_flops_for(precision),
        client_mfu=catalog.assumption("client_training_mfu") if request.mfu is None else request.mfu,
        client_power_w=device.tdp_w,
        uplink_bits_per_s=request.uplink_bits_per_s,
        downlink_bits_per_s=request.downlink_bits_per_s,
        compression=request.compression,
        topk_ratio=request.topk_ratio,
        server_memory_bytes_per_s=server.memory_bandwidth_bytes_per_s,
        server_usd_per_h=price.hourly_usd,
        radio=RadioModel(
            catalog.assumption("radio_uplink_j_per_byte"),
            catalog.assumption("radio_downlink_j_per_byte"),
            catalog.assumption("radio_active_w"),
        ),
    )
    return PlannedFederation(
        plan=plan_federated(job),
        client_precision=precision,
        client_power_w=device.tdp_w,
        client_source=device.source,
        sequence_tokens=seq,
        server_price=price.explanation,
        radio_source=catalog.assumption_row("radio_uplink_j_per_byte").source,
    )
