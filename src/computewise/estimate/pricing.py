"""Renting N GPUs of an offering, and which offering rents them cheapest.

**The rule for renting N GPUs** lives in ``rent`` and nowhere else: N accelerators of an offering
whose instances hold k cost N/k of the instance's hourly price under the chosen pricing. When k
divides N that is N/k whole instances; otherwise the job takes a share of an instance whose other
GPUs host other replicas or jobs, and every answer says so ("1 of 8 GPUs of lambda gpu_8x_h100_sxm5
(us), on-demand $2.99/h share of a $23.92/h instance"). A smaller instance, where one is sold,
competes on the same per-GPU price and wins ties. A pricing the offering is not sold at (spot,
reserved-1y, reserved-3y) is an ``InputError`` naming the pricings it has, never a price of 0.

A job that spans instances is timed over their network, so ``cheapest_rental`` (``timed``) picks the
cheapest offering whose network bandwidth the catalog knows (one instance needs none) and names the
cheaper ones it passed over. When none is known it still rents the cheapest; the estimate then gives
memory and FLOPs, which need no network, and says that time and cost cannot be had. Which rental a
verb pays for, with its grid and PUE, is ``estimate.quote``'s to say.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from computewise.errors import InputError
from computewise.specs import CLOUD_PRICINGS, Offering, Pricing

if TYPE_CHECKING:
    from computewise.catalog import Catalog

__all__ = ["Rental", "cheapest_rental", "instance_rental", "onprem_network_per_device", "rent"]


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
    return tuple(p for p in CLOUD_PRICINGS if any(o.usd_per_h(p) is not None for o in offerings))


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


def onprem_network_per_device(catalog: Catalog, slug: str) -> float:
    """Owned clusters are assumed networked like the best cloud instance of the same accelerator
    (the catalog's on-prem rows price servers, not fabrics); 0, meaning unknown, when none is rented."""
    return max(
        (o.network_bytes_per_s / o.accelerator_count for o in catalog.offerings_for(slug)),
        default=0.0,
    )
