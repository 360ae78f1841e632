"""The one rule for renting N GPUs (``estimate.pricing.rent``), and every verb that prices through it.

A share of a bigger instance costs the share of its price and says so; whole instances are whole; a
pricing the catalog does not list is an error naming the ones it does, never $0.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from computewise.catalog import Catalog
from computewise.errors import InputError
from computewise.estimate import Assumptions, estimate_infer
from computewise.estimate.pricing import cheapest_rental, instance_rental, rent
from computewise.estimate.quote import Ask, PriceRequest, quote
from computewise.models import preset
from computewise.monitor.pricing import DetectedHardware, frozen_price
from computewise.plan import InferConstraints, plan_infer
from computewise.scale.engine import Resources
from computewise.scale.supervise import job_price
from computewise.specs import InferJob, Offering, Pricing

CLI = [sys.executable, "-m", "computewise.cli.app"]
ONE_H100 = DetectedHardware(1, "NVIDIA H100 80GB HBM3", 85_520_809_984, logical_cpus=16)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120)


def _p5(catalog: Catalog, region: str = "us-east-1") -> Offering:
    return next(o for o in catalog.instance_offerings("p5.48xlarge") if o.region == region)


def _cheapest_h100_gpu_hour(catalog: Catalog) -> float:
    """The catalog's lowest on-demand price of one h100-sxm hour, read from the rows, not typed in."""
    return min(o.on_demand_usd_per_h / o.accelerator_count for o in catalog.offerings_for("h100-sxm"))


def test_one_gpu_of_an_eight_gpu_instance_pays_its_share_and_says_so(catalog: Catalog) -> None:
    p5 = _p5(catalog)
    one = rent(p5, 1, "on-demand")
    assert one.usd_per_h == pytest.approx(p5.on_demand_usd_per_h / 8)
    assert one.shared and one.instances == 1
    assert one.instance_usd_per_h == pytest.approx(p5.on_demand_usd_per_h)
    assert "1 of 8 GPUs of aws p5.48xlarge" in one.describe()
    assert f"${p5.on_demand_usd_per_h / 8:.2f}/h share" in one.describe()


def test_counts_that_fill_instances_rent_them_whole(catalog: Catalog) -> None:
    p5 = _p5(catalog)
    sixteen = rent(p5, 16, "on-demand")
    assert (sixteen.instances, sixteen.shared) == (2, False)
    assert sixteen.usd_per_h == pytest.approx(2 * p5.on_demand_usd_per_h)
    assert "2 x aws p5.48xlarge" in sixteen.describe() and "share" not in sixteen.describe()
    twelve = rent(p5, 12, "on-demand")  # one whole instance and half of another
    assert (twelve.instances, twelve.shared) == (2, True)
    assert twelve.usd_per_h == pytest.approx(1.5 * p5.on_demand_usd_per_h)
    assert "the last one shared (4 of 8 GPUs)" in twelve.describe()


@pytest.mark.parametrize("pricing", ["reserved-1y", "reserved-3y"])
def test_a_pricing_the_instance_lacks_is_an_error_naming_the_ones_it_has(catalog: Catalog, pricing: Pricing) -> None:
    with pytest.raises(InputError, match=r"no reserved-.y price for aws p5.48xlarge .*on-demand, spot") as raised:
        rent(_p5(catalog), 1, pricing)
    assert "--pricing on-demand" in (raised.value.hint or "")
    with pytest.raises(InputError, match=r"p5.48xlarge \(priced there: on-demand, spot\)"):
        instance_rental(catalog, "p5.48xlarge", pricing)


def test_quote_never_bills_a_missing_price_as_zero(catalog: Catalog) -> None:
    h100 = catalog.accelerator("h100")
    reserved = PriceRequest(pricing="reserved-3y")
    with pytest.raises(InputError, match="no reserved-3y price for h100-sxm"):
        quote(catalog, Ask(h100, 1, estimate=True), reserved)
    with pytest.raises(InputError, match=r"no reserved-3y price for p5\.48xlarge"):
        quote(catalog, Ask(h100, 8, estimate=True), PriceRequest(instance_type="p5.48xlarge", pricing="reserved-3y"))


def test_estimate_infer_and_plan_infer_quote_the_same_hourly_price_for_one_h100(
    catalog: Catalog, assumptions: Assumptions
) -> None:
    model = preset("llama-3-8b")
    estimate = estimate_infer(
        model, catalog.accelerator("h100"), InferJob(batch=1, context_len=1024, output_len=256), catalog, assumptions
    )
    plan = plan_infer(
        model,
        catalog,
        assumptions,
        InferConstraints(requests_per_s=1.0, input_len=512, output_len=128, accelerators=("h100-sxm",)),
    )
    per_gpu = _cheapest_h100_gpu_hour(catalog)
    assert estimate.quote.hourly_usd == pytest.approx(per_gpu)  # was the whole 8-GPU instance, 8x this
    assert plan.recommended.gpus_per_replica == 1
    assert plan.recommended.usd_per_h_per_replica == pytest.approx(estimate.quote.hourly_usd)
    assert estimate.quote.shared and plan.recommended.shared
    data = estimate.to_dict()
    assert data["cost"]["share_of_instance"] is True
    assert "1 of 8 GPUs of" in data["cost"]["hardware"]
    assert plan.recommended.to_dict()["hardware"]["rental"] == data["cost"]["hardware"]


def test_the_cli_prints_the_share_and_the_per_gpu_price() -> None:
    result = _cli("estimate", "infer", "--model", "llama-3-8b", "--gpu", "h100", "--batch-size", "1")
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())
    assert "on-demand at $2.99/h" in text and "$23.92/h," not in text
    assert "1 of 8 GPUs of lambda gpu_8x_h100_sxm5 (us), on-demand $2.99/h share of a $23.92/h instance" in text


@pytest.mark.parametrize(
    "args",
    [
        ("estimate", "infer", "--model", "llama-3-8b", "--gpu", "h100", "--pricing", "reserved-3y"),
        (
            "estimate",
            "infer",
            "--model",
            "llama-3-8b",
            "--gpu",
            "h100",
            "--instance",
            "p5.48xlarge",
            "--pricing",
            "reserved-3y",
        ),
        (
            "estimate",
            "train",
            "--model",
            "llama-3-8b",
            "--gpu",
            "h100",
            "--gpus",
            "8",
            "--zero",
            "3",
            "--pricing",
            "reserved-1y",
        ),
        ("plan", "infer", "--model", "llama-3-8b", "--gpu", "h100", "--rps", "1", "--pricing", "reserved-3y"),
        ("plan", "train", "--model", "llama-3-8b", "--gpu", "h100", "--pricing", "reserved-3y"),
        (
            "plan",
            "serve",
            "--capacity-rps",
            "10",
            "--peak-rps",
            "5",
            "--instance",
            "p5.48xlarge",
            "--pricing",
            "reserved-3y",
        ),
        (
            "plan",
            "serve",
            "--capacity-rps",
            "10",
            "--peak-rps",
            "5",
            "--accelerator",
            "h100",
            "--pricing",
            "reserved-1y",
        ),
    ],
)
def test_a_missing_price_exits_2_with_the_pricings_there_are(args: tuple[str, ...]) -> None:
    result = _cli(*args)
    assert result.returncode == 2, result.stdout + result.stderr
    text = " ".join(result.stderr.split())
    assert "priced there: on-demand, spot" in text and "--pricing on-demand" in text
    assert "Traceback" not in result.stderr and "$0.0000" not in result.stdout


def test_a_run_on_a_detected_gpu_is_priced_by_the_same_rule_in_the_region_asked(catalog: Catalog) -> None:
    west = _p5(catalog, "us-west-2")
    price = frozen_price(catalog, ONE_H100.ask(catalog), PriceRequest(cloud="aws", region="us-west-2", pricing="spot"))
    assert price.region == "us-west-2"  # --region was dropped: the cheapest region anywhere was billed
    assert west.spot_usd_per_h is not None
    assert price.hourly_usd == pytest.approx(west.spot_usd_per_h / 8)
    assert "1 of 8 GPUs of aws p5.48xlarge (us-west-2)" in price.explanation
    with pytest.raises(InputError, match="no reserved-3y price for h100-sxm in aws"):
        frozen_price(catalog, ONE_H100.ask(catalog), PriceRequest(cloud="aws", pricing="reserved-3y"))


def test_a_job_asking_for_half_a_gpu_pays_half_of_one_gpu_by_the_same_rule(catalog: Catalog) -> None:
    price = job_price(catalog, PriceRequest(), Resources(gpus=0.5, accelerator="h100"))
    one, _ = cheapest_rental(catalog.offerings_for("h100-sxm"), 1, "on-demand", "h100-sxm", timed=False)
    assert price.hourly_usd == pytest.approx(one.usd_per_h / 2)
    assert "0.5 of 8 GPUs of" in price.explanation and "share" in price.explanation


def test_plan_infer_json_says_when_replicas_share_an_instance() -> None:
    result = _cli("plan", "infer", "--model", "llama-3-8b", "--gpu", "h100", "--rps", "1", "--json")
    assert result.returncode == 0, result.stderr
    best = json.loads(result.stdout)["recommended"]
    assert best["hardware"]["share_of_instance"] is True
    assert best["hardware"]["rental"].startswith("1 of 8 GPUs of lambda gpu_8x_h100_sxm5")
    assert best["cost"]["usd_per_hour_per_replica"] == pytest.approx(2.99)


def test_an_accelerator_no_cloud_rents_keeps_memory_and_time_and_labels_the_cost() -> None:
    """The labelled fallback: MI300X has no offering, so its cost is "not available" (null), never $0."""
    result = _cli("estimate", "infer", "--model", "llama-3-8b", "--gpu", "mi300x", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["memory"]["fits"] and data["time"]["seconds"] > 0
    assert data["cost"]["usd"] is None and data["cost"]["usd_per_hour"] is None
    assert data["cost"]["usd_per_1000_requests"] is None
    assert "the catalog rents no mi300x" in data["cost"]["unavailable"]
    table = _cli("estimate", "infer", "--model", "llama-3-8b", "--gpu", "mi300x")
    assert "not available" in table.stdout and "$0.0000" not in table.stdout
