"""The loaded catalog as one frozen value, with the look-ups planners and the CLI need.

``load_catalog`` is cached: the planner asks for the catalog once per candidate and the CLI once
per command, and re-parsing the CSV files each time would dominate a plan's run time. The cache
key holds the modification time and size of every user file, so an edited file is re-read.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from types import MappingProxyType

from computewise.catalog.loader import (
    TABLES,
    CatalogFile,
    LoadedCatalog,
    Row,
    RowOrigin,
    SourceFile,
    TableName,
    discover_files,
    load_files,
    row_key,
    user_catalog_dir,
)
from computewise.errors import InputError, UnknownNameError
from computewise.specs.hardware import (
    Accelerator,
    Assumption,
    CarbonIntensity,
    KernelProfile,
    NetworkFabric,
    Offering,
    OnPremCost,
    Pricing,
)

__all__ = ["Catalog", "load_catalog", "usd_per_accelerator_h"]

_WILDCARD = "*"


def usd_per_accelerator_h(offering: Offering, pricing: Pricing = "on-demand") -> float | None:
    """Price of one accelerator-hour on this offering, or None where that pricing is not sold."""
    price = offering.usd_per_h(pricing)
    return None if price is None else price / offering.accelerator_count


@dataclass(frozen=True)
class Catalog:
    """Hardware, prices, carbon intensities, on-premises costs and assumptions, each row with a source."""

    accelerators: tuple[Accelerator, ...]
    offerings: tuple[Offering, ...]
    carbon: tuple[CarbonIntensity, ...]
    onprem: tuple[OnPremCost, ...]
    assumptions: tuple[Assumption, ...]
    files: tuple[CatalogFile, ...]
    fabrics: tuple[NetworkFabric, ...]
    kernel_profiles: tuple[KernelProfile, ...]
    _origins: Mapping[tuple[TableName, tuple[str, ...]], RowOrigin] = field(repr=False, compare=False)
    _names: Mapping[str, Accelerator] = field(repr=False, compare=False)

    @classmethod
    def from_loaded(cls, loaded: LoadedCatalog) -> Catalog:
        def values(table: TableName) -> tuple[Row, ...]:
            return tuple(row.value for row in loaded.rows[table])

        accelerators = tuple(row for row in values("accelerators") if isinstance(row, Accelerator))
        names = {name: acc for acc in accelerators for name in (acc.slug, *acc.aliases)}
        return cls(
            accelerators=accelerators,
            offerings=tuple(row for row in values("offerings") if isinstance(row, Offering)),
            carbon=tuple(row for row in values("carbon") if isinstance(row, CarbonIntensity)),
            onprem=tuple(row for row in values("onprem") if isinstance(row, OnPremCost)),
            assumptions=tuple(row for row in values("assumptions") if isinstance(row, Assumption)),
            files=loaded.files,
            fabrics=tuple(row for row in values("fabrics") if isinstance(row, NetworkFabric)),
            kernel_profiles=tuple(row for row in values("kernel_profiles") if isinstance(row, KernelProfile)),
            _origins=MappingProxyType(
                {(row.table, row.key): row.origin for table in TABLES for row in loaded.rows[table]}
            ),
            _names=MappingProxyType(names),
        )

    # -------------------------------------------------------------------------- accelerators

    def accelerator_names(self) -> tuple[str, ...]:
        """Every slug and alias, sorted: what ``accelerator()`` accepts."""
        return tuple(sorted(self._names))

    def accelerator(self, name: str) -> Accelerator:
        """Resolve a slug or alias, case-insensitively ('H100', 'a100', 'h100-sxm')."""
        found = self._names.get(name.strip().lower())
        if found is None:
            raise UnknownNameError(
                "accelerator",
                name,
                self._names,
                f"run `computewise catalog list accelerators` for the {len(self.accelerators)} known ones, "
                f"or add a row to {user_catalog_dir() / 'accelerators.csv'}",
            )
        return found

    def match_device(self, device_name: str, memory_total_bytes: float | None = None) -> Accelerator | None:
        """The catalog accelerator behind a driver's device name ("NVIDIA A100-SXM4-80GB", "Tesla T4"), or None.

        Drivers name devices their own way, so the name must hold every word of the slug but its memory
        size and form factor (a100, h100, rtx 4090, rtx 6000 ada: "rtx" alone names a dozen cards, so a
        GeForce RTX 3060 matches none rather than the row nearest its memory), then the form factor the
        name states (pcie, sxm, nvl) and the memory size the driver reports pick among them.
        """
        tokens = set(re.split(r"[^a-z0-9]+", device_name.lower()))
        forms = {"pcie", "nvl"} & tokens
        sizes = {token for token in tokens if re.fullmatch(r"\d+gb", token)}

        def named(acc: Accelerator) -> bool:
            words = {
                w for w in acc.slug.split("-") if w not in ("pcie", "sxm", "nvl") and not re.fullmatch(r"\d+gb", w)
            }
            return words <= tokens

        # CPUs are left out: "xeon" or "epyc" names a family of hundreds of parts, not a catalog row.
        family = [acc for acc in self.accelerators if acc.kind != "cpu" and named(acc)]
        if not family:
            return None

        def rank(acc: Accelerator) -> tuple[int, int, float, int]:
            acc_tokens = set(re.split(r"[^a-z0-9]+", " ".join((acc.slug, *acc.aliases))))
            form_mismatch = len(forms ^ ({"pcie", "nvl"} & acc_tokens))
            size_mismatch = 1 if sizes and not sizes & acc_tokens else 0
            memory_gap = abs(acc.memory_bytes - memory_total_bytes) if memory_total_bytes else 0.0
            is_family_default = acc.slug.split("-")[0] in acc.aliases or acc.slug == acc.slug.split("-")[0]
            return (form_mismatch, size_mismatch, memory_gap, 0 if is_family_default else 1)

        return min(family, key=rank)

    # -------------------------------------------------------------------------- offerings

    def offerings_for(
        self, accelerator: str, cloud: str | None = None, region: str | None = None
    ) -> tuple[Offering, ...]:
        """Instances with this accelerator, optionally in one cloud and region (names checked, not silently empty)."""
        slug = self.accelerator(accelerator).slug
        rows = self._in_cloud_region(self.offerings, cloud, region)
        return tuple(row for row in rows if row.accelerator == slug)

    def instance_offerings(self, instance_type: str, cloud: str | None = None) -> tuple[Offering, ...]:
        """Every region (and cloud) selling this instance type, matched case-insensitively.

        A name sold only on another cloud than ``cloud`` is refused naming that cloud, not with a
        did-you-mean that would repeat the name back.
        """
        wanted = instance_type.strip().lower()
        everywhere = tuple(row for row in self.offerings if row.instance_type.lower() == wanted)
        rows = self._in_cloud_region(everywhere, cloud, None)
        if rows:
            return rows
        if everywhere:
            clouds = sorted({row.cloud for row in everywhere})
            raise InputError(
                f"instance type {everywhere[0].instance_type} is sold on {' and '.join(clouds)}, not on {cloud}",
                f"use --cloud {clouds[0]}, or leave --cloud out",
            )
        raise UnknownNameError(
            "instance type",
            instance_type,
            {row.instance_type.lower() for row in self.offerings},
            "run `computewise catalog list offerings` to see the instance types in the catalog",
        )

    def cheapest_offering(
        self, accelerator: str, pricing: Pricing = "on-demand", cloud: str | None = None, region: str | None = None
    ) -> Offering | None:
        """The offering with the lowest price per accelerator-hour for that pricing, or None if none sells it."""
        priced = [
            (price, row)
            for row in self.offerings_for(accelerator, cloud, region)
            if (price := usd_per_accelerator_h(row, pricing)) is not None
        ]
        if not priced:
            return None
        return min(priced, key=lambda pair: (pair[0], pair[1].cloud, pair[1].region, pair[1].instance_type))[1]

    def clouds(self) -> tuple[str, ...]:
        return tuple(sorted({row.cloud for row in self.offerings}))

    def cloud(self, name: str) -> str:
        """The cloud the user named (case and spaces ignored), or ``UnknownNameError`` with the closest ones."""
        wanted = name.strip().lower()
        if wanted not in self.clouds():
            raise UnknownNameError("cloud", name, self.clouds())
        return wanted

    def region(self, name: str) -> str:
        """A region some offering is sold in (case and spaces ignored), or ``UnknownNameError`` with the closest."""
        wanted = name.strip().lower()
        regions = {row.region for row in self.offerings}
        if wanted not in regions:
            raise UnknownNameError("region", name, regions)
        return wanted

    def _in_cloud_region(self, rows: Sequence[Offering], cloud: str | None, region: str | None) -> tuple[Offering, ...]:
        if cloud is not None:
            wanted = self.cloud(cloud)
            rows = [row for row in rows if row.cloud == wanted]
        if region is not None:
            region = region.strip().lower()
            regions = {row.region for row in rows}
            if region not in regions:
                raise UnknownNameError("region", region, regions)
            rows = [row for row in rows if row.region == region]
        return tuple(rows)

    # -------------------------------------------------------------------------- carbon

    def carbon_for(self, cloud: str, region: str) -> CarbonIntensity:
        """The most specific row: (cloud, region), then (cloud, *), then the world's (*, *).

        The world row is the one place the world-average grid is written down (carbon.csv); a catalog
        without it cannot price energy's CO2 anywhere unlisted and is refused with the fix.
        """
        by_key = {(row.cloud.lower(), row.region.lower()): row for row in self.carbon}
        cloud, region = cloud.strip().lower(), region.strip().lower()
        for key in ((cloud, region), (cloud, _WILDCARD), (_WILDCARD, _WILDCARD)):
            if key in by_key:
                return by_key[key]
        raise InputError(
            "the carbon table has no world row (cloud '*', region '*')",
            f"add one with the world-average grid intensity to {user_catalog_dir() / 'carbon.csv'}",
        )

    def carbon_g_per_kwh(self, cloud: str, region: str) -> float:
        """Grid intensity for a cloud region, falling back to the world average for unknown regions."""
        return self.carbon_for(cloud, region).g_co2_per_kwh

    # -------------------------------------------------------------------------- on premises

    def onprem_options(self, accelerator: str) -> tuple[OnPremCost, ...]:
        slug = self.accelerator(accelerator).slug
        return tuple(row for row in self.onprem if row.accelerator == slug)

    def onprem_for(self, accelerator: str) -> OnPremCost | None:
        """The server configuration with the lowest purchase price per accelerator, or None if none is listed."""
        options = self.onprem_options(accelerator)
        if not options:
            return None
        return min(options, key=lambda row: (row.purchase_usd / row.accelerator_count, row.accelerator_count))

    # -------------------------------------------------------------------------- assumptions

    def assumption_row(self, key: str) -> Assumption:
        for row in self.assumptions:
            if row.key == key:
                return row
        raise UnknownNameError(
            "assumption",
            key,
            (row.key for row in self.assumptions),
            f"add a row with key {key!r} to {user_catalog_dir() / 'assumptions.csv'}",
        )

    def assumption(self, key: str) -> float:
        """The value of an estimator assumption (unit in the row), e.g. ``assumption("onprem_pue")``."""
        return self.assumption_row(key).value

    # -------------------------------------------------------------------------- fabrics

    def fabric(self, name: str) -> NetworkFabric:
        """An inter-node network by slug ('efa', 'infiniband'), with its measured efficiency and source."""
        wanted = name.strip().lower()
        for row in self.fabrics:
            if row.fabric == wanted:
                return row
        raise UnknownNameError(
            "fabric",
            name,
            (row.fabric for row in self.fabrics),
            f"run `computewise catalog list fabrics`, or add a row to {user_catalog_dir() / 'fabrics.csv'}",
        )

    # -------------------------------------------------------------------------- kernel profiles

    def kernel_profile(self, accelerator: str) -> KernelProfile | None:
        """The measured or published burst shares of an accelerator's kernels (slug), None where the catalog
        has none and the assumptions apply."""
        for row in self.kernel_profiles:
            if row.accelerator == accelerator:
                return row
        return None

    # -------------------------------------------------------------------------- provenance and age

    def rows(self, table: TableName) -> tuple[Row, ...]:
        tables: dict[TableName, tuple[Row, ...]] = {
            "accelerators": self.accelerators,
            "offerings": self.offerings,
            "carbon": self.carbon,
            "onprem": self.onprem,
            "kernel_profiles": self.kernel_profiles,
            "assumptions": self.assumptions,
            "fabrics": self.fabrics,
        }
        return tables[table]

    def origin(self, row: Row) -> RowOrigin:
        """The file and line a row was read from (a user file when it overrode a bundled row)."""
        return self._origins[row_key(row)]

    def oldest_retrieved(self, table: TableName | None = None) -> date:
        """The oldest ``retrieved`` date in a table (or the whole catalog): how stale the data may be."""
        tables = TABLES if table is None else (table,)
        return min(date.fromisoformat(row.retrieved) for name in tables for row in self.rows(name))

    def age_days(self, table: TableName | None = None, today: date | None = None) -> int:
        """Days between the oldest ``retrieved`` date and today."""
        return ((today or date.today()) - self.oldest_retrieved(table)).days


def _stat_key(source: SourceFile) -> tuple[str, int, int]:
    if source.bundled:
        return source.path, 0, 0
    stat = Path(source.path).stat()
    return source.path, stat.st_mtime_ns, stat.st_size


@functools.lru_cache(maxsize=32)
def _load(key: tuple[tuple[str, int, int], ...], files: tuple[SourceFile, ...]) -> Catalog:
    del key  # part of the cache key only: a changed file has a new mtime/size and is re-read
    return Catalog.from_loaded(load_files(files))


def load_catalog(extra_paths: Sequence[Path] = ()) -> Catalog:
    """Bundled data, then user files (``$COMPUTEWISE_CATALOG_DIR`` or the user config dir), then ``extra_paths``.

    A later row with the same key overrides an earlier one. Cached on the set of files and their
    modification times, so repeated calls cost a few ``stat`` calls.
    """
    files = discover_files(extra_paths)
    return _load(tuple(_stat_key(source) for source in files), files)
