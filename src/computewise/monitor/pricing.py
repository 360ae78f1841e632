"""The price a monitored run is charged at, decided once at launch and frozen into the ledger.

The price is ``estimate.quote``'s, the one every verb uses, asked as a bill: ``--hourly-usd`` (the
user knows best) > ``--instance`` (one whole catalog instance) > the detected GPUs rented by
``estimate.pricing.rent`` at the cheapest catalog offering in ``--cloud`` and ``--region`` (a share of
an instance where the GPUs leave some of it over) > a CPU-only run at the catalog's price per
vCPU-hour. This module turns what the driver saw into that ask and the quote into the ledger's
``PriceSnapshot``; whatever was assumed is said in its ``explanation``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from computewise.catalog import Catalog
from computewise.estimate.quote import Ask, PriceRequest, quote
from computewise.ledger import PriceSnapshot

__all__ = ["DetectedHardware", "frozen_price", "unpriced"]


@dataclass(frozen=True)
class DetectedHardware:
    """What the run will use: GPUs seen by the driver (may be none) and the host's logical CPUs."""

    gpu_count: int
    gpu_name: str | None
    gpu_memory_total_bytes: float | None
    logical_cpus: int

    def ask(self, catalog: Catalog) -> Ask:
        """What pricing this hardware asks ``estimate.quote``: the catalog's device for the GPUs seen (a GPU
        the catalog lacks is named as such) and the vCPUs, for ``frozen_price``."""
        seen = self.gpu_name if self.gpu_count > 0 else None
        accelerator = catalog.match_device(seen, self.gpu_memory_total_bytes) if seen is not None else None
        return Ask(
            accelerator=accelerator,
            gpus=self.gpu_count,
            vcpus=self.logical_cpus,
            why=f"detected {seen!r}",
            unmatched_gpu=seen if accelerator is None else None,
        )


def frozen_price(catalog: Catalog, ask: Ask, request: PriceRequest) -> PriceSnapshot:
    """The one call that prices a run: ``estimate.quote``'s answer to ``ask`` (detected hardware's
    ``DetectedHardware.ask``, a supervised job's requested resources) as the ledger keeps it, with the grid
    carbon intensity and PUE; a price computewise chose says how to give it exactly. Raises InputError for
    impossible flags."""
    price = quote(catalog, ask, request)
    advice = "; set --hourly-usd or --instance to price it exactly" if price.assumed else ""
    return PriceSnapshot(
        hourly_usd=price.hourly_usd,
        source=price.source,
        explanation=price.explanation + advice,
        assumed=price.assumed,
        cloud=price.cloud,
        instance_type=price.instance_type,
        pricing=price.pricing,
        region=price.region,
        retrieved=price.retrieved,
        carbon_g_per_kwh=price.carbon.g_co2_per_kwh,
        carbon_source=price.carbon.source,
        pue=price.pue,
    )


def unpriced(catalog: Catalog) -> PriceSnapshot:
    """The placeholder of a ``track()`` run until it is priced from its device at the end: $0 on the grid
    and PUE ``estimate.quote`` gives a machine priced without a place."""
    placeholder = frozen_price(catalog, Ask(), PriceRequest(hourly_usd=0.0))
    return replace(
        placeholder,
        source="none",
        explanation="not priced yet: track() prices the run from its device when it finishes",
        assumed=True,
    )
