"""The price a test run is recorded at: one ``PriceSnapshot`` "as given" for every test that needs one.

A snapshot must carry its grid intensity and PUE (the ledger keeps no default of its own), so each
test used to write all seven fields out; this is the one place that does.
"""

from __future__ import annotations

from computewise.ledger import PriceSnapshot


def given_price(
    hourly_usd: float,
    *,
    explanation: str | None = None,
    carbon_g_per_kwh: float = 475.0,
    pue: float = 1.0,
    source: str = "test",
    cloud: str | None = None,
    instance_type: str | None = None,
    pricing: str | None = None,
    region: str | None = None,
) -> PriceSnapshot:
    """A price the user gave (not looked up), at a world-average-like grid and no facility overhead by default."""
    return PriceSnapshot(
        hourly_usd=hourly_usd,
        source=source,
        explanation=explanation if explanation is not None else f"${hourly_usd:.2f}/h as given",
        assumed=False,
        cloud=cloud,
        instance_type=instance_type,
        pricing=pricing,
        region=region,
        carbon_g_per_kwh=carbon_g_per_kwh,
        carbon_source="test",
        pue=pue,
    )
