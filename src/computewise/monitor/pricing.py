"""The price a monitored run is charged at, decided once at launch and frozen into the ledger.

Order of precedence: ``--hourly-usd`` (the user knows best) > ``--instance`` (a catalog offering)
> the detected GPUs rented by ``estimate.pricing.rent`` (the rule ``estimate`` and ``plan`` use:
a share of an instance where the GPUs leave some of it over) at the cheapest catalog offering in
``--cloud`` and ``--region`` > a CPU-only run at the catalog's price per vCPU-hour. Whatever was
assumed is said in ``PriceSnapshot.explanation``; a pricing the catalog does not list is an error.
"""

from __future__ import annotations

from dataclasses import dataclass

from computewise.catalog import Catalog
from computewise.errors import InputError
from computewise.estimate.pricing import Rental, cheapest_price_only, instance_rental
from computewise.ledger import PriceSnapshot
from computewise.specs import PRICINGS, Accelerator, Pricing
from computewise.units import format_usd

__all__ = ["DetectedHardware", "PriceRequest", "gpu_price", "resolve_price"]


@dataclass(frozen=True)
class DetectedHardware:
    """What the run will use: GPUs seen by the driver (may be none) and the host's logical CPUs."""

    gpu_count: int
    gpu_name: str | None
    gpu_memory_total_bytes: float | None
    logical_cpus: int


@dataclass(frozen=True)
class PriceRequest:
    """The pricing flags of ``computewise run`` (all optional)."""

    hourly_usd: float | None = None
    instance_type: str | None = None
    cloud: str | None = None
    region: str | None = None
    pricing: Pricing = "on-demand"


def resolve_price(catalog: Catalog, request: PriceRequest, hardware: DetectedHardware) -> PriceSnapshot:
    """Freeze the hourly price, grid carbon intensity and PUE of a run; raise InputError for impossible flags."""
    if request.pricing not in PRICINGS:
        raise InputError(f"unknown pricing {request.pricing!r}", f"use one of: {', '.join(PRICINGS)}")
    if request.hourly_usd is not None:
        if request.hourly_usd < 0:
            raise InputError(f"--hourly-usd must not be negative, got {request.hourly_usd}", "e.g. --hourly-usd 2.5")
        return _with_carbon(
            catalog,
            request,
            hourly_usd=request.hourly_usd,
            source="--hourly-usd",
            explanation=f"{format_usd(request.hourly_usd)}/h as given by --hourly-usd",
            assumed=False,
        )
    if request.instance_type is not None:
        return _instance_price(catalog, request, request.instance_type)
    accelerator = _detected_accelerator(catalog, hardware)
    if accelerator is not None:
        return _gpu_price(catalog, request, hardware, accelerator)
    rate = catalog.assumption_row("cpu_usd_per_vcpu_h")
    hourly = rate.value * hardware.logical_cpus
    gpu_note = f"; GPU {hardware.gpu_name!r} is not in the catalog" if hardware.gpu_count else ""
    return _with_carbon(
        catalog,
        request,
        hourly_usd=hourly,
        source=rate.source,
        explanation=(
            f"assumed {hardware.logical_cpus} vCPUs x {format_usd(rate.value)}/vCPU-h = {format_usd(hourly)}/h "
            f"(catalog assumption cpu_usd_per_vcpu_h{gpu_note}); set --hourly-usd or --instance to price it exactly"
        ),
        assumed=True,
        retrieved=rate.retrieved,
    )


def _detected_accelerator(catalog: Catalog, hardware: DetectedHardware) -> Accelerator | None:
    if hardware.gpu_count == 0 or hardware.gpu_name is None:
        return None
    return catalog.match_device(hardware.gpu_name, hardware.gpu_memory_total_bytes)


def _instance_price(catalog: Catalog, request: PriceRequest, instance_type: str) -> PriceSnapshot:
    rental = instance_rental(catalog, instance_type, request.pricing, request.cloud, request.region)
    return _offering_snapshot(catalog, request, rental, assumed=False, count_note="")


def _gpu_price(
    catalog: Catalog, request: PriceRequest, hardware: DetectedHardware, accelerator: Accelerator
) -> PriceSnapshot:
    return gpu_price(catalog, request, accelerator, hardware.gpu_count, f"detected {hardware.gpu_name!r}")


def gpu_price(
    catalog: Catalog, request: PriceRequest, accelerator: Accelerator, gpus: float, why: str
) -> PriceSnapshot:
    """``gpus`` (a fraction of one included) of ``accelerator`` rented by ``estimate.pricing.rent`` at the
    cheapest offering in ``request``'s cloud and region; ``why`` says where the count came from."""
    rental = cheapest_price_only(catalog, accelerator.slug, gpus, request.pricing, request.cloud, request.region)
    note = (
        f"assumed {gpus:g} x {accelerator.slug} ({why}): {rental.describe()}, "
        f"the cheapest {request.pricing} price in the catalog"
    )
    return _offering_snapshot(catalog, request, rental, assumed=True, count_note=note)


def _offering_snapshot(
    catalog: Catalog, request: PriceRequest, rental: Rental, assumed: bool, count_note: str
) -> PriceSnapshot:
    offering = rental.offering
    carbon = catalog.carbon_for(offering.cloud, offering.region)
    explanation = count_note or rental.describe()
    return PriceSnapshot(
        hourly_usd=rental.usd_per_h,
        source=offering.source,
        explanation=explanation + ("; set --hourly-usd or --instance to price it exactly" if assumed else ""),
        assumed=assumed,
        cloud=offering.cloud,
        instance_type=offering.instance_type,
        pricing=request.pricing,
        region=offering.region,
        retrieved=offering.retrieved,
        carbon_g_per_kwh=carbon.g_co2_per_kwh,
        carbon_source=carbon.source,
        pue=catalog.assumption("cloud_pue"),
    )


def _with_carbon(
    catalog: Catalog,
    request: PriceRequest,
    *,
    hourly_usd: float,
    source: str,
    explanation: str,
    assumed: bool,
    retrieved: str | None = None,
) -> PriceSnapshot:
    """A price not tied to an offering: carbon from --cloud/--region when given, else the world average."""
    if request.cloud is not None:
        carbon = catalog.carbon_for(request.cloud, request.region or "*")
        pue = catalog.assumption("cloud_pue")
    else:
        carbon = catalog.carbon_for("*", "*")
        pue = 1.0
    return PriceSnapshot(
        hourly_usd=hourly_usd,
        source=source,
        explanation=explanation,
        assumed=assumed,
        cloud=request.cloud,
        pricing=request.pricing,
        region=request.region,
        retrieved=retrieved,
        carbon_g_per_kwh=carbon.g_co2_per_kwh,
        carbon_source=carbon.source,
        pue=pue,
    )
