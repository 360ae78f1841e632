"""``plan serve``: replicas, $ per 1000 requests and the monthly bill of serving a measured model.

Pure functions on numbers the user measured (a replica's capacity, from ``computewise loadtest``)
or knows (a traffic profile, an hourly price); no I/O, so the CLI reads the files and this module
only parses their text. Three ways to pay for the same traffic are compared:

- **always-on**: the replicas the peak needs, all month;
- **autoscaled**: replicas follow the traffic hour by hour, never below ``min_replicas``;
- **scale-to-zero**: as autoscaled, but no replica at all in hours without traffic, at the price of
  a cold start (billed start-up time, and a wait for the first request) each time traffic returns.

The sizing rule is utilization headroom: a replica that sustains ``C`` requests/s within its latency
SLO is planned at ``C x u`` (``u``: the catalog's ``serving_target_utilization`` unless given),
because queueing delay grows as ``u/(1-u)`` (M/M/1, Kleinrock 1975, *Queueing Systems* vol. 1,
ch. 3) and an autoscaler needs room to absorb the rise while a new replica starts. The same ``u``
gives the Kubernetes HPA target and, with Little's law (``L = lambda x W``; Little 1961), the Ray
Serve ``target_ongoing_requests``.
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np

from computewise.errors import InputError
from computewise.limits import RATE_RPS
from computewise.plan.infer import HOURS_PER_MONTH
from computewise.plan.spendcap import Demand, SpendCap, cap_spend
from computewise.specs.codec import Jsonable, Layout, json_field, json_property
from computewise.specs.loadtest import LoadtestRun, MaxRateSearch
from computewise.units import plural

__all__ = [
    "HPA_METRIC_NAME",
    "RAY_DEFAULT_DOWNSCALE_DELAY_S",
    "RAY_DEFAULT_TARGET_ONGOING_REQUESTS",
    "RAY_DEFAULT_UPSCALE_DELAY_S",
    "HourPlan",
    "HpaMetric",
    "LoadtestCapacity",
    "ModeCost",
    "ServeMode",
    "ServePlan",
    "TrafficProfile",
    "capacity_from_loadtest",
    "parse_traffic_csv",
    "plan_serving",
    "replicas_needed",
]

# Ray Serve AutoscalingConfig defaults (docs.ray.io, ray.serve.config.AutoscalingConfig; Ray >= 2.32).
RAY_DEFAULT_TARGET_ONGOING_REQUESTS = 2.0
RAY_DEFAULT_UPSCALE_DELAY_S = 30.0
RAY_DEFAULT_DOWNSCALE_DELAY_S = 600.0
# Kubernetes' default scale-down stabilization window (autoscaling/v2 HPA behavior), written out so it shows.
HPA_SCALE_DOWN_STABILIZATION_S = 300
# What Prometheus Adapter calls the rate of a ``computewise_serve_requests_total`` counter with the usual
# ``^(.*)_total$ -> ${1}_per_second`` rule.
HPA_METRIC_NAME = "computewise_serve_requests_per_second"
# Above this, queueing delay (u/(1-u)) is more than 5.7x the service time: latency is at the mercy of bursts.
_HIGH_UTILIZATION = 0.85
# The most replicas a plan may need: --peak-rps at its limit (1e7) over --capacity-rps at its (0.001) at 1 %
# utilization is 1e12; beyond that the hourly schedule's int64 counts would lose their meaning.
_MAX_REPLICAS = 1e12
_K8S_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")

HpaMetric = Literal["rps", "cpu"]
ServeMode = Literal["always-on", "autoscaled", "scale-to-zero"]


@dataclass(frozen=True)
class TrafficProfile(Jsonable):
    """Requests per second offered to the whole service: peak, mean, and optionally one value per hour.

    ``hourly_rps`` is a profile that repeats (a day of 24 values, a week of 168, ...); ``first_hour``
    only labels the schedule with the hours the user wrote. The plan's JSON gives the profile's length,
    not its values: the schedule lists them with the replicas of each hour.
    """

    json_layout: ClassVar[Layout] = ("peak_rps", "mean_rps", "hours_in_profile", "requests_per_month")

    peak_rps: float
    mean_rps: float
    hourly_rps: tuple[float, ...] | None = None
    first_hour: int = 0

    @classmethod
    def from_hourly(cls, hourly_rps: Sequence[float], first_hour: int = 0) -> TrafficProfile:
        values = tuple(float(v) for v in hourly_rps)
        if not values:
            raise InputError("the traffic profile has no hours", "give at least one hour,rps row")
        return cls(max(values), sum(values) / len(values), values, first_hour)

    @json_property()
    def hours_in_profile(self) -> int | None:
        return None if self.hourly_rps is None else len(self.hourly_rps)

    @json_property()
    def requests_per_month(self) -> float:
        return self.mean_rps * 3600.0 * HOURS_PER_MONTH


@dataclass(frozen=True)
class LoadtestCapacity:
    """What one replica sustains, read from a ``computewise loadtest --json`` result."""

    capacity_rps: float
    latency_s: float | None  # median latency at that rate: W in Little's law
    description: str
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class ModeCost(Jsonable):
    """One way of paying for the traffic: average replicas kept up, and what that costs."""

    mode: ServeMode
    average_replicas: float
    monthly_usd: float
    usd_per_1000_requests: float
    cold_starts_per_month: float | None  # scale-to-zero with an hourly profile only
    start_up_replica_hours_per_month: float  # billed while cold-started replicas boot, before they serve
    basis: str  # how the replica-hours were counted

    @json_property(after="average_replicas")
    def replica_hours_per_month(self) -> float:
        return self.average_replicas * HOURS_PER_MONTH


@dataclass(frozen=True)
class HourPlan(Jsonable):
    """One hour of the schedule: the traffic, and the replicas each elastic mode runs."""

    hour: int
    rps: float
    autoscaled_replicas: int
    scale_to_zero_replicas: int
    utilization: float  # of the autoscaled replicas' full capacity; 0 when none run


@dataclass(frozen=True)
class ServePlan(Jsonable):
    """Replicas and cost of serving a traffic profile, and the autoscaler settings that carry the plan out.

    Its JSON is the body of ``plan serve --json`` (``plan.serve_request.PlannedServing``), which writes the
    spend cap and the notes itself: with the budget and the request's notes, which this plan does not know.
    """

    json_layout: ClassVar[Layout] = (
        ("capacity", ("capacity_rps_per_replica", "target_utilization", "rps_per_replica_at_target", "latency_s",
                      "capacity_source")),
        "traffic",
        ("price", ("hourly_usd_per_replica", "hours_per_month", "price_source")),
        ("replicas", ("replicas_at_peak", "replicas_at_mean", "min_replicas")),
        "cold_start_s",
        ("modes", ("always_on", "autoscaled", "scale_to_zero")),
        "schedule",
    )  # fmt: skip

    capacity_rps_per_replica: float = field(metadata=json_field(name="rps_per_replica"))
    target_utilization: float
    hourly_usd_per_replica: float = field(metadata=json_field(name="usd_per_hour_per_replica"))
    min_replicas: int = field(metadata=json_field(name="min"))
    cold_start_s: float
    latency_s: float | None
    traffic: TrafficProfile
    replicas_at_peak: int = field(metadata=json_field(name="at_peak"))
    replicas_at_mean: int = field(metadata=json_field(name="at_mean"))
    always_on: ModeCost = field(metadata=json_field(name="always-on"))
    autoscaled: ModeCost
    scale_to_zero: ModeCost = field(metadata=json_field(name="scale-to-zero"))
    schedule: tuple[HourPlan, ...] | None
    notes: tuple[str, ...] = ()
    spend_cap: SpendCap | None = None  # --max-usd-per-hour: replicas held under it, and what it costs
    capacity_source: str = field(
        default="", metadata=json_field(name="source", omit_empty=True, description="--capacity-rps, or the loadtest.")
    )
    price_source: str = field(
        default="", metadata=json_field(name="source", omit_empty=True, description="The quote, and its catalog row.")
    )

    @property
    def max_replicas(self) -> int:
        """The most replicas the autoscalers may start: the peak's, or fewer under a spend cap."""
        if self.spend_cap is None:
            return self.replicas_at_peak
        return min(self.replicas_at_peak, self.spend_cap.max_replicas)

    @json_property()
    def rps_per_replica_at_target(self) -> float:
        """The load each replica is planned for: capacity x target utilization."""
        return self.capacity_rps_per_replica * self.target_utilization

    @json_property()
    def hours_per_month(self) -> float:
        """The month every monthly figure is counted in (730 h), written so a reader need not know it."""
        return HOURS_PER_MONTH

    @property
    def requests_per_month(self) -> float:
        return self.traffic.requests_per_month

    @property
    def usd_per_1000_requests(self) -> dict[str, float]:
        return {m.mode: m.usd_per_1000_requests for m in self.modes}

    @property
    def monthly_usd(self) -> dict[str, float]:
        return {m.mode: m.monthly_usd for m in self.modes}

    @property
    def modes(self) -> tuple[ModeCost, ModeCost, ModeCost]:
        return (self.always_on, self.autoscaled, self.scale_to_zero)

    @property
    def target_ongoing_requests(self) -> float:
        """Requests in flight per replica at the target load, by Little's law L = lambda x W (Little 1961).

        lambda is the per-replica rate at the target (capacity x utilization) and W the measured latency;
        without a latency, Ray Serve's own default (2) is the honest answer.
        """
        if self.latency_s is None:
            return RAY_DEFAULT_TARGET_ONGOING_REQUESTS
        return max(round(self.rps_per_replica_at_target * self.latency_s, 2), 0.01)

    def hpa_manifest(
        self, name: str, metric: HpaMetric = "rps", namespace: str | None = None, metric_name: str = HPA_METRIC_NAME
    ) -> str:
        """A Kubernetes ``autoscaling/v2`` HorizontalPodAutoscaler for a Deployment called ``name``, as YAML text.

        The HPA keeps ``metric / target`` near 1 (kubernetes.io, "Horizontal Pod Autoscaling", algorithm
        details), so the per-pod target is the planned load, capacity x utilization: requests/s through a
        custom Pods metric, or the same fraction of requested CPU where the replica is CPU-bound. The HPA
        cannot go below one replica without the alpha HPAScaleToZero feature gate, so minReplicas >= 1.
        """
        _check_k8s_name(name, "--name")
        if namespace is not None:
            _check_k8s_name(namespace, "--namespace")
        lines = [
            f"# HorizontalPodAutoscaler for {name}, written by `computewise plan serve`.",
            f"# Planned for a peak of {_num(self.traffic.peak_rps)} requests/s at "
            f"{_num(self.capacity_rps_per_replica)} requests/s per replica x {_num(self.target_utilization)} "
            "target utilization.",
        ]
        if self.spend_cap is not None and self.spend_cap.binding:
            ceiling_rps = self.max_replicas * self.capacity_rps_per_replica
            lines.append(
                f"# maxReplicas capped at {self.max_replicas} by --max-usd-per-hour "
                f"{_num(self.spend_cap.max_usd_per_hour)} $/h: above {_num(ceiling_rps)} requests/s, 429s."
            )
        if metric == "rps":
            lines += [
                f"# The Pods metric {metric_name} must be served by a custom-metrics adapter, e.g. a Prometheus",
                "# Adapter rule turning the rate of computewise_serve_requests_total into <name>_per_second.",
            ]
        lines += [
            "apiVersion: autoscaling/v2",
            "kind: HorizontalPodAutoscaler",
            "metadata:",
            f"  name: {name}",
            *([f"  namespace: {namespace}"] if namespace is not None else []),
            "spec:",
            "  scaleTargetRef:",
            "    apiVersion: apps/v1",
            "    kind: Deployment",
            f"    name: {name}",
            f"  minReplicas: {max(1, self.min_replicas)}",
            f"  maxReplicas: {self.max_replicas}",
            "  metrics:",
        ]
        if metric == "rps":
            milli = round(self.rps_per_replica_at_target * 1000)
            lines += [
                "    - type: Pods",
                "      pods:",
                "        metric:",
                f"          name: {metric_name}",
                "        target:",
                "          type: AverageValue",
                f'          averageValue: "{milli}m"  # {_num(self.rps_per_replica_at_target)} requests/s per pod',
            ]
        elif metric == "cpu":
            lines += [
                "    - type: Resource",
                "      resource:",
                "        name: cpu",
                "        target:",
                "          type: Utilization",
                f"          averageUtilization: {max(1, round(self.target_utilization * 100))}",
            ]
        else:
            raise InputError(f"unknown HPA metric {metric!r}", "use rps (requests per second per pod) or cpu")
        lines += [
            "  behavior:",
            "    scaleUp:",
            "      stabilizationWindowSeconds: 0",
            "    scaleDown:",
            f"      stabilizationWindowSeconds: {HPA_SCALE_DOWN_STABILIZATION_S}",
        ]
        return "\n".join(lines) + "\n"

    def ray_serve_config(self, name: str) -> dict[str, Any]:
        """A Ray Serve deployment entry (``deployments:`` item of a Serve config) with its ``autoscaling_config``.

        min/max replicas come from the plan; ``target_ongoing_requests`` from Little's law (see
        :attr:`target_ongoing_requests`); ``max_ongoing_requests`` 50 % above it, the top of the 20-50 %
        margin the Ray Serve advanced-autoscaling guide recommends; delays are Ray's defaults, written out.
        """
        target = self.target_ongoing_requests
        return {
            "name": name,
            "max_ongoing_requests": max(1, math.ceil(target * 1.5)),
            "autoscaling_config": {
                "min_replicas": self.min_replicas,
                "max_replicas": self.max_replicas,
                "target_ongoing_requests": target,
                "upscale_delay_s": RAY_DEFAULT_UPSCALE_DELAY_S,
                "downscale_delay_s": RAY_DEFAULT_DOWNSCALE_DELAY_S,
            },
        }


@dataclass(frozen=True)
class _Price:
    """Prices replica-hours the same way for every mode."""

    hourly_usd_per_replica: float
    requests_per_month: float

    def mode(
        self,
        name: ServeMode,
        average_replicas: float,
        basis: str,
        cold_starts: float | None = None,
        start_up_replica_h: float = 0.0,
    ) -> ModeCost:
        monthly = (average_replicas * HOURS_PER_MONTH + start_up_replica_h) * self.hourly_usd_per_replica
        per_1000 = monthly / self.requests_per_month * 1000.0
        return ModeCost(name, average_replicas, monthly, per_1000, cold_starts, start_up_replica_h, basis)


def replicas_needed(rps: float, rps_per_replica: float, min_replicas: int = 1) -> int:
    """ceil(rps / rps_per_replica), at least ``min_replicas``, and at least one while there is traffic.

    The quotient is rounded to 9 decimals first so float noise (0.3 / 0.1 = 2.9999999999999996)
    does not buy or drop a replica.
    """
    if rps <= 0:
        return min_replicas
    return max(min_replicas, 1, math.ceil(round(rps / rps_per_replica, 9)))


def plan_serving(
    capacity_rps_per_replica: float,
    traffic: TrafficProfile,
    hourly_usd_per_replica: float,
    *,
    target_utilization: float,
    min_replicas: int = 1,
    scale_to_zero_cold_start_s: float,
    latency_s: float | None = None,
    max_usd_per_hour: float | None = None,
    capacity_source: str = "",
    price_source: str = "",
) -> ServePlan:
    """Replicas at peak and mean, and the monthly cost (730 h) and $ per 1000 requests of each serving mode.

    ``target_utilization`` and ``scale_to_zero_cold_start_s`` are assumptions: the CLI passes the flags,
    else the catalog's ``serving_target_utilization`` and ``serving_cold_start_s``.

    $ per 1000 requests divides each mode's monthly bill by the requests actually served in a month
    (mean rps x 3600 x 730), so idle capacity shows up in the price of every request.

    ``max_usd_per_hour`` caps the replicas of every mode at what it buys (``plan.spendcap``); the hours
    that want more are answered in part, the rest refused with 429, and the plan says how much.

    ``capacity_source`` and ``price_source`` say where the capacity and the price came from, for the JSON.
    """
    _validate(capacity_rps_per_replica, traffic, hourly_usd_per_replica, target_utilization, min_replicas)
    if scale_to_zero_cold_start_s < 0 or not math.isfinite(scale_to_zero_cold_start_s):
        raise InputError(f"cold start must be >= 0 s, got {scale_to_zero_cold_start_s}", "e.g. --cold-start-s 30")
    if latency_s is not None and not (latency_s > 0 and math.isfinite(latency_s)):
        raise InputError(f"latency must be positive, got {latency_s} s", "e.g. --latency-ms 40")
    per_replica = capacity_rps_per_replica * target_utilization
    at_peak = replicas_needed(traffic.peak_rps, per_replica, min_replicas)
    at_mean = replicas_needed(traffic.mean_rps, per_replica, min_replicas)
    requests_per_month = traffic.mean_rps * 3600.0 * HOURS_PER_MONTH
    spend_cap = None
    if max_usd_per_hour is not None:
        hours = traffic.hourly_rps if traffic.hourly_rps is not None else (traffic.peak_rps,)
        spend_cap = cap_spend(
            max_usd_per_hour,
            hourly_usd_per_replica,
            capacity_rps=capacity_rps_per_replica,
            target_utilization=target_utilization,
            demand=[
                Demand(
                    None if traffic.hourly_rps is None else traffic.first_hour + i,
                    rps,
                    replicas_needed(rps, per_replica, min_replicas),
                )
                for i, rps in enumerate(hours)
            ],
            hours_per_month=HOURS_PER_MONTH,
            hourly_profile=traffic.hourly_rps is not None,
            latency_s=latency_s,
            min_replicas=min_replicas,
        )
    cap = None if spend_cap is None else spend_cap.max_replicas

    price = _Price(hourly_usd_per_replica, requests_per_month)
    notes: list[str] = []
    on = at_peak if cap is None else min(at_peak, cap)
    always_on = price.mode(
        "always-on",
        float(on),
        f"{plural(on, 'replica')} ({'the peak' if on == at_peak else 'the spend cap'}'s) all month",
    )
    schedule: tuple[HourPlan, ...] | None = None
    if traffic.hourly_rps is None:
        mean_on = at_mean if cap is None else min(at_mean, cap)
        autoscaled = price.mode(
            "autoscaled",
            float(mean_on),
            f"{plural(mean_on, 'replica')} (the mean's) all month: without an hourly profile the swings are unknown",
        )
        scale_to_zero = _on_off(traffic, per_replica, autoscaled, price, cap)
        notes.append(
            "no hourly profile: give --traffic FILE.csv (hour,rps) for an hourly schedule and cold-start count"
        )
    else:
        schedule, autoscaled, scale_to_zero = _hourly(
            traffic, per_replica, capacity_rps_per_replica, min_replicas, scale_to_zero_cold_start_s, price, cap
        )
    if traffic.hourly_rps is None:
        idle = traffic.mean_rps < traffic.peak_rps  # the on/off reading of a mean below the peak
    else:
        idle = any(rps == 0 for rps in traffic.hourly_rps)
    if not idle:
        notes.append("no idle hour in the traffic: scale-to-zero never scales to zero, so it saves nothing")
    elif scale_to_zero_cold_start_s > 0:
        notes.append(
            f"scale-to-zero: the first requests after an idle period wait about {_num(scale_to_zero_cold_start_s)} s "
            "for a replica to start"
        )
    if target_utilization > _HIGH_UTILIZATION:
        notes.append(
            f"target utilization {target_utilization:.0%}: queueing delay grows as u/(1-u), so bursts will break "
            "the latency SLO; 0.6-0.7 is the usual range"
        )
    if hourly_usd_per_replica == 0:
        notes.append("price is $0/h: every cost shows as 0")
    if spend_cap is not None and not spend_cap.binding:
        notes.append(
            f"the spend cap buys {plural(spend_cap.max_replicas, 'replica')}, no fewer than the peak needs: "
            "it never binds for this traffic"
        )
    return ServePlan(
        capacity_rps_per_replica=capacity_rps_per_replica,
        target_utilization=target_utilization,
        hourly_usd_per_replica=hourly_usd_per_replica,
        min_replicas=min_replicas,
        cold_start_s=scale_to_zero_cold_start_s,
        latency_s=latency_s,
        traffic=traffic,
        replicas_at_peak=at_peak,
        replicas_at_mean=at_mean,
        always_on=always_on,
        autoscaled=autoscaled,
        scale_to_zero=scale_to_zero,
        schedule=schedule,
        notes=tuple(notes),
        spend_cap=spend_cap,
        capacity_source=capacity_source,
        price_source=price_source,
    )


def _on_off(
    traffic: TrafficProfile, per_replica: float, autoscaled: ModeCost, price: _Price, cap: int | None = None
) -> ModeCost:
    """Scale-to-zero without an hourly profile: never more than autoscaled, and zero only in idle gaps.

    A replica can only go to zero while no request arrives, so fractional "pay per use" replicas
    (mean / capacity) are not on offer: constant traffic (mean = peak) keeps the replicas it needs up
    all month, as autoscaled does. A mean below the peak is read as on/off traffic, the most scaling
    to zero could save: the peak's replicas for mean/peak of the hours and none in the rest, when
    that is below the autoscaled average.
    """
    busy = replicas_needed(traffic.peak_rps, per_replica)
    if cap is not None:
        busy = min(busy, cap)
    duty = traffic.mean_rps / traffic.peak_rps
    if duty >= 1.0 or busy * duty >= autoscaled.average_replicas:
        return price.mode(
            "scale-to-zero",
            autoscaled.average_replicas,
            "as autoscaled: no idle gap is known, and a replica only goes to zero in one",
        )
    return price.mode(
        "scale-to-zero",
        busy * duty,
        f"on/off traffic assumed: {plural(busy, 'replica')} (the peak's) for {duty:.0%} of the hours (mean/peak), "
        "none in the rest; give --traffic FILE.csv for the real schedule",
    )


def _hourly(
    traffic: TrafficProfile,
    per_replica: float,
    capacity: float,
    min_replicas: int,
    cold_start_s: float,
    price: _Price,
    cap: int | None = None,
) -> tuple[tuple[HourPlan, ...], ModeCost, ModeCost]:
    """Whole replicas hour by hour; the profile repeats to fill the 730-hour month.

    A cold start happens at every hour with traffic that follows an idle hour (cyclically: the profile's
    last hour precedes its first). Each one bills ``cold_start_s`` of start-up for every replica it starts.
    """
    hourly = np.asarray(traffic.hourly_rps, dtype=np.float64)
    hours = len(hourly)
    need = np.maximum(np.ceil(np.round(hourly / per_replica, 9)), 1.0)  # whole replicas for the hour's load
    if cap is not None:  # a spend cap: never more replicas than it buys (plan.spendcap)
        need = np.minimum(need, cap)
    autoscaled = np.where(hourly > 0, np.maximum(need, min_replicas), min_replicas).astype(np.int64)
    to_zero = np.where(hourly > 0, autoscaled, 0).astype(np.int64)
    starts = (hourly > 0) & (np.roll(hourly, 1) == 0)
    repeats = HOURS_PER_MONTH / hours
    cold_starts = float(starts.sum()) * repeats
    start_up_replica_h = float(to_zero[starts].sum()) * cold_start_s / 3600.0 * repeats
    utilization = np.divide(hourly, autoscaled * capacity, out=np.zeros(hours), where=autoscaled > 0)
    schedule = tuple(
        HourPlan(traffic.first_hour + i, float(hourly[i]), int(autoscaled[i]), int(to_zero[i]), float(utilization[i]))
        for i in range(hours)
    )
    autoscaled_cost = price.mode(
        "autoscaled",
        float(autoscaled.mean()),
        f"whole replicas per hour of the {hours}-hour profile, at least {min_replicas}",
    )
    idle_hours = int((hourly == 0).sum())
    to_zero_cost = price.mode(
        "scale-to-zero",
        float(to_zero.mean()),
        f"as autoscaled, zero replicas in the {plural(idle_hours, 'idle hour')} of the profile, plus "
        f"{_num(cold_start_s)} s of billed start-up per replica per cold start",
        cold_starts,
        start_up_replica_h,
    )
    return schedule, autoscaled_cost, to_zero_cost


def _validate(
    capacity: float, traffic: TrafficProfile, hourly_usd: float, utilization: float, min_replicas: int
) -> None:
    if not (capacity > 0 and math.isfinite(capacity)):
        raise InputError(f"capacity per replica must be positive, got {capacity} requests/s", "e.g. --capacity-rps 50")
    if not 0 < utilization <= 1:
        raise InputError(f"target utilization must be in (0, 1], got {utilization}", "e.g. --target-utilization 0.65")
    if min_replicas < 0:
        raise InputError(f"min replicas must be >= 0, got {min_replicas}", "e.g. --min-replicas 1")
    if not (hourly_usd >= 0 and math.isfinite(hourly_usd)):
        raise InputError(f"hourly price must be >= 0, got {hourly_usd}", "e.g. --hourly-usd 1.2")
    if not (traffic.peak_rps > 0 and math.isfinite(traffic.peak_rps)):
        raise InputError(f"peak traffic must be positive, got {traffic.peak_rps} requests/s", "e.g. --peak-rps 200")
    if traffic.peak_rps > RATE_RPS.high:
        raise InputError(
            f"peak traffic {_rate(traffic.peak_rps)} requests/s is above {_rate(RATE_RPS.high)} ({RATE_RPS.why})",
            f"e.g. --peak-rps {RATE_RPS.example}",
        )
    at_peak = traffic.peak_rps / (capacity * utilization)
    if at_peak > _MAX_REPLICAS:  # replica counts are int64 in the hourly schedule: refuse, never wrap around
        raise InputError(
            f"{_rate(traffic.peak_rps)} requests/s at {_rate(capacity)} requests/s per replica needs "
            f"{_rate(at_peak)} replicas, more than {_rate(_MAX_REPLICAS)}",
            "check --capacity-rps: it is the requests/s one replica sustains, e.g. --capacity-rps 50",
        )
    if not 0 < traffic.mean_rps <= traffic.peak_rps * (1 + 1e-9):
        raise InputError(
            f"mean traffic must be in (0, peak = {traffic.peak_rps}], got {traffic.mean_rps} requests/s",
            "e.g. --peak-rps 200 --mean-rps 60",
        )
    if traffic.hourly_rps is not None:
        hourly = traffic.hourly_rps
        if not hourly:
            raise InputError("the traffic profile has no hours", "give at least one hour,rps row")
        if any(not (v >= 0 and math.isfinite(v)) for v in hourly):
            raise InputError("hourly traffic must be finite and >= 0", "fix the rps column")
        mean = sum(hourly) / len(hourly)
        if not (math.isclose(max(hourly), traffic.peak_rps) and math.isclose(mean, traffic.mean_rps)):
            raise InputError(
                "peak and mean disagree with the hourly profile",
                "build the profile with TrafficProfile.from_hourly",
            )


def parse_traffic_csv(text: str, source: str = "traffic CSV") -> TrafficProfile:
    """A CSV with the header ``hour,rps`` and one row per consecutive hour (24 for a day, 168 for a week, ...).

    Errors name ``source:line``. Hours must be whole, non-negative and consecutive, so a missing or
    repeated hour is caught instead of silently stretching the profile.
    """
    reader = csv.reader(io.StringIO(text.lstrip("\ufeff")))
    header: list[str] | None = None
    hours: list[int] = []
    rates: list[float] = []
    for row in reader:
        line = reader.line_num
        if not row or all(not cell.strip() for cell in row):
            continue
        if header is None:
            header = [cell.strip().lower() for cell in row]
            if header != ["hour", "rps"]:
                raise InputError(
                    f"{source}:{line}: the header must be 'hour,rps', got {','.join(row)!r}",
                    "start the file with the line: hour,rps",
                )
            continue
        if len(row) != 2:
            raise InputError(f"{source}:{line}: expected 2 columns (hour,rps), got {len(row)}", "write e.g. 13,42.5")
        hour = _number(row[0], source, line, "hour")
        rps = _number(row[1], source, line, "rps")
        if hour != int(hour):
            raise InputError(f"{source}:{line}: hour must be a whole number, got {row[0].strip()!r}", "e.g. 0 ... 23")
        if hours and int(hour) != hours[-1] + 1:
            raise InputError(
                f"{source}:{line}: hour {int(hour)} follows hour {hours[-1]}; hours must be consecutive",
                "list every hour once, in order (an idle hour is a row with rps 0)",
            )
        _check_rate(rps, row, source, line)
        hours.append(int(hour))
        rates.append(rps)
    if header is None:
        raise InputError(f"{source}: the file is empty", "write a header 'hour,rps' and one row per hour")
    if not rates:
        raise InputError(f"{source}: no hours after the header", "add one row per hour, e.g. 0,12.5")
    if max(rates) == 0:
        raise InputError(f"{source}: every hour has 0 requests/s", "nothing to serve: check the rps column")
    return TrafficProfile.from_hourly(rates, first_hour=hours[0])


def _check_rate(rps: float, row: list[str], source: str, line: int) -> None:
    """An hour's rps within the range ``--peak-rps`` takes: a file is no way around the flag's limit, and a
    rate like 1e30 would only come back as a nonsense plan (replicas past any integer type)."""
    if rps > RATE_RPS.high:
        hour = row[0].strip()
        raise InputError(
            f"{source}:{line}: hour {hour} has rps {row[1].strip()}, above the {_rate(RATE_RPS.high)} requests/s "
            f"that --peak-rps takes ({RATE_RPS.why})",
            f"write the requests per second of that hour (0 for an idle one), e.g. {hour},{RATE_RPS.example}",
        )


def _number(cell: str, source: str, line: int, column: str) -> float:
    try:
        value = float(cell.strip())
    except ValueError:
        raise InputError(
            f"{source}:{line}: {column} must be a number, got {cell.strip()!r}", "write plain numbers, e.g. 13,42.5"
        ) from None
    if not (math.isfinite(value) and value >= 0):
        raise InputError(
            f"{source}:{line}: {column} must be a finite number >= 0, got {cell.strip()!r}",
            "write a plain number >= 0 (an idle hour is rps 0)",
        )
    return value


def capacity_from_loadtest(result: LoadtestRun | MaxRateSearch, source: str = "loadtest result") -> LoadtestCapacity:
    """The per-replica capacity in a ``computewise loadtest --json`` result (``specs.loadtest.read_loadtest``).

    - ``loadtest --find-max --slo-p99-ms X --json``: ``max_rate_rps``, the highest offered rate that
      met the SLO, is the capacity and the median latency of the probe at that rate the latency. A
      null rate means no rate met the SLO;
    - ``loadtest --json`` (one rate): ``throughput_rps``, the answers per second, is the capacity and
      ``p50_ms`` the latency; ``error_rate`` and ``rejection_rate`` above 1 % are flagged, as they mean
      the replica was overloaded.
    """
    if isinstance(result, MaxRateSearch):
        best = _measured_rate(
            result.max_rate_rps,
            "max_rate_rps",
            source,
            "no rate met the SLO: rerun --find-max from a lower --rate or with a looser SLO",
        )
        probe = result.best
        latency_s = None if probe is None or probe.p50_ms is None else probe.p50_ms / 1000.0
        within = f"within p99 <= {_num(result.slo_p99_ms)} ms"
        if result.spread.high_rps is None:  # every rate probed met the SLO: the search stopped at --max-rate
            return LoadtestCapacity(
                best,
                latency_s,
                f"{source}: at least {_num(best)} requests/s {within} (no rate probed missed it)",
                (
                    f"the loadtest never found the rate that misses the SLO, so a replica sustains at least "
                    f"{_num(best)} requests/s and this plan's replica count is an upper bound; rerun "
                    "`computewise loadtest URL --find-max` with a higher --max-rate to measure the capacity",
                ),
            )
        return LoadtestCapacity(best, latency_s, f"{source}: highest sustained rate {_num(best)} requests/s {within}")
    run = result.result
    throughput = _measured_rate(
        run.throughput_rps, "throughput_rps", source, "the run answered nothing: check the server"
    )
    notes = [
        "capacity from a single-rate loadtest: it measured the rate offered, not the most the replica "
        "sustains within an SLO; `computewise loadtest URL --find-max --slo-p99-ms X --json` measures that"
    ]
    failed = run.error_rate + run.rejection_rate
    if failed > 0.01:
        notes.append(
            f"{failed:.1%} of the loadtest's requests failed or were rejected: the replica was overloaded, "
            "so its throughput is a ceiling, above what it sustains within a latency SLO"
        )
    return LoadtestCapacity(
        throughput,
        None if run.p50_ms is None else run.p50_ms / 1000.0,
        f"{source}: measured throughput {_num(throughput)} requests/s",
        tuple(notes),
    )


def _measured_rate(value: float | None, key: str, source: str, hint: str) -> float:
    """A loadtest's requests/s, held to the range --capacity-rps has (``RATE_RPS``): the file is input too."""
    if value is None or not (value > 0 and math.isfinite(value)):
        raise InputError(f"{source}: {key} must be a positive number, got {value!r}", hint)
    if value > RATE_RPS.high:
        raise InputError(
            f"{source}: {key} is {value:g} requests/s, above the {RATE_RPS.high:g} a replica can answer "
            f"({RATE_RPS.why})",
            "give the JSON that `computewise loadtest URL --json` wrote for one replica, or --capacity-rps",
        )
    return value


def _check_k8s_name(name: str, flag: str) -> None:
    """Kubernetes object names are DNS-1123 subdomains: lower-case alphanumerics, '-' and '.', at most 253."""
    if not _K8S_NAME.fullmatch(name):
        raise InputError(
            f"{flag} {name!r} is not a valid Kubernetes name",
            "use lower-case letters, digits and '-', starting and ending with a letter or digit, e.g. minilm",
        )


def _rate(value: float) -> str:
    """A number as the limits write it, 1e7 rather than 1e+07: how the user typed it in a flag or a file."""
    return f"{value:.3g}".replace("e+0", "e").replace("e+", "e").replace("e-0", "e-")


def _num(value: float) -> str:
    """A number as people write it: 32.5, 7, 0.65 (no trailing zeros, no exponent for ordinary sizes)."""
    return f"{value:.6g}"
