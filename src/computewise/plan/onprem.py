"""``plan compare-onprem``: the utilization above which owning a server beats renting one.

Owning costs the same every hour whether the server works or not; renting costs only the hours
used. At utilization u the owned cost per used hour is C_full / u, so owning wins once
u > C_full / P, where C_full is the owned hourly cost at 100 % and P the rental price of the same
accelerators (cheapest offering, rented by ``estimate.pricing.rent``: a share of a bigger instance
where the server holds fewer accelerators than it, marked "share"). Pricings the catalog does not
list for an accelerator are left out, never compared at $0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from computewise.estimate.pricing import cheapest_rental
from computewise.estimate.quote import owned_usd_per_h
from computewise.specs import Pricing
from computewise.specs.codec import Jsonable, json_field

if TYPE_CHECKING:
    from computewise.catalog import Catalog

__all__ = ["BreakEven", "compare_onprem"]


@dataclass(frozen=True)
class BreakEven(Jsonable):
    """One owned server against renting the same accelerators at one pricing: where owning starts to pay."""

    accelerator: str
    accelerator_count: int
    owned_usd_per_h_at_full_use: float = field(metadata=json_field(name="owned_usd_per_hour_at_full_use"))
    pricing: Pricing
    rented_usd_per_h: float = field(metadata=json_field(name="rented_usd_per_hour"))
    rented_from: str
    break_even_utilization: float  # > 1: renting is always cheaper


def compare_onprem(
    catalog: Catalog,
    accelerators: tuple[str, ...] = (),
    pricings: tuple[Pricing, ...] = ("on-demand", "reserved-1y", "reserved-3y"),
) -> list[BreakEven]:
    results: list[BreakEven] = []
    for server in catalog.onprem:
        if accelerators and server.accelerator not in accelerators:
            continue
        owned = owned_usd_per_h(catalog, server, utilization=1.0)
        for pricing in pricings:
            offerings = [o for o in catalog.offerings_for(server.accelerator) if o.usd_per_h(pricing) is not None]
            if not offerings:
                continue
            rental, _ = cheapest_rental(offerings, server.accelerator_count, pricing, server.accelerator, timed=False)
            o = rental.offering
            rented = rental.usd_per_h
            source = f"{o.cloud} {o.instance_type} {o.region}" + (
                f" ({server.accelerator_count:g} of {o.accelerator_count} GPUs, share)" if rental.shared else ""
            )
            results.append(
                BreakEven(
                    accelerator=server.accelerator,
                    accelerator_count=server.accelerator_count,
                    owned_usd_per_h_at_full_use=owned,
                    pricing=pricing,
                    rented_usd_per_h=rented,
                    rented_from=source,
                    break_even_utilization=owned / rented,
                )
            )
    return results
