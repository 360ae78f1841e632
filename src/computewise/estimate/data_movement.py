"""Moving a training dataset to the GPUs: egress, copy time, and the read rate the job needs.

A plan that rents GPUs in another region (or another cloud) than the one holding the data pays for
the bytes to leave, and waits for them to arrive. The dataset is copied once, before training, to
storage beside the GPUs: reading it across regions every epoch would pay egress on every pass. So the
copy adds its egress to the cost and its duration to the wall time, but no GPU-hours (the GPUs are
rented when the copy is done).

The read rate is what storage beside the GPUs must sustain: training tokens per second times the
bytes one token takes in a tokenized shard. Megatron-LM's indexed dataset and nanoGPT store token ids
in the smallest unsigned integer that holds the vocabulary: 2 bytes up to 65,536 entries, else 4.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from computewise.errors import InputError, UnknownNameError
from computewise.specs.codec import Jsonable, json_field

if TYPE_CHECKING:
    from computewise.catalog import Catalog

__all__ = [
    "DataMovement",
    "DataSite",
    "EgressScope",
    "data_movement",
    "data_site",
    "egress_scope",
    "token_bytes",
]

EgressScope = Literal["same-region", "inter-region", "internet"]
_SCOPES: tuple[EgressScope, ...] = ("same-region", "inter-region", "internet")

_UINT16_VOCAB = 65_536
_BYTES_PER_GB = 1e9  # cloud egress is billed per decimal GB
_AT_LEAST_0 = json_field(minimum=0)


@dataclass(frozen=True)
class DataSite:
    """Where the dataset lives (``--data-region``) and how big it is (``--dataset-size``)."""

    cloud: str
    region: str
    dataset_bytes: float


@dataclass(frozen=True)
class DataMovement(Jsonable):
    """What moving the dataset to one option's GPUs costs and takes, and the read rate training needs there."""

    origin: str = field(metadata=json_field(description="cloud:region holding the dataset"))
    dataset_bytes: float = field(metadata=json_field(exclusive_minimum=0))
    scope: EgressScope
    usd_per_gb: float = field(metadata=_AT_LEAST_0)
    egress_usd: float = field(metadata=_AT_LEAST_0)
    transfer_s: float = field(metadata=json_field(name="transfer_seconds", minimum=0))
    read_bytes_per_s: float = field(
        metadata=json_field(
            minimum=0,
            description="what storage beside the GPUs must sustain: training tokens per second x bytes per token id",
        )
    )


def data_site(catalog: Catalog, place: str, dataset_bytes: float) -> DataSite:
    """``--data-region``: ``cloud:region``, or a region name that only one cloud uses.

    The region must be one the catalog knows for that cloud (where it rents GPUs or where its grid is
    listed): a typo such as ``aws:us-east1`` would otherwise be read as a faraway region and silently
    change the recommendation to GPUs that pay no egress."""
    example = "e.g. --data-region aws:us-east-1"
    cloud_text, _, region_text = place.rpartition(":")
    region = region_text.strip().lower()
    if not region:
        raise InputError(f"--data-region {place!r} names no region", example)
    known = _known_sites(catalog)
    if not cloud_text and region in catalog.clouds():
        regions = ", ".join(f"{cloud}:{r}" for cloud, r in sorted(known) if cloud == region)
        raise InputError(f"--data-region {place!r} names a cloud, not a region", f"name its region: one of {regions}")
    if cloud_text:
        cloud = catalog.cloud(cloud_text)
        if (cloud, region) not in known:
            raise _unknown_site(place, known)
        return DataSite(cloud, region, dataset_bytes)
    clouds = sorted({cloud for cloud, r in known if r == region})
    if not clouds:
        raise _unknown_site(place, known)
    if len(clouds) > 1:
        raise InputError(
            f"region {region!r} is sold by {' and '.join(clouds)}: which one holds the data?",
            f"name the cloud: --data-region {clouds[0]}:{region}",
        )
    return DataSite(clouds[0], region, dataset_bytes)


def _known_sites(catalog: Catalog) -> set[tuple[str, str]]:
    """(cloud, region) of every offering and every grid-intensity row that names a region."""
    sites = {(row.cloud, row.region) for row in catalog.offerings}
    return sites | {
        (row.cloud.lower(), row.region.lower()) for row in catalog.carbon if "*" not in (row.cloud, row.region)
    }


def _unknown_site(place: str, known: set[tuple[str, str]]) -> UnknownNameError:
    names = sorted(f"{cloud}:{region}" for cloud, region in known)
    return UnknownNameError(
        "data region",
        place.strip(),
        names,
        f"pick one of: {', '.join(names)}; or add the region's grid intensity to carbon.csv in a catalog file "
        "(--catalog PATH)",
    )


def egress_scope(site: DataSite, cloud: str, region: str) -> EgressScope:
    """How the bytes travel to GPUs in ``cloud``/``region``: not at all, between regions of one cloud,
    or out to the internet (another cloud, or an owned server with no cloud)."""
    if cloud != site.cloud:
        return "internet"
    return "same-region" if region == site.region else "inter-region"


def token_bytes(vocab_size: int) -> int:
    """Bytes of one token id in a tokenized shard: uint16 when the vocabulary fits, else 4 bytes."""
    return 2 if 0 < vocab_size <= _UINT16_VOCAB else 4


def data_movement(
    site: DataSite,
    scope: EgressScope,
    *,
    usd_per_gb: float,
    copy_bytes_per_s: float,
    tokens: float,
    training_s: float,
    vocab_size: int,
) -> DataMovement:
    """Egress and copy time of ``site``'s dataset over ``scope``, and the read rate of ``tokens`` in ``training_s``.

    ``copy_bytes_per_s`` is the slower of the managed copy's rate and the destination's network.
    """
    moved = scope != "same-region"
    return DataMovement(
        origin=f"{site.cloud}:{site.region}",
        dataset_bytes=site.dataset_bytes,
        scope=scope,
        usd_per_gb=usd_per_gb if moved else 0.0,
        egress_usd=site.dataset_bytes / _BYTES_PER_GB * usd_per_gb if moved else 0.0,
        transfer_s=site.dataset_bytes / copy_bytes_per_s if moved else 0.0,
        read_bytes_per_s=tokens * token_bytes(vocab_size) / training_s if training_s > 0 else 0.0,
    )
