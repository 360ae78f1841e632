"""The serving benchmarks run end to end in their --quick mode: real servers, real load, their figures printed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("uvicorn")

pytestmark = pytest.mark.torch

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def run(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(BENCHMARKS / script), "--quick", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)


def test_overhead_quick_run_answers_every_request(tmp_path: Path) -> None:
    out = tmp_path / "overhead.json"
    result = run("serve_overhead.py", "--json", str(out))
    assert result.returncode == 0, result.stderr
    assert "logical cores" in result.stdout and "req/s" in result.stdout
    figures = json.loads(out.read_text())
    assert figures["sent"] > 0 and figures["error_rate"] == 0


def test_batching_quick_run_finds_a_rate_per_policy(tmp_path: Path) -> None:
    out = tmp_path / "batching.json"
    result = run("serve_batching.py", "--policies", "none,cost", "--json", str(out))
    assert result.returncode == 0, result.stderr
    figures = json.loads(out.read_text())
    assert set(figures["results"]) == {"none", "cost"}
    assert all(r["max_rate_rps"] > 0 for r in figures["results"].values())


def test_cache_quick_run_measures_an_uncached_and_a_cached_server(tmp_path: Path) -> None:
    out = tmp_path / "cache.json"
    result = run("serve_cache.py", "--json", str(out))
    assert result.returncode == 0, result.stderr
    assert "cached / uncached" in result.stdout and "logical cores" in result.stdout
    figures = json.loads(out.read_text())
    assert [r["cached"] for r in figures["runs"]] == [False, True]
    assert all((r["max_rate_rps"] or 0) > 0 for r in figures["runs"]), result.stdout
    uncached, cached = figures["runs"]
    assert uncached["hit_ratio"] is None
    # Half the requests repeat an earlier one; a repeat sent while its original is in flight is a miss.
    assert 0.3 <= cached["hit_ratio"] <= 0.65
    assert figures["cached_over_uncached"] == pytest.approx(figures["cached_rps"] / figures["uncached_rps"])


def test_ray_side_by_side_quick_run_measures_both_stacks(tmp_path: Path) -> None:
    pytest.importorskip("ray.serve", reason="the ray extra is not installed: pip install 'computewise[ray]'")
    out = tmp_path / "vs_ray.json"
    result = run("serve_vs_ray.py", "--json", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert set(figures["results"]) == {"computewise", "ray-serve"}
    assert all((r["max_rate_rps"] or 0) > 0 for r in figures["results"].values()), result.stdout
    assert "computewise / Ray Serve" in result.stdout
