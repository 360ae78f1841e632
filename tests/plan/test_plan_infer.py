"""Serving plans: replicas for the traffic, and a latency-vs-cost frontier that is really non-dominated."""

from __future__ import annotations

import itertools
import math

import pytest

from computewise.catalog import Catalog
from computewise.estimate import Assumptions
from computewise.models import preset
from computewise.plan import InferConstraints, plan_infer


def test_replicas_cover_peak_traffic_and_frontier_is_non_dominated(catalog: Catalog, assumptions: Assumptions) -> None:
    constraints = InferConstraints(requests_per_s=50, input_len=512, output_len=128, latency_s=20.0)
    plan = plan_infer(preset("llama-3-8b"), catalog, assumptions, constraints)
    best = plan.recommended
    assert best.replicas == max(1, math.ceil(50 / (best.requests_per_s_per_replica * 0.65)))
    front = plan.pareto
    assert len(front) >= 2
    for a, b in itertools.pairwise(front):
        assert a.latency_s <= b.latency_s and a.usd_per_1000_requests > b.usd_per_1000_requests
    for option in plan.candidates:
        dominated = any(
            f.latency_s <= option.latency_s and f.usd_per_1000_requests <= option.usd_per_1000_requests for f in front
        )
        assert dominated or option in front


def test_constant_traffic_cannot_scale_to_zero(catalog: Catalog, assumptions: Assumptions) -> None:
    """No --mean-rps: the traffic is constant, so no hour is idle and scale-to-zero keeps every replica
    (it used to bill mean/capacity, a fraction of a replica, as if the gaps it needs were there)."""
    constraints = InferConstraints(requests_per_s=1.0, input_len=512, output_len=128, accelerators=("h100-sxm",))
    for option in plan_infer(preset("llama-3-8b"), catalog, assumptions, constraints).candidates:
        assert option.scale_to_zero_usd_per_month == option.always_on_usd_per_month


def test_a_mean_below_the_peak_is_on_off_traffic(catalog: Catalog, assumptions: Assumptions) -> None:
    """The peak's replicas for mean/peak of the hours, none in the rest: never below that many whole replicas."""
    constraints = InferConstraints(
        requests_per_s=40.0, mean_requests_per_s=10.0, input_len=512, output_len=128, accelerators=("h100-sxm",)
    )
    best = plan_infer(preset("llama-3-8b"), catalog, assumptions, constraints).recommended
    assert best.scale_to_zero_usd_per_month == pytest.approx(best.always_on_usd_per_month * 10.0 / 40.0)
