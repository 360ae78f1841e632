"""``plan train --data-region --dataset-size``: egress and copy time, by hand and against the plan without data."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

import pytest

from computewise.catalog import Catalog
from computewise.errors import InputError, UnknownNameError
from computewise.estimate import Assumptions
from computewise.estimate.data_movement import DataSite, data_movement, data_site, egress_scope, token_bytes
from computewise.estimate.quote import egress_usd_per_gb
from computewise.models import preset
from computewise.plan import TrainConstraints, plan_train
from computewise.plan.result import Plan

TWO_TB = 2e12
ON_AWS = DataSite("aws", "us-east-1", TWO_TB)
# A small search: A10G and L4 instances are sold by aws and gcp in several regions.
SMALL = TrainConstraints(tokens=2e9, seq_len=1024, global_batch=64, accelerators=("a10g", "l4"), max_gpus=8)


def test_scope_follows_cloud_and_region() -> None:
    assert egress_scope(ON_AWS, "aws", "us-east-1") == "same-region"
    assert egress_scope(ON_AWS, "aws", "us-west-2") == "inter-region"
    assert egress_scope(ON_AWS, "gcp", "us-east4") == "internet"
    assert egress_scope(ON_AWS, "", "") == "internet"  # an owned server: the bytes leave the cloud


@pytest.mark.parametrize(("vocab", "expected"), [(50_257, 2), (65_536, 2), (65_537, 4), (128_256, 4), (0, 4)])
def test_token_bytes_is_the_smallest_unsigned_int_holding_the_vocabulary(vocab: int, expected: int) -> None:
    assert token_bytes(vocab) == expected


def test_hand_computed_internet_copy() -> None:
    # 2 TB = 2000 GB at $0.09/GB = $180; 2e12 B / 1.25e9 B/s = 1600 s.
    # 20e9 tokens of a 128,256-entry vocabulary (4 B each) read in 25,200 s = 3,174,603 B/s.
    moved = data_movement(
        ON_AWS, "internet", usd_per_gb=0.09, copy_bytes_per_s=1.25e9, tokens=20e9, training_s=25_200, vocab_size=128_256
    )
    assert moved.egress_usd == pytest.approx(180.0)
    assert moved.transfer_s == pytest.approx(1600.0)
    assert moved.read_bytes_per_s == pytest.approx(3_174_603.17, rel=1e-6)
    assert moved.origin == "aws:us-east-1"


def test_same_region_moves_nothing_but_still_needs_the_read_rate() -> None:
    moved = data_movement(
        ON_AWS, "same-region", usd_per_gb=0.09, copy_bytes_per_s=1.25e9, tokens=1e9, training_s=1000, vocab_size=32_000
    )
    assert (moved.egress_usd, moved.transfer_s, moved.usd_per_gb) == (0.0, 0.0, 0.0)
    assert moved.read_bytes_per_s == pytest.approx(2e6)  # 1e9 tokens x 2 B / 1000 s


def test_egress_prices_are_catalog_rows(catalog: Catalog) -> None:
    assert egress_usd_per_gb(catalog, "aws", "inter-region") == catalog.assumption("egress_aws_inter_region_usd_per_gb")
    assert egress_usd_per_gb(catalog, "gcp", "internet") == catalog.assumption("egress_gcp_internet_usd_per_gb")
    assert egress_usd_per_gb(catalog, "aws", "same-region") == 0.0
    for cloud in catalog.clouds():  # every cloud that rents GPUs can be a data origin
        for scope in ("inter-region", "internet"):
            assert egress_usd_per_gb(catalog, cloud, scope) >= 0
    with pytest.raises(InputError, match="no internet egress price for cloud 'acme'"):
        egress_usd_per_gb(catalog, "acme", "internet")


def test_data_site_parses_and_refuses(catalog: Catalog) -> None:
    assert data_site(catalog, "aws:us-east-2", TWO_TB) == DataSite("aws", "us-east-2", TWO_TB)  # no GPUs there
    assert data_site(catalog, "us-east4", TWO_TB) == DataSite("gcp", "us-east4", TWO_TB)
    with pytest.raises(InputError, match="sold by coreweave and lambda"):
        data_site(catalog, "us", TWO_TB)
    with pytest.raises(UnknownNameError):
        data_site(catalog, "acme:us-east-1", TWO_TB)
    with pytest.raises(InputError, match="names no region"):
        data_site(catalog, "aws:", TWO_TB)


def test_each_option_pays_its_own_trip_and_nothing_else(catalog: Catalog) -> None:
    """Against the plan without data: every option's time and cost grow by exactly its copy and egress."""
    model, assumptions = preset("gpt2-xl"), Assumptions.from_catalog(catalog)
    plain = plan_train(model, catalog, assumptions, SMALL)
    moved = plan_train(model, catalog, assumptions, replace(SMALL, data=ON_AWS))
    before = {option.label: option for option in plain.candidates}
    assert {option.label for option in moved.candidates} == set(before)
    scopes = set()
    for option in moved.candidates:
        assert option.data is not None
        base = before[option.label]
        scope = egress_scope(ON_AWS, option.cloud, option.region)
        scopes.add(scope)
        usd_per_gb = 0.0 if scope == "same-region" else egress_usd_per_gb(catalog, "aws", scope)
        copy_s = 0.0 if scope == "same-region" else TWO_TB / catalog.assumption("cross_region_copy_bytes_per_s")
        assert option.cost_usd == pytest.approx(base.cost_usd + TWO_TB / 1e9 * usd_per_gb)
        assert option.time_s == pytest.approx(base.time_s + copy_s)
        assert option.data.read_bytes_per_s == pytest.approx(SMALL.tokens * 2 / base.time_s)  # GPT-2: uint16 ids
    assert scopes == {"same-region", "inter-region", "internet"}


def test_the_data_can_change_the_recommendation(catalog: Catalog) -> None:
    """Where the cheapest GPUs are far from a large dataset, the egress decides: the winner sits by the data."""
    model, assumptions = preset("gpt2-xl"), Assumptions.from_catalog(catalog)
    plain = plan_train(model, catalog, assumptions, SMALL).recommended
    elsewhere = next(
        region
        for region in sorted({o.region for o in catalog.offerings if o.cloud == plain.cloud})
        if region != plain.region
    )
    far = DataSite(plain.cloud, elsewhere, 200e12)  # 200 TB: egress in the thousands of dollars
    moved = plan_train(model, catalog, assumptions, replace(SMALL, data=far)).recommended
    assert moved.data is not None and moved.data.egress_usd < plain.cost_usd
    assert (moved.cloud, moved.region) == (plain.cloud, elsewhere)


def test_the_plan_document_round_trips_the_data(catalog: Catalog) -> None:
    model, assumptions = preset("gpt2-xl"), Assumptions.from_catalog(catalog)
    plan = plan_train(model, catalog, assumptions, replace(SMALL, data=ON_AWS))
    again = Plan.from_dict(plan.to_dict())
    assert again.recommended.data == plan.recommended.data


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--data-region", "aws:us-east-1"), "--data-region and --dataset-size go together"),
        (("--dataset-size", "2TB"), "--data-region and --dataset-size go together"),
        (("--data-region", "us", "--dataset-size", "2TB"), "which one holds the data"),
        (("--data-region", "aws:us-east-1", "--dataset-size", "0TB"), "--dataset-size must be between"),
        (("--data-region", "aws:us-east-1", "--dataset-size", "lots"), "--dataset-size"),
    ],
)
def test_the_cli_refuses_incomplete_or_absurd_data_flags(flags: tuple[str, ...], message: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "computewise.cli.app", "plan", "train", "-m", "gpt2-medium", "--tokens", "2B", *flags],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert message in result.stderr and "To fix:" in result.stderr
    assert not result.stdout
