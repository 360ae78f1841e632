"""The calibration file: read from a bench result, written atomically, found by device, and its own CPU row.

No timing here: the bench result is a hand-written ``BenchResult.to_dict()`` so every figure in the
calibration can be checked against the one it came from.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest

from computewise.catalog import load_catalog
from computewise.catalog.calibration import (
    Calibration,
    calibration_catalog_paths,
    calibration_for,
    curve,
    equivalent_matmul_size,
    find_calibration,
    load_calibration,
    save,
)
from computewise.errors import InputError
from computewise.estimate.calibrated import calibrated_compute


def _measured(median: float) -> dict[str, Any]:
    return {"median": median, "low": median * 0.9, "high": median * 1.1, "repeats": 5}


def bench_dict(catalog_slug: str | None = None, device: str = "cpu") -> dict[str, Any]:
    """What ``BenchResult.to_dict()`` holds for one CPU: a 3-point fp32 sweep, a triad and two reference steps."""
    return {
        "schema_version": 1,
        "host": "box-1",
        "date": "2026-11-24T10:00:00+00:00",
        "cpu": "AMD EPYC",
        "threads": 2,
        "quick": True,
        "catalog_slug": catalog_slug,
        "devices": [
            {"device": device, "name": "AMD EPYC" if device == "cpu" else "NVIDIA H100", "catalog_slug": catalog_slug}
        ],
        "matmul": [
            {
                "device": device,
                "dtype": "fp32",
                "points": [],
                "peak_tflops": 0.15,
                "datasheet_tflops": None,
                "efficiency": [
                    {"size": 128, "fraction": 0.5},
                    {"size": 512, "fraction": 1.0},
                    {"size": 256, "fraction": 0.8},
                ],
            }
        ],
        "bandwidth": [{"device": device, "kind": "triad", "gb_per_s": _measured(12.5), "datasheet_gb_per_s": None}],
        "collectives": [],
        "storage": [],
        "reference": [
            {
                "kind": kind,
                "model": "tiny_gpt",
                "width": width,
                "device": device,
                "dtype": "fp32",
                "step_s": _measured(seconds),
                "tflops": flops / seconds / 1e12,
                "mfu": None,
                "flops": flops,
                "matmul_size": size,
            }
            for kind, width, seconds, flops, size in (
                ("train", 64, 0.04, 1.8e9, 203.2),
                ("train", 128, 0.10, 6.0e9, 322.5),
                ("infer", 128, 0.02, 2.0e9, 322.5),
            )
        ],
        "comparisons": [],
        "skipped": [],
        "notes": [],
    }


def test_from_bench_dict_takes_every_measured_figure() -> None:
    calibration = Calibration.from_bench_dict(bench_dict(), memory_bytes=8e9)
    assert calibration.device_slug == "cpu-box-1"
    assert calibration.peak_flops == {"fp32": pytest.approx(0.15e12)}
    assert calibration.matmul_curves["fp32"] == curve(((128.0, 0.5), (256.0, 0.8), (512.0, 1.0)))
    assert calibration.memory_bandwidth_bytes_per_s == pytest.approx(12.5e9)
    # Training steps only, as the share of the fp32 peak their FLOPs reached: 1.8e9 / 0.04 / 0.15e12.
    assert [point.size for point in calibration.step_curve] == [203.2, 322.5]
    assert [point.fraction for point in calibration.step_curve] == pytest.approx([0.3, 0.4])
    assert calibration.source == "computewise bench on box-1, 2026-11-24"
    assert calibration.note.startswith("utilization measured by bench on 2026-11-24")


def test_a_catalogued_device_gets_no_row_of_its_own() -> None:
    calibration = Calibration.from_bench_dict(bench_dict("h100-sxm", device="cuda:0"))
    assert calibration.device_slug == "h100-sxm"
    assert calibration.device_row is None


def test_a_result_without_matmul_figures_cannot_calibrate() -> None:
    result = bench_dict()
    result["matmul"] = []
    with pytest.raises(InputError, match="no matmul figure"):
        Calibration.from_bench_dict(result)


def test_save_round_trips_and_the_cpu_row_loads_as_this_cpu(tmp_path: Path) -> None:
    tmp_path = tmp_path / "saved"
    calibration = Calibration.from_bench_dict(bench_dict(), memory_bytes=8e9)
    path = save(calibration, tmp_path)
    assert path.name == "calibration-cpu-box-1.json"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "accelerators-bench-cpu-box-1.csv",
        "calibration-cpu-box-1.json",
    ]  # no temporary file left behind
    assert load_calibration(path) == calibration
    document = json.loads(path.read_text())
    assert document["source"] == "computewise bench on box-1, 2026-11-24"
    schema = json.loads((Path(__file__).resolve().parents[2] / "docs/schemas/calibration.schema.json").read_text())
    jsonschema.validate(document, schema)

    row = load_catalog([tmp_path]).accelerator("this-cpu")
    assert (row.slug, row.kind) == ("cpu-box-1", "cpu")
    assert row.peak_flops["fp32"] == pytest.approx(0.15e12)
    assert row.memory_bandwidth_bytes_per_s == pytest.approx(12.5e9)
    assert row.source.startswith("computewise bench on box-1, 2026-11-24")
    assert calibration_catalog_paths(path) == (tmp_path / "accelerators-bench-cpu-box-1.csv",)


def test_found_by_slug_in_the_user_catalog_dir(user_catalog_dir: Path) -> None:
    assert find_calibration("cpu-box-1") is None
    calibration = Calibration.from_bench_dict(bench_dict(), memory_bytes=8e9)
    save(calibration)
    assert find_calibration("cpu-box-1") == calibration
    assert calibration_for("cpu-box-1") == calibration
    assert calibration_for("h100-sxm") is None


def test_a_calibration_of_another_device_is_refused(tmp_path: Path) -> None:
    path = save(Calibration.from_bench_dict(bench_dict(), memory_bytes=8e9), tmp_path)
    assert calibration_for("cpu-box-1", path) is not None
    assert calibration_for("cpu-other", path, aliases=("this-cpu",)) is not None
    with pytest.raises(InputError, match="is for cpu-box-1, not h100-sxm"):
        calibration_for("h100-sxm", path)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d.update(schema_version=99), "schema_version"),
        (lambda d: d["step_curve"].append({"size": 100, "fraction": 70}), "fraction"),
        (lambda d: d.pop("peak_flops"), "peak_flops"),
    ],
)
def test_a_damaged_file_is_an_input_error(tmp_path: Path, edit: Any, message: str) -> None:
    path = save(Calibration.from_bench_dict(bench_dict(), memory_bytes=8e9), tmp_path)
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    with pytest.raises(InputError, match=message):
        load_calibration(path)


@pytest.mark.parametrize(
    ("key", "edit"),
    [
        ("peak_flops.bf16", lambda d: d["peak_flops"].update(bf16=1e-300)),  # estimates said "time nan ms"
        ("peak_flops.bf16", lambda d: d["peak_flops"].update(bf16=0)),  # was "has no bf16 matmul figure"
        ("peak_flops.fp32", lambda d: d["peak_flops"].update(fp32=-1.5e11)),
        ("peak_flops.fp32", lambda d: d["peak_flops"].update(fp32=2e18)),  # an exaFLOP/s: a unit slip
        ("memory_bandwidth_bytes_per_s", lambda d: d.update(memory_bandwidth_bytes_per_s=-3e12)),  # was faster
        ("memory_bandwidth_bytes_per_s", lambda d: d.update(memory_bandwidth_bytes_per_s=0)),
        ("memory_bandwidth_bytes_per_s", lambda d: d.update(memory_bandwidth_bytes_per_s=1e15)),
        ("launch_s", lambda d: d.update(launch_s=-2e-6)),
        ("launch_s", lambda d: d.update(launch_s=5.0)),
        ("matmul_curves.fp32[0].size", lambda d: d["matmul_curves"]["fp32"][0].update(size=0)),
        ("matmul_curves.fp32[2].size", lambda d: d["matmul_curves"]["fp32"][2].update(size=1e9)),
        ("matmul_curves.fp32[1].fraction", lambda d: d["matmul_curves"]["fp32"][1].update(fraction=1e-300)),
        ("matmul_curves.fp32[1].fraction", lambda d: d["matmul_curves"]["fp32"][1].update(fraction=-0.5)),
        ("step_curve[0].size", lambda d: d["step_curve"][0].update(size=-203.2)),
        ("step_curve[1].fraction", lambda d: d["step_curve"][1].update(fraction=0)),
    ],
)
def test_a_figure_out_of_its_range_is_refused_by_file_and_key(tmp_path: Path, key: str, edit: Any) -> None:
    path = save(Calibration.from_bench_dict(bench_dict(), memory_bytes=8e9), tmp_path)
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    with pytest.raises(InputError, match=re.escape(f"{path}: {key} must be between")) as raised:
        load_calibration(path)
    assert "bench --save" in (raised.value.hint or "")


def test_the_edges_of_each_range_still_load(tmp_path: Path) -> None:
    """A step beating the sweep's dtype (share above 1) and a slow CPU's figures are real, not edits."""
    calibration = Calibration.from_bench_dict(bench_dict(), memory_bytes=8e9)
    real = replace(calibration, peak_flops={"fp32": 1e6}, step_curve=curve(((1.0, 1e-6), (1e7, 20.0))), launch_s=1e-8)
    assert load_calibration(save(real, tmp_path)) == real


def test_a_bench_result_with_a_broken_figure_is_not_saved() -> None:
    result = bench_dict()
    result["bandwidth"][0]["gb_per_s"] = _measured(0.0)
    with pytest.raises(InputError, match="bench result: memory_bandwidth_bytes_per_s must be between"):
        Calibration.from_bench_dict(result)


def test_cli_refuses_a_broken_calibration_with_exit_2_and_prints_no_estimate(tmp_path: Path) -> None:
    path = save(Calibration.from_bench_dict(bench_dict("h100-sxm", device="cuda:0")), tmp_path)
    data = json.loads(path.read_text())
    data["peak_flops"]["bf16"] = 1e-300
    path.write_text(json.dumps(data))
    args = ("estimate", "train", "-m", "llama-2-7b", "-g", "h100", "-n", "8", "--zero", "3", "--json")
    result = subprocess.run(
        [sys.executable, "-m", "computewise.cli.app", *args, "--calibration", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.startswith(f"error: {path}: peak_flops.bf16 must be between")
    assert "To fix: re-run computewise bench --save" in result.stderr
    assert "Warning" not in result.stderr and "Traceback" not in result.stderr


def test_missing_and_non_json_files_are_input_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read"):
        load_calibration(tmp_path / "absent.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(InputError, match="not JSON"):
        load_calibration(tmp_path / "bad.json")


def test_interpolation_is_linear_in_log_size_and_flat_beyond_the_ends() -> None:
    calibration = replace(
        Calibration.from_bench_dict(bench_dict(), memory_bytes=8e9), step_curve=curve(((128.0, 0.2), (512.0, 0.6)))
    )
    measured = calibrated_compute(calibration, "fp32", np.array([64.0, 256.0, 4096.0]), whole_steps=True)
    assert measured is not None and measured.whole_step
    assert list(measured.share) == pytest.approx([0.2, 0.4, 0.6])  # 256 is halfway in log2
    assert (
        calibrated_compute(calibration, "bf16", np.array([256.0]), whole_steps=True) is None
    )  # not measured: no calibration


def test_equivalent_matmul_size_keeps_the_flops() -> None:
    size = equivalent_matmul_size(2048, 64)
    assert size**3 == pytest.approx(2048 * 64 * 64)
    assert math.isclose(equivalent_matmul_size(512, 512), 512)
