"""``plan serve`` as one call: the typed request (capacity, traffic, a replica's price, the knobs) in, the plan out.

The CLI reads the files and the flags into a :class:`ServeRequest`; :func:`plan_serve_request` fills in the
catalog's defaults, plans the traffic (and, with a cache, the traffic that misses it) and returns a
:class:`PlannedServing`, whose ``to_dict`` is the ``plan serve --json`` document: the plan with where its
capacity and price come from, and every note, in the order the user reads them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from computewise.plan.serve import LoadtestCapacity, ServePlan, TrafficProfile, plan_serving
from computewise.plan.serve_cache import CacheSaving, cache_saving, miss_traffic

if TYPE_CHECKING:
    from computewise.estimate import Assumptions
    from computewise.estimate.quote import Quote

__all__ = ["PlannedServing", "ServeRequest", "plan_serve_request"]


@dataclass(frozen=True)
class ServeRequest:
    """What ``plan serve`` is asked; a None knob takes the catalog's assumption (or the loadtest's latency)."""

    capacity: LoadtestCapacity
    traffic: TrafficProfile
    price: Quote
    traffic_notes: tuple[str, ...] = ()
    per_instance: bool = False  # priced as one whole catalog instance per replica (--instance)
    target_utilization: float | None = None
    min_replicas: int = 1
    cold_start_s: float | None = None
    latency_s: float | None = None
    max_usd_per_hour: float | None = None
    cache_hit_ratio: float | None = None


@dataclass(frozen=True)
class PlannedServing:
    """The plan of a request and, with a cache hit ratio, what the cache saves."""

    request: ServeRequest
    plan: ServePlan
    cache: CacheSaving | None = None

    def to_dict(self) -> dict[str, Any]:
        request, price = self.request, self.request.price
        data = self.plan.to_dict()
        data["capacity"]["source"] = request.capacity.description
        data["price"]["source"] = (
            ("one instance per replica: " if request.per_instance else "")
            + price.explanation
            + (f" ({price.source}, retrieved {price.retrieved})" if price.offering is not None else "")
        )
        data["notes"] = [*request.capacity.notes, *request.traffic_notes, *data["notes"]]
        if self.cache is not None:
            data["cache"] = self.cache.to_dict()
            data["notes"].append(
                f"cache: replicas sized for the {1 - self.cache.hit_ratio:.0%} of requests that miss; a hit still "
                "costs the HTTP layer (the configs written above are for all requests)"
            )
        return data


def plan_serve_request(request: ServeRequest, assumptions: Assumptions) -> PlannedServing:
    """Plan ``request``'s traffic, and its cache misses' when it names a hit ratio, on the same replicas."""
    utilization = request.target_utilization
    cold_start_s = request.cold_start_s

    def planned(traffic: TrafficProfile) -> ServePlan:
        return plan_serving(
            request.capacity.capacity_rps,
            traffic,
            request.price.hourly_usd,
            target_utilization=assumptions.serving_target_utilization if utilization is None else utilization,
            min_replicas=request.min_replicas,
            scale_to_zero_cold_start_s=assumptions.serving_cold_start_s if cold_start_s is None else cold_start_s,
            latency_s=request.capacity.latency_s if request.latency_s is None else request.latency_s,
            max_usd_per_hour=request.max_usd_per_hour,
        )

    plan = planned(request.traffic)
    ratio = request.cache_hit_ratio
    if ratio is None:
        return PlannedServing(request, plan)
    return PlannedServing(request, plan, cache_saving(plan, planned(miss_traffic(request.traffic, ratio)), ratio))
