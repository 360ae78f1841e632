"""``plan.pipeline``: stages sized by hand, the end-to-end p99 against independent computations, the YAML checks.

The combination rule (stage latencies independent, Reich 1957) is checked twice: its premise against
a simulated tandem of M/M/1 queues, and the planner's sampled p99 against a numerical convolution of
the stage distributions, a second implementation that shares no code with it.
"""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np
import pytest

from computewise.catalog import Catalog
from computewise.errors import InputError
from computewise.estimate import Assumptions
from computewise.estimate.quote import Ask, PriceRequest, quote
from computewise.models import resolve_model
from computewise.plan.pipeline import PipelinePlan, parse_pipeline, plan_pipeline, stage_latency_s

# Two measured stages: a detector answering a batch of 8 in 20 ms on a T4 (400 calls/s per replica) and
# a captioner answering a batch of 4 in 200 ms on an L4 (20 calls/s), called 3 times per request.
MEASURED: dict[str, Any] = {
    "slo_p99_ms": 2000,
    "stages": [
        {"name": "detect", "latency_ms": 20, "batch": 8, "accelerator": "t4"},
        {"name": "caption", "latency_ms": 200, "batch": 4, "accelerator": "l4", "fan_out": 3},
    ],
}


def _plan(catalog: Catalog, assumptions: Assumptions, doc: dict[str, Any], rps: float, u: float = 0.65) -> PipelinePlan:
    spec = parse_pipeline(doc, "pipeline.yaml", catalog, resolve_model)
    return plan_pipeline(spec, rps, catalog, assumptions, target_utilization=u)


def test_measured_stages_by_hand(catalog: Catalog, assumptions: Assumptions) -> None:
    plan = _plan(catalog, assumptions, MEASURED, 50.0)
    detect, caption = plan.stages
    # detect: 50 calls/s; 400 x 0.65 = 260 per replica: 1 replica at 50/400 = 12.5 %
    assert (detect.calls_per_s, detect.capacity_rps_per_replica, detect.replicas) == (50.0, 400.0, 1)
    assert detect.utilization == pytest.approx(0.125)
    # caption: 150 calls/s; 20 x 0.65 = 13 per replica: ceil(150 / 13) = 12 replicas at 150/12/20 = 62.5 %
    assert (caption.calls_per_s, caption.replicas) == (150.0, 12)
    assert caption.utilization == pytest.approx(0.625)
    # the bottleneck sustains the fewest pipeline requests/s: caption 12 x 20 / 3 = 80 < detect 400
    assert plan.bottleneck.name == "caption" and caption.max_pipeline_rps == pytest.approx(80.0)
    # prices are the one quote's; $/1000 = (1 x T4 + 12 x L4) $/h / (50 x 3600) x 1000
    t4 = quote(catalog, Ask(catalog.accelerator("t4"), 1), PriceRequest()).hourly_usd
    l4 = quote(catalog, Ask(catalog.accelerator("l4"), 1), PriceRequest()).hourly_usd
    assert plan.usd_per_1000_requests == pytest.approx((t4 + 12 * l4) / 180.0)
    # caption's p99: 200 ms + the longest of 3 waits; per wait quantile 0.99^(1/3), rho = 0.625, mu - lambda = 7.5/s
    q = 0.99 ** (1 / 3)
    assert caption.p99_s == pytest.approx(0.2 + math.log(0.625 / (1 - q)) / 7.5)
    # detect at 12.5 %: a wait beyond the 50th percentile never happens (P(wait > 0) = rho), so p50 is one batch
    assert detect.p50_s == pytest.approx(0.020)


def test_the_end_to_end_p99_matches_a_numerical_convolution(catalog: Catalog, assumptions: Assumptions) -> None:
    plan = _plan(catalog, assumptions, MEASURED, 50.0)
    # Each stage: S + the longest of k waits, whose CDF is F(t)^k with F(t) = 1 - rho exp(-(mu - lambda) t) (an
    # atom at 0); on a 0.5 ms grid up to 3 s the sum's distribution is the convolution of the stages' pmfs.
    step = 0.0005
    grid = np.arange(0, 3.0, step)
    total = np.array([1.0])
    for s in plan.stages:
        mu, lam = s.capacity_rps_per_replica, s.calls_per_s / s.replicas
        cdf = (1 - (lam / mu) * np.exp(-(mu - lam) * grid)) ** s.fan_out
        pmf = np.diff(np.concatenate([[0.0], cdf]))
        shift = round(s.service_s / step)
        total = np.convolve(total, np.concatenate([np.zeros(shift), pmf]))
    p99 = np.searchsorted(np.cumsum(total), 0.99) * step
    assert plan.p99_s == pytest.approx(p99, abs=0.01)
    assert plan.p99_s <= plan.p99_upper_s  # the sum of stage p99s bounds it
    assert plan.p99_s >= max(s.p99_s for s in plan.stages)


def test_tandem_mm1_sojourns_add_as_independent_variables() -> None:
    """The premise of the rule (Reich 1957): two M/M/1 queues in tandem, simulated by Lindley's recursion; the
    p99 of the total time equals that of Exp(mu1 - lambda) + Exp(mu2 - lambda) taken as independent."""
    lam, mu1, mu2 = 5.0, 8.0, 10.0
    rng = random.Random(3)
    free1 = free2 = t = 0.0
    totals = []
    for _ in range(200_000):
        t += rng.expovariate(lam)
        done1 = max(t, free1) + rng.expovariate(mu1)
        done2 = max(done1, free2) + rng.expovariate(mu2)
        free1, free2 = done1, done2
        totals.append(done2 - t)
    totals.sort()
    a, b = mu1 - lam, mu2 - lam  # hypoexponential tail: (b e^(-a t) - a e^(-b t)) / (b - a) = 0.01, by bisection
    low, high = 0.0, 10.0
    for _ in range(100):
        mid = (low + high) / 2
        tail = (b * math.exp(-a * mid) - a * math.exp(-b * mid)) / (b - a)
        low, high = (mid, high) if tail > 0.01 else (low, mid)
    assert totals[int(0.99 * len(totals))] == pytest.approx(low, rel=0.05)
    # the comonotone sum (both p99s added) overshoots it by more than the simulation's noise
    assert math.log(100) / a + math.log(100) / b > low * 1.1


def test_more_traffic_never_needs_fewer_replicas(catalog: Catalog, assumptions: Assumptions) -> None:
    previous = [0, 0]
    for rps in (1, 5, 20, 50, 120, 300):
        replicas = [s.replicas for s in _plan(catalog, assumptions, MEASURED, float(rps)).stages]
        assert all(r >= p for r, p in zip(replicas, previous, strict=True))
        previous = replicas


def test_cheaper_placements_keep_the_slo(catalog: Catalog, assumptions: Assumptions) -> None:
    doc = {
        "slo_p99_ms": 3000,
        "stages": [
            {"name": "detect", "model": "vit-b-16", "accelerator": "t4", "batch": 8},
            {"name": "caption", "model": "llama-3-8b", "accelerator": "a100-80gb", "batch": 16, "fan_out": 3,
             "input_len": 256, "output_len": 32},
        ],
    }  # fmt: skip
    plan = _plan(catalog, assumptions, doc, 20.0)
    assert plan.meets_slo and plan.alternatives
    by_stage = {s.name: s for s in plan.stages}
    for alt in plan.alternatives:
        assert alt.p99_s <= 3.0 and alt.usd_per_h < by_stage[alt.stage].usd_per_h
        assert alt.accelerator != by_stage[alt.stage].accelerator
    tight = _plan(catalog, assumptions, doc | {"slo_p99_ms": 600}, 20.0)
    # A tighter SLO only removes placements: a tight alternative the loose plan does not list is one it
    # ranked below its own three for that stage (it saves no more than the least of them).
    loose = {(a.stage, a.accelerator) for a in plan.alternatives}
    for alt in tight.alternatives:
        if (alt.stage, alt.accelerator) not in loose:
            kept = [a.saves_usd_per_1000_requests for a in plan.alternatives if a.stage == alt.stage]
            assert len(kept) == 3 and alt.saves_usd_per_1000_requests <= min(kept)
    assert all(a.p99_s <= 0.6 for a in tight.alternatives)
    assert PipelinePlan.from_dict(plan.to_dict()) == plan


def test_stage_latency_is_one_batch_at_no_load() -> None:
    assert stage_latency_s(0.05, 100.0, 1e-9, 1.0, 0.99) == pytest.approx(0.05)


def _stage(**changes: Any) -> dict[str, Any]:
    return {"stages": [{"name": "s", "latency_ms": 10, "batch": 4, "accelerator": "t4"} | changes]}


@pytest.mark.parametrize(
    ("doc", "fragment", "hint"),
    [
        (_stage(bacth=8), "stage 's': unknown key 'bacth'", "did you mean 'batch'?"),
        (_stage(model="gpt2"), "give exactly one of 'model', 'latency_ms' or 'loadtest'", ""),
        (_stage(accelerator="t5"), "stage 's': key 'accelerator': unknown accelerator 't5'; did you mean 't4'?", ""),
        (_stage(batch=0), "stage 's': key 'batch' must be between", ""),
        (_stage(fan_out="three"), "stage 's': key 'fan_out' must be a number", ""),
        (_stage(model=None, latency_ms=None), "give exactly one", ""),
        ({"stages": [{"latency_ms": 10}]}, "stage 1: key 'name'", ""),
        ({"stages": []}, "'stages' must be a non-empty list", ""),
        ({"stage": []}, "unknown key 'stage'", "did you mean 'stages'?"),
        ({"stages": [_stage()["stages"][0], _stage()["stages"][0]]}, "stage 's' is named twice", ""),
        ({**_stage(), "slo_p99_ms": -1}, "slo_p99_ms must be between", ""),
    ],
)
def test_yaml_errors_name_the_stage_and_the_key(catalog: Catalog, doc: Any, fragment: str, hint: str) -> None:
    with pytest.raises(InputError) as error:
        parse_pipeline(doc, "p.yaml", catalog, resolve_model)
    assert fragment in error.value.message and error.value.message.startswith("p.yaml")
    assert hint in (error.value.hint or "") and error.value.hint
