"""The catalog's tables as grids (``catalog list``, ``show`` and ``validate``), printed like every other table.

Each takes the catalog's own rows; prices come out of :func:`computewise.units.format_usd`,
peaks and bandwidths in decimal prefixes, as vendors quote them, and memory in GiB
(:func:`computewise.units.format_bytes`), as the driver reports it and every plan prints it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from computewise.catalog import usd_per_accelerator_h
from computewise.estimate.quote import owned_usd_per_h
from computewise.report.rows import Grid
from computewise.units import format_bytes, format_usd_or

if TYPE_CHECKING:
    from computewise.catalog import Catalog
    from computewise.specs.hardware import (
        Accelerator,
        Assumption,
        CarbonIntensity,
        KernelProfile,
        NetworkFabric,
        Offering,
        OnPremCost,
    )

__all__ = [
    "accelerator_grid",
    "assumption_grid",
    "carbon_grid",
    "fabric_grid",
    "files_grid",
    "kernel_profile_grid",
    "offering_grid",
    "onprem_grid",
    "si",
]


def si(value: float, unit: str) -> str:
    """Decimal prefixes, as vendors quote peaks and bandwidth (989.5 TFLOP/s, 3.35 TB/s)."""
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6)):
        if value >= scale:
            return f"{value / scale:.4g} {prefix}{unit}"
    return f"{value:.4g} {unit}"


def accelerator_grid(rows: tuple[Accelerator, ...]) -> Grid:
    body = tuple(
        (
            acc.slug,
            acc.kind,
            format_bytes(acc.memory_bytes),
            si(acc.memory_bandwidth_bytes_per_s, "B/s"),
            si(acc.peak_flops_for("bf16"), "FLOP/s"),
            si(acc.peak_flops["fp8"], "FLOP/s") if "fp8" in acc.peak_flops else "-",
            f"{acc.tdp_w:.0f} W" if acc.tdp_w else "n/p",
            ", ".join(acc.aliases),
        )
        for acc in rows
    )
    headers = ("slug", "kind", "memory", "bandwidth", "bf16 peak", "fp8 peak", "TDP", "aliases")
    return Grid(headers, body, frozenset(range(2, 7)), whole=frozenset({0, 1}), drop_order=(7, 5, 6))


def offering_grid(rows: tuple[Offering, ...]) -> Grid:
    body = tuple(
        (
            row.cloud,
            row.instance_type,
            f"{row.accelerator_count}x {row.accelerator}",
            row.region,
            format_usd_or(row.on_demand_usd_per_h),
            format_usd_or(row.spot_usd_per_h),
            format_usd_or(row.reserved_1y_usd_per_h),
            format_usd_or(row.reserved_3y_usd_per_h),
            format_usd_or(usd_per_accelerator_h(row)),
        )
        for row in rows
    )
    headers = (
        *("cloud", "instance type", "accelerator", "region"),
        *("on-demand/h", "spot/h", "1y/h", "3y/h", "per accel-h"),
    )
    # Reserved prices go first on a narrow terminal, then spot, then the accelerator (the instance type names it).
    return Grid(headers, body, frozenset(range(4, 9)), whole=frozenset({0, 1, 3}), drop_order=(7, 6, 5, 2, 3))


def carbon_grid(rows: tuple[CarbonIntensity, ...]) -> Grid:
    body = tuple((row.cloud, row.region, f"{row.g_co2_per_kwh:.0f}", row.source) for row in rows)
    return Grid(("cloud", "region", "gCO2/kWh", "source"), body, frozenset({2}), whole=frozenset({0, 1}))


def onprem_grid(catalog: Catalog, rows: tuple[OnPremCost, ...]) -> tuple[str, Grid]:
    """Owned servers, with the hourly cost per accelerator at the catalog's power price, PUE and utilization."""
    power_usd_per_kwh = catalog.assumption("onprem_power_usd_per_kwh")
    pue = catalog.assumption("onprem_pue")
    utilization = catalog.assumption("onprem_utilization")
    title = f"onprem (per accel-h at {utilization:.0%} utilization, PUE {pue:g}, ${power_usd_per_kwh:g}/kWh)"
    body = tuple(
        (
            row.accelerator,
            str(row.accelerator_count),
            format_usd_or(row.purchase_usd),
            f"{row.lifetime_years:g} y",
            f"{row.server_power_w / 1000:.1f} kW",
            format_usd_or(row.ops_usd_per_year),
            format_usd_or(owned_usd_per_h(catalog, row) / row.accelerator_count),
        )
        for row in rows
    )
    headers = ("accelerator", "count", "purchase", "life", "power", "ops/yr", "per accel-h")
    return title, Grid(headers, body, frozenset(range(1, 7)), whole=frozenset({0}))


def assumption_grid(rows: tuple[Assumption, ...]) -> Grid:
    body = tuple((row.key, f"{row.value:g}", row.unit, row.source) for row in rows)
    return Grid(("key", "value", "unit", "source"), body, frozenset({1}), whole=frozenset({0}))


def fabric_grid(rows: tuple[NetworkFabric, ...]) -> Grid:
    body = tuple(
        (row.fabric, row.name, f"{row.network_efficiency:g}", f"{row.latency_s * 1e6:g} us", row.source) for row in rows
    )
    return Grid(("fabric", "name", "efficiency", "latency", "source"), body, frozenset({2, 3}), whole=frozenset({0}))


def kernel_profile_grid(rows: tuple[KernelProfile, ...]) -> Grid:
    """Each accelerator's burst shares of its data sheet: 16-bit and fp32 GEMMs, the triad; blank: assumed."""

    def share(value: float | None) -> str:
        return "" if value is None else f"{value:.0%}"

    body = tuple(
        (row.accelerator, share(row.matmul_share), share(row.fp32_matmul_share), share(row.stream_share), row.source)
        for row in rows
    )
    headers = ("accelerator", "GEMM 16-bit", "GEMM fp32", "triad", "source")
    return Grid(headers, body, frozenset({1, 2, 3}), whole=frozenset({0}))


def files_grid(rows: tuple[tuple[str, str, str], ...]) -> Grid:
    return Grid(("file", "table", "rows"), rows, frozenset({2}), whole=frozenset({1}))
