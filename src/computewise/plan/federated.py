"""``plan federated``: time, bytes, server cost and client energy of federated averaging rounds.

One round of FedAvg (McMahan et al. 2017, "Communication-Efficient Learning of Deep Networks from
Decentralized Data", Algorithm 1): the server picks ``m = max(1, round(C x N))`` of its ``N`` clients
(participation ``C``), each downloads the model, runs ``K`` local steps of batch ``B``, uploads its
update, and the server averages the ``m`` updates. Per participating client::

    download_s    = model_bytes x 8 / downlink_bits_per_s            (the fp32 model, uncompressed)
    compute_s     = K x B x training FLOPs per sample / (peak x mfu)   (estimate.flops: 6N plus attention)
    upload_s      = update_bytes x 8 / uplink_bits_per_s              (compressed, below)
    aggregation_s = (m + 1) x model_bytes / server memory bandwidth   (read m fp32 updates, write one model)
    round_s       = download_s + compute_s + upload_s + aggregation_s

**A round waits for its slowest participant.** The clients here are identical (one device, one
link), so the slowest is any of them and a round takes one client's time; a real fleet has
stragglers, so this is a lower bound, and fewer participants change the bytes and energy, not the
time. Server links are assumed not to be the bottleneck (a server fans out to ``m`` clients at once).

Compression applies to the upload (the update; Konečný et al. 2016, "Federated Learning: Strategies
for Improving Communication Efficiency"): ``int8`` sends 1 byte per parameter, 1/4 of fp32 (per-tensor
scales are a few bytes per layer and left out); ``topk`` sends the ``ratio x P`` largest values as fp32
with an int32 index each, 8 bytes per kept value. Client energy is the device's power (the catalog
row's ``tdp_w``) over the compute time plus the radio: per-byte energy up and down and the radio's
active power over the transfer time (an LTE power model, catalog assumptions with their source).
The server is billed, at the one price quote (``estimate.quote``), for the whole wall time.

**The model must fit on the client.** Local training holds at least the fp32 weights and their fp32
gradients (Algorithm 1's local steps are plain SGD, with no optimizer state): 8 bytes per parameter,
before activations. A model larger than the device's memory is refused, not planned.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar, Literal

from computewise.errors import InputError
from computewise.specs.codec import Jsonable, Layout, json_field, json_property
from computewise.units import format_bytes

__all__ = [
    "COMPRESSIONS",
    "Compression",
    "FederatedJob",
    "FederatedPlan",
    "FederatedRound",
    "FederatedSetup",
    "ParticipationEffect",
    "RadioModel",
    "plan_federated",
    "update_bytes",
]

Compression = Literal["none", "int8", "topk"]
COMPRESSIONS: tuple[Compression, ...] = ("none", "int8", "topk")
_FP32_BYTES = 4.0
_INT8_BYTES = 1.0
_TOPK_BYTES_PER_VALUE = 8.0  # fp32 value + int32 index
_LOCAL_TRAINING_BYTES_PER_PARAM = 2 * _FP32_BYTES  # weights and gradients (module docstring)


@dataclass(frozen=True)
class RadioModel:
    """Energy of moving bytes over the client's radio (catalog assumptions)."""

    uplink_j_per_byte: float
    downlink_j_per_byte: float
    active_w: float


@dataclass(frozen=True)
class FederatedSetup:
    """The part of a federated job its plan repeats (the ``job`` of ``plan federated --json``, and the
    server's price): declared once here for the job and the plan that both carry it."""

    model_name: str = field(metadata=json_field(name="model"))
    params: float
    clients: int = field(metadata=json_field(minimum=1))
    participation: float = field(metadata=json_field(exclusive_minimum=0, maximum=1))
    rounds: int = field(metadata=json_field(minimum=1))
    local_steps: int = field(metadata=json_field(minimum=1))
    local_batch: int = field(metadata=json_field(minimum=1))
    client_device: str
    uplink_bits_per_s: float
    downlink_bits_per_s: float
    topk_ratio: float
    server_usd_per_h: float


@dataclass(frozen=True, kw_only=True)
class FederatedJob(FederatedSetup):
    """Everything a round depends on, as plain numbers (the CLI resolves names and prices): the setup, and
    what the plan reads from the catalog but does not repeat."""

    flops_per_sample: float  # training (forward + backward) FLOPs of one sample
    client_memory_bytes: float
    client_peak_flops: float
    client_mfu: float
    client_power_w: float
    compression: Compression
    server_memory_bytes_per_s: float
    radio: RadioModel


def update_bytes(params: float, compression: Compression, topk_ratio: float) -> float:
    """Bytes of one client's upload under ``compression`` (module docstring)."""
    if compression == "none":
        return params * _FP32_BYTES
    if compression == "int8":
        return params * _INT8_BYTES
    return math.ceil(params * topk_ratio) * _TOPK_BYTES_PER_VALUE


@dataclass(frozen=True)
class FederatedRound(Jsonable):
    """One round under one compression: its parts in seconds, its bytes, and one client's energy."""

    compression: Compression
    participants: int = field(metadata=json_field(minimum=1))
    download_bytes_per_client: float
    upload_bytes_per_client: float
    download_s: float
    compute_s: float
    upload_s: float
    aggregation_s: float
    client_compute_j: float
    client_radio_j: float

    @json_property(after="aggregation_s")
    def round_s(self) -> float:
        return self.download_s + self.compute_s + self.upload_s + self.aggregation_s

    @json_property(after="upload_bytes_per_client")
    def bytes_per_round(self) -> float:
        return self.participants * (self.download_bytes_per_client + self.upload_bytes_per_client)

    @json_property()
    def client_j(self) -> float:
        return self.client_compute_j + self.client_radio_j


@dataclass(frozen=True)
class ParticipationEffect(Jsonable):
    """The chosen compression at another participation: bytes and energy scale with the participants."""

    participation: float
    participants: int
    bytes_total: float
    client_energy_j_total: float
    wall_s: float


@dataclass(frozen=True)
class FederatedPlan(FederatedSetup, Jsonable):
    """A federated training plan: its setup, the chosen round, its totals, and the other compressions and
    participations. Its JSON is the body of ``plan federated --json`` (``federated_request.PlannedFederation``)."""

    json_layout: ClassVar[Layout] = (
        ("job", ("model_name", "params", "clients", "participation", "rounds", "local_steps", "local_batch",
                 "client_device", "uplink_bits_per_s", "downlink_bits_per_s", "topk_ratio")),
        "chosen",
        ("total", ("wall_s", "bytes_total", "server_usd_per_h", "server_usd", "client_energy_j_total",
                   "client_energy_kwh")),
        "compressions",
        "participation_effect",
        "notes",
    )  # fmt: skip

    chosen: FederatedRound = field(metadata=json_field(name="round"))
    compressions: tuple[FederatedRound, ...]  # every compression at the chosen participation
    participation_effect: tuple[ParticipationEffect, ...]
    notes: tuple[str, ...]

    @json_property()
    def wall_s(self) -> float:
        return self.rounds * self.chosen.round_s

    @json_property(name="bytes")
    def bytes_total(self) -> float:
        return self.rounds * self.chosen.bytes_per_round

    @json_property()
    def server_usd(self) -> float:
        return self.server_usd_per_h * self.wall_s / 3600.0

    @json_property(name="client_energy_j")
    def client_energy_j_total(self) -> float:
        return self.rounds * self.chosen.participants * self.chosen.client_j

    @json_property()
    def client_energy_kwh(self) -> float:
        return self.client_energy_j_total / 3.6e6


def participants(clients: int, participation: float) -> int:
    """m = max(1, round(C x N)): McMahan et al. 2017, Algorithm 1 (m <- max(C K, 1))."""
    return max(1, round(participation * clients))


def plan_federated(job: FederatedJob) -> FederatedPlan:
    """Round time, bytes, energy and cost of ``job``, with every compression and a few participations beside it."""
    _validate(job)
    chosen = _round(job, job.compression, participants(job.clients, job.participation))
    m = chosen.participants
    others = tuple(_round(job, c, m) for c in COMPRESSIONS)
    effect = []
    for share in sorted({job.participation, *(p for p in (0.01, 0.1, 1.0) if p * job.clients >= 1)}):
        r = _round(job, job.compression, participants(job.clients, share))
        effect.append(
            ParticipationEffect(
                share, r.participants, job.rounds * r.bytes_per_round, job.rounds * r.participants * r.client_j,
                job.rounds * r.round_s,
            )
        )  # fmt: skip
    notes = [
        "identical clients: a round waits for its slowest participant, here any of them; stragglers in a real "
        "fleet make rounds longer",
        "fewer participants save bytes and energy, not time, here; FedAvg may then need more rounds to converge "
        "(not modelled)",
    ]
    if job.compression != "none":
        notes.append(f"{job.compression} compresses the upload only; the model is downloaded in fp32")
    if participants(job.clients, job.participation) != job.participation * job.clients:
        notes.append(f"{job.participation:g} x {job.clients} clients rounds to {m} per round")
    return FederatedPlan(
        model_name=job.model_name,
        params=job.params,
        clients=job.clients,
        participation=job.participation,
        rounds=job.rounds,
        local_steps=job.local_steps,
        local_batch=job.local_batch,
        client_device=job.client_device,
        uplink_bits_per_s=job.uplink_bits_per_s,
        downlink_bits_per_s=job.downlink_bits_per_s,
        topk_ratio=job.topk_ratio,
        server_usd_per_h=job.server_usd_per_h,
        chosen=chosen,
        compressions=others,
        participation_effect=tuple(effect),
        notes=tuple(notes),
    )


def _round(job: FederatedJob, compression: Compression, m: int) -> FederatedRound:
    model_bytes = job.params * _FP32_BYTES
    up_bytes = update_bytes(job.params, compression, job.topk_ratio)
    download_s = model_bytes * 8.0 / job.downlink_bits_per_s
    upload_s = up_bytes * 8.0 / job.uplink_bits_per_s
    flops = job.local_steps * job.local_batch * job.flops_per_sample
    compute_s = flops / (job.client_peak_flops * job.client_mfu)
    aggregation_s = (m + 1) * model_bytes / job.server_memory_bytes_per_s
    radio = job.radio
    radio_j = (
        up_bytes * radio.uplink_j_per_byte
        + model_bytes * radio.downlink_j_per_byte
        + radio.active_w * (upload_s + download_s)
    )
    return FederatedRound(
        compression=compression,
        participants=m,
        download_bytes_per_client=model_bytes,
        upload_bytes_per_client=up_bytes,
        download_s=download_s,
        compute_s=compute_s,
        upload_s=upload_s,
        aggregation_s=aggregation_s,
        client_compute_j=job.client_power_w * compute_s,
        client_radio_j=radio_j,
    )


def _validate(job: FederatedJob) -> None:
    """Library callers are held to the CLI's ranges: each check names the flag that sets the value."""
    checks: tuple[tuple[bool, str, str], ...] = (
        (job.clients >= 1, f"--clients must be at least 1, got {job.clients}", "e.g. --clients 1000"),
        (
            0 < job.participation <= 1,
            f"--participation must be in (0, 1], got {job.participation:g}",
            "a share of the clients per round, e.g. --participation 0.1",
        ),
        (job.rounds >= 1, f"--rounds must be at least 1, got {job.rounds}", "e.g. --rounds 100"),
        (job.local_steps >= 1, f"--local-steps must be at least 1, got {job.local_steps}", "e.g. --local-steps 5"),
        (job.local_batch >= 1, f"--local-batch must be at least 1, got {job.local_batch}", "e.g. --local-batch 16"),
        (job.uplink_bits_per_s > 0, "--uplink must be above 0", "e.g. --uplink 20Mbps"),
        (job.downlink_bits_per_s > 0, "--downlink must be above 0", "e.g. --downlink 100Mbps"),
        (0 < job.topk_ratio <= 1, f"--topk-ratio must be in (0, 1], got {job.topk_ratio:g}", "e.g. 0.01"),
        (job.client_peak_flops > 0, f"{job.client_device} has no FLOP/s in the catalog", "pick another device"),
        (0 < job.client_mfu <= 1, f"--mfu must be in (0, 1], got {job.client_mfu:g}", "e.g. --mfu 0.1"),
        (job.params > 0 and job.flops_per_sample > 0, "the model has no parameters", "check --model"),
        (job.server_memory_bytes_per_s > 0, "the server device has no memory bandwidth", "pick another"),
    )
    for ok, message, hint in checks:
        if not ok:
            raise InputError(message, hint)
    needed = job.params * _LOCAL_TRAINING_BYTES_PER_PARAM
    if needed > job.client_memory_bytes:
        raise InputError(
            f"{job.model_name} does not fit on {job.client_device}: local training needs at least "
            f"{format_bytes(needed)} (fp32 weights and gradients) and the device has "
            f"{format_bytes(job.client_memory_bytes)}",
            "pick a smaller --model or a --client-device with more memory (computewise catalog list accelerators)",
        )
