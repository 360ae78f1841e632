"""benchmarks/validate_gpu.py: the ladder's models match their ModelSpecs, and the CPU smoke run works end to end."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.torch

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "validate_gpu.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("validate_gpu", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


vg = _load()
ALL_SHAPES = [*vg.GPU_SHAPES.values(), *vg.CPU_SHAPES.values()]


@pytest.mark.parametrize("shape", ALL_SHAPES, ids=lambda s: f"{s.name}-{s.hidden}")
def test_built_model_has_exactly_the_specs_parameter_count(shape: vg.Shape) -> None:
    model = vg.build(shape, "meta")  # no memory, even for 1.3B
    assert vg.built_param_count(model) == vg.model_spec(shape).params


@pytest.mark.parametrize("shape", ALL_SHAPES, ids=lambda s: f"{s.name}-{s.hidden}")
def test_param_count_agrees_with_the_models_package(shape: vg.Shape) -> None:
    shape_module = pytest.importorskip("computewise.models.shape")
    family = shape_module.FAMILIES["gpt2" if shape.family == "gpt" else "llama"]
    assert shape_module.count_params(vg.model_spec(shape), family) == vg.model_spec(shape).params


def test_published_gpt2_small_count() -> None:
    # GPT-2 small (Radford et al. 2019; Hugging Face gpt2): 124,439,808 parameters with 1024 positions.
    gpt2 = vg.Shape("gpt2", "gpt", 12, 768, 12, 12, 3072, 50257, 1024)
    assert vg.param_count(gpt2) == 124_439_808


def test_ladder_covers_sizes_precisions_recompute_and_inference() -> None:
    for device in ("cuda", "cpu"):
        configs = vg.ladder(device)
        train = [c for c in configs if c.kind == "train"]
        assert len(train) >= 20
        assert {c.precision for c in train} == {"bf16", "fp32"}
        assert {c.recompute for c in train} == {"none", "full"}
        assert {c.shape.family for c in train} == {"gpt", "llama"}
        assert any(c.kind == "infer" for c in configs)
        assert len({c.name for c in configs}) == len(configs)
        quick = vg.ladder(device, quick=True)
        assert len(quick) == 3 and quick[0].kind == "train"


def test_cpu_ladder_is_the_gpu_ladder_in_miniature() -> None:
    gpu, cpu = vg.ladder("cuda"), vg.ladder("cpu")
    assert [c.key for c in cpu] == [c.name for c in gpu]
    assert all(c.seq <= c.shape.positions and c.seq + c.new_tokens <= c.shape.positions for c in cpu + gpu)


@pytest.mark.parametrize("family", ["gpt", "llama"])
def test_kv_cache_decode_matches_the_full_forward(family: str) -> None:
    shape = vg.CPU_SHAPES["gpt-125m" if family == "gpt" else "llama-1.1b"]  # llama: grouped KV heads
    torch.manual_seed(0)
    model = vg.build(shape, "cpu").eval()
    ids = torch.randint(shape.vocab, (2, 12))
    cache_shape = (2, shape.kv_heads, 12, shape.head_dim)
    caches = [(torch.zeros(cache_shape), torch.zeros(cache_shape)) for _ in range(shape.layers)]
    with torch.no_grad():
        full = model.hidden_states(ids)
        prefill = model.hidden_states(ids[:, :8], caches, 0)
        steps = [model.hidden_states(ids[:, i : i + 1], caches, i) for i in range(8, 12)]
    torch.testing.assert_close(prefill, full[:, :8], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(torch.cat(steps, dim=1), full[:, 8:], rtol=1e-4, atol=1e-5)


def test_recompute_gives_the_same_loss_and_gradients() -> None:
    shape = vg.CPU_SHAPES["llama-160m"]  # no dropout, so both runs see the same numbers
    torch.manual_seed(0)
    model = vg.build(shape, "cpu")
    ids = torch.randint(shape.vocab, (2, 17))
    grads = []
    for recompute in (False, True):
        model.recompute = recompute
        model.zero_grad(set_to_none=True)
        model(ids[:, :-1], ids[:, 1:]).backward()
        grads.append(model.head.weight.grad.clone())
    torch.testing.assert_close(grads[0], grads[1])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown without CUDA")
def test_without_cuda_it_says_how_to_run(capsys: pytest.CaptureFixture[str]) -> None:
    assert vg.main([]) == 2
    assert "no CUDA device" in capsys.readouterr().err


def test_cpu_quick_run_writes_estimates_and_measurements(tmp_path: Path) -> None:
    out = tmp_path / "rows.json"
    markdown = tmp_path / "table.md"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "cpu", "--quick", "--json", str(out), "--markdown", str(markdown)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "COMPUTEWISE_CATALOG_DIR": str(tmp_path)},  # the bundled catalog only
    )
    assert done.returncode == 0, done.stderr
    assert "verdict: n/a" in done.stdout
    data = json.loads(out.read_text())
    rows = data["rows"]
    assert len(rows) == 3
    assert {r["kind"] for r in rows} == {"train", "infer"}
    for row in rows:
        assert row["status"] == "ok"
        assert row["estimated_bytes"] > 0 and row["estimated_breakdown_bytes"]["weights"] > 0
        assert row["estimated_s"] > 0 and row["measured_s"] > 0
        assert row["time_error"] is not None
        assert row["allocated_bytes"] is None and row["memory_note"] == "max_memory_allocated needs CUDA"
    assert data["summary"]["time_median_abs_error"] is not None  # every training row judged, none fitted on
    assert data["environment"]["torch"] == torch.__version__
    assert markdown.read_text().count("\n|") == len(rows) + 2  # header, rule, one line per row


REPLAY = SCRIPT.with_name("replay_memory.py")


def test_replay_checks_itself_and_the_quick_ladder_meets_the_target(tmp_path: Path) -> None:
    # --check: tiny models with real CPU tensors, the profiler's allocator record against the
    # replay's tracker, then fake tensors; --quick: 3 ladder rows against the estimate.
    out = tmp_path / "replay.json"
    done = subprocess.run(
        [sys.executable, str(REPLAY), "--check", "--quick", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,  # about 30 s on an idle 2-core machine; generous for a loaded CI runner
        check=False,
        env={**os.environ, "COMPUTEWISE_CATALOG_DIR": str(tmp_path)},  # the bundled catalog only
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count(": agree") == 4
    data = json.loads(out.read_text())
    assert len(data["rows"]) == 3 and data["summary"]["verdict"] == "PASS"
    for row in data["rows"]:
        assert abs(row["error"]) <= 0.05
        assert row["estimated_reserved_bytes"] > row["estimated_allocated_bytes"]
