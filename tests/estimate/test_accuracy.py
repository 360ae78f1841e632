"""Step time against published training runs (benchmarks/accuracy.py): the targets of docs/ACCURACY.md.

Each figure in benchmarks/data/published_training_runs.csv is cited there, row by row (papers'
tables, model cards); the test recomputes every row through ``evaluate_train`` and fails when a
target is missed, so a change to the time model that drifts from the published runs cannot land.
"""

from __future__ import annotations

import importlib.util
import statistics
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from computewise.estimate import Assumptions

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "accuracy.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("accuracy", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


accuracy = _load()


@pytest.fixture(scope="module")
def results(assumptions: Assumptions) -> dict[str, object]:
    return {r.name: r for r in accuracy.table(accuracy.load_runs(), assumptions)}


def test_megatron_tables_within_the_targets(results: dict[str, object]) -> None:
    """Narayanan et al. 2021 Table 1 and Korthikanti et al. 2022 Table 5: median <= 5 %, worst <= 25 %."""
    errors = [abs(r.error) for name, r in results.items() if name.startswith("gpt-")]  # type: ignore[attr-defined]
    assert len(errors) == 18
    assert statistics.median(errors) <= 0.05
    assert max(errors) <= 0.25


# Held-out rows outside 25 %, each explained in docs/ACCURACY.md; a new miss fails the test.
DOCUMENTED_MISSES = {
    "mtnlg-530b-2800",
    "mtnlg-530b-3360",
    "nemo-qwen3-30b-a3b-dropless-mb2",  # dropless MoE dispatch: 2x NVIDIA's token-drop run of the same layout
    "nemo-qwen3-30b-a3b-dropless-mb1",
}


def test_held_out_runs_within_25_percent(results: dict[str, object]) -> None:
    """Runs the calibration never saw: at least four within 25 % (issue 14), misses only where documented."""
    held_out = {n: r for n, r in results.items() if r.role == "check"}  # type: ignore[attr-defined]
    missed = {n for n, r in held_out.items() if abs(r.error) > 0.25}  # type: ignore[attr-defined]
    assert len(held_out) - len(missed) >= 4
    assert missed <= DOCUMENTED_MISSES


def test_llama3_table4(results: dict[str, object]) -> None:
    """Dubey et al. 2024 Table 4: 43 %, 41 % and 38 % BF16 MFU within 25 %. At 131K tokens attention is
    most of the work; it is timed at FlashAttention's own rate (``attention_share_of_matmul``), lower
    than a GEMM's, so the long-context row no longer comes out faster than the 8K rows."""
    for name in ("llama3-405b-8k", "llama3-405b-16k", "llama3-405b-128k"):
        assert abs(results[name].error) <= 0.25, name  # type: ignore[attr-defined]
    assert results["llama3-405b-128k"].computed < results["llama3-405b-8k"].computed  # type: ignore[attr-defined]


def test_recompute_and_scale_move_the_right_way(results: dict[str, object]) -> None:
    """Selective recompute with sequence parallelism beats full recompute (Korthikanti Table 5: ~30 %)."""
    for size in ("22b", "175b", "530b", "1t"):
        full = results[f"gpt-{size}-full"].computed  # type: ignore[attr-defined]
        selective = results[f"gpt-{size}-selective"].computed  # type: ignore[attr-defined]
        assert 1.15 < full / selective < 1.6, size


def test_quick_script_prints_the_table() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick"], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "| gpt-1008b |" in done.stdout
    assert "median |error|" in done.stdout


def test_nvidia_fp8_runs(results: dict[str, object]) -> None:
    """NVIDIA's published FP8 pre-training of dense models on DGX H100 (NeMo 24.07 and Megatron-Bridge 25.x,
    GPT-3 5B to Llama 3.1 405B, 8 to 1,024 GPUs): fp8 GEMMs in the transformer blocks, attention and the LM
    head in bf16 as Transformer Engine runs them, and every GEMM input quantised where it is used. Before the
    quantisation was timed the small models were the optimistic ones (GPT-3 5B +24 %, 20B +17 %)."""
    dense = {n: r for n, r in results.items() if n.startswith(("nemo-llama", "nemo2407-"))}
    assert len(dense) == 15
    errors = {n: r.error for n, r in dense.items()}  # type: ignore[attr-defined]
    assert statistics.median(abs(e) for e in errors.values()) <= 0.05, errors
    assert all(abs(e) <= 0.15 for e in errors.values()), errors


def test_nvidia_token_drop_moe_run_within_25_percent(results: dict[str, object]) -> None:
    """Qwen3-30B-A3B on 16 H100s with 8-way expert parallelism: each device's grouped GEMMs run its 16 experts
    on the tokens of all 8 devices, and the router and the token shuffles are timed. NVIDIA's dropless runs of
    the same layout are twice as slow as its token-drop one, which the estimate does not explain (DOCUMENTED_MISSES)."""
    row = results["nemo-qwen3-30b-a3b-tokendrop"]
    assert abs(row.error) <= 0.25  # type: ignore[attr-defined]


def test_published_layouts_fit_as_they_ran(results: dict[str, object]) -> None:
    """Every published run ran, so its layout fit in its devices' memory, and the estimate must let it: a
    memory model that overcounts would make ``plan train`` reject the recipes people actually run. Before
    Megatron's fused SwiGLU and in-place loss, Transformer Engine's fp8 inputs, ZeRO over dp x cp, the
    fused loss of llm-foundry and NVIDIA's 16-bit gradient reduce were modelled, 16 of 63 did not fit.

    Six of MaxText's v5p runs with remat_policy minimal (JAX's dots policy, each tensor-parallel group's
    sequences in one micro-batch) come out at most 10 % over their chip: each keeps 78 % of a layer's outputs
    per token, and XLA rematerialises more when a program would not fit in HBM, which is not modelled
    (docs/ACCURACY.md). An estimate over the device refuses a layout, never lets one run out of memory."""
    over = {n: r.memory_bytes / r.device_bytes for n, r in results.items() if not r.fits}  # type: ignore[attr-defined]
    minimal = {f"maxtext-{size}-v5p-{chips}" for size, chips in (("32b", 128), ("64b", 128), ("256b", 1024))} | {
        f"maxtext-{size}-2x-v5p-{chips}" for size, chips in (("32b", 128), ("64b", 128), ("256b", 1024))
    }
    assert set(over) == minimal, over
    assert all(ratio <= 1.10 for ratio in over.values()), over
    assert len(results) == 103


def _maxtext(results: dict[str, object], slices: bool) -> dict[str, object]:
    """MaxText's rows on one slice, or on several (``-2x-`` to ``-32x-`` in the name)."""
    return {n: r for n, r in results.items() if n.startswith("maxtext-") and ("x-v5" in n) == slices}


def test_maxtext_on_one_tpu_slice(results: dict[str, object]) -> None:
    """MaxText's published runs on one v5e-256 or v5p slice (2023): a slice is one node on ICI, and each chip's
    profile is fitted on one declared row, so the 10 others are held out: median within 10 %, none over 25 %.
    Each tensor-parallel group runs its chips' sequences as one micro-batch (MaxText had no gradient
    accumulation then); split into per-chip micro-batches, the 512B model at TP 16 came out 29 % slow."""
    tpu = _maxtext(results, slices=False)
    assert {n for n, r in tpu.items() if r.role == "fit"} == {"maxtext-16b-v5e-256", "maxtext-32b-v5p-128"}  # type: ignore[attr-defined]
    held = [abs(r.error) for r in tpu.values() if r.role == "check"]  # type: ignore[attr-defined]
    assert len(held) == 10
    assert statistics.median(held) <= 0.10 and max(held) <= 0.25, held


def test_maxtext_on_several_tpu_slices(results: dict[str, object]) -> None:
    """The same models on 2 to 32 v5e pods and on two v5p slices, FSDP within each slice and data parallelism
    across them over the data-center network (``--zero-group``): all held out, median within 10 %, none over
    25 %. The published rate falls with the slice count (up to 16 % at 32 pods) and the estimate's does not,
    so the error grows with the slices: documented in docs/ACCURACY.md, not fitted."""
    held = [abs(r.error) for r in _maxtext(results, slices=True).values()]  # type: ignore[attr-defined]
    assert len(held) == 28
    assert statistics.median(held) <= 0.10 and max(held) <= 0.25, held


@pytest.mark.parametrize("slug", ["tpu-v5e", "tpu-v5p"])
def test_a_fitted_profile_is_what_its_fit_row_chooses(slug: str, assumptions: Assumptions) -> None:
    """kernel_profiles.csv's fitted TPU shares are reproduced by ``accuracy.py --fit`` from the published rows."""
    from computewise.catalog import load_catalog

    _, share = accuracy.fit_profile(accuracy.load_runs(), slug, assumptions)
    profile = load_catalog().kernel_profile(slug)
    assert profile is not None and profile.sustained_share == 1.0
    assert profile.matmul_share == pytest.approx(share, abs=0.0051)
