"""``computewise bench`` from the real console script: one quick run checked whole, and its refusals.

The quick run is done once per module (about 35 s on the 2-core VM) with --json, --html and --save
together, so every output is checked against the same measurement.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

CLI = [sys.executable, "-m", "computewise.cli.app", "bench"]
ROOT = Path(__file__).resolve().parents[2]

pytest.importorskip("torch")


@dataclass(frozen=True)
class QuickRun:
    result: subprocess.CompletedProcess[str]
    html: Path
    catalog_dir: Path


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> QuickRun:
    work = tmp_path_factory.mktemp("bench")
    html, catalog_dir = work / "bench.html", work / "catalog"
    env = {**os.environ, "COMPUTEWISE_CATALOG_DIR": str(catalog_dir)}
    args = ["--quick", "--json", "--html", str(html), "--save", "--device", "cpu"]
    # From the repository root: the reference steps import examples/tiny_gpt.py from there.
    result = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    return QuickRun(result, html, catalog_dir)


def test_quick_json_is_one_document_that_matches_its_schema(
    quick_run: QuickRun, json_schema: Callable[[object, str], None]
) -> None:
    assert quick_run.result.returncode == 0, quick_run.result.stderr
    data = json.loads(quick_run.result.stdout)  # the whole of stdout: one document, the bar is on stderr
    json_schema(data, "bench")
    assert data["schema_version"] == 1
    assert [d["device"] for d in data["devices"]] == ["cpu"]
    fp32 = next(f for f in data["matmul"] if f["dtype"] == "fp32")
    assert max(e["fraction"] for e in fp32["efficiency"]) == 1.0
    assert any(b["kind"] == "triad" for b in data["bandwidth"])
    assert data["collectives"] and data["reference"]


def test_html_is_written_with_the_efficiency_curve(quick_run: QuickRun) -> None:
    assert quick_run.result.returncode == 0, quick_run.result.stderr
    page = quick_run.html.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and "<svg" in page and "matmul efficiency" in page


def test_save_writes_a_calibration_into_the_user_catalog(quick_run: QuickRun) -> None:
    assert quick_run.result.returncode == 0, quick_run.result.stderr
    written = sorted(quick_run.catalog_dir.glob("calibration-*.json"))
    assert len(written) == 1
    assert f"wrote the calibration {written[0]}" in quick_run.result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--device", "tpu:0"], "--device 'tpu:0' is not a device on this machine"),
        (["--storage", "/no/such/directory"], "not a directory"),
        (["--no-such-flag"], "No such option"),
        (["--device"], "requires an argument"),
    ],
)
def test_bad_flags_exit_2_before_measuring(args: list[str], message: str) -> None:
    result = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert message in result.stderr
    assert result.stdout == ""
