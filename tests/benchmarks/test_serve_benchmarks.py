"""The serving benchmarks run end to end in their --quick mode: real servers, real load, their figures printed."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("uvicorn")

pytestmark = pytest.mark.torch

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
# One xdist worker runs every test that serves the exported MiniLM, so the session fixture exports it once.
SHARES_ARTIFACT = pytest.mark.xdist_group("minilm-artifact")


def run(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(BENCHMARKS / script), "--quick", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)


@pytest.fixture(scope="session")  # not "module": xdist runs other modules between these tests
def minilm_artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """MiniLM exported once, by the benchmarks' own ``export_artifact``, for every quick run that serves it.

    Exporting (``computewise optimize``) takes longer than a quick run's probes; each script still builds
    its own artifact when run without ``--artifact``, as a user runs it.
    """
    spec = importlib.util.spec_from_file_location("serve_batching", BENCHMARKS / "serve_batching.py")
    assert spec is not None and spec.loader is not None
    serve_batching = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(serve_batching)
    sentences = (serve_batching.ROOT / "examples" / "sentences.txt").read_text().splitlines()
    artifact: Path = serve_batching.export_artifact(tmp_path_factory.mktemp("minilm"), sentences)
    return artifact


def test_overhead_quick_run_answers_every_request(tmp_path: Path) -> None:
    out = tmp_path / "overhead.json"
    result = run("serve_overhead.py", "--json", str(out))
    assert result.returncode == 0, result.stderr
    assert "logical cores" in result.stdout and "req/s" in result.stdout
    figures = json.loads(out.read_text())
    assert figures["sent"] > 0 and figures["error_rate"] == 0


@SHARES_ARTIFACT
def test_batching_quick_run_finds_a_rate_per_policy(tmp_path: Path, minilm_artifact: Path) -> None:
    out = tmp_path / "batching.json"
    result = run("serve_batching.py", "--policies", "none,cost", "--artifact", str(minilm_artifact), "--json", str(out))
    assert result.returncode == 0, result.stderr
    figures = json.loads(out.read_text())
    assert set(figures["results"]) == {"none", "cost"}
    assert all(r["max_rate_rps"] > 0 for r in figures["results"].values())


@SHARES_ARTIFACT
def test_cache_quick_run_measures_an_uncached_and_a_cached_server(tmp_path: Path, minilm_artifact: Path) -> None:
    out = tmp_path / "cache.json"
    result = run("serve_cache.py", "--artifact", str(minilm_artifact), "--json", str(out))
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


@SHARES_ARTIFACT
def test_ray_side_by_side_quick_run_measures_both_stacks(tmp_path: Path, minilm_artifact: Path) -> None:
    pytest.importorskip("ray.serve", reason="the ray extra is not installed: pip install 'computewise[ray]'")
    out = tmp_path / "vs_ray.json"
    result = run("serve_vs_ray.py", "--artifact", str(minilm_artifact), "--json", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert set(figures["results"]) == {"computewise", "ray-serve"}
    assert all((r["max_rate_rps"] or 0) > 0 for r in figures["results"].values()), result.stdout
    assert "computewise / Ray Serve" in result.stdout
