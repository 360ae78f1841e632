"""A spend cap on a serving deployment: replicas held under ``--max-usd-per-hour``, and what that costs in a surge.

The cap buys ``floor(cap / price per replica)`` replicas (the price is ``estimate.quote``'s, the one quote).
Whenever the traffic wants more, the capped replicas take what they sustain within the latency SLO and
refuse the rest with 429 (the server's admission control: a full queue or a predicted SLO miss), so
in a capped hour::

    served_rps    = min(demand, replicas x capacity)
    refused_share = 1 - served_rps / demand

Latency of the requests served comes from the queueing model ``plan.serve`` plans with, M/M/1
(Kleinrock 1975, *Queueing Systems* vol. 1, ch. 3): a replica's response time is exponential with
rate ``mu - lambda`` (service rate minus arrival rate), so its median is ``ln 2 / (mu - lambda)`` and its
p99 ``ln 100 / (mu - lambda)``. ``mu`` is calibrated on the one point measured: the median latency
``W50`` at the replica's capacity ``C`` gives ``mu = C + ln 2 / W50``. Planned at ``u x C`` and pushed to
``C`` by a capped surge, the same replica's latency is read off that one curve; without a measured
latency only the utilization is given.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from computewise.errors import InputError
from computewise.specs.codec import Jsonable, json_field, json_property
from computewise.units import format_usd

__all__ = ["CapAlert", "CappedHour", "Demand", "QueueLatency", "SpendCap", "cap_alert", "cap_spend", "capped_replicas"]

_LN2 = math.log(2.0)
_LN100 = math.log(100.0)


@dataclass(frozen=True)
class Demand:
    """One hour of traffic and the replicas the plan wants for it (at the target utilization)."""

    hour: int | None  # None: the peak of a profile without hours
    rps: float
    wanted_replicas: int


@dataclass(frozen=True)
class QueueLatency(Jsonable):
    """Median and p99 response time of one replica at one utilization, by M/M/1 (module docstring)."""

    utilization: float  # of the replica's capacity C
    p50_s: float
    p99_s: float


@dataclass(frozen=True)
class CappedHour(Jsonable):
    """An hour in which the traffic wants more replicas than the cap buys."""

    hour: int | None
    demand_rps: float
    wanted_replicas: int
    replicas: int
    served_rps: float
    refused_share: float  # of the hour's requests, answered 429
    utilization: float  # served load per replica / its capacity
    latency: QueueLatency | None  # None without a measured latency


@dataclass(frozen=True)
class SpendCap(Jsonable):
    """What ``--max-usd-per-hour`` allows and what it costs in the hours it binds."""

    max_usd_per_hour: float
    hourly_usd_per_replica: float = field(metadata=json_field(name="usd_per_hour_per_replica"))
    max_replicas: int
    capped_hours: tuple[CappedHour, ...]
    refused_requests_per_month: float | None  # None without an hourly profile (how long the peak lasts is unknown)
    refused_share_of_month: float | None
    planned_latency: QueueLatency | None  # at the target utilization, uncapped
    service_rate_per_s: float | None  # mu of the M/M/1 model, per replica

    @json_property(after="max_replicas")
    def max_spend_usd_per_hour(self) -> float:
        """What the capped replicas cost per hour: at most the cap."""
        return self.max_replicas * self.hourly_usd_per_replica

    @json_property(after="max_spend_usd_per_hour")
    def binding(self) -> bool:
        return bool(self.capped_hours)

    @property
    def worst(self) -> CappedHour | None:
        """The capped hour that refuses the largest share of its requests."""
        return max(self.capped_hours, key=lambda h: (h.refused_share, h.demand_rps), default=None)

    @json_property()
    def latency_model(self) -> str:
        """How ``planned_latency`` and each capped hour's latency were computed."""
        return (
            "M/M/1 (Kleinrock 1975): response time exponential with rate mu - lambda; "
            "mu = capacity + ln 2 / median latency at capacity"
        )


def capped_replicas(max_usd_per_hour: float, hourly_usd_per_replica: float, min_replicas: int) -> int:
    """Whole replicas the cap pays for; a cap below one replica (or below ``min_replicas``) is refused."""
    if not (max_usd_per_hour > 0 and math.isfinite(max_usd_per_hour)):
        raise InputError(f"--max-usd-per-hour must be positive, got {max_usd_per_hour:g}", "e.g. --max-usd-per-hour 5")
    if hourly_usd_per_replica <= 0:
        raise InputError(
            "a replica priced at $0/h never reaches a spend cap",
            "drop --max-usd-per-hour, or price the replica (--hourly-usd, --gpu or --instance)",
        )
    replicas = math.floor(round(max_usd_per_hour / hourly_usd_per_replica, 9))
    if replicas < 1:
        raise InputError(
            f"--max-usd-per-hour {format_usd(max_usd_per_hour)} is below the price of one replica "
            f"({format_usd(hourly_usd_per_replica)}/h): no replica could run",
            f"raise it to at least {format_usd(hourly_usd_per_replica)}, or price a cheaper replica "
            "(another --gpu, --pricing spot)",
        )
    if replicas < min_replicas:
        raise InputError(
            f"--min-replicas {min_replicas} costs {format_usd(min_replicas * hourly_usd_per_replica)}/h, above "
            f"--max-usd-per-hour {format_usd(max_usd_per_hour)}",
            f"lower --min-replicas to {replicas} or raise the cap to "
            f"{format_usd(min_replicas * hourly_usd_per_replica)}",
        )
    return replicas


def cap_spend(
    max_usd_per_hour: float,
    hourly_usd_per_replica: float,
    *,
    capacity_rps: float,
    target_utilization: float,
    demand: Sequence[Demand],
    hours_per_month: float,
    hourly_profile: bool,
    latency_s: float | None,
    min_replicas: int,
) -> SpendCap:
    """The cap applied to every hour of ``demand`` (the profile's hours, or its peak alone).

    ``hourly_profile`` says whether ``demand`` is a repeating profile whose hours fill the month
    (``hours_per_month / len(demand)`` repeats), so refusals per month can be counted.
    """
    replicas = capped_replicas(max_usd_per_hour, hourly_usd_per_replica, min_replicas)
    mu = None if latency_s is None else capacity_rps + _LN2 / latency_s
    capped: list[CappedHour] = []
    refused_rps_hours = 0.0
    for hour in demand:
        if hour.wanted_replicas <= replicas:
            continue
        served = min(hour.rps, replicas * capacity_rps)
        per_replica = served / replicas
        capped.append(
            CappedHour(
                hour=hour.hour,
                demand_rps=hour.rps,
                wanted_replicas=hour.wanted_replicas,
                replicas=replicas,
                served_rps=served,
                refused_share=1.0 - served / hour.rps,
                utilization=per_replica / capacity_rps,
                latency=None if mu is None else _latency(mu, per_replica, capacity_rps),
            )
        )
        refused_rps_hours += hour.rps - served
    refused_month: float | None = None
    refused_share: float | None = None
    if hourly_profile and demand:
        repeats = hours_per_month / len(demand)
        refused_month = refused_rps_hours * 3600.0 * repeats
        offered = sum(h.rps for h in demand) * 3600.0 * repeats
        refused_share = refused_month / offered if offered > 0 else 0.0
    return SpendCap(
        max_usd_per_hour=max_usd_per_hour,
        hourly_usd_per_replica=hourly_usd_per_replica,
        max_replicas=replicas,
        capped_hours=tuple(capped),
        refused_requests_per_month=refused_month,
        refused_share_of_month=refused_share,
        planned_latency=None if mu is None else _latency(mu, target_utilization * capacity_rps, capacity_rps),
        service_rate_per_s=mu,
    )


def _latency(mu: float, rate_per_replica: float, capacity_rps: float) -> QueueLatency:
    """M/M/1 response time at ``rate_per_replica`` (always below mu: admission keeps it at most C < mu)."""
    gap = mu - rate_per_replica
    return QueueLatency(rate_per_replica / capacity_rps, _LN2 / gap, _LN100 / gap)


_LONGEST_MONTH_S = 31 * 86400.0


@dataclass(frozen=True)
class CapAlert(Jsonable):
    """A budget threshold that warns ``lead_s`` ahead of a spend-capped deployment using up its budget.

    Under a cap of X $/h spend cannot grow faster than X, so once a month's spend reaches
    ``P = 100 x (1 - X x lead / monthly)`` percent, what is left lasts at least ``lead`` even if the
    deployment runs at the cap from then on: the cap turns the alert's lead time into a guarantee,
    where the burn-rate forecast only extrapolates the past week.
    """

    monthly_usd: float
    max_usd_per_hour: float
    lead_s: float
    threshold_pct: float | None  # None: the budget lasts less than lead_s at the cap, so no threshold warns in time
    hours_at_cap: float  # how long the whole budget lasts at the cap
    never_runs_out: bool  # the cap held for the longest month (31 days) stays within the budget


def cap_alert(monthly_usd: float, max_usd_per_hour: float, lead_s: float) -> CapAlert:
    """The threshold of :class:`CapAlert`, rounded down to 0.1 % so the lead is never shorter than asked."""
    if not (monthly_usd > 0 and max_usd_per_hour > 0 and lead_s > 0):
        raise InputError(
            "a budget alert for a spend cap needs a positive budget, cap and lead time",
            "e.g. --monthly-usd 2000 --max-usd-per-hour 6 --alert-lead 1d",
        )
    hours_at_cap = monthly_usd / max_usd_per_hour
    pct = math.floor(1000.0 * (1.0 - max_usd_per_hour * lead_s / 3600.0 / monthly_usd)) / 10.0
    return CapAlert(
        monthly_usd=monthly_usd,
        max_usd_per_hour=max_usd_per_hour,
        lead_s=lead_s,
        threshold_pct=pct if pct > 0 else None,
        hours_at_cap=hours_at_cap,
        never_runs_out=max_usd_per_hour * _LONGEST_MONTH_S / 3600.0 <= monthly_usd,
    )
