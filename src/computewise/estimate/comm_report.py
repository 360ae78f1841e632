"""``estimate comm``: one collective on one fabric, at one size or over the nccl-tests sweep.

Kept apart from ``collectives`` (the formulas) because it makes choices a person would make at a
command line: which instance stands for "an H100 node on AWS", which sizes to sweep, which
message to print when a network is unknown. The result is a typed ``CommEstimate``, which ``report.comm``
prints and whose ``to_dict`` is the ``--json`` document.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from computewise.errors import InputError, UnknownNameError
from computewise.estimate.arrays import col
from computewise.estimate.collectives import (
    COLLECTIVES,
    Collective,
    bus_bytes_per_s,
    bus_factor,
    collective_s,
    fabric_for,
    link_problem,
    network_fabric_for,
    node_devices,
    node_network_bytes_per_s,
    require_network,
    require_slices,
)
from computewise.specs.codec import Document, Jsonable, Layout

if TYPE_CHECKING:
    from computewise.catalog import Catalog
    from computewise.estimate.assumptions import Assumptions
    from computewise.specs.hardware import Accelerator, Offering

__all__ = [
    "MAX_GPUS",
    "MAX_MESSAGE_BYTES",
    "SWEEP_BYTES",
    "CommEstimate",
    "CommInstance",
    "CommQuery",
    "CommRow",
    "RentedInstance",
    "estimate_comm",
    "parse_collective",
]

MAX_GPUS = 1_000_000  # the largest clusters announced are ~10^5 GPUs; beyond 10^6 is a typo
MAX_MESSAGE_BYTES = float(2**40)  # 1 TiB: more than any device's memory, so a unit mistake
# nccl-tests' default sweep in our examples: -b 8 -e 8G -f 2
SWEEP_BYTES: tuple[float, ...] = tuple(float(2**k) for k in range(3, 34))

_FORMULA = {
    "all-reduce": "busbw = algbw * 2(n-1)/n",
    "all-gather": "busbw = algbw * (n-1)/n",
    "reduce-scatter": "busbw = algbw * (n-1)/n",
    "all-to-all": "busbw = algbw * (n-1)/n",
    "send-recv": "busbw = algbw",
}
_ALONE = "1 rank: no communication, so every size takes 0 us"


def parse_collective(text: str) -> Collective:
    """'all-reduce', 'allreduce', 'all_reduce', 'AllReduce' -> the collective, or a did-you-mean error."""
    squashed = text.strip().lower().replace("_", "").replace("-", "").replace(" ", "")
    for op in COLLECTIVES:
        if op.replace("-", "") == squashed or (op == "send-recv" and squashed in ("p2p", "sendrecv")):
            return op
    raise UnknownNameError("collective", text, COLLECTIVES, f"use one of: {', '.join(COLLECTIVES)}")


@dataclass(frozen=True)
class CommQuery:
    """What the user asked: the op, how many ranks, sizes, and optionally where."""

    op: Collective
    gpus: int
    sizes_bytes: tuple[float, ...]
    ranks_per_node: int | None = None
    cloud: str | None = None
    instance_type: str | None = None

    def check(self) -> None:
        """Reject the absurd before any arithmetic: counts below 1 or beyond a million, empty or huge buffers."""
        if self.gpus < 1 or self.gpus > MAX_GPUS:
            raise InputError(f"--gpus must be between 1 and {MAX_GPUS:,}, got {self.gpus:,}", "e.g. --gpus 64")
        for size in self.sizes_bytes:
            if not 0 < size <= MAX_MESSAGE_BYTES:
                raise InputError(
                    f"--bytes must be more than 0 and at most 1 TiB, got {size:g} bytes",
                    "e.g. --bytes 1GiB, or leave --bytes out for the 8 B .. 8 GiB sweep",
                )
        if self.ranks_per_node is not None and self.ranks_per_node < 1:
            raise InputError(f"--per-node must be at least 1, got {self.ranks_per_node}", "e.g. --per-node 8")


def _pick_offering(catalog: Catalog, accelerator: Accelerator, query: CommQuery) -> Offering | None:
    """The named instance, else the largest node of this accelerator with the fastest network (None: not rented)."""
    if query.instance_type is not None:
        offering = catalog.instance_offerings(query.instance_type, query.cloud)[0]
        if offering.accelerator != accelerator.slug:
            raise InputError(
                f"{offering.instance_type} has {offering.accelerator} devices, not {accelerator.slug}",
                f"drop --instance, or use --gpu {offering.accelerator}",
            )
        return offering
    rented = catalog.offerings_for(accelerator.slug, query.cloud)
    if not rented:
        return None
    return max(
        rented,
        key=lambda o: (o.accelerator_count, o.network_bytes_per_s, o.fabric != "", o.cloud, o.instance_type),
    )


@dataclass(frozen=True)
class CommInstance(Jsonable):
    """The node assumed: one node of devices where the catalog rents none (a ``RentedInstance`` where it does)."""

    json_layout: ClassVar[Layout] = ("cloud", "instance_type", "devices_per_node", "network_bytes_per_s")
    devices_per_node: int
    cloud: str | None = None  # None: no rented instance in the catalog
    instance_type: str | None = None
    network_bytes_per_s: float = 0.0
    fabric: str | None = None
    fabric_name: str | None = None
    fabric_source: str | None = None


@dataclass(frozen=True)
class RentedInstance(CommInstance):
    """A catalog instance: its network, and the fabric it is timed on (None where the catalog names none)."""

    json_layout: ClassVar[Layout] = (*CommInstance.json_layout, "fabric", "fabric_name", "fabric_source")


@dataclass(frozen=True)
class CommRow(Jsonable):
    """One message size, as nccl-tests prints it: time, algorithm bandwidth and bus bandwidth."""

    size_bytes: float
    time_s: float
    algbw_bytes_per_s: float
    busbw_bytes_per_s: float


@dataclass(frozen=True)
class CommEstimate(Jsonable):
    """``estimate comm``: the collective, the fabric it assumed, and one row per message size."""

    json_document: ClassVar[Document] = Document(
        "estimate-comm",
        "estimate comm --json",
        "Time and nccl-tests bus bandwidth of one collective over message sizes (estimate.comm_report).",
    )

    op: Collective
    gpus: int
    ranks_per_node: int
    nodes: int
    accelerator: str
    link_bytes_per_s: float
    link_efficiency: float
    network_efficiency: float
    instance: CommInstance
    peak_busbw_bytes_per_s: float
    formula: str
    rows: tuple[CommRow, ...]
    notes: tuple[str, ...]


def _instance(offering: Offering | None, catalog: Catalog, devices: int) -> CommInstance:
    network = network_fabric_for(offering, catalog)
    if offering is None:
        return CommInstance(devices)
    return RentedInstance(
        devices_per_node=devices,
        cloud=offering.cloud,
        instance_type=offering.instance_type,
        network_bytes_per_s=node_network_bytes_per_s(offering, devices),
        fabric=offering.fabric or None,
        fabric_name=network.name if network is not None else None,
        fabric_source=network.source if network is not None else None,
    )


def estimate_comm(
    catalog: Catalog, accelerator: Accelerator, query: CommQuery, assumptions: Assumptions | None = None
) -> CommEstimate:
    """Time, algorithm and bus bandwidth of ``query.op`` for each size, with the fabric it assumed."""
    query.check()
    if (problem := link_problem(accelerator, query.gpus)) is not None:
        raise InputError(*problem)
    offering = _pick_offering(catalog, accelerator, query)
    require_slices(accelerator, query.gpus)
    # A node is an instance's devices, or a TPU slice's chips (rented one by one, joined by ICI).
    devices = node_devices(accelerator, offering, query.gpus) if offering is not None else min(query.gpus, 8)
    per_node = min(query.ranks_per_node or devices, devices, query.gpus)
    if query.ranks_per_node is not None and query.ranks_per_node > devices:
        raise InputError(
            f"--per-node {query.ranks_per_node} is more than the {devices} devices of one node",
            f"use --per-node {devices} or fewer",
        )
    _require_even_nodes(query.gpus, per_node)
    require_network(offering, query.gpus, per_node)
    fabric = fabric_for(accelerator, offering, catalog, assumptions, devices_per_node=devices)
    sizes = col(np.array(query.sizes_bytes))
    time_s = collective_s(query.op, sizes, col(float(query.gpus)), col(float(per_node)), fabric)
    factor = float(bus_factor(query.op, col(float(query.gpus))))
    rows = tuple(
        CommRow(
            size_bytes=float(size),
            time_s=float(t),
            algbw_bytes_per_s=float(size / t) if t > 0 else 0.0,
            busbw_bytes_per_s=float(size / t * factor) if t > 0 else 0.0,
        )
        for size, t in zip(sizes, time_s, strict=True)
    )
    alone = query.gpus == 1  # nothing to exchange: every row is 0, and so is the peak
    peak = 0.0 if alone else float(bus_bytes_per_s(query.op, col(float(query.gpus)), col(float(per_node)), fabric))
    return CommEstimate(
        op=query.op,
        gpus=query.gpus,
        ranks_per_node=per_node,
        nodes=-(-query.gpus // per_node),
        accelerator=accelerator.slug,
        link_bytes_per_s=accelerator.interconnect_bytes_per_s,
        link_efficiency=float(fabric.link_efficiency),
        network_efficiency=float(fabric.network_efficiency),
        instance=_instance(offering, catalog, devices),
        peak_busbw_bytes_per_s=peak,
        formula="none (1 rank)"
        if alone
        else (
            f"time = {float(fabric.base_latency_s) * 1e6:.1f} us + hops x latency + bytes moved / bus bandwidth; "
            f"{_FORMULA[query.op]}, n = {query.gpus} (nccl-tests PERFORMANCE.md); inside a node the bus runs at "
            "link x link efficiency, across nodes at the group's share of the node's NICs x network efficiency"
        ),
        rows=rows,
        notes=tuple(_notes(query, per_node, devices)),
    )


def _require_even_nodes(ranks: int, per_node: int) -> None:
    """Refuse a group whose last node is part-filled: the model gives every node ``per_node`` ranks and
    their share of its NICs, so a node of fewer ranks, the ring's slowest hop, would be timed too fast."""
    if ranks % per_node == 0:
        return
    fewer = ranks - ranks % per_node
    divisor = next(d for d in range(per_node, 0, -1) if ranks % d == 0)
    raise InputError(
        f"{ranks} ranks do not fill nodes of {per_node} evenly ({fewer // per_node} x {per_node} + "
        f"{ranks % per_node}), and the model puts the same number of ranks on every node",
        f"use --per-node {divisor}, or --gpus {fewer} or {fewer + per_node}",
    )


def _notes(query: CommQuery, per_node: int, devices: int) -> list[str]:
    if query.gpus == 1:
        return [_ALONE]
    notes: list[str] = []
    nodes = -(-query.gpus // per_node)
    if query.op == "all-reduce" and nodes == 2:
        notes.append("2 nodes: NCCL's tree sends each byte across once, so busbw can exceed the network's rate")
    if per_node < devices and nodes > 1:
        notes.append(
            f"{per_node} of {devices} devices per node in this group: it gets {per_node}/{devices} of the node's NICs "
            "(the other groups of its kind share the rest)"
        )
    notes.append(
        "accuracy against published nccl-tests: docs/ACCURACY.md (large messages within 25 %; "
        "1-100 MiB messages are optimistic, NVLink SHARP all-reduce on H100 is not modelled)"
    )
    return notes
