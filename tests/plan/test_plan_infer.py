"""Serving plans: replicas that carry the traffic with headroom; a latency-vs-cost frontier checked by brute force."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
from pareto_check import assert_is_the_pareto_front

from computewise.catalog import Catalog
from computewise.errors import InfeasiblePlanError
from computewise.estimate import Assumptions
from computewise.models import from_param_count, preset
from computewise.plan import InferConstraints, InferOption, InferPlan, plan_infer

TRAFFIC = InferConstraints(requests_per_s=50, input_len=512, output_len=128, latency_s=20.0)


def _plan(
    catalog: Catalog,
    assumptions: Assumptions,
    requests_per_s: float = TRAFFIC.requests_per_s,
    target_utilization: float | None = None,
) -> InferPlan:
    """Llama 3 8B for ``TRAFFIC`` at another peak; the catalog's target utilization unless one is given."""
    constraints = replace(TRAFFIC, requests_per_s=requests_per_s)
    if target_utilization is not None:
        constraints = replace(constraints, target_utilization=target_utilization)
    return plan_infer(preset("llama-3-8b"), catalog, assumptions, constraints)


def _by_offering(plan: InferPlan) -> dict[tuple[str, str, str], InferOption]:
    return {(o.cloud, o.instance_type, o.region): o for o in plan.candidates}


def test_frontier_is_the_brute_force_non_dominated_set(catalog: Catalog, assumptions: Assumptions) -> None:
    plan = _plan(catalog, assumptions)
    assert len(plan.pareto) >= 2
    assert_is_the_pareto_front(plan.candidates, plan.pareto, lambda o: o.latency_s, lambda o: o.usd_per_1000_requests)


@pytest.mark.parametrize("target", [0.5, 0.8])
def test_replicas_are_the_fewest_that_carry_the_peak_at_the_target_utilization(
    catalog: Catalog, assumptions: Assumptions, target: float
) -> None:
    """At the peak each replica runs at most ``target`` of what it sustains, and one replica fewer would not."""
    plan = _plan(catalog, assumptions, target_utilization=target)
    assert {o.replicas for o in plan.candidates} - {1}, "every option has one replica: nothing is checked"
    for option in plan.candidates:
        capacity_rps = option.requests_per_s_per_replica
        assert TRAFFIC.requests_per_s / option.replicas <= capacity_rps * target * (1 + 1e-9), option
        if option.replicas > 1:
            assert TRAFFIC.requests_per_s / (option.replicas - 1) > capacity_rps * target, option


def test_more_traffic_or_less_headroom_never_needs_fewer_replicas(catalog: Catalog, assumptions: Assumptions) -> None:
    """Per offering: twice the traffic takes at least as many replicas and at most twice as many; a lower
    target utilization (more headroom) never takes fewer."""
    base = _by_offering(_plan(catalog, assumptions))
    doubled = _by_offering(_plan(catalog, assumptions, requests_per_s=2 * TRAFFIC.requests_per_s))
    assert set(doubled) == set(base)
    assert any(doubled[key].replicas > base[key].replicas for key in base)
    for key, option in base.items():
        assert option.replicas <= doubled[key].replicas <= 2 * option.replicas, key
    tight, loose = (_by_offering(_plan(catalog, assumptions, target_utilization=u)) for u in (0.4, 0.9))
    assert any(tight[key].replicas > loose[key].replicas for key in tight)
    for key, option in tight.items():
        assert option.replicas >= loose[key].replicas, key


def test_a_faster_replica_never_needs_more_replicas(catalog: Catalog, assumptions: Assumptions) -> None:
    """For the same traffic, an option whose replica sustains more requests/s needs no more replicas."""
    candidates = _plan(catalog, assumptions).candidates
    for a, b in itertools.permutations(candidates, 2):
        if a.requests_per_s_per_replica >= b.requests_per_s_per_replica:
            assert a.replicas <= b.replicas, (a, b)


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


def test_a_precision_no_accelerator_runs_is_named_as_the_reason(catalog: Catalog, assumptions: Assumptions) -> None:
    """An A100 has no fp8: the plan says so rather than "no accelerator meets the memory need: " and nothing."""
    constraints = replace(TRAFFIC, accelerators=("a100-80gb",), precisions=("fp8",))
    with pytest.raises(
        InfeasiblePlanError, match="no accelerator runs the precision asked: A100 SXM4 80GB runs none"
    ) as error:
        plan_infer(preset("llama-2-7b"), catalog, assumptions, constraints)
    assert error.value.hint == "choose --gpu models that run fp8, or another --precision"


def test_a_model_that_fits_nowhere_names_the_largest_accelerators_first(
    catalog: Catalog, assumptions: Assumptions
) -> None:
    with pytest.raises(InfeasiblePlanError, match="no accelerator meets the memory need") as error:
        plan_infer(from_param_count(1e12), catalog, assumptions, TRAFFIC)
    first = error.value.message.split(": ", 1)[1].split("; ")[0]
    largest = max(
        (a for a in catalog.accelerators if a.kind == "gpu" and catalog.offerings_for(a.slug)),
        key=lambda a: a.memory_bytes,
    )
    assert first.endswith(f"on {largest.name}"), error.value.message
