"""What each stored file costs a month: its storage class's catalog row times its size.

A file's class is what the store reports (an S3 listing's ``StorageClass``, matched to the row whose
``api_name`` it is), or the archive folder it was moved to (``cloud:class``), or else the class the
user says the folder lives on (``--storage-class``, default ``aws:ebs-gp3`` for a local disk and the
store's standard class for a bucket: ``aws:s3-standard``, ``gcp:gcs-standard``, ``azure:blob-hot``).
A class the table lacks leaves the file unpriced, counted as such.

Prices are per region, and the default region follows the default class's cloud: a ``gs://`` bucket
priced in ``us-east-1``, where Google has no row, would leave every object unpriced.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from computewise.catalog.storage_prices import StoragePrice, StoragePrices
from computewise.errors import InputError
from computewise.storage.inventory import Entry
from computewise.storage.location import Location

__all__ = ["Pricer", "default_class", "default_region"]

_DEFAULT_CLASS_BLOCK = "aws:ebs-gp3"
_STANDARD_CLASS_BY_CLOUD = {"aws": "aws:s3-standard", "gcp": "gcp:gcs-standard", "azure": "azure:blob-hot"}
_DEFAULT_REGION_BY_CLOUD = {"aws": "us-east-1", "gcp": "us-central1", "azure": "eastus"}


def default_class(location: Location) -> str:
    """The class files are priced at when neither the store nor the user says which.

    A local folder is taken for a gp3 volume; a bucket for its store's standard class (S3's when the
    store is not one the table prices, as for an S3-compatible endpoint).
    """
    if location.is_local:
        return _DEFAULT_CLASS_BLOCK
    return _STANDARD_CLASS_BY_CLOUD.get(location.cloud or "aws", _STANDARD_CLASS_BY_CLOUD["aws"])


def default_region(storage_class: str) -> str:
    """The region prices are read in when ``--region`` is not given: one the catalog prices the class's cloud in."""
    return _DEFAULT_REGION_BY_CLOUD.get(storage_class.partition(":")[0], _DEFAULT_REGION_BY_CLOUD["aws"])


@dataclass
class Pricer:
    """Prices entries in one region; ``default`` prices files whose class the store does not say."""

    prices: StoragePrices
    default: StoragePrice
    cloud: str | None
    _cache: dict[str | None, StoragePrice | None] = field(default_factory=dict, repr=False)

    @property
    def region(self) -> str:
        return self.default.region

    def price_of(self, entry: Entry) -> StoragePrice | None:
        key = entry.storage_class
        if key not in self._cache:
            self._cache[key] = self._resolve(key)
        return self._cache[key]

    def class_name(self, entry: Entry) -> str:
        """The ``cloud:class`` name of the entry's class, or the store's own name when the table lacks it."""
        price = self.price_of(entry)
        return price.name if price is not None else str(entry.storage_class)

    def usd_per_month(self, entry: Entry) -> float | None:
        price = self.price_of(entry)
        return None if price is None else price.usd_per_month(entry.size_bytes)

    def _resolve(self, storage_class: str | None) -> StoragePrice | None:
        if storage_class is None:
            return self.default
        if ":" in storage_class:
            try:
                return self.prices.price(storage_class, self.region)
            except InputError:
                return None
        if self.cloud is None:
            return None
        return self.prices.by_api_name(self.cloud, storage_class, self.region)
