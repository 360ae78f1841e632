"""Which rental (or owned server) a job runs on, and what it pays per hour for it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from computewise.errors import InputError
from computewise.estimate.assumptions import Assumptions
from computewise.specs import Accelerator, Offering, Pricing

if TYPE_CHECKING:
    from computewise.catalog import Catalog

__all__ = ["Quote", "onprem_network_per_device", "quote"]


@dataclass(frozen=True)
class Quote:
    """The hardware a job rents: how many instances, at what price, on which grid."""

    pricing: Pricing
    usd_per_h: float  # all instances together; 0 when no price is known
    instances: int
    devices_per_node: int
    node_network_bytes_per_s: float  # all NICs of one instance together
    g_co2_per_kwh: float
    pue: float
    offering: Offering | None
    description: str


def _cheapest(offerings: list[Offering], pricing: Pricing, gpus: int) -> tuple[Offering, float] | None:
    best: tuple[Offering, float] | None = None
    for offering in offerings:
        hourly = offering.usd_per_h(pricing)
        if hourly is None:
            continue
        total = math.ceil(gpus / offering.accelerator_count) * hourly
        if best is None or total < best[1]:
            best = (offering, total)
    return best


def quote(
    catalog: Catalog,
    accelerator: Accelerator,
    gpus: int,
    pricing: Pricing,
    assumptions: Assumptions,
    cloud: str | None = None,
    region: str | None = None,
    instance_type: str | None = None,
) -> Quote:
    """The cheapest way to rent ``gpus`` of ``accelerator`` under ``pricing`` (or own them, for on-prem)."""
    if pricing == "on-prem":
        return _onprem_quote(catalog, accelerator, gpus, assumptions)
    offerings = [
        o
        for o in catalog.offerings_for(accelerator.slug, cloud=cloud, region=region)
        if instance_type is None or o.instance_type == instance_type
    ]
    if instance_type is not None and not offerings:
        raise InputError(
            f"no instance type {instance_type!r} with {accelerator.slug} in the catalog"
            + (f" (cloud {cloud}, region {region})" if cloud or region else ""),
            "run `computewise catalog list offerings` to see the instance types",
        )
    chosen = _cheapest(offerings, pricing, gpus)
    if chosen is None:
        where = " ".join(x for x in (cloud, region) if x)
        return Quote(
            pricing=pricing,
            usd_per_h=0.0,
            instances=1,
            devices_per_node=gpus,  # no instance type known: timed as one node
            node_network_bytes_per_s=accelerator.interconnect_bytes_per_s * gpus,
            g_co2_per_kwh=catalog.carbon_g_per_kwh(cloud or "", region or ""),
            pue=assumptions.cloud_pue,
            offering=None,
            description=f"no {pricing} price for {accelerator.slug} {where}in the catalog; cost shown as 0",
        )
    offering, total = chosen
    instances = math.ceil(gpus / offering.accelerator_count)
    return Quote(
        pricing=pricing,
        usd_per_h=total,
        instances=instances,
        devices_per_node=offering.accelerator_count,
        node_network_bytes_per_s=offering.network_bytes_per_s,
        g_co2_per_kwh=catalog.carbon_g_per_kwh(offering.cloud, offering.region),
        pue=assumptions.cloud_pue,
        offering=offering,
        description=(
            f"{instances} x {offering.cloud} {offering.instance_type} ({offering.region}), {pricing} "
            f"${total / instances:.2f}/h each"
        ),
    )


def onprem_network_per_device(catalog: Catalog, slug: str) -> float:
    """Owned clusters are assumed networked like the best cloud instance of the same accelerator
    (the catalog's on-prem rows price servers, not fabrics); 0, meaning unknown, when none is rented."""
    return max(
        (o.network_bytes_per_s / o.accelerator_count for o in catalog.offerings_for(slug)),
        default=0.0,
    )


def _onprem_quote(catalog: Catalog, accelerator: Accelerator, gpus: int, assumptions: Assumptions) -> Quote:
    server = catalog.onprem_for(accelerator.slug)
    if server is None:
        raise InputError(
            f"no on-premises server with {accelerator.slug} in the catalog",
            "add a row to onprem.csv in your catalog directory, or choose another --pricing",
        )
    instances = math.ceil(gpus / server.accelerator_count)
    hourly = server.usd_per_h(
        assumptions.onprem_power_usd_per_kwh, assumptions.onprem_pue, assumptions.onprem_utilization
    )
    return Quote(
        pricing="on-prem",
        usd_per_h=instances * hourly,
        instances=instances,
        devices_per_node=server.accelerator_count,
        node_network_bytes_per_s=onprem_network_per_device(catalog, accelerator.slug) * server.accelerator_count,
        g_co2_per_kwh=assumptions.world_g_co2_per_kwh,
        pue=assumptions.onprem_pue,
        offering=None,
        description=(
            f"{instances} owned server(s) with {server.accelerator_count} x {accelerator.slug}, "
            f"${hourly:.2f}/h each at {assumptions.onprem_utilization:.0%} utilization"
        ),
    )
