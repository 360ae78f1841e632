"""benchmarks/train_gpu.py: the CPU smoke run end to end, the FLOPs behind its MFU, and the GPU run where one is."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.torch

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "train_gpu.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("train_gpu", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


tg = _load()


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=600, check=False
    )


def test_quick_run_measures_naive_and_tuned_and_prints_the_table(tmp_path: Path) -> None:
    out = tmp_path / "train_gpu.json"
    result = run("--quick", "--micro-batches", "16,32", "--steps", "2", "--json", str(out))
    assert result.returncode == 0, result.stderr
    assert "| configuration | settings | micro-batch |" in result.stdout
    assert "no verdict: CPU smoke run" in result.stdout
    payload = json.loads(out.read_text())
    roles = [trial["role"] for trial in payload["trials"]]
    assert roles == ["naive", "tuned", "candidate"]
    naive, tuned, other = payload["trials"]
    assert naive["status"] == tuned["status"] == other["status"] == "ok"
    # Naive: FP32 at the largest micro-batch that fits (the whole batch of 32 on a CPU); tuned: fused AdamW.
    assert naive["micro_batch_size"] == 32 and "precision=fp32" in naive["settings"]
    assert "fused_optimizer=True" in tuned["settings"]
    assert tuned["tokens_per_s"] >= other["tokens_per_s"]  # the fastest candidate is the one reported
    assert payload["summary"]["verdict"] is None and payload["summary"]["ratio"] > 0
    assert naive["mfu"] is None  # no catalog peak for a CPU
    assert payload["workload"]["global_batch"] == 32 and payload["workload"]["tokens_per_sample"] == 64


def test_compiled_candidates_compile_the_loss_and_the_model_alone_is_their_comparison(tmp_path: Path) -> None:
    out = tmp_path / "train_gpu.json"
    result = run("--quick", "--micro-batches", "16", "--compile-modes", "default", "--steps", "2", "--json", str(out))
    assert result.returncode == 0, result.stderr
    payload = json.loads(out.read_text())
    compiled = sorted(trial["settings"] for trial in payload["trials"][1:])
    assert compiled == [
        "precision=fp32, micro_batch_size=16, compile=True, fused_optimizer=True",
        "precision=fp32, micro_batch_size=16, compile=True, fused_optimizer=True, compile_loss=True",
    ]
    assert all(trial["status"] == "ok" for trial in payload["trials"])
    rates = {trial["settings"]: trial["tokens_per_s"] for trial in payload["trials"][1:]}
    gain = payload["summary"]["loss_in_graph_gain"]
    assert gain == pytest.approx(rates[compiled[1]] / rates[compiled[0]])
    assert any(
        line.startswith("loss compiled with the model / the model alone compiled: ")
        for line in payload["summary"]["lines"]
    )


def test_without_a_list_the_quick_run_grows_the_micro_batch_as_tune_does(tmp_path: Path) -> None:
    out = tmp_path / "train_gpu.json"
    result = run("--quick", "--growth-start", "16", "--steps", "2", "--json", str(out))
    assert result.returncode == 0, result.stderr
    payload = json.loads(out.read_text())
    growth = payload["growth"]
    sizes = [point["micro"] for point in growth["points"]]
    assert sizes[0] == 16 and set(sizes) <= {16, 32}
    assert growth["stopped"] in ("throughput", "global batch")
    roles = [trial["role"] for trial in payload["trials"]]
    assert roles[:2] == ["naive", "tuned"] and set(roles[2:]) <= {"growth"}
    # On the CPU nothing is compiled: the fastest growth trial is the tuned row.
    tuned = payload["trials"][1]
    assert tuned["micro_batch_size"] in sizes and "compile=True" not in tuned["settings"]
    assert any(line.startswith("micro-batch growth: 16 -> ") for line in payload["summary"]["lines"])


def test_mfu_counts_flops_as_nanogpt_does_for_gpt2_124m() -> None:
    # nanoGPT's estimate_mfu: 6N + 12 L H Q T per token, N without the position embeddings.
    workload = tg.describe_workload("GPT-2 124M", {"preset": "gpt2_124m", "global_batch": 64})
    assert workload.params == 124_475_904  # GPT-2 small with the vocabulary padded to 50304, as nanoGPT
    layers, heads, head_dim, context = 12, 12, 64, 1024
    nanogpt = (6 * (workload.params - context * 768) + 12 * layers * heads * head_dim * context) * context
    assert workload.flops_per_sample == pytest.approx(nanogpt, rel=0.002)


def test_naive_retries_halve_the_micro_batch_while_it_divides_the_batch() -> None:
    assert tg.halvings(64) == [64, 32, 16, 8, 4, 2, 1]
    assert tg.halvings(24) == [24, 12, 6, 3]


def test_without_cuda_the_gpu_run_exits_2() -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA, so the refusal without it cannot happen here; the GPU test runs instead")
    result = run()
    assert result.returncode == 2 and "no CUDA device" in result.stderr


@pytest.mark.gpu
def test_gpt2_on_the_gpu_meets_the_targets(tmp_path: Path) -> None:
    out = tmp_path / "train_gpu.json"
    result = run("--steps", "10", "--warmup", "3", "--json", str(out))
    payload = json.loads(out.read_text())
    assert result.returncode == 0, result.stdout + result.stderr
    assert payload["summary"]["ratio"] >= tg.TARGET_RATIO
    assert payload["summary"]["tuned_mfu"] >= tg.TARGET_MFU
