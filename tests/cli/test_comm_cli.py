"""``computewise estimate comm`` as a user runs it: the real console script in a child process."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

CLI = [sys.executable, "-m", "computewise.cli.app"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, "estimate", "comm", *args], capture_output=True, text=True, timeout=120)


def test_one_size_json_contract() -> None:
    result = run("--gpu", "h100", "--gpus", "64", "--op", "all-reduce", "--bytes", "1GiB", "--cloud", "aws", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["op"] == "all-reduce" and data["gpus"] == 64 and data["nodes"] == 8
    assert data["instance"]["instance_type"] == "p5.48xlarge" and data["instance"]["fabric"] == "efa"
    (row,) = data["rows"]
    assert row["size_bytes"] == 2**30
    assert row["time_s"] > 0
    assert row["busbw_bytes_per_s"] == pytest.approx(row["algbw_bytes_per_s"] * 2 * 63 / 64)
    assert row["busbw_bytes_per_s"] <= data["peak_busbw_bytes_per_s"]


def test_sweep_without_bytes_is_nccl_tests_shaped() -> None:
    result = run("--gpu", "a100", "--gpus", "8", "--json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)["rows"]
    assert [row["size_bytes"] for row in rows] == [2.0**k for k in range(3, 34)]  # 8 B .. 8 GiB, x2
    busbw = [row["busbw_bytes_per_s"] for row in rows]
    assert busbw == sorted(busbw)  # grows with size, latency-bound at the small end


def test_terminal_output_names_the_instance_the_fabric_and_the_formula() -> None:
    result = run("--gpu", "a100-40gb", "--gpus", "32", "--instance", "Standard_ND96asr_v4", "--bytes", "8GiB")
    assert result.returncode == 0, result.stderr
    for text in ("Standard_ND96asr_v4", "InfiniBand", "busbw", "2(n-1)/n"):
        assert text in result.stdout, text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--gpu", "h100", "--op", "allreduc"), "did you mean 'all-reduce'"),
        (("--gpu", "h100", "--gpus", "0"), "--gpus"),
        (("--gpu", "h100", "--gpus", "5000000"), "--gpus must be between 1 and 1e6"),
        (("--gpu", "h100", "--bytes", "0"), "--bytes"),
        (("--gpu", "h100", "--bytes", "2TiB"), "1 TiB"),
        (("--gpu", "h100", "--bytes", "lots"), "--bytes"),
        (("--gpu", "h100", "--gpus", "16", "--instance", "gpu_8x_h100_sxm5"), "no network bandwidth"),
        (("--gpu", "h100", "--instance", "p4d.24xlarge"), "not h100-sxm"),
    ],
)
def test_bad_input_exits_2_with_a_clear_message(args: tuple[str, ...], message: str) -> None:
    result = run(*args)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert message in " ".join(result.stderr.split())
    assert "Traceback" not in result.stderr
