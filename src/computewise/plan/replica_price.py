"""The hourly price of one serving replica: given by the user, or read from the catalog with its source.

``plan serve`` sizes replicas from a measured capacity; what each replica costs comes from exactly
one of three places (a flat hourly rate, an accelerator at its cheapest catalog price, or a named
catalog instance), and the answer always says which, so a bill can be traced back to a row.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

from computewise.errors import InputError

if TYPE_CHECKING:
    from computewise.catalog import Catalog
    from computewise.specs import Pricing

__all__ = ["SERVE_PRICINGS", "replica_price"]

SERVE_PRICINGS: tuple[Pricing, ...] = ("on-demand", "spot", "reserved-1y", "reserved-3y")


def _pricing(value: str) -> Pricing:
    for option in SERVE_PRICINGS:
        if option == value.lower():
            return option
    raise InputError(f"--pricing must be one of {', '.join(SERVE_PRICINGS)}, got {value!r}", "e.g. --pricing on-demand")


def replica_price(
    hourly_usd: float | None,
    accelerator: str | None,
    gpus_per_replica: int,
    instance: str | None,
    cloud: str | None,
    region: str | None,
    pricing: str,
    catalog_paths: tuple[Path, ...] = (),
) -> tuple[float, str]:
    """USD per replica-hour and where it came from: the flag, or a catalog row (with its source and date)."""
    from computewise.units import format_usd

    given = [
        flag
        for flag, value in (("--hourly-usd", hourly_usd), ("--accelerator", accelerator), ("--instance", instance))
        if value is not None
    ]
    if len(given) != 1:
        raise InputError(
            "give the price of one replica with exactly one of --hourly-usd, --accelerator or --instance"
            + (f" (got {', '.join(given)})" if given else ""),
            "e.g. --hourly-usd 1.2, --accelerator l4, or --instance g6.xlarge",
        )
    if gpus_per_replica < 1:
        raise InputError(f"--gpus-per-replica must be at least 1, got {gpus_per_replica}", "e.g. --gpus-per-replica 1")
    if gpus_per_replica != 1 and accelerator is None:
        raise InputError("--gpus-per-replica only applies to --accelerator", "drop it, or price with --accelerator")
    if hourly_usd is not None:
        if not (hourly_usd >= 0 and math.isfinite(hourly_usd)):
            raise InputError(f"--hourly-usd must be >= 0, got {hourly_usd:g}", "e.g. --hourly-usd 1.2")
        return hourly_usd, f"{format_usd(hourly_usd)}/h per replica as given by --hourly-usd"
    from computewise.catalog import load_catalog

    catalog = load_catalog(catalog_paths)
    kind = _pricing(pricing)
    if accelerator is not None:
        return _accelerator_price(catalog, accelerator, gpus_per_replica, kind, cloud, region)
    if instance is None:  # for mypy: exactly one source was given
        raise InputError("--instance is missing", "give --instance NAME")
    return _instance_price(catalog, instance, kind, cloud, region)


def _accelerator_price(
    catalog: Catalog, name: str, gpus: int, pricing: Pricing, cloud: str | None, region: str | None
) -> tuple[float, str]:
    """A replica's GPUs rented by ``estimate.pricing.rent`` at the cheapest offering: a share of an
    instance where the replica leaves GPUs over (its other GPUs host other replicas), said in the source."""
    from computewise.estimate.pricing import cheapest_price_only

    rental = cheapest_price_only(catalog, catalog.accelerator(name).slug, gpus, pricing, cloud, region)
    offering = rental.offering
    return rental.usd_per_h, (
        f"{rental.describe()}, the cheapest {pricing} price in the catalog "
        f"({offering.source}, retrieved {offering.retrieved})"
    )


def _instance_price(
    catalog: Catalog, instance: str, pricing: Pricing, cloud: str | None, region: str | None
) -> tuple[float, str]:
    from computewise.estimate.pricing import instance_rental

    rental = instance_rental(catalog, instance, pricing, cloud, region)
    offering = rental.offering
    return rental.usd_per_h, (
        f"one instance per replica: {rental.describe()} ({offering.source}, retrieved {offering.retrieved})"
    )
