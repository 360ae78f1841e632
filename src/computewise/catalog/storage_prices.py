"""What a GiB stored for a month costs, by storage class and region: ``storage_prices.csv``.

A table of its own beside the compute catalog (which ``catalog.loader`` merges across user files):
storage prices are read by ``computewise storage`` only, from the bundled file or one the user
passes, and every cell is checked by the same ``_Cells`` rules as a shipped compute row, so a bad
cell reads ``path:line: column 'x': problem`` the same way. A class is named ``cloud:class``
(``aws:s3-standard``, ``gcp:gcs-coldline``, ``azure:blob-archive``, ``aws:ebs-gp3``);
``api_name`` is the provider's own spelling (S3's ``STANDARD_IA``), so a listed object's class
can be priced.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from computewise.catalog.loader import _Cells, _numbered_records
from computewise.errors import CatalogError, InputError, UnknownNameError

__all__ = ["STORAGE_KINDS", "StoragePrice", "StoragePrices", "load_storage_prices"]

StorageKind = Literal["object", "block"]
STORAGE_KINDS: tuple[StorageKind, ...] = ("object", "block")

_COLUMNS = (
    "cloud",
    "storage_class",
    "kind",
    "region",
    "usd_per_gib_month",
    "min_storage_days",
    "api_name",
    "source",
    "retrieved",
)
_BUNDLED = Path(__file__).resolve().parent / "data" / "storage_prices.csv"


@dataclass(frozen=True)
class StoragePrice:
    """One class in one region: its monthly price per GiB and the minimum it bills an object for."""

    cloud: str
    storage_class: str
    kind: StorageKind
    region: str
    usd_per_gib_month: float
    min_storage_days: int
    api_name: str
    source: str
    retrieved: str

    @property
    def name(self) -> str:
        """``cloud:class``, the name flags and policies use."""
        return f"{self.cloud}:{self.storage_class}"

    def usd_per_month(self, size_bytes: float) -> float:
        return size_bytes / 2**30 * self.usd_per_gib_month


@dataclass(frozen=True)
class StoragePrices:
    """Every row, with look-ups that fail with "did you mean" on a name the table lacks."""

    rows: tuple[StoragePrice, ...]
    path: str

    def names(self) -> tuple[str, ...]:
        return tuple(sorted({row.name for row in self.rows}))

    def price(self, name: str, region: str) -> StoragePrice:
        """The row of class ``name`` (``cloud:class``) in ``region``."""
        wanted = name.strip().lower()
        in_class = [row for row in self.rows if row.name == wanted]
        if not in_class:
            raise UnknownNameError("storage class", name, self.names(), f"pick one of: {', '.join(self.names())}")
        for row in in_class:
            if row.region == region.strip().lower():
                return row
        regions = sorted(row.region for row in in_class)
        close = difflib.get_close_matches(region, regions, n=1)
        raise InputError(
            f"no price for storage class {wanted} in region {region!r}"
            + (f"; did you mean {close[0]!r}?" if close else ""),
            f"pass --region with one of: {', '.join(regions)}",
        )

    def by_api_name(self, cloud: str, api_name: str, region: str) -> StoragePrice | None:
        """The row the provider calls ``api_name`` (an S3 listing's ``StorageClass``), or None."""
        for row in self.rows:
            if row.cloud == cloud and row.api_name == api_name and row.region == region:
                return row
        return None


def _row(cells: _Cells) -> StoragePrice:
    kind = cells.text("kind").lower()
    if kind not in STORAGE_KINDS:
        raise cells.error("kind", f"{kind!r} is not a storage kind", f"use one of: {', '.join(STORAGE_KINDS)}")
    days = cells.number("min_storage_days", default=0.0)
    if days != int(days):
        raise cells.error("min_storage_days", f"must be a whole number of days, got {cells.raw('min_storage_days')!r}")
    return StoragePrice(
        cloud=cells.name("cloud"),
        storage_class=cells.name("storage_class"),
        kind="object" if kind == "object" else "block",
        region=cells.name("region"),
        usd_per_gib_month=cells.number("usd_per_gib_month", positive=True),
        min_storage_days=int(days),
        api_name=cells.text("api_name"),
        source=cells.text("source"),
        retrieved=cells.iso_date("retrieved"),
    )


def load_storage_prices(path: Path | str | None = None) -> StoragePrices:
    """The bundled table, or the file at ``path`` (same columns), every cell checked."""
    source = Path(path) if path is not None else _BUNDLED
    try:
        text = source.read_text(encoding="utf-8-sig")
    except OSError as error:
        raise InputError(
            f"cannot read storage price file {source}: {error.strerror or error}", "check the path and its permissions"
        ) from error
    records = _numbered_records(text)
    first = next(records, None)
    if first is None:
        raise CatalogError(str(source), 1, _COLUMNS[0], "file is empty", f"start with the header: {','.join(_COLUMNS)}")
    header_line, header = first
    header = [name.strip() for name in header]
    missing = [name for name in _COLUMNS if name not in header]
    unknown = [name for name in header if name not in _COLUMNS]
    if unknown or missing:
        column = (unknown or missing)[0]
        raise CatalogError(
            str(source),
            header_line,
            column,
            "unknown column" if unknown else "missing column",
            f"storage price files need the header: {','.join(_COLUMNS)}",
        )
    rows: list[StoragePrice] = []
    seen: dict[tuple[str, str], int] = {}
    for line, record in records:
        cells = _Cells(str(source), line, dict(zip(header, record, strict=False)))
        row = _row(cells)
        key = (row.name, row.region)
        if key in seen:
            raise cells.error(
                "storage_class", f"duplicate row for {row.name} in {row.region} (first on line {seen[key]})"
            )
        seen[key] = line
        rows.append(row)
    return StoragePrices(_sorted(rows), str(source))


def _sorted(rows: Sequence[StoragePrice]) -> tuple[StoragePrice, ...]:
    return tuple(sorted(rows, key=lambda row: (row.cloud, row.region, -row.usd_per_gib_month)))
