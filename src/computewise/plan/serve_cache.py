"""``plan serve --cache-hit-ratio``: what a prediction cache in front of the replicas saves.

A share ``h`` of the requests answered from the cache (``serve --cache-size``) never reaches the
model, so the replicas are sized for the misses, ``(1 - h) x`` the traffic at every hour, with the
same capacity per replica, utilization target and price. The saving is the difference of the two
plans' monthly bills, mode by mode; $ per 1000 requests stays over *all* the requests served, hits
included, so the two prices compare like with like.

A hit is not free: it still costs the HTTP layer (parsing, hashing, the answer). The replica
capacity from ``loadtest`` is model-bound, so sizing for the misses alone assumes that cost is
small against a model call; the note in the plan says so, and the figure in docs/PERFORMANCE.md
(``benchmarks/serve_cache.py``) measures the whole server with hits included.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import ClassVar

from computewise.errors import InputError
from computewise.plan.serve import ServePlan, TrafficProfile
from computewise.specs.codec import Jsonable, json_field, json_property

__all__ = ["CacheSaving", "cache_saving", "miss_traffic"]


def miss_traffic(traffic: TrafficProfile, hit_ratio: float) -> TrafficProfile:
    """The traffic that reaches the model when ``hit_ratio`` of every hour's requests are cache hits."""
    if not (math.isfinite(hit_ratio) and 0 <= hit_ratio < 1):
        raise InputError(f"the cache hit ratio must be in [0, 1), got {hit_ratio}", "e.g. --cache-hit-ratio 0.5")
    miss = 1.0 - hit_ratio
    hourly = None if traffic.hourly_rps is None else tuple(rps * miss for rps in traffic.hourly_rps)
    return dataclasses.replace(traffic, peak_rps=traffic.peak_rps * miss, mean_rps=traffic.mean_rps * miss,
                               hourly_rps=hourly)  # fmt: skip


@dataclass(frozen=True)
class CacheSaving(Jsonable):
    """Replicas and monthly bills without and with the cache, for each serving mode."""

    json_description: ClassVar[str] = (
        "With --cache-hit-ratio (plan.serve_cache.CacheSaving): replicas and monthly USD per mode without and with "
        "a prediction cache answering hit_ratio of the requests; cached_usd_per_1000_requests is over all "
        "requests, hits included."
    )

    hit_ratio: float = field(metadata=json_field(minimum=0, exclusive_maximum=1))
    replicas_at_peak: int
    cached_replicas_at_peak: int
    replicas_at_mean: int
    cached_replicas_at_mean: int
    monthly_usd: dict[str, float]
    cached_monthly_usd: dict[str, float]
    cached_usd_per_1000_requests: dict[str, float]

    @json_property(after="cached_monthly_usd")
    def saved_monthly_usd(self) -> dict[str, float]:
        return {mode: self.monthly_usd[mode] - self.cached_monthly_usd[mode] for mode in self.monthly_usd}


def cache_saving(uncached: ServePlan, cached: ServePlan, hit_ratio: float) -> CacheSaving:
    """Compare ``uncached`` with ``cached``, the same plan made for ``miss_traffic(traffic, hit_ratio)``."""
    all_requests = uncached.requests_per_month
    per_1000: dict[str, float] = {
        mode.mode: mode.monthly_usd / all_requests * 1000.0 if all_requests > 0 else 0.0 for mode in cached.modes
    }
    return CacheSaving(
        hit_ratio=hit_ratio,
        replicas_at_peak=uncached.replicas_at_peak,
        cached_replicas_at_peak=cached.replicas_at_peak,
        replicas_at_mean=uncached.replicas_at_mean,
        cached_replicas_at_mean=cached.replicas_at_mean,
        monthly_usd=uncached.monthly_usd,
        cached_monthly_usd=cached.monthly_usd,
        cached_usd_per_1000_requests=per_1000,
    )
