"""Spend caps on a serving plan: replicas held under --max-usd-per-hour, the 429s and latency of a surge.

Every expected number is worked out by hand in the comments; the M/M/1 latency is checked against a
simulated queue (Lindley's recursion), a second implementation that shares no code with the planner.
"""

from __future__ import annotations

import math
import random

import pytest
import yaml

from computewise.errors import InputError
from computewise.plan.serve import TrafficProfile, plan_serving
from computewise.plan.spendcap import capped_replicas

# One day of six hours with a surge at hour 3; capacity 50 requests/s per replica, planned at 65 %
# (32.5 requests/s), $1.20/h per replica, median latency 40 ms at capacity.
DAY = (20.0, 40.0, 60.0, 180.0, 60.0, 0.0)


def _plan(cap: float | None, latency_s: float | None = 0.040, hourly: tuple[float, ...] = DAY):  # type: ignore[no-untyped-def]
    return plan_serving(
        50.0,
        TrafficProfile.from_hourly(hourly),
        1.2,
        target_utilization=0.65,
        scale_to_zero_cold_start_s=30.0,
        latency_s=latency_s,
        max_usd_per_hour=cap,
    )


def test_a_cap_holds_replicas_and_refuses_the_surge_it_cannot_serve() -> None:
    plan = _plan(4.0)
    cap = plan.spend_cap
    assert cap is not None
    # $4/h / $1.20 = 3.33: 3 replicas, $3.60/h at most
    assert cap.max_replicas == 3 and cap.max_spend_usd_per_hour == pytest.approx(3.6)
    # wanted per hour: ceil(rps / 32.5) = 1, 2, 2, 6, 2 and 1 (min) in the idle hour: only hour 3 wants more than 3
    [surge] = cap.capped_hours
    assert (surge.hour, surge.wanted_replicas, surge.replicas) == (3, 6, 3)
    # 3 x 50 = 150 requests/s served of 180: 30/180 = 1/6 refused, replicas at 100 % of capacity
    assert surge.served_rps == pytest.approx(150.0)
    assert surge.refused_share == pytest.approx(1 / 6)
    assert surge.utilization == pytest.approx(1.0)
    # 30 requests/s for 1 h of each 6-hour day; 730 h / 6 = 121.67 days: 30 x 3600 x 121.67 = 13,140,000 refused,
    # of 360 x 3600 x 121.67 offered: 30/360 = 8.33 %
    assert cap.refused_requests_per_month == pytest.approx(13_140_000.0)
    assert cap.refused_share_of_month == pytest.approx(30 / 360)
    # the bills use the capped replicas: always-on 3 x 730 h x $1.20 = $2,628 (6 uncapped: $5,256)
    assert plan.always_on.monthly_usd == pytest.approx(2628.0)
    assert _plan(None).always_on.monthly_usd == pytest.approx(5256.0)
    # autoscaled per hour: 1, 2, 2, 3, 2, 1 = 11/6 replicas on average
    assert plan.autoscaled.average_replicas == pytest.approx(11 / 6)
    assert max(h.autoscaled_replicas for h in plan.schedule or ()) == 3


def test_latency_of_the_served_requests_follows_the_measured_point() -> None:
    cap = _plan(4.0).spend_cap
    assert cap is not None and cap.service_rate_per_s is not None
    # mu = 50 + ln 2 / 0.040 = 67.33/s; at capacity (the measured point) the median is the 40 ms given
    assert cap.service_rate_per_s == pytest.approx(50 + math.log(2) / 0.040)
    surge = cap.capped_hours[0].latency
    assert surge is not None
    assert surge.p50_s == pytest.approx(0.040)
    assert surge.p99_s == pytest.approx(0.040 * math.log(100) / math.log(2))  # 265.8 ms
    # as planned, 32.5/s per replica: 1 / (67.33 - 32.5) x ln 2 = 19.9 ms
    planned = cap.planned_latency
    assert planned is not None and planned.p50_s == pytest.approx(math.log(2) / (67.328 - 32.5), rel=1e-3)
    assert planned.p99_s < surge.p99_s


def test_the_mm1_latency_agrees_with_a_simulated_queue() -> None:
    """Lindley's recursion W(n+1) = max(0, W(n) + S(n) - A(n+1)) on exponential draws, 200k customers."""
    mu = 50 + math.log(2) / 0.040
    lam = 50.0
    rng = random.Random(7)
    wait, sojourn = 0.0, []
    for _ in range(200_000):
        service = rng.expovariate(mu)
        sojourn.append(wait + service)
        wait = max(0.0, wait + service - rng.expovariate(lam))
    sojourn.sort()
    cap = _plan(4.0).spend_cap
    assert cap is not None and cap.capped_hours[0].latency is not None
    assert sojourn[len(sojourn) // 2] == pytest.approx(cap.capped_hours[0].latency.p50_s, rel=0.1)
    assert sojourn[int(len(sojourn) * 0.99)] == pytest.approx(cap.capped_hours[0].latency.p99_s, rel=0.15)


def test_a_higher_cap_never_refuses_more_and_a_loose_one_never_binds() -> None:
    shares = []
    for cap_usd in (1.2, 2.4, 3.6, 4.8, 6.0, 7.2):
        cap = _plan(cap_usd).spend_cap
        assert cap is not None
        shares.append(cap.refused_share_of_month)
    assert shares == sorted(shares, reverse=True)
    loose = _plan(7.2)
    assert loose.spend_cap is not None and not loose.spend_cap.binding and shares[-1] == 0.0
    assert any("never binds" in note for note in loose.notes)
    assert loose.always_on.monthly_usd == _plan(None).always_on.monthly_usd


def test_without_a_measured_latency_only_the_utilization_is_given() -> None:
    cap = _plan(4.0, latency_s=None).spend_cap
    assert cap is not None and cap.planned_latency is None and cap.capped_hours[0].latency is None


def test_without_an_hourly_profile_the_peak_is_the_surge() -> None:
    plan = plan_serving(
        50.0, TrafficProfile(180.0, 60.0), 1.2, target_utilization=0.65, scale_to_zero_cold_start_s=30.0,
        max_usd_per_hour=4.0,
    )  # fmt: skip
    cap = plan.spend_cap
    assert cap is not None and cap.capped_hours[0].hour is None
    assert cap.refused_requests_per_month is None  # how long the peak lasts is unknown
    assert plan.always_on.average_replicas == 3 and plan.autoscaled.average_replicas == 2  # mean 60 wants 2


def test_the_autoscaler_configs_carry_the_cap() -> None:
    plan = _plan(4.0)
    manifest = yaml.safe_load(plan.hpa_manifest("minilm"))
    assert manifest["spec"]["maxReplicas"] == 3
    assert plan.ray_serve_config("minilm")["autoscaling_config"]["max_replicas"] == 3
    assert yaml.safe_load(_plan(None).hpa_manifest("minilm"))["spec"]["maxReplicas"] == 6


def test_a_cap_below_one_replica_or_the_minimum_is_refused_with_a_fix() -> None:
    with pytest.raises(InputError, match=r"below the price of one replica \(\$1.20/h\)") as error:
        _plan(1.0)
    assert "raise it to at least $1.20" in (error.value.hint or "")
    with pytest.raises(InputError, match="--min-replicas 4 costs"):
        capped_replicas(4.0, 1.2, 4)
    with pytest.raises(InputError, match=r"\$0/h never reaches"):
        capped_replicas(4.0, 0.0, 1)
    # float noise must not drop a replica: 3.6 / 1.2 = 2.9999999999999996
    assert capped_replicas(3.6, 1.2, 1) == 3
