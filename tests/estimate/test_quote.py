"""One price quote (``estimate.quote``): every verb that prices gives the same answer for the same ask,
and every number it assumes (PUE, grid, owned-server use, serving headroom) comes from the catalog's
CSV files, so a user's override moves them all."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from computewise.catalog import Catalog, load_catalog
from computewise.estimate import Assumptions, estimate_infer
from computewise.estimate.quote import Ask, PriceRequest, Quote, quote
from computewise.ledger import PriceSnapshot
from computewise.models import preset
from computewise.monitor.pricing import DetectedHardware, frozen_price, unpriced
from computewise.plan import InferConstraints, TrainConstraints, plan_infer, plan_train
from computewise.scale.engine import Resources
from computewise.scale.supervise import job_price
from computewise.specs import InferJob

CLI = [sys.executable, "-m", "computewise.cli.app"]
ONE_H100 = DetectedHardware(1, "NVIDIA H100 80GB HBM3", 85_520_809_984, logical_cpus=16)
ASSUMPTION_HEADER = "key,value,unit,source,retrieved"


def _cli(*args: str) -> dict[str, object]:
    result = subprocess.run([*CLI, *args, "--json"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    data: dict[str, object] = json.loads(result.stdout)
    return data


def _where(q: Quote) -> tuple[str | None, str | None, str | None]:
    return q.cloud, q.instance_type, q.region


def _override(directory: Path) -> Path:
    """A user catalog that changes every price, grid and utilization assumption the quote reads."""
    directory.mkdir(exist_ok=True)
    (directory / "assumptions.csv").write_text(
        "\n".join(
            [
                ASSUMPTION_HEADER,
                "cloud_pue,1.5,ratio,test site,2026-01-01",
                "unlocated_pue,1.3,ratio,test site,2026-01-01",
                "onprem_pue,1.9,ratio,test site,2026-01-01",
                "onprem_utilization,0.3,fraction,test site,2026-01-01",
                "serving_target_utilization,0.5,fraction,test site,2026-01-01",
                "serving_cold_start_s,90,s,test site,2026-01-01",
            ]
        )
        + "\n",
        encoding="utf-8",
    )
    (directory / "carbon.csv").write_text(
        "cloud,region,g_co2_per_kwh,source,retrieved\n*,*,600,test grid,2026-01-01\n", encoding="utf-8"
    )
    return directory


def test_one_h100_is_one_quote_through_every_path(catalog: Catalog, assumptions: Assumptions) -> None:
    """estimate, plan infer, plan serve's replica, run's launch price and a supervised job agree."""
    h100 = catalog.accelerator("h100")
    bill = quote(catalog, Ask(h100, 1), PriceRequest())
    estimate = estimate_infer(
        preset("llama-3-8b"), h100, InferJob(batch=1, context_len=1024, output_len=256), catalog, assumptions
    ).quote
    plan = plan_infer(
        preset("llama-3-8b"),
        catalog,
        assumptions,
        InferConstraints(requests_per_s=1.0, input_len=512, output_len=128, accelerators=("h100-sxm",)),
    ).recommended
    run = frozen_price(catalog, ONE_H100.ask(catalog), PriceRequest())
    job = job_price(catalog, PriceRequest(), Resources(gpus=1, accelerator="h100"))
    replica = _cli("plan", "serve", "--capacity-rps", "10", "--peak-rps", "5", "--accelerator", "h100")
    replica_price = replica["price"]
    assert isinstance(replica_price, dict)

    # Cheapest per GPU-hour in the bundled rows, read independently of the quote.
    offering = min(catalog.offerings_for("h100-sxm"), key=lambda o: o.on_demand_usd_per_h / o.accelerator_count)
    per_gpu = offering.on_demand_usd_per_h / offering.accelerator_count
    assert bill.hourly_usd == pytest.approx(per_gpu) and bill.offering == offering and bill.shared
    for hourly in (estimate.hourly_usd, plan.usd_per_h_per_replica, run.hourly_usd, job.hourly_usd):
        assert hourly == pytest.approx(bill.hourly_usd)
    assert replica_price["usd_per_hour_per_replica"] == pytest.approx(bill.hourly_usd)
    assert _where(estimate) == _where(bill) == (plan.cloud, plan.instance_type, plan.region)
    assert _where(bill) == (run.cloud, run.instance_type, run.region) == (job.cloud, job.instance_type, job.region)
    carbon = catalog.carbon_for(offering.cloud, offering.region)
    for snapshot in (run, job):
        assert (snapshot.carbon_g_per_kwh, snapshot.pue) == (bill.carbon.g_co2_per_kwh, bill.pue)
        assert snapshot.source == offering.source and snapshot.carbon_source == carbon.source
    assert (estimate.carbon, estimate.pue) == (bill.carbon, bill.pue) == (carbon, catalog.assumption("cloud_pue"))
    # The same rental, said the same way: the replica's and the estimate's rental lines are one sentence.
    assert plan.rental == estimate.explanation
    assert estimate.explanation in bill.explanation and estimate.explanation in str(replica_price["source"])


def test_an_instance_type_is_matched_whatever_its_case(catalog: Catalog) -> None:
    """As the catalog matches names (``Catalog.instance_offerings``): P5.48XLARGE is p5.48xlarge."""
    h100 = catalog.accelerator("h100")
    upper = quote(catalog, Ask(h100, 8, estimate=True), PriceRequest(instance_type="P5.48XLARGE"))
    lower = quote(catalog, Ask(h100, 8, estimate=True), PriceRequest(instance_type="p5.48xlarge"))
    assert upper.offering is not None and upper.offering == lower.offering
    assert upper.hourly_usd == lower.hourly_usd


def test_half_a_gpu_is_half_of_one_gpu_through_the_supervisor(catalog: Catalog) -> None:
    one = quote(catalog, Ask(catalog.accelerator("h100"), 1), PriceRequest())
    half = job_price(catalog, PriceRequest(), Resources(gpus=0.5, accelerator="h100"))
    assert half.hourly_usd == pytest.approx(one.hourly_usd / 2)
    assert (half.carbon_g_per_kwh, half.pue) == (one.carbon.g_co2_per_kwh, one.pue)


def test_plan_train_prices_every_option_as_the_quote_does(catalog: Catalog, assumptions: Assumptions) -> None:
    constraints = TrainConstraints(
        tokens=2e9,
        seq_len=1024,
        global_batch=64,
        accelerators=("a10g", "l4", "h100-sxm"),
        max_gpus=16,
        pricings=("on-demand", "spot", "on-prem"),
    )
    plan = plan_train(preset("gpt2-medium"), catalog, assumptions, constraints)
    checked = {"on-demand": 0, "spot": 0, "on-prem": 0}
    for option in plan.candidates:
        accelerator = catalog.accelerator(option.accelerator)
        if option.pricing == "on-prem":
            q = quote(catalog, Ask(accelerator, option.gpus, estimate=True), PriceRequest(pricing="on-prem"))
            if q.instance_type != option.instance_type:
                continue  # plan weighs every owned server; the quote answers with the cheapest per GPU
        else:
            flags = PriceRequest(None, option.instance_type, option.cloud, option.region, option.pricing)
            q = quote(catalog, Ask(accelerator, option.gpus, estimate=True), flags)
        assert option.usd_per_h == pytest.approx(q.hourly_usd), option
        assert option.co2_kg == pytest.approx(option.energy_kwh * q.carbon.g_co2_per_kwh / 1000.0), option
        checked[option.pricing] += 1
    assert all(checked.values()), checked


def test_a_user_catalog_moves_every_assumed_number(tmp_path: Path, assumptions: Assumptions) -> None:
    bundled = load_catalog()
    custom = load_catalog([_override(tmp_path / "site")])
    h100 = custom.accelerator("h100")

    rented = quote(custom, Ask(h100, 1), PriceRequest())
    assert rented.pue == 1.5 != quote(bundled, Ask(h100, 1), PriceRequest()).pue
    run = frozen_price(custom, ONE_H100.ask(custom), PriceRequest())
    assert run.pue == 1.5
    given = frozen_price(custom, ONE_H100.ask(custom), PriceRequest(hourly_usd=2.0))
    assert (given.carbon_g_per_kwh, given.carbon_source, given.pue) == (600, "test grid", 1.3)
    placeholder = unpriced(custom)
    assert (placeholder.carbon_g_per_kwh, placeholder.pue) == (600, 1.3)

    owned = quote(custom, Ask(h100, 8), PriceRequest(pricing="on-prem"))
    server = custom.onprem_for("h100")
    assert server is not None
    per_server = server.usd_per_h(custom.assumption("onprem_power_usd_per_kwh"), 1.9, 0.3)
    assert owned.hourly_usd == pytest.approx(math.ceil(8 / server.accelerator_count) * per_server)
    assert (owned.carbon.g_co2_per_kwh, owned.pue) == (600, 1.9)
    assert owned.hourly_usd > quote(bundled, Ask(h100, 8), PriceRequest(pricing="on-prem")).hourly_usd

    traffic = InferConstraints(requests_per_s=200.0, input_len=512, output_len=128, accelerators=("h100-sxm",))
    best = plan_infer(preset("llama-3-8b"), custom, Assumptions.from_catalog(custom), traffic).recommended
    assert best.replicas == math.ceil(200.0 / (best.requests_per_s_per_replica * 0.5))

    served = _cli(
        "plan",
        "serve",
        "--capacity-rps",
        "10",
        "--peak-rps",
        "5",
        "--hourly-usd",
        "1",
        "--catalog",
        str(tmp_path / "site"),
    )
    assert served["cold_start_s"] == 90
    capacity = served["capacity"]
    assert isinstance(capacity, dict) and capacity["target_utilization"] == 0.5


def test_the_bundled_serving_defaults_are_the_ones_plans_use(catalog: Catalog) -> None:
    served = _cli("plan", "serve", "--capacity-rps", "10", "--peak-rps", "5", "--hourly-usd", "1")
    capacity = served["capacity"]
    assert isinstance(capacity, dict)
    assert capacity["target_utilization"] == catalog.assumption("serving_target_utilization")
    assert served["cold_start_s"] == catalog.assumption("serving_cold_start_s")


def test_a_run_price_always_names_its_grid_and_pue() -> None:
    """The ledger has no default grid or PUE of its own: a snapshot without them is a programming error."""
    with pytest.raises(TypeError, match="carbon_g_per_kwh"):
        PriceSnapshot(hourly_usd=1.0, source="test", explanation="$1/h", assumed=False)  # type: ignore[call-arg]
