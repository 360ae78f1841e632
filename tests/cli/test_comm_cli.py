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
        (("--gpu", "h100", "--gpus", "16", "--per-node", "3"), "16 ranks do not fill nodes of 3 evenly (5 x 3 + 1)"),
        (("--gpu", "h100", "--gpus", "16", "--per-node", "3"), "use --per-node 2, or --gpus 15 or 18"),
        (("--gpu", "h100", "--gpus", "12"), "12 ranks do not fill nodes of 8 evenly"),
    ],
)
def test_bad_input_exits_2_with_a_clear_message(args: tuple[str, ...], message: str) -> None:
    result = run(*args)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert message in " ".join(result.stderr.split())
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("gpu", "gpus"), [("apple-m2", "4"), ("xeon-8488c", "16"), ("epyc-9654", "2"), ("jetson-agx-orin-64gb", "2")]
)
@pytest.mark.parametrize("as_json", [False, True])
def test_a_device_without_interconnect_is_refused_as_estimate_infer_refuses_it(
    gpu: str, gpus: str, as_json: bool
) -> None:
    """No link speed, no time: exit 2 with the fix, never a row of inf (or --json's invalid Infinity)."""
    result = run("--gpu", gpu, "--gpus", gpus, "--bytes", "1GiB", *(("--json",) if as_json else ()))
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stdout == ""
    assert "no interconnect bandwidth" in result.stderr and "To fix: add interconnect_bytes_per_s" in result.stderr
    infer = subprocess.run(  # llama-3-8b's 32 heads divide every --gpus here
        [*CLI, "estimate", "infer", "--model", "llama-3-8b", "--gpu", gpu, "--gpus", gpus],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert infer.returncode == 2 and infer.stderr == result.stderr  # one check, one message


@pytest.mark.parametrize("verb", [("comm",), ("train", "--model", "gpt2"), ("infer", "--model", "gpt2")])
def test_an_instance_of_another_cloud_names_its_cloud(verb: tuple[str, ...]) -> None:
    """A real name under the wrong --cloud: say where it is sold, not 'did you mean' the same name."""
    result = subprocess.run(
        [*CLI, "estimate", *verb, "--gpu", "h100", "--cloud", "aws", "--instance", "a3-highgpu-8g"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "instance type a3-highgpu-8g is sold on gcp, not on aws" in result.stderr
    assert "To fix: use --cloud gcp" in result.stderr
    assert "did you mean" not in result.stderr


def test_one_rank_says_there_is_no_communication() -> None:
    """One rank moves nothing: the rows are 0 and no formula with a base latency contradicts them."""
    text = run("--gpu", "h100", "--gpus", "1", "--bytes", "1GiB")
    assert text.returncode == 0, text.stderr
    assert "1 rank: no communication" in text.stdout and "6.6 us" not in text.stdout
    data = json.loads(run("--gpu", "h100", "--gpus", "1", "--bytes", "1GiB", "--json").stdout)
    assert data["formula"] == "none (1 rank)" and data["peak_busbw_bytes_per_s"] == 0
    assert [row["time_s"] for row in data["rows"]] == [0]
    assert data["notes"] == ["1 rank: no communication, so every size takes 0 us"]


def test_a_node_without_network_says_only_that() -> None:
    """No rented instance, one node: the network line says none, without a fabric or efficiency for it."""
    result = run("--gpu", "apple-m2", "--gpus", "1", "--bytes", "8")
    assert result.returncode == 0, result.stderr
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("network")]
    assert line.split() == ["network", "none", "(single", "node)"]
