"""Which rental (or owned server) a job runs on, and what it pays per hour for it.

A job that spans instances is timed over their network, so ``quote`` picks the cheapest offering
whose network bandwidth the catalog knows (one instance needs none) and names the cheaper ones it
passed over. When none is known it still quotes the cheapest; the estimate then gives memory and
FLOPs, which need no network, and says that time and cost cannot be had.
"""

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
    notes: tuple[str, ...] = ()  # cheaper offerings passed over, and why

    @property
    def timeable(self) -> bool:
        """Whether the links between its instances have a known speed (one instance needs none)."""
        return self.instances == 1 or self.node_network_bytes_per_s > 0


def _instances(offering: Offering, gpus: int) -> int:
    return math.ceil(gpus / offering.accelerator_count)


def _timeable(offering: Offering, gpus: int) -> bool:
    return _instances(offering, gpus) == 1 or offering.network_bytes_per_s > 0


def _priced(offerings: list[Offering], pricing: Pricing, gpus: int) -> list[tuple[Offering, float]]:
    """Offerings with a ``pricing`` price and what ``gpus`` cost on them per hour, cheapest first
    (catalog order among equals)."""
    totals = [(o, hourly) for o in offerings if (hourly := o.usd_per_h(pricing)) is not None]
    return sorted(((o, _instances(o, gpus) * hourly) for o, hourly in totals), key=lambda pair: pair[1])


def _choose(priced: list[tuple[Offering, float]], gpus: int) -> tuple[tuple[Offering, float], tuple[str, ...]]:
    """The cheapest offering that can be timed (else the cheapest), and a note per cheaper one skipped."""
    chosen = next((pair for pair in priced if _timeable(pair[0], gpus)), priced[0])
    skipped: dict[tuple[str, str], Offering] = {}
    for offering, total in priced:
        if total < chosen[1] and not _timeable(offering, gpus):
            skipped.setdefault((offering.cloud, offering.instance_type), offering)
    notes = tuple(
        f"{o.cloud} {o.instance_type} is cheaper but publishes no network bandwidth, so {_instances(o, gpus)} "
        f"instances cannot be timed; quoted the cheapest offering that can be"
        for o in skipped.values()
    )
    return chosen, notes


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
    """The cheapest way to rent ``gpus`` of ``accelerator`` under ``pricing`` (or own them, for on-prem)
    that can be timed: see the module docstring. An ``instance_type`` is quoted as asked, timeable or not."""
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
    priced = _priced(offerings, pricing, gpus)
    if not priced:
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
    (offering, total), notes = _choose(priced, gpus)
    instances = _instances(offering, gpus)
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
        notes=notes,
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
