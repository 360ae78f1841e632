"""``computewise scaletest`` end to end: the real CLI in a child process, real torchrun ranks on 127.0.0.1.

User errors go through the real exit-code-2 path of ``computewise.cli.app.main``; a world size that
fails after the single-process run is a row with its reason and exit code 1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from computewise.tune.scaletest import ScaleTestResult

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.torch

ROOT = Path(__file__).resolve().parents[2]


def scaletest(*args: str, timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "computewise.cli.app", "scaletest", *args]
    env = os.environ | {"COLUMNS": "100"}
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, cwd=ROOT, env=env, check=False)


def test_measures_one_and_two_processes_and_names_the_verdict() -> None:
    result = scaletest("examples.tiny_gpt:setup", "--nproc", "2", "--steps", "3", "--warmup-steps", "1")
    assert result.returncode == 0, result.stderr
    out = " ".join(result.stdout.split())  # Rich wraps long lines
    assert "scaletest examples.tiny_gpt:setup" in out
    assert "procs" in out and "samples/s" in out and "pred." in out
    assert "loopback (gloo over TCP on 127.0.0.1) at 1 GB/s" in out
    assert "Adding workers keeps paying up to 2 processes" in out or "Adding workers stops paying at 2" in out
    assert "eff. = measured scaling efficiency" in out


def test_json_reports_a_failing_world_size_beside_the_measured_one(json_schema: Callable[[object, str], None]) -> None:
    # 40 samples hold one batch of 32 but not the 64 two ranks draw a step (weak scaling).
    result = scaletest(
        "examples.tiny_gpt:setup", "--nproc", "1,2", "--steps", "2", "--warmup-steps", "0",
        "--config", '{"samples": 40}', "--json",
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    data = json.loads(result.stdout)
    json_schema(data, "scaletest")
    assert next(iter(data)) == "schema_version" and data["schema_version"] == 1
    assert ScaleTestResult.from_dict(data).to_dict() == data
    one, two = data["rows"]
    assert one["status"] == "ok" and one["samples_per_s"] > 0
    assert two["status"] == "error"
    assert "the dataset has 40 samples, fewer than one global batch of 64" in two["message"]
    assert data["stops_paying_at"] is None
    assert "not measured: 2 processes" in result.stderr


def test_an_entry_point_that_cannot_be_imported_is_named_with_exit_2() -> None:
    result = scaletest("no_such_module:setup", "--nproc", "1,2", timeout_s=120)
    assert result.returncode == 2
    assert "no_such_module:setup" in result.stderr and "To fix:" in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--nproc", "0,2"), "--nproc must be between 1 and 10000"),
        (("--nproc", "1,x"), "cannot read --nproc 'x'"),
        (("--config", "{not json"), "--config is not valid JSON"),
        (("--config", "[1, 2]"), "is neither a JSON object nor a file"),
        (("--steps", "0"), "--steps must be between 1 and 1e6"),
        (("--device", "tpu"), "--device must be one of auto, cpu, cuda"),
    ],
)
def test_bad_options_exit_2_with_the_reason(args: tuple[str, ...], message: str) -> None:
    result = scaletest("examples.tiny_gpt:setup", *args, timeout_s=120)
    assert result.returncode == 2, result.stdout
    assert message in " ".join(result.stderr.split())


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_asked_for_without_a_gpu_exits_2() -> None:
    result = scaletest("examples.tiny_gpt:setup", "--device", "cuda", timeout_s=120)
    assert result.returncode == 2
    assert "torch sees no CUDA device" in result.stderr
