"""kernel_profiles.csv: each accelerator's burst shares of its data sheet, checked against their sources."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from computewise.catalog import Catalog, load_catalog
from computewise.errors import CatalogError
from computewise.estimate import Assumptions
from computewise.estimate.kernels import profile_shares

MEASURED = Path(__file__).parents[2] / "benchmarks" / "data" / "measured" / "h100-2026-11-26" / "bench.json"


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog()


def test_every_profile_names_a_catalog_accelerator_and_says_how_it_was_found(catalog: Catalog) -> None:
    assert len(catalog.kernel_profiles) >= 5
    for row in catalog.kernel_profiles:
        assert catalog.accelerator(row.accelerator).slug == row.accelerator
        assert 0.3 < row.matmul_share <= 1.0, row
        assert row.source.startswith(("measured:", "published:", "fitted:")), row.source
        # A share fitted on whole multi-device steps already is what such a step sustains; a burst is not.
        assert (row.sustained_share is not None) == row.source.startswith("fitted:"), row


def test_the_h100_profile_is_what_bench_measured_on_the_real_h100(catalog: Catalog) -> None:
    """The row is the bench run's own numbers, read here from its JSON independently of the CSV."""
    bench = json.loads(MEASURED.read_text())
    share = {c["figure"]: c["share"] for c in bench["comparisons"]}
    triad = next(b for b in bench["bandwidth"] if b["kind"] == "triad")
    profile = catalog.kernel_profile("h100-sxm")
    assert profile is not None
    assert profile.matmul_share == pytest.approx(share["bf16 matmul"], abs=0.001)
    assert profile.fp32_matmul_share == pytest.approx(share["fp32 matmul"], abs=0.001)
    assert profile.stream_share == pytest.approx(triad["gb_per_s"]["median"] / triad["datasheet_gb_per_s"], abs=0.001)


@pytest.mark.parametrize("slug", ["rtx-3090", "rtx-4090", "rtx-5090", "rtx-a6000", "rtx-6000-ada"])
def test_workstation_gpu_profiles_are_the_published_rate_over_the_catalogs_peak(catalog: Catalog, slug: str) -> None:
    """Each row is the measured bf16 rate its source quotes over the catalog's own peak, which the source
    names too; GeForce cards measure above their data sheet (rated at the boost clock, run faster) and
    are held at the table's ceiling of 1."""
    profile = catalog.kernel_profile(slug)
    assert profile is not None
    found = re.search(r"bf16 (?P<measured>[\d.]+) TFLOP/s of the catalog's (?P<peak>[\d.]+)", profile.source)
    assert found is not None, profile.source
    peak = catalog.accelerator(slug).peak_flops["bf16"]
    assert float(found["peak"]) * 1e12 == pytest.approx(peak)
    assert profile.matmul_share == pytest.approx(min(1.0, float(found["measured"]) * 1e12 / peak), abs=0.001)
    assert profile.fp32_matmul_share is None and profile.stream_share is None  # the assumptions apply


def test_an_estimate_uses_the_profile_and_falls_back_to_the_assumptions(catalog: Catalog) -> None:
    assumptions = Assumptions.from_catalog(catalog)
    a100 = catalog.kernel_profile("a100-80gb")
    assert profile_shares(a100, "bf16", assumptions) == (0.859, assumptions.stream_bandwidth_fraction)
    assert profile_shares(a100, "fp32", assumptions)[0] == 0.859  # no fp32 figure: the 16-bit one
    assert catalog.kernel_profile("t4") is None
    assert profile_shares(None, "bf16", assumptions) == (
        assumptions.matmul_peak_fraction,
        assumptions.stream_bandwidth_fraction,
    )


def test_a_user_row_overrides_the_bundled_one_and_a_bad_share_is_refused(tmp_path: Path) -> None:
    header = "accelerator,matmul_share,fp32_matmul_share,stream_share,source,retrieved\n"
    mine = tmp_path / "kernel_profiles-mine.csv"
    mine.write_text(header + "h100,0.7,,0.9,measured: our own cluster,2026-11-20\n")
    profile = load_catalog([mine]).kernel_profile("h100-sxm")  # an alias resolves to the slug
    assert profile is not None and (profile.matmul_share, profile.fp32_matmul_share) == (0.7, None)
    bad = tmp_path / "kernel_profiles-bad.csv"
    bad.write_text(header + "h100-sxm,1.4,,,measured: typo,2026-11-20\n")
    with pytest.raises(CatalogError, match=r"matmul_share.*at most 1"):
        load_catalog([bad])
