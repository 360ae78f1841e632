"""``plan.train_request``: which pricings ``--spot``/``--no-spot`` leave, and where the dataset lives."""

from __future__ import annotations

import pytest

from computewise.catalog import Catalog
from computewise.errors import InputError
from computewise.estimate.data_movement import DataSite
from computewise.plan import CLOUD_PRICINGS
from computewise.plan.train_request import dataset_site, offered_pricings


def test_spot_leaves_only_spot_and_no_spot_every_pricing_but_spot() -> None:
    assert offered_pricings() == CLOUD_PRICINGS
    assert offered_pricings(("on-demand", "reserved-1y")) == ("on-demand", "reserved-1y")
    assert offered_pricings(spot=True) == ("spot",)
    assert "spot" in CLOUD_PRICINGS and offered_pricings(no_spot=True) == tuple(
        p for p in CLOUD_PRICINGS if p != "spot"
    )


def test_pricings_that_contradict_or_leave_nothing_are_refused() -> None:
    with pytest.raises(InputError, match="--spot and --no-spot contradict each other"):
        offered_pricings(spot=True, no_spot=True)
    with pytest.raises(InputError, match="--no-spot removed the only --pricing given") as refused:
        offered_pricings(("spot",), no_spot=True)
    assert refused.value.hint == "add --pricing on-demand"
    with pytest.raises(InputError, match="--spot plans spot prices only, but --pricing on-demand leaves spot out"):
        offered_pricings(("on-demand",), spot=True)
    assert offered_pricings(("spot", "on-demand"), spot=True) == ("spot",)


def test_a_dataset_has_both_a_place_and_a_size_or_neither(catalog: Catalog) -> None:
    assert dataset_site(catalog, None, None) is None
    assert dataset_site(catalog, "aws:us-east-1", 2e12) == DataSite("aws", "us-east-1", 2e12)
    for place, size in (("aws:us-east-1", None), (None, 2e12)):
        with pytest.raises(InputError, match="--data-region and --dataset-size go together"):
            dataset_site(catalog, place, size)
