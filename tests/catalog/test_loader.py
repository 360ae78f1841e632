"""User files: overrides, additions and malformed rows reported with file, line and column."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from computewise.catalog import load_catalog, table_for_filename
from computewise.errors import CatalogError, InputError

ACCELERATOR_HEADER = (
    "slug,name,vendor,kind,aliases,memory_bytes,memory_bandwidth_bytes_per_s,fp32_flops,tf32_flops,"
    "bf16_flops,fp16_flops,fp8_flops,int8_flops,tdp_w,interconnect_bytes_per_s,form_factor,source,retrieved"
)
OFFERING_HEADER = (
    "cloud,instance_type,accelerator,accelerator_count,vcpus,ram_bytes,network_bytes_per_s,region,"
    "on_demand_usd_per_h,spot_usd_per_h,reserved_1y_usd_per_h,reserved_3y_usd_per_h,source,retrieved"
)
GOOD_ACCELERATOR = "x1,Example X1,Acme,gpu,xone|x-1,8e10,2e12,5e13,0,4e14,4e14,0,0,500,1e11,PCIe,test sheet,2025-01-02"
GOOD_OFFERING = "mycloud,box.8x,x1,8,64,5e11,1.25e10,home-1,20,8,15,10,test price list,2025-01-02"


def write(path: Path, *lines: str) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def load_error(tmp_path: Path, filename: str, *lines: str) -> CatalogError:
    path = write(tmp_path / filename, *lines)
    with pytest.raises(CatalogError) as caught:
        load_catalog([path])
    return caught.value


def test_user_directory_adds_and_overrides_rows(user_catalog_dir: Path) -> None:
    bundled = load_catalog()
    p5 = next(o for o in bundled.offerings if o.instance_type == "p5.48xlarge" and o.region == "us-east-1")
    write(user_catalog_dir / "accelerators-mine.csv", ACCELERATOR_HEADER, GOOD_ACCELERATOR)
    path = write(
        user_catalog_dir / "offerings-negotiated.csv",
        OFFERING_HEADER,
        "aws,p5.48xlarge,h100,8,192,2.2e12,4e11,us-east-1,55.04,,,,our AWS contract,2025-07-01",
        GOOD_OFFERING,
    )
    catalog = load_catalog()
    override = next(o for o in catalog.offerings if o.instance_type == "p5.48xlarge" and o.region == "us-east-1")
    assert override.on_demand_usd_per_h == 55.04 != p5.on_demand_usd_per_h
    assert override.accelerator == "h100-sxm"  # alias resolved to the slug
    assert override.spot_usd_per_h is None
    assert catalog.origin(override).path == str(path)
    assert catalog.origin(override).line == 2
    assert len(catalog.offerings) == len(bundled.offerings) + 1
    assert catalog.accelerator("XONE").slug == "x1"
    assert catalog.offerings_for("x1")[0].reserved_3y_usd_per_h == 10


def test_explicit_path_overrides_the_user_directory(tmp_path: Path, user_catalog_dir: Path) -> None:
    write(
        user_catalog_dir / "assumptions.csv",
        "key,value,unit,source,retrieved",
        "onprem_pue,1.4,ratio,site A,2025-01-01",
    )
    extra = write(
        tmp_path / "assumptions-site-b.csv", "key,value,unit,source,retrieved", "onprem_pue,1.2,ratio,site B,2025-02-01"
    )
    assert load_catalog().assumption("onprem_pue") == 1.4
    catalog = load_catalog([extra])
    assert catalog.assumption("onprem_pue") == 1.2
    assert catalog.assumption_row("onprem_pue").source == "site B"
    directory = tmp_path / "more"
    directory.mkdir()
    write(directory / "assumptions.csv", "key,value,unit,source,retrieved", "onprem_pue,1.3,ratio,site C,2025-03-01")
    assert load_catalog([directory]).assumption("onprem_pue") == 1.3


def test_edited_user_file_is_reread(user_catalog_dir: Path) -> None:
    path = write(
        user_catalog_dir / "assumptions.csv", "key,value,unit,source,retrieved", "onprem_pue,1.4,ratio,a,2025-01-01"
    )
    assert load_catalog().assumption("onprem_pue") == 1.4
    write(path, "key,value,unit,source,retrieved", "onprem_pue,1.25,ratio,a,2025-01-01")
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert load_catalog().assumption("onprem_pue") == 1.25


def test_comments_and_blank_lines_keep_line_numbers(tmp_path: Path) -> None:
    error = load_error(
        tmp_path,
        "offerings.csv",
        "# negotiated prices",
        OFFERING_HEADER,
        "",
        "# next row is broken",
        "aws,p5.48xlarge,h100,8,192,2.2e12,4e11,us-east-1,cheap,,,,contract,2025-07-01",
    )
    assert (error.line, error.column) == (5, "on_demand_usd_per_h")


@pytest.mark.parametrize(
    ("row", "column", "problem"),
    [
        (
            "aws,p5.48xlarge,h100,8,192,2.2e12,4e11,us-east-1,abc,,,,contract,2025-07-01",
            "on_demand_usd_per_h",
            "expected a number",
        ),
        (
            "aws,p5.48xlarge,h100,8,192,2.2e12,4e11,us-east-1,-3,,,,contract,2025-07-01",
            "on_demand_usd_per_h",
            "greater than zero",
        ),
        ("aws,p5.48xlarge,h100,8,192,2.2e12,-1,us-east-1,50,,,,contract,2025-07-01", "network_bytes_per_s", "negative"),
        ("aws,p5.48xlarge,h100,8,192,2.2e12,4e11,us-east-1,50,,,,contract,01/07/2025", "retrieved", "ISO date"),
        ("aws,p5.48xlarge,h100,8,192,2.2e12,4e11,us-east-1,50,,,,,2025-07-01", "source", "empty"),
        ("aws,p5.48xlarge,h100,8.5,192,2.2e12,4e11,us-east-1,50,,,,contract,2025-07-01", "accelerator_count", "whole"),
        (
            "aws,p5.48xlarge,h10O,8,192,2.2e12,4e11,us-east-1,50,,,,contract,2025-07-01",
            "accelerator",
            "did you mean 'h100'",
        ),
        ("aws,p5.48xlarge,h100,8,192,2.2e12,4e11,us-east-1,50,,,,contract,2025-07-01,extra", "(cell 15)", "15 cells"),
        (
            "AWS Cloud,p5.48xlarge,h100,8,192,2.2e12,4e11,us-east-1,50,,,,contract,2025-07-01",
            "cloud",
            "not a valid name",
        ),
        (
            "aws,p5.48xlarge,h100,8,192,2.2e12,4e11,us-east-1,nan,,,,contract,2025-07-01",
            "on_demand_usd_per_h",
            "finite",
        ),
    ],
)
def test_malformed_offering_names_file_line_and_column(tmp_path: Path, row: str, column: str, problem: str) -> None:
    error = load_error(tmp_path, "offerings-bad.csv", OFFERING_HEADER, GOOD_OFFERING.replace("x1", "h100"), row)
    assert error.path == str(tmp_path / "offerings-bad.csv")
    assert (error.line, error.column) == (3, column)
    assert problem in str(error)
    assert str(error).startswith(f"{error.path}:3: column {column!r}:")


def test_missing_column_names_line_1(tmp_path: Path) -> None:
    header = OFFERING_HEADER.replace(",vcpus", "")
    error = load_error(tmp_path, "offerings.csv", header, "aws,p5,h100,8,2.2e12,4e11,us-east-1,50,,,,c,2025-07-01")
    assert (error.line, error.column) == (1, "vcpus")
    assert "missing column" in error.message
    assert error.hint and "cloud,instance_type" in error.hint


def test_unknown_column_suggests_the_right_one(tmp_path: Path) -> None:
    header = OFFERING_HEADER.replace("spot_usd_per_h", "spot_usd_per_hr")
    error = load_error(tmp_path, "offerings.csv", header, GOOD_OFFERING)
    assert (error.line, error.column) == (1, "spot_usd_per_hr")
    assert "did you mean 'spot_usd_per_h'" in error.message


def test_optional_columns_may_be_left_out(tmp_path: Path) -> None:
    header = OFFERING_HEADER.replace(",spot_usd_per_h,reserved_1y_usd_per_h,reserved_3y_usd_per_h", "")
    path = write(tmp_path / "offerings.csv", header, "mycloud,box,h100,8,64,5e11,1e10,home-1,20,price list,2025-01-02")
    (offering,) = load_catalog([path]).offerings_for("h100", cloud="mycloud")
    assert offering.spot_usd_per_h is None


@pytest.mark.parametrize(
    ("row", "column", "problem"),
    [
        (GOOD_ACCELERATOR.replace(",gpu,", ",fpga,"), "kind", "not a known kind"),
        (GOOD_ACCELERATOR.replace(",8e10,", ",0,"), "memory_bytes", "greater than zero"),
        (GOOD_ACCELERATOR.replace("xone|x-1", "h100"), "aliases", "already names accelerator 'h100-sxm'"),
        (GOOD_ACCELERATOR.replace("5e13,0,4e14,4e14", "0,0,0,0"), "fp32_flops", "every *_flops cell is zero"),
        (GOOD_ACCELERATOR.replace("x1,", "X 1,", 1), "slug", "not a valid name"),
        (GOOD_ACCELERATOR.replace("2025-01-02", "2025-02-30"), "retrieved", "ISO date"),
    ],
)
def test_malformed_accelerator(tmp_path: Path, row: str, column: str, problem: str) -> None:
    error = load_error(tmp_path, "accelerators.csv", ACCELERATOR_HEADER, row)
    assert (error.line, error.column) == (2, column)
    assert problem in error.message


def test_duplicate_key_in_one_file(tmp_path: Path) -> None:
    error = load_error(tmp_path, "accelerators.csv", ACCELERATOR_HEADER, GOOD_ACCELERATOR, GOOD_ACCELERATOR)
    assert error.line == 3
    assert "first on line 2" in error.message


def test_offering_may_refer_to_an_accelerator_from_another_user_file(tmp_path: Path) -> None:
    offerings = write(tmp_path / "offerings.csv", OFFERING_HEADER, GOOD_OFFERING)
    with pytest.raises(CatalogError, match="unknown accelerator 'x1'"):
        load_catalog([offerings])
    accelerators = write(tmp_path / "accelerators.csv", ACCELERATOR_HEADER, GOOD_ACCELERATOR)
    assert load_catalog([offerings, accelerators]).offerings_for("x-1")[0].instance_type == "box.8x"


def test_file_names_choose_the_table(tmp_path: Path) -> None:
    assert table_for_filename("Offerings-2025.CSV") == "offerings"
    assert table_for_filename(Path("x") / "onprem_site.csv") == "onprem"
    with pytest.raises(InputError, match="cannot tell which catalog table"):
        table_for_filename("prices.csv")
    with pytest.raises(InputError, match="no catalog file or directory"):
        load_catalog([tmp_path / "missing.csv"])
    with pytest.raises(CatalogError, match="file is empty"):
        load_catalog([write(tmp_path / "carbon.csv", "# nothing here")])


def test_loading_is_cached_until_a_file_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Planners and the CLI call ``load_catalog`` often: a second call is the same object, not a re-parse,
    and a user file that changes is read again. (Its speed, 30 ms cold, is benchmarks/speed.py's figure.)"""
    monkeypatch.setenv("COMPUTEWISE_CATALOG_DIR", str(tmp_path))
    first = load_catalog()
    assert load_catalog() is first
    (tmp_path / "assumptions.csv").write_text(
        "key,value,unit,source,retrieved\nonprem_pue,1.3,ratio,test,2025-01-01\n", encoding="utf-8"
    )
    changed = load_catalog()
    assert changed is not first and changed.assumption("onprem_pue") == 1.3
    assert load_catalog() is changed
