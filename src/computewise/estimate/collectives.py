"""Collective communication time on a two-level fabric: a link inside the node, NICs between nodes.

The figures follow nccl-tests' definitions (PERFORMANCE.md): for a buffer of S bytes on n ranks,
the algorithm bandwidth is S / t and the bus bandwidth multiplies it by the bytes each rank must
move relative to S: 2(n-1)/n for all-reduce, (n-1)/n for all-gather, reduce-scatter and
all-to-all, 1 for send/recv. Bus bandwidth is what a fabric sustains whatever n is, so it is
what the model predicts, from the hardware:

- inside one node the group runs at the device's link rate times an efficiency;
- across nodes, NCCL's rings and trees cross each node boundary once per channel and spread
  the channels over all NICs, so a group with g ranks on each node of d devices gets g/d of the
  node's whole network (the other d/g concurrent groups of the same kind share the rest), capped
  by the link inside the node;
- a latency term per algorithm step, so small messages are latency-bound.

Every function works on numpy columns, like the rest of ``estimate``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from computewise.estimate.arrays import FloatArray, col

__all__ = ["COLLECTIVES", "Collective", "Fabric", "bus_bytes_per_s", "bus_factor", "collective_s"]

Collective = Literal["all-reduce", "all-gather", "reduce-scatter", "all-to-all", "send-recv"]
COLLECTIVES: tuple[Collective, ...] = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "send-recv")


@dataclass(frozen=True)
class Fabric:
    """The network a group of ranks talks over, one entry per candidate row."""

    devices_per_node: FloatArray
    link_bytes_per_s: FloatArray  # per device, one direction (NVLink, xGMI, PCIe)
    node_network_bytes_per_s: FloatArray  # all NICs of one node together, one direction
    link_efficiency: FloatArray  # achieved bus bandwidth / link rate inside a node
    network_efficiency: FloatArray  # achieved bus bandwidth / NIC rate across nodes
    link_latency_s: FloatArray  # per algorithm step inside a node
    network_latency_s: FloatArray  # per algorithm step across nodes


def bus_factor(op: Collective, ranks: FloatArray) -> FloatArray:
    """Bytes each rank moves per byte of the buffer (nccl-tests' busbw / algbw)."""
    n = np.maximum(col(ranks), 1.0)
    if op == "all-reduce":
        return 2.0 * (n - 1.0) / n
    if op == "send-recv":
        return np.where(n > 1, 1.0, 0.0)
    return (n - 1.0) / n


def bus_bytes_per_s(op: Collective, ranks: FloatArray, ranks_per_node: FloatArray, fabric: Fabric) -> FloatArray:
    """Bus bandwidth a group of ``ranks`` (``ranks_per_node`` of them on each node) sustains."""
    n = col(ranks)
    g = np.minimum(np.maximum(col(ranks_per_node), 1.0), n)
    link = fabric.link_bytes_per_s * fabric.link_efficiency
    share = g / fabric.devices_per_node  # of the node's NICs this group gets
    network = fabric.node_network_bytes_per_s * fabric.network_efficiency * share
    if op == "all-to-all":
        # Only the (n - g) / n of each rank's traffic that leaves the node uses the NICs.
        leaving = np.maximum(n - g, 0.0) / np.maximum(n - 1.0, 1.0)
        with np.errstate(divide="ignore"):
            network = np.where(leaving > 0, network / (leaving * g), np.inf)
    spans_nodes = n > g
    return np.where(spans_nodes, np.minimum(link, network), link)


def collective_s(
    op: Collective,
    message_bytes: FloatArray,
    ranks: FloatArray,
    ranks_per_node: FloatArray,
    fabric: Fabric,
) -> FloatArray:
    """Seconds for one collective on a buffer of ``message_bytes`` (nccl-tests' "size")."""
    n = col(ranks)
    g = np.minimum(np.maximum(col(ranks_per_node), 1.0), n)
    moved = bus_factor(op, n) * col(message_bytes)
    busbw = bus_bytes_per_s(op, n, g, fabric)
    nodes = np.ceil(n / g)
    # A ring takes 2(n-1) steps for an all-reduce and n-1 otherwise; a tree across nodes
    # log2(nodes) each way. NCCL picks the faster, so the latency is the smaller of the two.
    ring_steps = (2.0 if op == "all-reduce" else 1.0) * np.maximum(n - 1.0, 0.0)
    tree_steps = 2.0 * np.log2(np.maximum(nodes, 1.0)) + 2.0 * np.maximum(g - 1.0, 0.0)
    steps = np.where((op == "all-reduce") & (nodes > 1), np.minimum(ring_steps, tree_steps), ring_steps)
    if op == "send-recv":
        steps = np.where(n > 1, 1.0, 0.0)
    latency = np.where(nodes > 1, fabric.network_latency_s, fabric.link_latency_s)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(moved > 0, moved / busbw + steps * latency, 0.0)
