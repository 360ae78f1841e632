"""``estimate comm``: the assumed fabric, then one nccl-tests-style row per message size.

Reads the typed ``estimate.comm_report.CommEstimate``; every string goes in as ``Text`` so a
user-supplied instance name cannot become Rich markup.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.text import Text

from computewise.report.rows import Grid
from computewise.report.table import print_table
from computewise.report.terminal import print_pairs
from computewise.units import format_bytes, plural

if TYPE_CHECKING:
    from computewise.estimate.comm_report import CommEstimate

__all__ = ["comm_grid", "comm_setup", "print_comm"]


def _gbps(bytes_per_s: float) -> str:
    """GB/s (decimal), as nccl-tests prints algbw and busbw."""
    return f"{bytes_per_s / 1e9:.2f}"


def _time(seconds: float) -> str:
    return f"{seconds * 1e6:.1f}"


def comm_setup(c: CommEstimate) -> list[tuple[str, str]]:
    """Label-value lines saying what was assumed, so a surprising number can be traced."""
    inst = c.instance
    if inst.instance_type is None:
        where = f"no rented instance in the catalog; one node of {inst.devices_per_node} assumed"
    else:
        where = f"{inst.cloud} {inst.instance_type} ({inst.devices_per_node} x {c.accelerator} per node)"
    network = "none (single node)"  # no NICs: a fabric and its efficiency would describe nothing
    if inst.network_bytes_per_s > 0:
        fabric = inst.fabric_name or inst.fabric or "not named in the catalog (generic efficiency)"
        speed = f"{_gbps(inst.network_bytes_per_s)} GB/s per node"
        network = f"{speed} over {fabric} x {c.network_efficiency:.2f} efficiency"
    return [
        ("collective", f"{c.op} on {plural(c.gpus, 'rank')}, {c.ranks_per_node} per node, {plural(c.nodes, 'node')}"),
        ("instance", where),
        ("link", f"{_gbps(c.link_bytes_per_s)} GB/s per device x {c.link_efficiency:.2f} efficiency"),
        ("network", network),
        ("peak busbw", f"{_gbps(c.peak_busbw_bytes_per_s)} GB/s (large messages)"),
        ("formula", c.formula),
    ]


def print_comm(c: CommEstimate, console: Console) -> None:
    """Setup block, then size / time / algbw / busbw like all_reduce_perf, then notes."""
    print_pairs(comm_setup(c), console)
    console.print()
    print_table(comm_grid(c), console)
    for note in c.notes:
        console.print(Text(f"note: {note}", style="dim"))


def comm_grid(c: CommEstimate) -> Grid:
    """size / bytes / time / algbw / busbw per message size, as nccl-tests' all_reduce_perf prints them."""
    rows = tuple(
        (
            format_bytes(row.size_bytes),
            f"{row.size_bytes:.0f}",
            _time(row.time_s),
            _gbps(row.algbw_bytes_per_s),
            _gbps(row.busbw_bytes_per_s),
        )
        for row in c.rows
    )
    headers = ("size", "bytes", "time (us)", "algbw (GB/s)", "busbw (GB/s)")
    return Grid(headers, rows, frozenset(range(len(headers))))
