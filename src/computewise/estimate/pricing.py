"""Which rental (or owned server) a job runs on, and what it pays per hour for it.

**The rule for renting N GPUs** lives in ``rent`` and nowhere else: N accelerators of an offering
whose instances hold k cost N/k of the instance's hourly price under the chosen pricing. When k
divides N that is N/k whole instances; otherwise the job takes a share of an instance whose other
GPUs host other replicas or jobs, and every answer says so ("1 of 8 GPUs of lambda gpu_8x_h100_sxm5
(us), on-demand $2.99/h share of a $23.92/h instance"). A smaller instance, where one is sold,
competes on the same per-GPU price and wins ties. A pricing the offering is not sold at (spot,
reserved-1y, reserved-3y) is an ``InputError`` naming the pricings it has, never a price of 0; an
accelerator no cloud rents at all (MI300X, Gaudi) gets a labelled fallback: memory and time, and
the cost "not available".

A job that spans instances is timed over their network, so ``quote`` picks the cheapest offering
whose network bandwidth the catalog knows (one instance needs none) and names the cheaper ones it
passed over. When none is known it still quotes the cheapest; the estimate then gives memory and
FLOPs, which need no network, and says that time and cost cannot be had.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from computewise.errors import InputError
from computewise.estimate.assumptions import Assumptions
from computewise.specs import Accelerator, Offering, Pricing
from computewise.units import plural

if TYPE_CHECKING:
    from computewise.catalog import Catalog

__all__ = [
    "Quote",
    "Rental",
    "cheapest_price_only",
    "cheapest_rental",
    "instance_rental",
    "onprem_network_per_device",
    "quote",
    "rent",
]

_CLOUD_PRICINGS: tuple[Pricing, ...] = ("on-demand", "spot", "reserved-1y", "reserved-3y")


@dataclass(frozen=True)
class Rental:
    """``gpus`` accelerators of one offering under one pricing: what they cost per hour, and how."""

    offering: Offering
    pricing: Pricing
    gpus: float  # may be a fraction of one GPU (a Ray job asking for 0.5)
    usd_per_h: float  # what the job pays for its GPUs, all instances together

    @property
    def instance_usd_per_h(self) -> float:
        """The price of one whole instance under this pricing."""
        return self.usd_per_h / self.gpus * self.offering.accelerator_count

    @property
    def instances(self) -> int:
        """Instances the job's GPUs sit on, the shared one included."""
        return max(1, math.ceil(round(self.gpus / self.offering.accelerator_count, 9)))

    @property
    def shared(self) -> bool:
        """Whether the job leaves GPUs of an instance to other replicas or jobs (pays a share of it)."""
        return not _is_whole(self.gpus / self.offering.accelerator_count)

    def describe(self) -> str:
        """One line a bill can be traced by: the instance, the pricing, and whether it is a share."""
        o = self.offering
        where = f"{o.cloud} {o.instance_type} ({o.region})"
        if not self.shared:
            return f"{self.instances} x {where}, {self.pricing} ${self.instance_usd_per_h:.2f}/h each"
        if self.gpus < o.accelerator_count:
            return (
                f"{self.gpus:g} of {o.accelerator_count} GPUs of {where}, {self.pricing} ${self.usd_per_h:.2f}/h "
                f"share of a ${self.instance_usd_per_h:.2f}/h instance (its other GPUs host other replicas or jobs)"
            )
        return (
            f"{self.gpus:g} GPUs on {self.instances} x {where}, the last one shared "
            f"({self.gpus - (self.instances - 1) * o.accelerator_count:g} of {o.accelerator_count} GPUs), "
            f"{self.pricing} ${self.usd_per_h:.2f}/h at ${self.instance_usd_per_h:.2f}/h per instance"
        )


def _is_whole(value: float) -> bool:
    return abs(value - round(value)) < 1e-9


def _sold_at(offerings: Sequence[Offering]) -> tuple[Pricing, ...]:
    return tuple(p for p in _CLOUD_PRICINGS if any(o.usd_per_h(p) is not None for o in offerings))


def _missing_price(what: str, pricing: Pricing, offerings: Sequence[Offering]) -> InputError:
    """The error for a pricing the catalog does not list: which pricings there are instead."""
    sold = _sold_at(offerings)
    return InputError(
        f"the catalog has no {pricing} price for {what}" + (f" (priced there: {', '.join(sold)})" if sold else ""),
        (f"use --pricing {sold[0]}" if sold else "choose another accelerator or instance")
        + ", or add the price to offerings.csv in a catalog directory (--catalog PATH); "
        "`computewise catalog list offerings` shows every price",
    )


def rent(offering: Offering, gpus: float, pricing: Pricing) -> Rental:
    """THE rule for renting ``gpus`` accelerators of ``offering`` (see the module docstring).

    They cost ``gpus / accelerator_count`` of the instance's ``pricing`` price: whole instances when
    the count fills them, else a share of an instance whose other GPUs host other replicas or jobs
    (``Rental.shared``, said by ``Rental.describe``). Raises ``InputError`` for a pricing the offering
    is not sold at, naming the pricings it has: a missing price is never billed as 0.
    """
    if not (gpus > 0 and math.isfinite(gpus)):
        raise InputError(f"the number of GPUs to rent must be positive, got {gpus:g}", "e.g. 1 or 8")
    hourly = offering.usd_per_h(pricing)
    if hourly is None:
        raise _missing_price(f"{offering.cloud} {offering.instance_type} ({offering.region})", pricing, [offering])
    return Rental(offering, pricing, gpus, gpus / offering.accelerator_count * hourly)


def _timeable(offering: Offering, gpus: float) -> bool:
    """Whether ``gpus`` on this offering can be timed: one instance, or instances with a known network."""
    return gpus <= offering.accelerator_count or offering.network_bytes_per_s > 0


def cheapest_rental(
    offerings: Sequence[Offering], gpus: float, pricing: Pricing, what: str, timed: bool = True
) -> tuple[Rental, tuple[str, ...]]:
    """The cheapest ``rent`` of ``gpus`` among ``offerings``, whole instances first among equal prices,
    catalog order after that. ``timed``: only one that can be timed (one instance, or a known network)
    unless none can, with a note per cheaper offering skipped; a price comparison that times nothing
    passes False. ``what`` names the offerings in the missing-price error."""
    rentals = [rent(o, gpus, pricing) for o in offerings if o.usd_per_h(pricing) is not None]
    if not rentals:
        raise _missing_price(what, pricing, offerings)
    ranked = sorted(rentals, key=lambda r: (r.usd_per_h, r.shared))
    chosen = next((r for r in ranked if not timed or _timeable(r.offering, gpus)), ranked[0])
    skipped: dict[tuple[str, str], Rental] = {}
    for rental in ranked:
        if rental.usd_per_h < chosen.usd_per_h and not _timeable(rental.offering, gpus):
            skipped.setdefault((rental.offering.cloud, rental.offering.instance_type), rental)
    notes = tuple(
        f"{r.offering.cloud} {r.offering.instance_type} is cheaper but publishes no network bandwidth, so "
        f"{r.instances} instances cannot be timed; quoted the cheapest offering that can be"
        for r in skipped.values()
    )
    return chosen, notes


def cheapest_price_only(
    catalog: Catalog, accelerator_slug: str, gpus: float, pricing: Pricing, cloud: str | None, region: str | None
) -> Rental:
    """``gpus`` of an accelerator at the cheapest offering in ``cloud``/``region``, where only the price
    matters (a replica, a recorded run): ``cheapest_rental`` without the network check."""
    where = " ".join(x for x in (cloud, region) if x)
    offerings = catalog.offerings_for(accelerator_slug, cloud, region)
    if not offerings:
        raise InputError(
            f"the catalog rents no {accelerator_slug}{' in ' + where if where else ''}",
            "give the price with --hourly-usd, or another --cloud or --region "
            "(`computewise catalog list offerings` shows every offering)",
        )
    what = accelerator_slug + (f" in {where}" if where else "")
    rental, _ = cheapest_rental(offerings, gpus, pricing, what, timed=False)
    return rental


def instance_rental(
    catalog: Catalog, instance_type: str, pricing: Pricing, cloud: str | None = None, region: str | None = None
) -> Rental:
    """One whole named instance at its cheapest listed region (or ``region``), through ``rent``."""
    offerings = catalog.instance_offerings(instance_type, cloud)
    if region is not None:
        offerings = tuple(o for o in offerings if o.region == region.strip().lower())
        if not offerings:
            raise InputError(
                f"{instance_type} is not listed in region {region!r}",
                "run `computewise catalog list offerings` to see where it is sold, or drop --region",
            )
    priced = [o for o in offerings if o.usd_per_h(pricing) is not None]
    if not priced:
        raise _missing_price(instance_type, pricing, offerings)
    rentals = [rent(o, o.accelerator_count, pricing) for o in priced]
    return min(rentals, key=lambda r: (r.usd_per_h, r.offering.region))


@dataclass(frozen=True)
class Quote:
    """The hardware a job rents: how many instances, at what price, on which grid."""

    pricing: Pricing
    usd_per_h: float  # all of the job's GPUs together (a share of an instance where it leaves GPUs over)
    instances: int
    devices_per_node: int
    node_network_bytes_per_s: float  # all NICs of one instance together
    g_co2_per_kwh: float
    pue: float
    offering: Offering | None
    description: str
    notes: tuple[str, ...] = ()  # cheaper offerings passed over, and why
    shared: bool = False  # the job pays a share of an instance whose other GPUs host other work
    priced: bool = True  # False: the catalog rents the accelerator nowhere; usd_per_h is NaN, cost not given

    @property
    def timeable(self) -> bool:
        """Whether the links between its instances have a known speed (one instance needs none)."""
        return self.instances == 1 or self.node_network_bytes_per_s > 0


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
    that can be timed, by ``rent``'s rule: see the module docstring. An ``instance_type`` is quoted as
    asked, timeable or not. A pricing nobody sells here raises ``InputError`` with the ones there are."""
    if pricing == "on-prem":
        return _onprem_quote(catalog, accelerator, gpus, assumptions)
    offerings = [
        o
        for o in catalog.offerings_for(accelerator.slug, cloud=cloud, region=region)
        if instance_type is None or o.instance_type == instance_type
    ]
    where = " ".join(x for x in (cloud, region) if x)
    if instance_type is not None and not offerings:
        raise InputError(
            f"no instance type {instance_type!r} with {accelerator.slug} in the catalog"
            + (f" ({where})" if where else ""),
            "run `computewise catalog list offerings` to see the instance types",
        )
    if not offerings and where:
        raise InputError(
            f"the catalog rents no {accelerator.slug} in {where}",
            "drop --cloud/--region, or run `computewise catalog list offerings` to see where it is sold",
        )
    if not offerings:
        return _unpriced_quote(catalog, accelerator, gpus, pricing, assumptions)
    what = instance_type or accelerator.slug + (f" in {where}" if where else "")
    rental, notes = cheapest_rental(offerings, gpus, pricing, what)
    offering = rental.offering
    return Quote(
        pricing=pricing,
        usd_per_h=rental.usd_per_h,
        instances=rental.instances,
        devices_per_node=offering.accelerator_count,
        node_network_bytes_per_s=offering.network_bytes_per_s,
        g_co2_per_kwh=catalog.carbon_g_per_kwh(offering.cloud, offering.region),
        pue=assumptions.cloud_pue,
        offering=offering,
        description=rental.describe(),
        notes=notes,
        shared=rental.shared,
    )


def _unpriced_quote(
    catalog: Catalog, accelerator: Accelerator, gpus: int, pricing: Pricing, assumptions: Assumptions
) -> Quote:
    """The labelled fallback for an accelerator no cloud in the catalog rents (MI300X, Gaudi, Jetson):
    memory, time and energy still hold, the cost is not given (NaN, shown as "not available")."""
    return Quote(
        pricing=pricing,
        usd_per_h=math.nan,
        instances=1,
        devices_per_node=gpus,  # no instance type known: timed as one node
        node_network_bytes_per_s=accelerator.interconnect_bytes_per_s * gpus,
        g_co2_per_kwh=catalog.carbon_g_per_kwh("", ""),
        pue=assumptions.cloud_pue,
        offering=None,
        description=(
            f"the catalog rents no {accelerator.slug}, so the cost is not given: add its offering in a catalog "
            "file (--catalog PATH), or use --pricing on-prem where an owned server is listed"
        ),
        priced=False,
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
            f"{plural(instances, 'owned server')} with {server.accelerator_count} x {accelerator.slug}, "
            f"${hourly:.2f}/h each at {assumptions.onprem_utilization:.0%} utilization"
        ),
    )
