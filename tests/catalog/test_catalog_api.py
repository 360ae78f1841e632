"""Look-ups on the loaded catalog: names, offerings, carbon, on-premises costs, assumptions, data age."""

from __future__ import annotations

from datetime import date

import pytest

from computewise.catalog import Catalog, load_catalog, usd_per_accelerator_h
from computewise.errors import InputError, UnknownNameError


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog()


@pytest.mark.parametrize(
    ("name", "slug"),
    [
        ("a100", "a100-80gb"),
        ("H100", "h100-sxm"),
        ("h100-sxm", "h100-sxm"),
        (" V100 ", "v100-16gb"),
        ("mi300", "mi300x"),
    ],
)
def test_slugs_and_aliases_resolve_case_insensitively(catalog: Catalog, name: str, slug: str) -> None:
    assert catalog.accelerator(name).slug == slug


def test_unknown_accelerator_suggests_close_names(catalog: Catalog) -> None:
    with pytest.raises(UnknownNameError) as caught:
        catalog.accelerator("h10O")
    assert "did you mean" in str(caught.value)
    assert "h100" in caught.value.suggestions
    assert "computewise catalog list accelerators" in (caught.value.hint or "")


def test_offerings_filter_by_cloud_and_region(catalog: Catalog) -> None:
    everywhere = catalog.offerings_for("h100")
    in_aws = catalog.offerings_for("h100", cloud="AWS")
    in_region = catalog.offerings_for("h100", cloud="aws", region="us-west-2")
    assert len(everywhere) > len(in_aws) > len(in_region) == 1
    assert in_region[0].instance_type == "p5.48xlarge"
    with pytest.raises(UnknownNameError, match="unknown cloud 'awz'; did you mean 'aws'"):
        catalog.offerings_for("h100", cloud="awz")
    with pytest.raises(UnknownNameError, match="unknown region"):
        catalog.offerings_for("h100", cloud="aws", region="us-east-9")


def test_instance_offerings_and_cheapest(catalog: Catalog) -> None:
    rows = catalog.instance_offerings("P4D.24XLARGE")
    assert {row.region for row in rows} >= {"us-east-1", "us-west-2"}
    with pytest.raises(UnknownNameError, match=r"did you mean 'p4d\.24xlarge'"):
        catalog.instance_offerings("p4d.24xlarg")
    with pytest.raises(InputError, match="a3-highgpu-8g is sold on gcp, not on aws") as elsewhere:
        catalog.instance_offerings("A3-HIGHGPU-8G", cloud="aws")
    assert not isinstance(elsewhere.value, UnknownNameError) and "--cloud gcp" in (elsewhere.value.hint or "")
    cheapest = catalog.cheapest_offering("h100", "on-demand")
    assert cheapest is not None
    best = usd_per_accelerator_h(cheapest)
    assert best is not None
    assert all((usd_per_accelerator_h(o) or 0) >= best for o in catalog.offerings_for("h100"))
    assert catalog.cheapest_offering("jetson-xavier-nx") is None
    spot = catalog.cheapest_offering("h100", "spot")
    assert spot is not None and spot.spot_usd_per_h is not None


def test_carbon_falls_back_from_region_to_cloud_to_world(catalog: Catalog) -> None:
    assert catalog.carbon_g_per_kwh("gcp", "europe-west4") < catalog.carbon_g_per_kwh("gcp", "us-central1")
    assert catalog.carbon_for("lambda", "us").cloud == "lambda"  # cloud-wide row
    assert catalog.carbon_g_per_kwh("aws", "ap-nowhere-1") == catalog.carbon_for("*", "*").g_co2_per_kwh == 475


def test_onprem_for_picks_the_cheapest_configuration(catalog: Catalog) -> None:
    dgx = catalog.onprem_for("H100")
    assert dgx is not None and dgx.accelerator == "h100-sxm"
    assert catalog.onprem_for("t4") is None
    assert catalog.onprem_options("b200")


def test_assumptions(catalog: Catalog) -> None:
    assert catalog.assumption("onprem_pue") > 1
    assert catalog.assumption_row("runtime_overhead_bytes").unit == "bytes"
    with pytest.raises(UnknownNameError, match="did you mean 'onprem_pue'"):
        catalog.assumption("onprem_peu")


def test_data_age_and_origin(catalog: Catalog) -> None:
    oldest = catalog.oldest_retrieved("offerings")
    assert oldest == min(date.fromisoformat(o.retrieved) for o in catalog.offerings)
    assert catalog.age_days("offerings", today=date(2026, 11, 21)) == (date(2026, 11, 21) - oldest).days
    assert catalog.oldest_retrieved() <= oldest
    origin = catalog.origin(catalog.accelerator("t4"))
    assert origin.path.endswith("accelerators.csv") and origin.line > 1
