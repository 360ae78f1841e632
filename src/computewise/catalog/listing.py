"""``catalog list --json`` and ``catalog show --json``: the catalog's rows as loaded, each with its origin.

Typed documents rather than dicts built in the CLI, so they carry a version and a generated schema. A
row is written field by field as its ``specs.hardware`` type, followed by ``origin``: the file and line
it came from, so a surprising number can be traced and corrected. Each kind of row has its own entry
class, so the schema says exactly which keys a table's rows have.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

from computewise.catalog.catalog import Catalog, usd_per_accelerator_h
from computewise.catalog.loader import Row, TableName
from computewise.specs.codec import Document, Jsonable, json_field
from computewise.specs.hardware import (
    CLOUD_PRICINGS,
    Accelerator,
    Assumption,
    CarbonIntensity,
    KernelProfile,
    NetworkFabric,
    Offering,
    OnPremCost,
    Pricing,
)

__all__ = [
    "AcceleratorEntry",
    "AcceleratorSheet",
    "AssumptionEntry",
    "CarbonEntry",
    "CatalogListing",
    "CheapestOffering",
    "FabricEntry",
    "InstanceSheet",
    "KernelProfileEntry",
    "OfferingEntry",
    "OnPremEntry",
]

_ORIGIN = "The file and line the row was read from (bundled, the user's catalog or --catalog): where to correct it."
_INLINE = json_field(inline=True)


@dataclass(frozen=True)
class AcceleratorEntry(Jsonable):
    json_description: ClassVar[str] = "An accelerators row and where it was read."
    row: Accelerator = field(metadata=_INLINE)
    origin: str = field(metadata=json_field(description=_ORIGIN))


@dataclass(frozen=True)
class OfferingEntry(Jsonable):
    json_description: ClassVar[str] = "An offerings row and where it was read."
    row: Offering = field(metadata=_INLINE)
    origin: str = field(metadata=json_field(description=_ORIGIN))


@dataclass(frozen=True)
class CarbonEntry(Jsonable):
    json_description: ClassVar[str] = "A carbon row and where it was read."
    row: CarbonIntensity = field(metadata=_INLINE)
    origin: str = field(metadata=json_field(description=_ORIGIN))


@dataclass(frozen=True)
class OnPremEntry(Jsonable):
    json_description: ClassVar[str] = "An onprem row and where it was read."
    row: OnPremCost = field(metadata=_INLINE)
    origin: str = field(metadata=json_field(description=_ORIGIN))


@dataclass(frozen=True)
class AssumptionEntry(Jsonable):
    json_description: ClassVar[str] = "An assumptions row and where it was read."
    row: Assumption = field(metadata=_INLINE)
    origin: str = field(metadata=json_field(description=_ORIGIN))


@dataclass(frozen=True)
class FabricEntry(Jsonable):
    json_description: ClassVar[str] = "A fabrics row and where it was read."
    row: NetworkFabric = field(metadata=_INLINE)
    origin: str = field(metadata=json_field(description=_ORIGIN))


@dataclass(frozen=True)
class KernelProfileEntry(Jsonable):
    json_description: ClassVar[str] = "A kernel_profiles row and where it was read."
    row: KernelProfile = field(metadata=_INLINE)
    origin: str = field(metadata=json_field(description=_ORIGIN))


_ENTRY: dict[type, Callable[[Any, str], Jsonable]] = {
    Accelerator: AcceleratorEntry,
    Offering: OfferingEntry,
    CarbonIntensity: CarbonEntry,
    OnPremCost: OnPremEntry,
    Assumption: AssumptionEntry,
    NetworkFabric: FabricEntry,
    KernelProfile: KernelProfileEntry,
}

_LIST = Document(
    "catalog-list",
    "catalog list --json",
    "One table of the catalog (with --cloud, that cloud's rows), how old its data is, and each row with the "
    "file and line it was read from.",
)
_SHOW = Document(
    "catalog-show",
    "catalog show NAME --json",
    "An accelerator with its offerings, the cheapest per accelerator-hour at each pricing and its on-premises "
    "rows (AcceleratorSheet), or an instance type in every region that sells it (InstanceSheet).",
)


@dataclass(frozen=True)
class CatalogListing(Jsonable):
    """``catalog list TABLE --json``: the rows of one table."""

    json_document: ClassVar[Document] = _LIST

    table: TableName
    oldest_retrieved: str = field(metadata=json_field(description="The table's oldest retrieved date (ISO)."))
    age_days: int = field(metadata=json_field(description="Days from oldest_retrieved to today."))
    rows: (
        tuple[AcceleratorEntry, ...]
        | tuple[OfferingEntry, ...]
        | tuple[CarbonEntry, ...]
        | tuple[OnPremEntry, ...]
        | tuple[AssumptionEntry, ...]
        | tuple[FabricEntry, ...]
        | tuple[KernelProfileEntry, ...]
    ) = field(metadata=json_field(description="The table's rows, each kind as its table names it."))

    @classmethod
    def of(cls, catalog: Catalog, table: TableName, rows: tuple[Row, ...]) -> Self:
        """``rows`` of ``table`` (all of it, or those ``--cloud`` kept), each with its origin."""
        entries: Any = tuple(_entry(catalog, row) for row in rows)  # one table's: one member of the union
        return cls(table, catalog.oldest_retrieved(table).isoformat(), catalog.age_days(table), entries)


@dataclass(frozen=True)
class CheapestOffering(Jsonable):
    """Where an accelerator-hour costs least at one pricing."""

    usd_per_h: float | None = field(metadata=json_field(description="Per accelerator-hour at this pricing."))
    cloud: str
    instance_type: str
    region: str


@dataclass(frozen=True)
class AcceleratorSheet(Jsonable):
    """``catalog show ACCELERATOR --json``: the accelerator, what rents it and what owning it costs."""

    json_document: ClassVar[Document] = _SHOW
    json_description: ClassVar[str] = "`catalog show ACCELERATOR --json`."

    accelerator: AcceleratorEntry
    offerings: tuple[OfferingEntry, ...] = field(
        metadata=json_field(description="Instances with it, cheapest per accelerator-hour first.")
    )
    cheapest_usd_per_accelerator_h: dict[Pricing, CheapestOffering | None] = field(
        metadata=json_field(
            description="By pricing (on-demand, spot, reserved-1y, reserved-3y); null: none sells it so."
        )
    )
    onprem: tuple[OnPremEntry, ...]

    @classmethod
    def of(cls, catalog: Catalog, accelerator: Accelerator) -> Self:
        offerings = sorted(catalog.offerings_for(accelerator.slug), key=lambda o: usd_per_accelerator_h(o) or 0.0)
        cheapest = {pricing: catalog.cheapest_offering(accelerator.slug, pricing) for pricing in CLOUD_PRICINGS}
        return cls(
            AcceleratorEntry(accelerator, str(catalog.origin(accelerator))),
            tuple(OfferingEntry(o, str(catalog.origin(o))) for o in offerings),
            {
                pricing: None
                if offering is None
                else CheapestOffering(
                    usd_per_accelerator_h(offering, pricing), offering.cloud, offering.instance_type, offering.region
                )
                for pricing, offering in cheapest.items()
            },
            tuple(OnPremEntry(row, str(catalog.origin(row))) for row in catalog.onprem_options(accelerator.slug)),
        )


@dataclass(frozen=True)
class InstanceSheet(Jsonable):
    """``catalog show INSTANCE_TYPE --json``: the instance type in every region (and cloud) that sells it."""

    json_document: ClassVar[Document] = _SHOW
    json_description: ClassVar[str] = "`catalog show INSTANCE_TYPE --json`."

    instance_type: str
    offerings: tuple[OfferingEntry, ...]

    @classmethod
    def of(cls, catalog: Catalog, offerings: tuple[Offering, ...]) -> Self:
        return cls(offerings[0].instance_type, tuple(OfferingEntry(o, str(catalog.origin(o))) for o in offerings))


def _entry(catalog: Catalog, row: Row) -> Jsonable:
    return _ENTRY[type(row)](row, str(catalog.origin(row)))
