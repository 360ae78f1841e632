"""Shared fixtures: the real bundled catalog and its assumptions."""

from __future__ import annotations

import pytest

from computewise.catalog import Catalog, load_catalog
from computewise.estimate import Assumptions


@pytest.fixture(scope="session")
def catalog() -> Catalog:
    return load_catalog()


@pytest.fixture(scope="session")
def assumptions(catalog: Catalog) -> Assumptions:
    return Assumptions.from_catalog(catalog)
