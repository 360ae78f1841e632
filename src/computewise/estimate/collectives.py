"""Collective communication time on a two-level fabric: a link inside the node, NICs between nodes.

The figures follow nccl-tests' definitions (PERFORMANCE.md): for a buffer of S bytes on n ranks
("size" in nccl-tests: the whole buffer for all-reduce, reduce-scatter's input, all-gather's output,
each rank's buffer for all-to-all), the algorithm bandwidth is S / t and the bus bandwidth multiplies
it by the bytes each rank must move relative to S: 2(n-1)/n for all-reduce, (n-1)/n for all-gather,
reduce-scatter and all-to-all, 1 for send/recv. Bus bandwidth is what a fabric sustains whatever n
is, so it is what the model predicts, from the hardware:

- inside one node the group runs at the device's link rate times an efficiency;
- across nodes, NCCL's rings cross each node boundary once per channel and spread the channels
  over all NICs, so a group with g ranks on each node of d devices gets g/d of the node's whole
  network (the other d/g concurrent groups of the same kind share the rest), capped by the link
  inside the node;
- on exactly two nodes NCCL's all-reduce switches to its double binary tree, which sends each
  byte across the network once instead of 2(n-1)/n times, so nccl-tests' busbw there exceeds the
  network's rate (NVIDIA: "On two nodes, NCCL uses the tree algorithm which can indeed go beyond
  the network bottleneck", github.com/NVIDIA/nccl-tests/issues/196); the tree's chain inside the
  node carries every byte up and down, so it is capped at half the link;
- all-to-all cannot spread one peer's traffic over several NICs: the share of each rank's bytes
  that leaves the node goes through that rank's own rail (g/d of the node network for g ranks);
- latency follows NCCL's own tuning model (src/graph/tuning.cc): a base cost per call plus a
  per-hop cost, NVLink hops and network hops counted apart, for the LL protocol (half the bus
  bandwidth, low latency) and the Simple protocol (full bandwidth, ~5x the latency), and the
  faster of ring, tree and protocol is taken, as NCCL does. That is what makes small messages
  latency-bound and large ones bandwidth-bound.

Every function works on numpy columns, like the rest of ``estimate``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Literal

import numpy as np
import numpy.typing as npt

from computewise.errors import InputError
from computewise.estimate.arrays import FloatArray, col

if TYPE_CHECKING:
    from computewise.catalog import Catalog
    from computewise.estimate.assumptions import Assumptions
    from computewise.specs.hardware import Accelerator, NetworkFabric, Offering

__all__ = [
    "COLLECTIVES",
    "Collective",
    "Fabric",
    "bus_bytes_per_s",
    "bus_factor",
    "collective_s",
    "fabric_for",
    "link_problem",
    "network_fabric_for",
    "node_devices",
    "node_network_bytes_per_s",
    "require_network",
    "require_slices",
    "sold_by_the_chip",
    "stack_fabrics",
]

Collective = Literal["all-reduce", "all-gather", "reduce-scatter", "all-to-all", "send-recv"]
COLLECTIVES: tuple[Collective, ...] = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "send-recv")

# LL stores 8 bytes (4 of data, 4 of flag) per 4 bytes moved, so it runs at half the bus bandwidth
# (NCCL docs, "Protocols"; tuning.cc divides LL bandwidth by 2 for the same reason).
_LL_BANDWIDTH_FRACTION = 0.5


def _zero() -> FloatArray:
    return col(0.0)


def _one() -> FloatArray:
    return col(1.0)


@dataclass(frozen=True)
class Fabric:
    """The network a group of ranks talks over, one entry per candidate row.

    Latencies are per algorithm step of NCCL's low-latency (LL) protocol; the Simple protocol's
    are ``simple_latency_factor`` times larger. The defaults of the last two fields (no base cost,
    factor 1) keep a Fabric built from the first seven columns a pure bandwidth-plus-hop model.
    """

    devices_per_node: FloatArray
    link_bytes_per_s: FloatArray  # per device, one direction (NVLink, xGMI, PCIe)
    node_network_bytes_per_s: FloatArray  # all NICs of one node together, one direction
    link_efficiency: FloatArray  # achieved bus bandwidth / link rate inside a node
    network_efficiency: FloatArray  # achieved bus bandwidth / NIC rate across nodes
    link_latency_s: FloatArray  # per algorithm step inside a node
    network_latency_s: FloatArray  # per algorithm step across nodes
    base_latency_s: FloatArray = field(default_factory=_zero)  # once per collective call
    simple_latency_factor: FloatArray = field(default_factory=_one)  # Simple-protocol hop / LL hop

    def take(self, index: npt.NDArray[np.intp]) -> Fabric:
        """The rows ``index`` of every column (a planner expands one fabric per offering to its candidates)."""
        return Fabric(**{f.name: _take(getattr(self, f.name), index) for f in fields(self)})


def _take(column: FloatArray, index: npt.NDArray[np.intp]) -> FloatArray:
    if np.ndim(column) == 0:
        return np.full(np.shape(index), float(column))
    return col(column)[index]


def stack_fabrics(fabrics: Sequence[Fabric]) -> Fabric:
    """One Fabric whose columns are the given one-row fabrics, in order (then ``take`` per candidate)."""
    if not fabrics:
        raise InputError("no fabrics to stack", "pass at least one Fabric")
    return Fabric(**{f.name: np.array([float(getattr(one, f.name)) for one in fabrics]) for f in fields(Fabric)})


# ------------------------------------------------------------------------------ bandwidth


def bus_factor(op: Collective, ranks: FloatArray) -> FloatArray:
    """Bytes each rank moves per byte of the buffer (nccl-tests' busbw / algbw)."""
    n = np.maximum(col(ranks), 1.0)
    if op == "all-reduce":
        return 2.0 * (n - 1.0) / n
    if op == "send-recv":
        return np.where(n > 1, 1.0, 0.0)
    return (n - 1.0) / n


def _per_node(ranks: FloatArray, ranks_per_node: FloatArray) -> FloatArray:
    return np.minimum(np.maximum(col(ranks_per_node), 1.0), col(ranks))


def _nodes(ranks: FloatArray, ranks_per_node: FloatArray) -> FloatArray:
    return np.ceil(col(ranks) / _per_node(ranks, ranks_per_node))


def _ring_bus_bytes_per_s(op: Collective, n: FloatArray, g: FloatArray, fabric: Fabric) -> FloatArray:
    """Ring (and the point-to-point ops): the link inside a node, the group's share of the NICs across."""
    link = fabric.link_bytes_per_s * fabric.link_efficiency
    node_network = fabric.node_network_bytes_per_s * fabric.network_efficiency
    share = g / fabric.devices_per_node  # of the node's NICs this group gets
    network = node_network * share
    if op == "all-to-all":
        # Each rank's traffic to other nodes goes through its own rail: (n - g) / n of its bytes leave.
        leaving = np.maximum(n - g, 0.0) / np.maximum(n - 1.0, 1.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            network = np.where(leaving > 0, network / (leaving * g), np.inf)
    if op == "send-recv":
        network = node_network / fabric.devices_per_node  # one pair, one rail
    spans_nodes = n > g
    return np.where(spans_nodes, np.minimum(link, network), link)


def _tree_bus_bytes_per_s(n: FloatArray, g: FloatArray, fabric: Fabric) -> FloatArray:
    """All-reduce on NCCL's double binary tree across nodes (0 where the group fits in one node).

    Per byte of the buffer a node sends 1 byte over the network on two nodes (each is the other's
    root in one of the two trees) and 2 bytes on three or more (interior in one tree, leaf in the
    other); the chain inside the node carries every byte up and down, 2 bytes per link direction.
    """
    nodes = np.ceil(n / g)
    network = fabric.node_network_bytes_per_s * fabric.network_efficiency * g / fabric.devices_per_node
    network_bytes_per_byte = np.where(nodes == 2, 1.0, 2.0)
    link = fabric.link_bytes_per_s * fabric.link_efficiency
    chain = np.where(g > 1, link / 2.0, np.inf)
    algbw = np.minimum(network / network_bytes_per_byte, chain)
    return np.where(nodes > 1, bus_factor("all-reduce", n) * algbw, 0.0)


def bus_bytes_per_s(op: Collective, ranks: FloatArray, ranks_per_node: FloatArray, fabric: Fabric) -> FloatArray:
    """Large-message bus bandwidth a group of ``ranks`` (``ranks_per_node`` of them on each node) sustains."""
    n = col(ranks)
    g = _per_node(n, ranks_per_node)
    ring = _ring_bus_bytes_per_s(op, n, g, fabric)
    if op != "all-reduce":
        return ring
    return np.maximum(ring, _tree_bus_bytes_per_s(n, g, fabric))


# ------------------------------------------------------------------------------ latency


def _ring_latency_s(op: Collective, n: FloatArray, g: FloatArray, fabric: Fabric) -> FloatArray:
    """NCCL tuning.cc: a ring's steps cross the network 2(nodes-1) times (all-reduce) or nodes-1 times."""
    nodes = np.ceil(n / g)
    passes = 2.0 if op == "all-reduce" else 1.0
    steps = passes * np.maximum(n - 1.0, 0.0)
    network_steps = passes * np.maximum(nodes - 1.0, 0.0)
    if op == "send-recv":
        steps = np.where(n > 1, 1.0, 0.0)
        network_steps = np.where(nodes > 1, 1.0, 0.0)
    return (steps - network_steps) * fabric.link_latency_s + network_steps * fabric.network_latency_s


def _tree_latency_s(n: FloatArray, g: FloatArray, fabric: Fabric) -> FloatArray:
    """NCCL tuning.cc: up and down the chain inside the node and log2(nodes) network levels."""
    nodes = np.ceil(n / g)
    return 2.0 * ((g - 1.0) * fabric.link_latency_s + np.log2(np.maximum(nodes, 1.0)) * fabric.network_latency_s)


def _fastest_s(moved_bytes: FloatArray, bus_bytes_per_s: FloatArray, hops_s: FloatArray, fabric: Fabric) -> FloatArray:
    """The faster protocol: LL (half the bandwidth, LL hops) or Simple (full bandwidth, slower hops)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ll = hops_s + moved_bytes / (bus_bytes_per_s * _LL_BANDWIDTH_FRACTION)
        simple = hops_s * fabric.simple_latency_factor + moved_bytes / bus_bytes_per_s
    return np.minimum(ll, simple)


def collective_s(
    op: Collective,
    message_bytes: FloatArray,
    ranks: FloatArray,
    ranks_per_node: FloatArray,
    fabric: Fabric,
) -> FloatArray:
    """Seconds for one collective on a buffer of ``message_bytes`` (nccl-tests' "size").

    The fastest of ring and (for all-reduce across nodes) tree, each with the faster protocol,
    plus NCCL's base cost per call; 0 where nothing moves (one rank, or an empty buffer).
    """
    n = col(ranks)
    g = _per_node(n, ranks_per_node)
    moved = bus_factor(op, n) * col(message_bytes)
    ring = _fastest_s(moved, _ring_bus_bytes_per_s(op, n, g, fabric), _ring_latency_s(op, n, g, fabric), fabric)
    best = ring
    if op == "all-reduce":
        tree_bw = _tree_bus_bytes_per_s(n, g, fabric)
        tree = _fastest_s(moved, tree_bw, _tree_latency_s(n, g, fabric), fabric)
        best = np.where(tree_bw > 0, np.minimum(ring, tree), ring)
    return np.where(moved > 0, fabric.base_latency_s + best, 0.0)


# ------------------------------------------------------------------------------ from the catalog


def network_fabric_for(offering: Offering | None, catalog: Catalog) -> NetworkFabric | None:
    """The catalog's row for the offering's inter-node network, or None where the catalog names none."""
    if offering is None or not offering.fabric:
        return None
    return catalog.fabric(offering.fabric)


def link_problem(accelerator: Accelerator, ranks: int) -> tuple[str, str] | None:
    """(what, fix) when ranks talk over a link of unknown speed (CPUs, Apple, edge modules): no time exists."""
    if ranks > 1 and accelerator.interconnect_bytes_per_s <= 0:
        return (
            f"the catalog has no interconnect bandwidth for {accelerator.name}, so {ranks} devices cannot be timed",
            "add interconnect_bytes_per_s for it in a catalog file (--catalog PATH), or use --gpus 1",
        )
    return None


def require_network(offering: Offering | None, ranks: int, devices_per_node: int) -> None:
    """Fail loudly when a group must cross nodes over a network the catalog knows nothing about."""
    if ranks <= devices_per_node:
        return
    if offering is None:
        raise InputError(
            f"{ranks} ranks need more than one node of {devices_per_node}, "
            "but no instance says what network joins the nodes",
            "pass --instance (or --cloud) to pick an instance with network data in the catalog",
        )
    if offering.network_bytes_per_s <= 0:
        raise InputError(
            f"{offering.cloud} {offering.instance_type} has no network bandwidth in the catalog, "
            f"so {ranks} ranks across {-(-ranks // devices_per_node)} nodes cannot be estimated",
            "pick another --instance, or add its network_bytes_per_s in an offerings*.csv "
            "(`computewise catalog list offerings` shows the columns)",
        )


def sold_by_the_chip(accelerator: Accelerator, offering: Offering | None) -> bool:
    """Whether the offering (or, without one, the accelerator) rents chips one at a time out of slices whose chips
    share their own links (Cloud TPU): its node is then a slice of the job's chips, not the instance."""
    return bool(accelerator.slice_sizes) and (offering is None or offering.accelerator_count == 1)


def node_devices(accelerator: Accelerator, offering: Offering | None, devices: float) -> int:
    """How many of a job's ``devices`` share the accelerator's own links: the node the model times.

    That is the instance's devices (all of them without an instance), except for a chip rented one
    at a time in slices (Cloud TPU): its offering is one chip, but a job's chips talk over the chips'
    links (ICI) within each slice and over the data-center network between slices only
    (``Accelerator.slice_chips``). A count no slices make up stays one chip a node, which
    ``estimate`` refuses before timing it.
    """
    whole = max(1, math.ceil(devices))
    if sold_by_the_chip(accelerator, offering):
        return max(1, accelerator.slice_chips(whole))
    return offering.accelerator_count if offering is not None else whole


def node_network_bytes_per_s(offering: Offering | None, devices: int) -> float:
    """All the NICs of a node of ``devices``: the offering's network per device times the devices (a TPU slice's
    chips share their hosts' NICs); no offering, no network."""
    return offering.network_bytes_per_s / offering.accelerator_count * devices if offering is not None else 0.0


def require_slices(accelerator: Accelerator, devices: int) -> None:
    """Refuse a chip count no slices of a chip sold in slices make up (6 chips of TPU v5p), naming the nearest."""
    if accelerator.slice_chips(devices):
        return
    below = next((n for n in range(devices - 1, 0, -1) if accelerator.slice_chips(n)), None)
    above = next(n for n in range(devices + 1, 2 * devices + accelerator.slice_sizes[0]) if accelerator.slice_chips(n))
    nearest = " or ".join(str(n) for n in (below, above) if n is not None)
    raise InputError(
        f"{accelerator.name} is rented in slices of {', '.join(map(str, accelerator.slice_sizes))} chips, and "
        f"{devices} chips are neither one slice nor equal slices of one size",
        f"use --gpus {nearest}",
    )


def fabric_for(
    accelerator: Accelerator,
    offering: Offering | None,
    catalog: Catalog,
    assumptions: Assumptions | None = None,
    *,
    devices_per_node: int | None = None,
) -> Fabric:
    """One row of Fabric from catalog data: the accelerator's link, the instance's NICs and fabric.

    The network efficiency and per-hop latency come from the offering's ``fabrics.csv`` row (EFA,
    InfiniBand, RoCE, Ethernet, each with its source); an offering without one falls back to the
    ``inter_node_network_efficiency`` assumption. ``assumptions`` (default: the catalog's) supplies
    the link efficiency, so ``dataclasses.replace`` on it reaches this model too. The node has
    ``devices_per_node`` devices (default: the offering's, else 8; a TPU slice's chips, from
    ``node_devices``), and their share of the offering's network per device; no offering, no network.
    """
    from computewise.estimate.assumptions import Assumptions

    chosen = assumptions if assumptions is not None else Assumptions.from_catalog(catalog)
    default = offering.accelerator_count if offering is not None else 8
    devices = devices_per_node or default
    network = network_fabric_for(offering, catalog)
    efficiency = network.network_efficiency if network is not None else chosen.inter_node_network_efficiency
    latency_s = network.latency_s if network is not None else catalog.assumption("inter_node_latency_s")
    return Fabric(
        devices_per_node=col(float(devices)),
        link_bytes_per_s=col(accelerator.interconnect_bytes_per_s),
        node_network_bytes_per_s=col(node_network_bytes_per_s(offering, devices)),
        link_efficiency=col(chosen.intra_node_link_efficiency),
        network_efficiency=col(efficiency),
        link_latency_s=col(catalog.assumption("intra_node_link_latency_s")),
        network_latency_s=col(latency_s),
        base_latency_s=col(catalog.assumption("collective_base_latency_s")),
        simple_latency_factor=col(catalog.assumption("simple_protocol_latency_factor")),
    )
