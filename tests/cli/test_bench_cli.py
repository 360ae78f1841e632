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
# one xdist worker runs the module, so the module fixture runs `bench --quick` once, not once per worker
pytestmark = pytest.mark.xdist_group("bench-quick-run")


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
    # --force: this VM is often busy, and whether it is must not decide this test (the refusal has its own)
    args = ["--quick", "--json", "--html", str(html), "--save", "--force", "--device", "cpu"]
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
    assert [f["device"] for f in data["launch"]] == ["cpu"]
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
    (launch,) = json.loads(quick_run.result.stdout)["launch"]
    assert json.loads(written[0].read_text(encoding="utf-8"))["launch_s"] == launch["back_to_back_s"]["median"]


# `computewise bench` whose matmul sweep (the measurement, and only it) replays a recording: what the
# 2-core VM measured on 2026-11-27 while other test runs shared it, and the fp32 figure at 1024
# (0.016-0.18 TFLOP/s). Everything else (triad, collectives, the save) runs for real.
REPLAYED_BENCH = """
import sys

from computewise.bench import MatmulFigure, MatmulPoint, Measured, suite

RECORDED = {  # dtype: {size: (median, low, high)} in TFLOP/s, 5 repeats each
    "fp32": {128: (0.0366, 0.00015, 0.158), 256: (0.0089, 0.0035, 0.0303), 512: (0.0105, 0.0057, 0.0120),
             1024: (0.0170, 0.016, 0.18)},
    "bf16": {128: (0.0261, 0.0145, 0.0293), 256: (0.122, 0.111, 0.164), 512: (0.171, 0.0976, 0.266),
             1024: (0.134, 0.0864, 0.867)},
    "int8": {128: (0.000175, 0.00015, 0.000175), 256: (0.0195, 0.00605, 0.0437), 512: (0.0183, 0.0121, 0.0330),
             1024: (0.0453, 0.0221, 0.0906)},
}


def replay(device, dtype, sizes, *, quick, datasheet_tflops=None, progress=None):
    points = tuple(MatmulPoint(n, dtype, Measured(*RECORDED[dtype][n], 5)) for n in sizes)
    return MatmulFigure(device, dtype, points, max(p.tflops.median for p in points), datasheet_tflops)


suite.measure_matmul = replay
from computewise.cli.app import main

sys.argv = ["computewise", "bench", *sys.argv[1:]]
main()
"""


def test_save_refuses_a_calibration_measured_on_a_busy_machine_unless_forced(tmp_path: Path) -> None:
    (tmp_path / "replayed_bench.py").write_text(REPLAYED_BENCH, encoding="utf-8")
    catalog_dir = tmp_path / "catalog"
    env = {**os.environ, "COMPUTEWISE_CATALOG_DIR": str(catalog_dir)}

    def bench(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "replayed_bench.py", "--quick", "--json", "--save", "--device", "cpu", *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)

    refused = bench()
    said = " ".join(refused.stderr.split())
    assert refused.returncode == 2, refused.stderr
    assert "calibration not saved: the machine was busy" in said
    assert "fp32 matmul 128: 0.00015-0.158 TFLOP/s (1053.3x)" in said
    assert "To fix: rerun computewise bench --save on a quiet machine" in said and "--force" in said
    assert "Traceback" not in refused.stderr
    assert json.loads(refused.stdout)["matmul"]  # what was measured is still printed
    assert not list(catalog_dir.glob("calibration-*.json"))

    forced = bench("--force")
    assert forced.returncode == 0, forced.stderr
    written = list(catalog_dir.glob("calibration-*.json"))
    assert len(written) == 1
    said = " ".join(forced.stderr.split())
    assert "warning: saved although the machine was busy" in said and f"wrote the calibration {written[0]}" in said


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--device", "tpu:0"], "--device 'tpu:0' is not a device on this machine"),
        (["--storage", "/no/such/directory"], "not a directory"),
        (["--no-such-flag"], "No such option"),
        (["--device"], "requires an argument"),
        (["--force"], "--force only changes what --save does"),
    ],
)
def test_bad_flags_exit_2_before_measuring(args: list[str], message: str) -> None:
    result = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert message in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("html", "message"),
    [
        ("/no/such/dir/bench.html", "--html /no/such/dir/bench.html: directory /no/such/dir does not exist"),
        (str(ROOT), f"--html {ROOT} is a directory"),
    ],
)
def test_an_html_path_that_cannot_be_written_is_refused_before_measuring(html: str, message: str) -> None:
    """The report is written after the whole benchmark: a bad path must not cost that minute for nothing."""
    result = subprocess.run([*CLI, "--quick", "--json", "--html", html], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert lines[0] == f"error: {message}" and lines[1].startswith("To fix:"), result.stderr
    assert len(lines) == 2, result.stderr  # no progress: nothing was measured
