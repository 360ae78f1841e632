"""Precision: what ``auto`` resolves to, what each policy runs in, FP16 loss scaling, FP32 master weights.

The FP16 scaler path normally runs on a GPU; CPU autocast supports FP16 too, so the engine's
scale / unscale / skip-on-overflow logic is exercised here for real by handing it an FP16 policy.
The ``gpu`` tests run on a CUDA machine and are skipped elsewhere. About 10 s on 2 cores.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from computewise.errors import ConfigError
from computewise.train.config import TrainConfig
from computewise.train.data import make_loader
from computewise.train.engine import StepEngine
from computewise.train.precision import PrecisionPolicy, resolve_precision
from computewise.train.setup import TrainingSetup, load_setup

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.torch

ROOT = Path(__file__).resolve().parents[2]
TINY = {"n_layer": 1, "n_embd": 32, "block_size": 16, "vocab_size": 64, "samples": 128, "global_batch": 16}


def gpt(monkeypatch: pytest.MonkeyPatch, **overrides: Any) -> TrainingSetup:
    monkeypatch.chdir(ROOT)
    return load_setup("examples.tiny_gpt:setup", {**TINY, **overrides})


def steps(engine: StepEngine, count: int) -> list[float]:
    batches = make_loader(engine.setup, engine.config, engine.micro_batch_size, 0)
    return [engine.step([next(batches) for _ in range(engine.accumulation_steps)]) for _ in range(count)]


def test_auto_and_explicit_choices_on_the_cpu() -> None:
    assert resolve_precision("auto", "cpu") == "fp32"
    assert resolve_precision("fp32", torch.device("cpu")) == "fp32"
    assert resolve_precision("bf16", "cpu") == "bf16"
    with pytest.raises(ConfigError, match="precision=fp16 is not available on the cpu device") as fp16:
        resolve_precision("fp16", "cpu")
    assert fp16.value.hint and "fp32 or bf16" in fp16.value.hint
    with pytest.raises(ConfigError, match=r"tf32 is not available on the cpu device: TF32 is a mode of NVIDIA"):
        resolve_precision("tf32", "cpu")


def test_policies_compute_in_their_dtype_and_scale_only_fp16() -> None:
    left, right = torch.randn(4, 4), torch.randn(4, 4)
    for precision, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16), ("fp16", torch.float16)):
        policy = PrecisionPolicy(precision, "cpu")
        with policy.autocast():
            assert (left @ right).dtype == dtype
        assert (policy.scaler is not None) == (precision == "fp16")
    assert PrecisionPolicy.for_device("auto", "cpu").autocast_dtype is None


def test_apply_tf32_leaves_the_cpu_alone() -> None:
    before = torch.get_float32_matmul_precision()
    PrecisionPolicy("bf16", "cpu").apply_tf32()
    PrecisionPolicy("fp32", "cpu").apply_tf32()
    assert torch.get_float32_matmul_precision() == before


def test_bf16_trains_with_fp32_master_weights(monkeypatch: pytest.MonkeyPatch) -> None:
    reference = steps(StepEngine.prepare(gpt(monkeypatch), TrainConfig(), device="cpu"), 4)
    engine = StepEngine.prepare(gpt(monkeypatch), TrainConfig(precision="bf16"), device="cpu")
    losses = steps(engine, 4)
    assert engine.policy.precision == "bf16" and engine.policy.scaler is None
    assert {p.dtype for p in engine.raw_model.parameters()} == {torch.float32}
    assert {s["exp_avg"].dtype for s in engine.optimizer.state.values()} == {torch.float32}
    assert losses == pytest.approx(reference, abs=0.05)
    assert losses[-1] < losses[0]


def test_fp16_loss_scaling_skips_overflowing_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """A scale that overflows FP16 skips the update (weights and scheduler untouched) and halves the scale."""
    engine = StepEngine.prepare(gpt(monkeypatch, warmup_steps=5), TrainConfig(), device="cpu")
    engine.policy = PrecisionPolicy("fp16", "cpu")
    engine.policy.scaler = torch.amp.GradScaler("cpu", init_scale=2.0**40)
    weights = [p.detach().clone() for p in engine.raw_model.parameters()]
    steps(engine, 1)
    assert engine.policy.scaler.get_scale() == 2.0**39
    assert all(torch.equal(before, after) for before, after in zip(weights, engine.raw_model.parameters(), strict=True))
    assert engine.scheduler.last_epoch == 0

    engine.policy.scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    losses = steps(engine, 3)
    assert engine.scheduler.last_epoch == 3
    assert not all(torch.equal(b, a) for b, a in zip(weights, engine.raw_model.parameters(), strict=True))
    assert engine.state_dict()["scaler"]["scale"] == 2.0**10
    assert all(torch.isfinite(torch.tensor(losses)))


@pytest.mark.gpu
def test_auto_on_a_gpu_and_the_tf32_switch() -> None:
    expected = "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    assert resolve_precision("auto", "cuda") == expected
    try:
        PrecisionPolicy("tf32", "cuda").apply_tf32()
        assert torch.get_float32_matmul_precision() == "high" and torch.backends.cudnn.allow_tf32
        PrecisionPolicy("fp32", "cuda").apply_tf32()
        assert torch.get_float32_matmul_precision() == "highest" and not torch.backends.cudnn.allow_tf32
    finally:
        torch.set_float32_matmul_precision("highest")
        torch.backends.cudnn.allow_tf32 = True


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["fp16", "bf16", "tf32"])
def test_mixed_precision_trains_on_a_gpu(monkeypatch: pytest.MonkeyPatch, precision: str) -> None:
    config = TrainConfig(precision=precision, fused_optimizer=True, pin_memory=True, micro_batch_size=8)
    engine = StepEngine.prepare(gpt(monkeypatch, lr=3e-3), config, device="cuda")
    losses = steps(engine, 10)
    assert (engine.policy.scaler is not None) == (precision == "fp16")
    assert {p.dtype for p in engine.raw_model.parameters()} == {torch.float32}
    assert losses[-1] < losses[0]
    torch.set_float32_matmul_precision("highest")
