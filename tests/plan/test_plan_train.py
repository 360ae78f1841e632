"""The planner against brute force, its constraints, and its explanations when nothing fits."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from computewise.catalog import Catalog
from computewise.errors import InfeasiblePlanError, InputError
from computewise.estimate import Assumptions, estimate_train
from computewise.models import preset
from computewise.plan import TrainConstraints, plan_train
from computewise.specs import Parallelism, TrainJob

SMALL = TrainConstraints(tokens=2e9, seq_len=1024, global_batch=64, accelerators=("a10g", "l4"), max_gpus=8)


def test_recommendation_is_the_brute_force_minimum_of_its_instance(catalog: Catalog, assumptions: Assumptions) -> None:
    """Every layout of the recommended instance, priced one by one through `estimate`, costs no less."""
    model = preset("gpt2-medium")
    plan = plan_train(model, catalog, assumptions, SMALL)
    best = plan.recommended
    accelerator = catalog.accelerator(best.accelerator)
    costs = []
    for tp, pp, zero, precision, micro, recompute in itertools.product(
        (1, 2, 4, 8),
        (1, 2, 4, 8),
        (0, 1, 2, 3),
        ("bf16", "fp16", "fp32"),
        (1, 2, 4, 8, 16, 32),
        ("none", "selective", "full"),
    ):
        if best.gpus % (tp * pp):
            continue
        dp = best.gpus // (tp * pp)
        if dp == 1 and zero:
            continue
        job = TrainJob(SMALL.tokens, SMALL.seq_len, micro, SMALL.global_batch, precision, "adamw", recompute)
        layout = Parallelism(dp=dp, tp=tp, pp=pp, zero=zero, sequence_parallel=tp > 1)
        try:
            estimate = estimate_train(
                model,
                accelerator,
                best.gpus,
                job,
                layout,
                catalog,
                assumptions,
                pricing=best.pricing,
                cloud=best.cloud,
                region=best.region,
                instance_type=best.instance_type,
            )
        except InputError:  # an impossible layout or a precision the chip lacks: not a candidate
            continue
        if estimate.fits:
            costs.append(estimate.to_dict()["cost"]["usd"])
    assert costs
    assert min(costs) == pytest.approx(best.cost_usd, rel=1e-9)
    assert plan.considered >= len(costs)


def test_pareto_frontier_is_non_dominated_and_contains_the_recommendation(
    catalog: Catalog, assumptions: Assumptions
) -> None:
    plan = plan_train(preset("gpt2-medium"), catalog, assumptions, SMALL)
    front = plan.pareto
    assert plan.recommended in front
    for a, b in itertools.pairwise(front):
        assert a.time_s <= b.time_s and a.cost_usd > b.cost_usd
    for option in plan.candidates:
        assert not any(f.time_s < option.time_s and f.cost_usd < option.cost_usd for f in front) or option not in front


def test_deadline_and_budget_filter_and_rank(catalog: Catalog, assumptions: Assumptions) -> None:
    model = preset("llama-3-8b")
    base = TrainConstraints(tokens=2e10, seq_len=4096, global_batch=256, max_gpus=128)
    unconstrained = plan_train(model, catalog, assumptions, base)
    deadline = unconstrained.recommended.time_s / 3
    plan = plan_train(model, catalog, assumptions, replace(base, deadline_s=deadline))
    assert all(o.time_s <= deadline for o in plan.candidates)
    assert plan.recommended.cost_usd >= unconstrained.recommended.cost_usd
    assert any(r.stage == "deadline" for r in plan.rejected)
    assert plan.considered >= 100_000


def test_memory_rejections_name_the_need(catalog: Catalog, assumptions: Assumptions) -> None:
    plan = plan_train(
        preset("llama-2-70b"),
        catalog,
        assumptions,
        TrainConstraints(tokens=1e10, seq_len=4096, global_batch=512, max_gpus=64),
    )
    t4 = [r for r in plan.rejected if r.accelerator == "t4" and r.stage == "memory"]
    assert t4 and "does not fit" in t4[0].reason and "> 14.9 GiB on Tesla T4" in t4[0].reason


def test_impossible_deadline_says_which_constraint_and_how_to_relax(catalog: Catalog, assumptions: Assumptions) -> None:
    constraints = TrainConstraints(tokens=2e12, seq_len=4096, global_batch=1024, max_gpus=64, deadline_s=3600)
    with pytest.raises(InfeasiblePlanError, match="deadline removed the last candidates") as error:
        plan_train(preset("llama-3-8b"), catalog, assumptions, constraints)
    assert error.value.hint and "--deadline" in error.value.hint


def test_impossible_budget_names_the_cheapest(catalog: Catalog, assumptions: Assumptions) -> None:
    constraints = TrainConstraints(tokens=2e11, seq_len=4096, global_batch=1024, max_gpus=64, budget_usd=10)
    with pytest.raises(InfeasiblePlanError, match="budget removed the last candidates"):
        plan_train(preset("llama-3-8b"), catalog, assumptions, constraints)


def test_nothing_fits_is_an_error_with_a_fix(catalog: Catalog, assumptions: Assumptions) -> None:
    constraints = TrainConstraints(tokens=1e10, seq_len=4096, global_batch=8, accelerators=("t4",), max_gpus=8)
    with pytest.raises(InfeasiblePlanError, match="does not fit") as error:
        plan_train(preset("llama-2-70b"), catalog, assumptions, constraints)
    assert error.value.hint and "--max-gpus" in error.value.hint


def test_owned_servers_are_planned_at_their_amortised_hourly_cost(catalog: Catalog, assumptions: Assumptions) -> None:
    constraints = TrainConstraints(tokens=2e10, seq_len=4096, global_batch=256, pricings=("on-prem",), max_gpus=64)
    plan = plan_train(preset("llama-3-8b"), catalog, assumptions, constraints)
    best = plan.recommended
    assert best.pricing == "on-prem" and best.cloud == "on-prem"
    assert best.cost_usd == pytest.approx(best.usd_per_h * best.time_s / 3600)
    server = next(s for s in catalog.onprem if s.accelerator == best.accelerator)
    hourly = server.usd_per_h(
        assumptions.onprem_power_usd_per_kwh, assumptions.onprem_pue, assumptions.onprem_utilization
    )
    assert best.usd_per_h == pytest.approx(best.instances * hourly)
