"""What the README promises of the report flags, through the real console script in a child process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

CLI = [sys.executable, "-m", "computewise.cli.app"]
OFFERING_HEADER = (
    "cloud,instance_type,accelerator,accelerator_count,vcpus,ram_bytes,network_bytes_per_s,region,"
    "on_demand_usd_per_h,spot_usd_per_h,reserved_1y_usd_per_h,reserved_3y_usd_per_h,source,retrieved"
)


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120, check=False)


def test_compare_onprem_writes_a_self_contained_html_report(tmp_path: Path) -> None:
    page = tmp_path / "onprem.html"
    result = run("plan", "compare-onprem", "--gpu", "h100", "--html", str(page))
    assert result.returncode == 0, result.stderr
    html = page.read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>") and "<svg" in html
    assert "owned cost per used hour / rental price" in html
    assert "$23.92/h" in html and "$23.92/h" in result.stdout  # the same figures as the table
    assert "<script" not in html and "http://" not in html.replace("http://www.w3.org", "")


def test_plan_serve_writes_a_self_contained_html_report(tmp_path: Path) -> None:
    traffic = tmp_path / "traffic.csv"
    traffic.write_text("hour,rps\n" + "".join(f"{h},{0 if h < 6 else 120}\n" for h in range(24)), encoding="utf-8")
    page = tmp_path / "serve.html"
    result = run(
        "plan", "serve", "--capacity-rps", "50", "--traffic", str(traffic), "--hourly-usd", "2", "--html", str(page),
        "--json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["written"]["html"] == str(page)
    html = page.read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>") and "replicas by hour" in html and "<svg" in html
    assert "scale-to-zero" in html and "$" in html


def test_catalog_validate_json_is_one_object_with_counts(tmp_path: Path) -> None:
    good = run("catalog", "validate", "--json")
    assert good.returncode == 0, good.stderr
    data = json.loads(good.stdout)
    assert data["valid"] is True and data["errors"] == []
    assert data["counts"]["files"] == len(data["files"]) >= 5
    assert data["counts"]["rows"] == sum(f["rows"] for f in data["files"])
    assert data["counts"]["rows_by_table"]["offerings"] > 0
    bad = tmp_path / "offerings-mine.csv"
    bad.write_text(OFFERING_HEADER + "\naws,p5,h100,8,192,2.2e12,4e11,us-east-1,cheap,,,,c,2025-07-01\n")
    failed = run("catalog", "validate", str(bad), "--json")
    assert failed.returncode == 2
    error = json.loads(failed.stdout)
    assert error["valid"] is False
    assert error["errors"][0]["file"] == str(bad)
    assert error["errors"][0]["line"] == 2 and error["errors"][0]["column"] == "on_demand_usd_per_h"
    assert error["errors"][0]["hint"]


def test_an_unknown_model_lists_the_presets() -> None:
    result = run("estimate", "train", "--model", "x", "--gpu", "h100")
    assert result.returncode == 2
    flat = " ".join(result.stderr.split())
    assert "unknown model 'x'" in flat
    for name in ("llama-3-8b", "gpt2", "mixtral-8x7b", "resnet-50", "vit-b-16"):
        assert name in flat
