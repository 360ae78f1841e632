"""``computewise catalog`` through the real entry point, so exit codes and error messages are what users see."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from computewise.catalog import TABLES
from computewise.catalog.listing import AcceleratorSheet, CatalogListing, InstanceSheet
from computewise.catalog.validation import CatalogValidation

OFFERING_HEADER = (
    "cloud,instance_type,accelerator,accelerator_count,vcpus,ram_bytes,network_bytes_per_s,region,"
    "on_demand_usd_per_h,spot_usd_per_h,reserved_1y_usd_per_h,reserved_3y_usd_per_h,source,retrieved"
)


def run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "computewise.cli.app", "catalog", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def test_list_accelerators_table_shows_data_age() -> None:
    result = run("list")
    assert result.returncode == 0, result.stderr
    assert "h100-sxm" in result.stdout
    assert "days ago" in result.stdout


def test_list_and_show_print_memory_in_one_unit() -> None:
    """Memory reads in GiB, as nvidia-smi and every plan print it: never "85.52 GB" beside "80 GB"."""
    listed = run("list").stdout
    rows = {line.split()[0]: line for line in listed.splitlines() if line.split()[:1] in (["h100-sxm"], ["a100-80gb"])}
    assert "79.6 GiB" in rows["h100-sxm"] and "80.0 GiB" in rows["a100-80gb"], listed
    assert " GB " not in rows["h100-sxm"] + rows["a100-80gb"]
    shown = run("show", "a100-80gb")
    assert shown.returncode == 0, shown.stderr
    assert "80.0 GiB at 2.039 TB/s" in shown.stdout


def test_list_json_parses_and_filters_by_cloud(json_schema: Callable[[object, str], None]) -> None:
    result = run("list", "offerings", "--cloud", "gcp", "--json")
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    json_schema(payload, "catalog-list")
    assert payload["table"] == "offerings"
    assert payload["rows"] and {row["cloud"] for row in payload["rows"]} == {"gcp"}
    assert payload["age_days"] >= 0


def test_every_table_lists_as_a_versioned_document_that_reads_back(json_schema: Callable[[object, str], None]) -> None:
    """Each table's rows carry its own keys and the origin; the document reads back to the same rows."""
    for table in TABLES:
        payload = json.loads(run("list", table, "--json").stdout)
        json_schema(payload, "catalog-list")
        assert next(iter(payload)) == "schema_version" and payload["table"] == table and payload["rows"]
        listing = CatalogListing.from_dict(payload)
        assert listing.to_dict() == payload
        assert all(".csv:" in entry.origin for entry in listing.rows)


def test_show_accelerator_json_has_offerings_and_cheapest(json_schema: Callable[[object, str], None]) -> None:
    result = run("show", "A100", "--json")
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    json_schema(payload, "catalog-show")
    assert payload["accelerator"]["slug"] == "a100-80gb"
    assert payload["offerings"]
    assert payload["cheapest_usd_per_accelerator_h"]["on-demand"]["usd_per_h"] > 0
    sheet = AcceleratorSheet.from_dict(payload)
    assert sheet.to_dict() == payload and sheet.accelerator.row.slug == "a100-80gb"


def test_show_instance_type_json_is_every_region_that_sells_it(json_schema: Callable[[object, str], None]) -> None:
    payload = json.loads(run("show", "g5.xlarge", "--json").stdout)
    json_schema(payload, "catalog-show")
    sheet = InstanceSheet.from_dict(payload)
    assert sheet.instance_type == "g5.xlarge" and {entry.row.accelerator for entry in sheet.offerings} == {"a10g"}


def test_show_instance_type() -> None:
    result = run("show", "g5.xlarge")
    assert result.returncode == 0, result.stderr
    assert "a10g" in result.stdout and "us-east-1" in result.stdout


def test_unknown_name_exits_2_with_did_you_mean_and_no_traceback() -> None:
    result = run("show", "h10O")
    assert result.returncode == 2
    assert "error: unknown accelerator" in result.stderr
    assert "did you mean" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    missing = run("show", "nonexist")
    assert missing.returncode == 2 and "unknown accelerator or instance type" in missing.stderr


def test_validate_counts_files_and_user_override_is_visible(tmp_path: Path) -> None:
    extra = tmp_path / "offerings-contract.csv"
    extra.write_text(
        OFFERING_HEADER + "\naws,p5.48xlarge,h100,8,192,2.2e12,4e11,us-east-1,55.04,,,,contract,2025-07-01\n",
        encoding="utf-8",
    )
    result = run("validate", str(extra))
    assert result.returncode == 0, result.stderr
    assert "OK" in result.stdout and "offerings-contract.csv" in result.stdout
    shown = json.loads(run("show", "h100", "--json", "--catalog", str(extra)).stdout)
    p5 = [o for o in shown["offerings"] if o["instance_type"] == "p5.48xlarge" and o["region"] == "us-east-1"]
    assert p5[0]["on_demand_usd_per_h"] == 55.04
    assert p5[0]["origin"] == f"{extra}:2"


def test_validate_bad_file_exits_2_naming_line_and_column(tmp_path: Path) -> None:
    bad = tmp_path / "offerings.csv"
    bad.write_text(
        OFFERING_HEADER + "\naws,p5,h100,8,192,2.2e12,4e11,us-east-1,lots,,,,c,2025-07-01\n", encoding="utf-8"
    )
    result = run("validate", str(bad))
    assert result.returncode == 2
    assert f"{bad}:2: column 'on_demand_usd_per_h'" in result.stderr.replace("\n", "")
    assert "Traceback" not in result.stderr


def test_validate_json_is_a_versioned_document_that_reads_back(
    tmp_path: Path, json_schema: Callable[[object, str], None]
) -> None:
    """Loaded or not, ``catalog validate --json`` matches its schema, version first, and reads back whole."""
    bad = tmp_path / "offerings-mine.csv"
    bad.write_text(OFFERING_HEADER + "\naws,p5,h100,8,192,2.2e12,4e11,us-east-1,cheap,,,,c,2025-07-01\n")
    good, failed = run("validate", "--json"), run("validate", str(bad), "--json")
    assert (good.returncode, failed.returncode) == (0, 2), good.stderr
    for result in (good, failed):
        data = json.loads(result.stdout)
        json_schema(data, "catalog-validate")
        assert next(iter(data)) == "schema_version" and data["schema_version"] == 1
        assert CatalogValidation.from_dict(data).to_dict() == data
    loaded, refused = CatalogValidation.from_dict(json.loads(good.stdout)), json.loads(failed.stdout)
    assert loaded.valid and loaded.counts is not None and loaded.counts.files == len(loaded.files) >= 5
    assert refused["valid"] is False and refused["counts"] is None and "oldest_retrieved" not in refused
    assert refused["errors"][0]["column"] == "on_demand_usd_per_h"
