"""How a monitored run is priced: flags first, then the detected GPU, then the CPU default."""

from __future__ import annotations

import pytest

from computewise.catalog import Catalog
from computewise.errors import InputError, UnknownNameError
from computewise.estimate.quote import PriceRequest
from computewise.monitor.pricing import DetectedHardware, frozen_price

CPU_ONLY = DetectedHardware(gpu_count=0, gpu_name=None, gpu_memory_total_bytes=None, logical_cpus=4)
EIGHT_A100 = DetectedHardware(8, "NVIDIA A100-SXM4-80GB", 85_899_345_920, logical_cpus=96)


def test_hourly_usd_wins_and_is_not_assumed(catalog: Catalog) -> None:
    price = frozen_price(catalog, EIGHT_A100.ask(catalog), PriceRequest(hourly_usd=2.5))
    assert price.hourly_usd == 2.5
    assert not price.assumed
    assert price.carbon_g_per_kwh == catalog.carbon_for("*", "*").g_co2_per_kwh


def test_instance_uses_catalog_price_and_region_carbon(catalog: Catalog) -> None:
    price = frozen_price(
        catalog, CPU_ONLY.ask(catalog), PriceRequest(instance_type="p3.2xlarge", cloud="aws", region="us-east-1")
    )
    assert price.hourly_usd == pytest.approx(3.06)
    assert price.instance_type == "p3.2xlarge"
    assert price.carbon_g_per_kwh == catalog.carbon_g_per_kwh("aws", "us-east-1")
    assert price.pue == catalog.assumption("cloud_pue")


def test_spot_price_of_an_instance(catalog: Catalog) -> None:
    price = frozen_price(
        catalog, CPU_ONLY.ask(catalog), PriceRequest(instance_type="p3.2xlarge", region="us-east-1", pricing="spot")
    )
    assert price.hourly_usd == pytest.approx(0.6929)


def test_detected_gpus_priced_at_cheapest_catalog_rate_and_said_so(catalog: Catalog) -> None:
    price = frozen_price(catalog, EIGHT_A100.ask(catalog), PriceRequest())
    cheapest = catalog.cheapest_offering("a100-80gb")
    assert cheapest is not None
    per_gpu = cheapest.on_demand_usd_per_h / cheapest.accelerator_count
    assert price.hourly_usd == pytest.approx(8 * per_gpu)
    assert price.assumed
    assert "a100-80gb" in price.explanation and "--hourly-usd" in price.explanation


def test_cpu_only_default_is_per_vcpu(catalog: Catalog) -> None:
    price = frozen_price(catalog, CPU_ONLY.ask(catalog), PriceRequest())
    assert price.hourly_usd == pytest.approx(4 * catalog.assumption("cpu_usd_per_vcpu_h"))
    assert price.assumed and "4 vCPUs" in price.explanation


def test_unknown_gpu_falls_back_to_cpu_price_and_names_it(catalog: Catalog) -> None:
    hardware = DetectedHardware(1, "NVIDIA GeForce GTX 1080", 8e9, logical_cpus=8)
    price = frozen_price(catalog, hardware.ask(catalog), PriceRequest())
    assert "GTX 1080" in price.explanation


def test_bad_flags_are_clear(catalog: Catalog) -> None:
    with pytest.raises(UnknownNameError, match="instance type"):
        frozen_price(catalog, CPU_ONLY.ask(catalog), PriceRequest(instance_type="p9.huge"))
    with pytest.raises(InputError, match="--hourly-usd must be >= 0"):
        frozen_price(catalog, CPU_ONLY.ask(catalog), PriceRequest(hourly_usd=-1.0))
    with pytest.raises(InputError, match="no reserved-1y price"):
        frozen_price(catalog, CPU_ONLY.ask(catalog), PriceRequest(instance_type="p3.2xlarge", pricing="reserved-1y"))
