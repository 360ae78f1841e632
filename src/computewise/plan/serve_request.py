"""``plan serve`` as one call: the typed request (capacity, traffic, a replica's price, the knobs) in, the plan out.

The CLI reads the files and the flags into a :class:`ServeRequest`; :func:`plan_serve_request` fills in the
catalog's defaults, plans the traffic (and, with a cache, the traffic that misses it; with a monthly budget,
the alert the spend cap makes reliable) and returns a :class:`PlannedServing`: what the tables and the HTML
report show, typed, and through ``to_dict`` the ``plan serve --json`` document, with where the capacity and
price come from and every note in the order the user reads them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from computewise.errors import InputError
from computewise.plan.serve import LoadtestCapacity, ServePlan, TrafficProfile, plan_serving
from computewise.plan.serve_cache import CacheSaving, cache_saving, miss_traffic
from computewise.plan.spendcap import CapAlert, SpendCap, cap_alert
from computewise.specs.codec import Document, Jsonable, Layout, json_field, json_property

if TYPE_CHECKING:
    from computewise.estimate import Assumptions
    from computewise.estimate.quote import Quote

__all__ = ["CapBudget", "CappedSpend", "PlannedServing", "ServeRequest", "WrittenFiles", "plan_serve_request"]


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
    monthly_usd: float | None = None  # with max_usd_per_hour: the deployment's budget, for CapBudget
    alert_lead_s: float = 86400.0
    name: str = "model"  # the deployment: the scope of its budget


@dataclass(frozen=True)
class CapBudget(Jsonable):
    """``--monthly-usd`` under a spend cap: the alert the cap makes reliable, and the commands that set it up."""

    alert: CapAlert = field(metadata=json_field(inline=True))
    scope: str  # the tag scope of the deployment's runs, deployment=NAME

    @json_property()
    def command(self) -> str:
        """The ``budget set`` that fires the alert (and one at 100 %)."""
        alert = self.alert
        thresholds = "100" if alert.threshold_pct is None else f"{alert.threshold_pct:g},100"
        return (
            f"computewise budget set --scope {self.scope} --monthly-usd {alert.monthly_usd:g} --alert-at {thresholds}"
        )

    @json_property()
    def serve_tag(self) -> str:
        """What ``serve`` needs so its runs fall in the budget's scope."""
        return f"--tag {self.scope}"


@dataclass(frozen=True)
class CappedSpend(Jsonable):
    """The ``spend_cap`` of ``plan serve --json``: the cap's plan and, with ``--monthly-usd``, its budget."""

    json_description: ClassVar[str] = (
        "--max-usd-per-hour: the replicas it buys and, in each hour that wants more, the 429s and latency "
        "(plan.spendcap.SpendCap)."
    )

    cap: SpendCap = field(metadata=json_field(inline=True))
    budget: CapBudget | None = field(default=None, metadata=json_field(omit_empty=True))


@dataclass(frozen=True)
class WrittenFiles(Jsonable):
    """The files ``plan serve`` wrote beside its answer, each None where not asked for (``--html`` only when it was)."""

    json_description: ClassVar[str] = (
        "The files written beside the answer (--hpa, --ray-config; --html only when given), null where not asked for."
    )

    hpa: str | None
    ray_config: str | None
    html: str | None = field(default=None, metadata=json_field(omit_empty=True))


@dataclass(frozen=True)
class PlannedServing(Jsonable):
    """The plan of a request and, with a cache hit ratio, what the cache saves; with a budget, its alert.

    Its JSON is the plan's, then the spend cap with its budget, every note, the cache and the files the CLI
    wrote: the request itself is not written (the plan says where its capacity and price came from), so it
    is not read back.
    """

    json_document: ClassVar[Document] = Document(
        "plan-serve",
        "plan serve --json",
        "Replicas and monthly cost of serving a measured model (plan.serve.ServePlan), with the files written.",
    )
    json_layout: ClassVar[Layout] = ("plan", "spend_cap", "notes", "cache", "written")

    request: ServeRequest
    plan: ServePlan = field(metadata=json_field(inline=True))
    cache: CacheSaving | None = field(default=None, metadata=json_field(omit_empty=True))
    budget: CapBudget | None = None
    written: WrittenFiles | None = field(default=None, metadata=json_field(omit_empty=True))  # set by the CLI

    @json_property()
    def spend_cap(self) -> CappedSpend | None:
        cap = self.plan.spend_cap
        return None if cap is None else CappedSpend(cap, self.budget)

    @json_property()
    def notes(self) -> list[str]:
        """The capacity's and traffic's notes, the plan's, then the cache's."""
        request = self.request
        notes = [*request.capacity.notes, *request.traffic_notes, *self.plan.notes]
        if self.cache is not None:
            notes.append(
                f"cache: replicas sized for the {1 - self.cache.hit_ratio:.0%} of requests that miss; a hit still "
                "costs the HTTP layer (the configs written above are for all requests)"
            )
        return notes


def plan_serve_request(request: ServeRequest, assumptions: Assumptions) -> PlannedServing:
    """Plan ``request``'s traffic, and its cache misses' when it names a hit ratio, on the same replicas."""
    if request.monthly_usd is not None and request.max_usd_per_hour is None:
        raise InputError("--monthly-usd needs --max-usd-per-hour", "add --max-usd-per-hour, or drop --monthly-usd")
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
            capacity_source=request.capacity.description,
            price_source=_price_source(request),
        )

    plan = planned(request.traffic)
    ratio = request.cache_hit_ratio
    cache = None if ratio is None else cache_saving(plan, planned(miss_traffic(request.traffic, ratio)), ratio)
    return PlannedServing(request, plan, cache, _budget(request, plan))


def _price_source(request: ServeRequest) -> str:
    """How a replica was priced: the quote's explanation and, from the catalog, its source and date."""
    price = request.price
    return (
        ("one instance per replica: " if request.per_instance else "")
        + price.explanation
        + (f" ({price.source}, retrieved {price.retrieved})" if price.offering is not None else "")
    )


def _budget(request: ServeRequest, plan: ServePlan) -> CapBudget | None:
    """The alert for ``request.monthly_usd`` at the capped replicas' price: spend can never grow faster than that."""
    if request.monthly_usd is None or plan.spend_cap is None:
        return None
    alert = cap_alert(request.monthly_usd, plan.spend_cap.max_spend_usd_per_hour, request.alert_lead_s)
    return CapBudget(alert, f"deployment={request.name}")
