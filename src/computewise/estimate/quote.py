"""The one price quote: what a job pays per hour, for which hardware, on which grid, at which PUE, and why.

Every verb that prices goes through this module: ``estimate`` (a job's GPUs, ``quote``), ``plan train``
and ``plan infer`` (each offering or owned server they weigh, ``offering_quote`` / ``server_quote``),
``plan serve`` (one replica), the price ``run``, ``track()``, ``tune`` and ``serve`` freeze at launch
(``monitor.pricing``) and a supervised job's fraction of a GPU. One precedence, first match wins:

1. ``--hourly-usd``: the user knows best;
2. ``--pricing on-prem``: the catalog's owned server for the accelerator, at the assumed utilization;
3. ``--instance``: that catalog instance type;
4. the job's GPUs rented by ``estimate.pricing.rent`` (N/k of a k-GPU instance) at the cheapest offering
   in ``--cloud``/``--region``;
5. a job without GPUs the catalog knows: its vCPUs at the catalog's price per vCPU-hour.

What a quote is for changes two answers, said by ``Ask.estimate``. An estimate times the job over the
instances' network, so it prefers offerings whose network is known, reads ``--instance`` as the type
its GPUs run on, and answers an accelerator no cloud rents without a price (memory and time still
hold). A bill (a run, a replica, a supervised job) is the cheapest price, ``--instance`` is one whole
instance the user pays for, and no price is an error.

Grid intensity is the offering's region, else ``--cloud``/``--region``, else the world row of
carbon.csv; PUE is the cloud's for a rented machine or one located in a cloud, the site's for an
owned server, and ``unlocated_pue`` for a machine priced without a place. What a dataset pays to leave
its region (``egress_usd_per_gb``, for ``plan train --data-region``) is a price too. Every one of these
numbers is read here, from the catalog's assumptions.csv, and nowhere else.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from computewise.errors import InputError
from computewise.estimate.collectives import node_devices, node_network_bytes_per_s, require_slices, sold_by_the_chip
from computewise.estimate.data_movement import EgressScope
from computewise.estimate.pricing import Rental, cheapest_rental, instance_rental, onprem_network_per_device, rent
from computewise.specs import PRICINGS, Accelerator, CarbonIntensity, Offering, OnPremCost, Pricing
from computewise.units import format_usd, plural

if TYPE_CHECKING:
    from computewise.catalog import Catalog

__all__ = [
    "Ask",
    "PriceRequest",
    "Quote",
    "egress_usd_per_gb",
    "offering_quote",
    "owned_usd_per_h",
    "quote",
    "server_quote",
]


@dataclass(frozen=True)
class PriceRequest:
    """The pricing flags a user gives (all optional): ``--hourly-usd``, ``--instance``, ``--cloud``,
    ``--region``, ``--pricing``."""

    hourly_usd: float | None = None
    instance_type: str | None = None
    cloud: str | None = None
    region: str | None = None
    pricing: Pricing = "on-demand"

    def placed(self, catalog: Catalog) -> PriceRequest:
        """These flags with ``--cloud`` and ``--region`` checked against the catalog (case ignored).

        A mistyped place is refused with a did-you-mean on every path, not only where offerings are
        filtered by it: a CPU-only or ``--hourly-usd`` price would otherwise fall back to the world's
        grid in silence. ``run`` calls it before it opens the ledger, so a typo writes nothing.
        """
        return replace(
            self,
            cloud=catalog.cloud(self.cloud) if self.cloud is not None else None,
            region=catalog.region(self.region) if self.region is not None else None,
        )


@dataclass(frozen=True)
class Ask:
    """What is to be priced: ``gpus`` of ``accelerator`` (a fraction of one allowed), else ``vcpus``.

    ``why`` says where a bill's GPU count came from ("detected 'NVIDIA H100 80GB HBM3'"), and
    ``unmatched_gpu`` names a device the catalog does not know, priced as CPUs. ``estimate``: see the
    module docstring.
    """

    accelerator: Accelerator | None = None
    gpus: float = 0.0
    vcpus: int = 0
    why: str = ""
    unmatched_gpu: str | None = None
    estimate: bool = False


@dataclass(frozen=True)
class Quote:
    """The price of an ask, with where it comes from and what it runs on (instances, their links)."""

    hourly_usd: float  # all of the job's hardware together; NaN when the catalog rents the accelerator nowhere
    pricing: Pricing
    offering: Offering | None  # the catalog row rented, when one is
    source: str  # the row's source, the assumption's, or the flag's name
    explanation: str  # what was priced and how, in words a bill can be traced by
    carbon: CarbonIntensity
    pue: float
    assumed: bool = False  # computewise chose the price (no --hourly-usd, no --instance)
    retrieved: str | None = None
    cloud: str | None = None
    instance_type: str | None = None
    region: str | None = None
    instances: int = 1
    devices_per_node: int = 1  # devices on the accelerator's own links: an instance's, or a TPU slice's chips
    node_network_bytes_per_s: float = 0.0  # all NICs of one such node together
    notes: tuple[str, ...] = ()  # cheaper offerings passed over, and why
    shared: bool = False  # the job pays a share of an instance whose other GPUs host other work
    priced: bool = True  # False: no cloud rents the accelerator; hourly_usd is NaN, the cost is not given

    @property
    def timeable(self) -> bool:
        """Whether the links between its instances have a known speed (one instance needs none)."""
        return self.instances == 1 or self.node_network_bytes_per_s > 0


def quote(catalog: Catalog, ask: Ask, flags: PriceRequest) -> Quote:
    """The price of ``ask`` under ``flags``, by the precedence of the module docstring.

    Raises ``InputError`` for impossible flags and for a pricing the catalog does not list (naming the
    pricings it does): a missing price is never billed as 0.
    """
    if flags.pricing not in PRICINGS:
        raise InputError(f"unknown pricing {flags.pricing!r}", f"use one of: {', '.join(PRICINGS)}")
    flags = flags.placed(catalog)
    gpus = ask.gpus if ask.accelerator is not None else 0.0
    if ask.estimate and ask.accelerator is not None and gpus >= 1:
        require_slices(ask.accelerator, math.ceil(gpus))
    if flags.hourly_usd is not None:
        return _given(catalog, ask, flags, flags.hourly_usd)
    if flags.pricing == "on-prem" and ask.accelerator is not None and gpus > 0:
        return _owned(catalog, ask.accelerator, gpus)
    if flags.instance_type is not None and not (ask.estimate and gpus > 0):
        return _from_rental(
            catalog, instance_rental(catalog, flags.instance_type, flags.pricing, flags.cloud, flags.region)
        )
    if ask.accelerator is not None and gpus > 0:
        return _rented(catalog, ask, ask.accelerator, gpus, flags)
    return _vcpus(catalog, ask, flags)


def offering_quote(catalog: Catalog, offering: Offering, gpus: float, pricing: Pricing) -> Quote:
    """``gpus`` of one offering rented by ``rent``, with its region's grid and the cloud's PUE: what
    ``quote`` answers once it has chosen, and what ``plan`` asks of each offering it weighs."""
    return _from_rental(catalog, rent(offering, gpus, pricing))


def _from_rental(catalog: Catalog, rental: Rental, explanation: str = "", notes: tuple[str, ...] = ()) -> Quote:
    o = rental.offering
    accelerator = catalog.accelerator(o.accelerator)
    devices = node_devices(accelerator, o, rental.gpus)
    slices = math.ceil(round(rental.gpus / devices, 9))
    if sold_by_the_chip(accelerator, o) and slices > 1:
        network_gb = o.network_bytes_per_s / 1e9
        notes = (
            f"{rental.gpus:g} chips of {accelerator.slug} run as {slices} slices of {devices} joined by the "
            f"data-center network ({network_gb:g} GB/s a chip; Cloud TPU Multislice): collectives between slices run "
            "at that rate, those within a slice on the chips' own links",
            *notes,
        )
    return Quote(
        hourly_usd=rental.usd_per_h,
        pricing=rental.pricing,
        offering=o,
        source=o.source,
        explanation=explanation or rental.describe(),
        carbon=catalog.carbon_for(o.cloud, o.region),
        pue=catalog.assumption("cloud_pue"),
        retrieved=o.retrieved,
        cloud=o.cloud,
        instance_type=o.instance_type,
        region=o.region,
        instances=rental.instances,
        devices_per_node=devices,
        node_network_bytes_per_s=node_network_bytes_per_s(o, devices),
        notes=notes,
        shared=rental.shared,
    )


def egress_usd_per_gb(catalog: Catalog, cloud: str, scope: EgressScope) -> float:
    """What ``cloud`` charges per GB leaving a region over ``scope`` (its first list-price tier);
    nothing stays in the region. A cloud without a row is an error naming the row to add."""
    if scope == "same-region":
        return 0.0
    key = f"egress_{cloud}_{scope.replace('-', '_')}_usd_per_gb"
    if not any(row.key == key for row in catalog.assumptions):
        raise InputError(
            f"the catalog has no {scope} egress price for cloud {cloud!r}",
            f"add a row with key {key!r} (usd/GB, with its source) to the user catalog's assumptions.csv",
        )
    return catalog.assumption(key)


def owned_usd_per_h(catalog: Catalog, server: OnPremCost, utilization: float | None = None) -> float:
    """One owned server's hourly cost: power at the site's PUE and price, busy ``utilization`` of its
    hours (default: the catalog's ``onprem_utilization``)."""
    return server.usd_per_h(
        catalog.assumption("onprem_power_usd_per_kwh"),
        catalog.assumption("onprem_pue"),
        catalog.assumption("onprem_utilization") if utilization is None else utilization,
    )


def server_quote(catalog: Catalog, server: OnPremCost, gpus: float) -> Quote:
    """``gpus`` on owned servers of one configuration: whole servers, on the world's average grid
    (an owned site's grid is not known) at the site's PUE."""
    instances = max(1, math.ceil(round(gpus / server.accelerator_count, 9)))
    hourly = owned_usd_per_h(catalog, server)
    name = catalog.accelerator(server.accelerator).name
    return Quote(
        hourly_usd=instances * hourly,
        pricing="on-prem",
        offering=None,
        source=server.source,
        explanation=(
            f"{plural(instances, 'owned server')} with {server.accelerator_count} x {server.accelerator}, "
            f"${hourly:.2f}/h each at {catalog.assumption('onprem_utilization'):.0%} utilization"
        ),
        carbon=catalog.carbon_for("*", "*"),
        pue=catalog.assumption("onprem_pue"),
        assumed=True,
        retrieved=server.retrieved,
        cloud="on-prem",
        instance_type=f"{server.accelerator_count}x {name} server",
        region="owned",
        instances=instances,
        devices_per_node=server.accelerator_count,
        node_network_bytes_per_s=onprem_network_per_device(catalog, server.accelerator) * server.accelerator_count,
    )


def _owned(catalog: Catalog, accelerator: Accelerator, gpus: float) -> Quote:
    server = catalog.onprem_for(accelerator.slug)
    if server is None:
        raise InputError(
            f"no on-premises server with {accelerator.slug} in the catalog",
            "add a row to onprem.csv in your catalog directory, or choose another --pricing",
        )
    return server_quote(catalog, server, gpus)


def _given(catalog: Catalog, ask: Ask, flags: PriceRequest, hourly_usd: float) -> Quote:
    """A price the user gave: on the grid of --cloud/--region when given, else the world average."""
    if not (hourly_usd >= 0 and math.isfinite(hourly_usd)):
        raise InputError(f"--hourly-usd must be >= 0, got {hourly_usd:g}", "e.g. --hourly-usd 2.5")
    devices = node_devices(ask.accelerator, None, ask.gpus) if ask.accelerator is not None else 1
    return Quote(
        hourly_usd=hourly_usd,
        pricing=flags.pricing,
        offering=None,
        source="--hourly-usd",
        explanation=f"{format_usd(hourly_usd)}/h as given by --hourly-usd",
        carbon=_flagged_carbon(catalog, flags),
        pue=_flagged_pue(catalog, flags),
        cloud=flags.cloud,
        region=flags.region,
        devices_per_node=devices,
        node_network_bytes_per_s=ask.accelerator.interconnect_bytes_per_s * devices if ask.accelerator else 0.0,
    )


def _rented(catalog: Catalog, ask: Ask, accelerator: Accelerator, gpus: float, flags: PriceRequest) -> Quote:
    """``gpus`` of ``accelerator`` at the cheapest offering (an estimate: the cheapest whose links can be timed)."""
    cloud, region, instance_type = flags.cloud, flags.region, flags.instance_type
    where = " ".join(x for x in (cloud, region) if x)
    wanted = None if instance_type is None else instance_type.strip().lower()  # as the catalog matches names
    offerings = [
        o for o in catalog.offerings_for(accelerator.slug, cloud, region) if wanted in (None, o.instance_type.lower())
    ]
    if instance_type is not None and not offerings:
        catalog.instance_offerings(instance_type, cloud)  # an unknown name, or one on another cloud, says which
        raise InputError(
            f"no instance type {instance_type!r} with {accelerator.slug} in the catalog"
            + (f" ({where})" if where else ""),
            "run `computewise catalog list offerings` to see the instance types",
        )
    if not offerings and (where or not ask.estimate):
        raise InputError(
            f"the catalog rents no {accelerator.slug}{' in ' + where if where else ''}",
            "drop --cloud/--region, or run `computewise catalog list offerings` to see where it is sold"
            if ask.estimate
            else "give the price with --hourly-usd, or another --cloud or --region "
            "(`computewise catalog list offerings` shows every offering)",
        )
    if not offerings:
        return _unpriced(catalog, accelerator, gpus, flags.pricing)
    what = instance_type or accelerator.slug + (f" in {where}" if where else "")
    rental, notes = cheapest_rental(offerings, gpus, flags.pricing, what, timed=ask.estimate)
    if ask.estimate:
        return _from_rental(catalog, rental, notes=notes)
    described = f"{rental.describe()}, the cheapest {flags.pricing} price in the catalog"
    if ask.why:
        described = f"assumed {gpus:g} x {accelerator.slug} ({ask.why}): {described}"
    return replace(_from_rental(catalog, rental, described, notes), assumed=True)


def _unpriced(catalog: Catalog, accelerator: Accelerator, gpus: float, pricing: Pricing) -> Quote:
    """The labelled fallback of an estimate for an accelerator no cloud in the catalog rents (MI300X, Gaudi,
    Jetson): memory, time and energy still hold, the cost is not given (NaN, shown as "not available")."""
    devices = node_devices(accelerator, None, gpus)  # no instance type known: timed as one node (or slice)
    return Quote(
        hourly_usd=math.nan,
        pricing=pricing,
        offering=None,
        source="",
        explanation=(
            f"the catalog rents no {accelerator.slug}, so the cost is not given: add its offering in a catalog "
            "file (--catalog PATH), or use --pricing on-prem where an owned server is listed"
        ),
        carbon=catalog.carbon_for("*", "*"),
        pue=catalog.assumption("cloud_pue"),
        devices_per_node=devices,
        node_network_bytes_per_s=accelerator.interconnect_bytes_per_s * devices,
        priced=False,
    )


def _vcpus(catalog: Catalog, ask: Ask, flags: PriceRequest) -> Quote:
    """A job without GPUs the catalog knows: its vCPUs at the catalog's price per vCPU-hour."""
    rate = catalog.assumption_row("cpu_usd_per_vcpu_h")
    vcpus = max(1, ask.vcpus)
    hourly = rate.value * vcpus
    gpu_note = f"; GPU {ask.unmatched_gpu!r} is not in the catalog" if ask.unmatched_gpu else ""
    return Quote(
        hourly_usd=hourly,
        pricing=flags.pricing,
        offering=None,
        source=rate.source,
        explanation=(
            f"assumed {vcpus} vCPUs x {format_usd(rate.value)}/vCPU-h = {format_usd(hourly)}/h "
            f"(catalog assumption cpu_usd_per_vcpu_h{gpu_note})"
        ),
        carbon=_flagged_carbon(catalog, flags),
        pue=_flagged_pue(catalog, flags),
        assumed=True,
        retrieved=rate.retrieved,
        cloud=flags.cloud,
        region=flags.region,
    )


def _flagged_carbon(catalog: Catalog, flags: PriceRequest) -> CarbonIntensity:
    return (
        catalog.carbon_for(flags.cloud, flags.region or "*")
        if flags.cloud is not None
        else catalog.carbon_for("*", "*")
    )


def _flagged_pue(catalog: Catalog, flags: PriceRequest) -> float:
    """A machine priced without an offering: the cloud's PUE when --cloud places it, else ``unlocated_pue``."""
    return catalog.assumption("cloud_pue" if flags.cloud is not None else "unlocated_pue")
