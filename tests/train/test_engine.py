"""StepEngine on the reference workloads: real training steps of examples/tiny_gpt.py and digits_cnn.py.

The speed settings must not change what the model learns: accumulation over micro-batches, activation
checkpointing, channels-last and the fused optimizer are each checked against the plain step.
A two-process gloo run checks that DDP with accumulation (one all-reduce a step) takes the same step
as one process on the whole global batch. About 25 s on 2 cores, most of it the torch.compile and DDP cases.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from computewise.errors import ConfigError, SetupError
from computewise.system.ports import free_port
from computewise.train.config import TrainConfig
from computewise.train.data import make_loader
from computewise.train.engine import StepEngine, find_checkpoint_blocks
from computewise.train.setup import TrainingSetup, load_setup

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.torch

ROOT = Path(__file__).resolve().parents[2]
# Small enough for a 2-core machine: a step of the tiny GPT takes a few milliseconds.
TINY = {"n_layer": 2, "n_embd": 32, "block_size": 16, "vocab_size": 64, "samples": 256, "global_batch": 32}


@pytest.fixture(autouse=True)
def _repo_on_path(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Entry points resolve from the working directory, as on the command line."""
    monkeypatch.chdir(ROOT)
    torch.manual_seed(0)
    yield


def gpt(**overrides: Any) -> TrainingSetup:
    return load_setup("examples.tiny_gpt:setup", {**TINY, **overrides})


def cnn(**overrides: Any) -> TrainingSetup:
    return load_setup("examples.digits_cnn:setup", overrides)


def run(setup: TrainingSetup, config: TrainConfig, steps: int) -> tuple[StepEngine, list[float]]:
    engine = StepEngine.prepare(setup, config, device="cpu")
    batches = make_loader(setup, config, engine.micro_batch_size, 0)
    losses = [engine.step([next(batches) for _ in range(engine.accumulation_steps)]) for _ in range(steps)]
    return engine, losses


def parameters(engine: StepEngine) -> dict[str, Any]:
    return {name: value.detach().clone() for name, value in engine.raw_model.named_parameters()}


def gradients(engine: StepEngine) -> dict[str, Any]:
    return {name: value.grad.detach().clone() for name, value in engine.raw_model.named_parameters()}


def assert_close(left: dict[str, Any], right: dict[str, Any], atol: float) -> None:
    assert left.keys() == right.keys()
    for name in left:
        torch.testing.assert_close(left[name], right[name], atol=atol, rtol=0, msg=name)


def test_tiny_gpt_learns() -> None:
    setup = gpt(lr=3e-3)
    before = setup.evaluate(setup.model) if setup.evaluate else None
    engine, losses = run(setup, TrainConfig(), steps=25)
    assert losses[-1] < losses[0] - 0.5, losses
    assert setup.evaluate is not None and before is not None
    assert setup.evaluate(engine.model) < before - 0.3
    assert setup.tokens_per_sample == TINY["block_size"]


def test_accumulation_keeps_the_global_batch() -> None:
    """4 micro-batches of 8 take the same step as one batch of 32: same gradients, same new weights."""
    whole, whole_losses = run(gpt(), TrainConfig(), steps=1)
    split, split_losses = run(gpt(), TrainConfig(micro_batch_size=8), steps=1)
    assert (whole.accumulation_steps, whole.micro_batch_size) == (1, 32)
    assert (split.accumulation_steps, split.micro_batch_size) == (4, 8)
    assert split_losses[0] == pytest.approx(whole_losses[0], abs=1e-5)
    assert_close(gradients(split), gradients(whole), atol=1e-6)
    assert_close(parameters(split), parameters(whole), atol=1e-5)


def test_cuda_graph_steps_accumulate_into_gradients_they_own() -> None:
    """Under CUDA graphs a gradient autograd creates is the backward graph's output buffer, which the
    next micro-batch's replay overwrites (an H200 run of GPT-2 failed so at two micro-batches a step).
    The engine allocates the gradients itself and accumulates into them in place: the same tensors
    every step, and the same step as the plain engine. On the CPU the graph mode's gradient path runs
    without graphs, which only a GPU records."""
    plain, plain_losses = run(gpt(), TrainConfig(micro_batch_size=8), steps=2)
    engine = StepEngine.prepare(gpt(), TrainConfig(micro_batch_size=8), device="cpu")
    engine.config = dataclasses.replace(engine.config, compile=True, compile_mode="reduce-overhead")
    assert engine.config.cuda_graphs and engine.accumulation_steps == 4
    batches = make_loader(engine.setup, engine.config, engine.micro_batch_size, 0)
    losses, owned = [], []
    for _ in range(2):
        losses.append(engine.step([next(batches) for _ in range(engine.accumulation_steps)]))
        owned.append([p.grad for p in engine.raw_model.parameters()])
    assert all(first is second for first, second in zip(*owned, strict=True))
    assert losses == pytest.approx(plain_losses, abs=1e-5)
    assert_close(gradients(engine), gradients(plain), atol=1e-6)
    assert_close(parameters(engine), parameters(plain), atol=1e-5)


def test_activation_checkpointing_changes_nothing_but_memory() -> None:
    """Same losses and gradients with dropout on: recomputation replays the same dropout masks."""
    plain, plain_losses = run(gpt(dropout=0.1), TrainConfig(), steps=3)
    torch.manual_seed(0)
    setup = gpt(dropout=0.1)
    checkpointed, losses = run(setup, TrainConfig(activation_checkpointing=True), steps=3)
    assert losses == pytest.approx(plain_losses, abs=1e-6)
    assert_close(gradients(checkpointed), gradients(plain), atol=1e-6)
    # The state_dict keys are the user's own: the blocks were not wrapped in another module.
    assert checkpointed.state_dict()["model"].keys() == plain.state_dict()["model"].keys()
    assert len(find_checkpoint_blocks(setup)) == TINY["n_layer"]


def test_channels_last_on_the_cnn() -> None:
    _, plain_losses = run(cnn(), TrainConfig(), steps=3)
    engine, losses = run(cnn(), TrainConfig(channels_last=True), steps=3)
    conv = engine.raw_model.conv2.weight
    assert conv.is_contiguous(memory_format=torch.channels_last) and not conv.is_contiguous()
    assert losses == pytest.approx(plain_losses, abs=1e-5)


def test_fused_optimizer_and_clipping() -> None:
    _, plain_losses = run(gpt(), TrainConfig(), steps=3)
    fused, losses = run(gpt(), TrainConfig(fused_optimizer=True), steps=3)
    assert fused.optimizer.defaults["fused"] is True
    assert losses == pytest.approx(plain_losses, abs=1e-5)

    clipped, _ = run(gpt(), TrainConfig(grad_clip_norm=0.01), steps=1)
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in gradients(clipped).values()]))
    assert float(norm) == pytest.approx(0.01, rel=1e-3)


def test_state_dict_resumes_the_same_steps() -> None:
    """Weights, AdamW moments and the warm-up scheduler saved after 3 steps give the same next 3 steps."""
    config = TrainConfig(micro_batch_size=16)
    setup = gpt(warmup_steps=10)
    engine = StepEngine.prepare(setup, config, device="cpu")
    batches = make_loader(setup, config, engine.micro_batch_size, 0)
    step_batches = [[next(batches) for _ in range(engine.accumulation_steps)] for _ in range(6)]
    for micro in step_batches[:3]:
        engine.step(micro)
    saved = copy.deepcopy(engine.state_dict())
    expected = [engine.step(micro) for micro in step_batches[3:]]

    resumed = StepEngine.prepare(gpt(warmup_steps=10), config, device="cpu")
    resumed.load_state_dict(saved)
    assert resumed.scheduler.last_epoch == 3
    assert [resumed.step(micro) for micro in step_batches[3:]] == expected


def test_compile_trains_like_eager() -> None:
    _, eager_losses = run(cnn(), TrainConfig(), steps=3)
    compiled, losses = run(cnn(), TrainConfig(compile=True), steps=3)
    assert compiled.model is not compiled.raw_model
    assert losses == pytest.approx(eager_losses, abs=1e-4)


def test_compile_loss_compiles_the_loss_around_the_model_and_trains_like_eager() -> None:
    """One graph from tokens to the loss: the model itself stays uncompiled, and the steps are eager's."""
    config = TrainConfig(micro_batch_size=16)
    eager, eager_losses = run(gpt(), config, steps=3)
    compiled, losses = run(gpt(), dataclasses.replace(config, compile=True, compile_loss=True), steps=3)
    assert compiled.model is compiled.raw_model  # compiled once, inside the loss, not twice
    assert compiled.loss_fn is not compiled.setup.loss and eager.loss_fn is eager.setup.loss
    assert losses == pytest.approx(eager_losses, abs=1e-4)
    assert_close(parameters(compiled), parameters(eager), atol=1e-4)


def test_settings_the_model_cannot_honour_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="channels_last needs a CNN"):
        StepEngine.prepare(gpt(), TrainConfig(channels_last=True), device="cpu")
    with pytest.raises(ConfigError, match="no blocks to checkpoint") as caught:
        StepEngine.prepare(cnn(), TrainConfig(activation_checkpointing=True), device="cpu")
    assert caught.value.hint and "checkpoint_blocks" in caught.value.hint
    with pytest.raises(ConfigError, match="does not divide the global batch 32"):
        StepEngine.prepare(gpt(), TrainConfig(micro_batch_size=12), device="cpu")
    with pytest.raises(ConfigError, match="precision=fp16 is not available on the cpu"):
        StepEngine.prepare(gpt(), TrainConfig(precision="fp16"), device="cpu")
    with pytest.raises(ConfigError, match="compile_mode=reduce-overhead records CUDA graphs, and this device is cpu"):
        StepEngine.prepare(gpt(), TrainConfig(compile=True, compile_mode="reduce-overhead"), device="cpu")

    ignores_fused = gpt()
    ignores_fused.make_optimizer = lambda params, fused: torch.optim.AdamW(params)
    with pytest.raises(ConfigError, match="non-fused AdamW"):
        StepEngine.prepare(ignores_fused, TrainConfig(fused_optimizer=True), device="cpu")

    not_a_module = gpt()
    not_a_module.model = object()
    with pytest.raises(SetupError, match=r"must be a torch\.nn\.Module"):
        StepEngine.prepare(not_a_module, TrainConfig(), device="cpu")


DDP_WORKER = textwrap.dedent(
    """
    import json, os, sys
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(1)
    sys.path.insert(0, sys.argv[1])
    from computewise.train.config import TrainConfig
    from computewise.train.data import make_loader
    from computewise.train.engine import StepEngine
    from computewise.train.setup import load_setup

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    setup = load_setup("examples.tiny_gpt:setup", json.loads(sys.argv[2]))
    config = TrainConfig.from_dict(json.loads(sys.argv[4]))
    engine = StepEngine.prepare(setup, config, device="cpu", wrap=DistributedDataParallel)
    batches = make_loader(setup, config, engine.micro_batch_size, 0, rank=rank, world_size=world)
    loss = engine.step([next(batches) for _ in range(engine.accumulation_steps)])
    if rank == 0:
        weights = {name: value.tolist() for name, value in engine.raw_model.named_parameters()}
        result = {"accumulation": engine.accumulation_steps, "loss": loss, "weights": weights}
        with open(sys.argv[3], "w") as stream:
            json.dump(result, stream)
    dist.destroy_process_group()
    """
)


@pytest.mark.parametrize(
    "config",
    [TrainConfig(micro_batch_size=4), TrainConfig(micro_batch_size=4, compile=True, compile_loss=True)],
    ids=["eager", "compile-loss"],
)
def test_ddp_with_accumulation_takes_the_single_process_step(tmp_path: Path, config: TrainConfig) -> None:
    """2 ranks x 4 micro-batches of 4 = the global batch of 32: the same new weights as one process, also
    with the loss compiled around the DDP-wrapped model (a tuned configuration scaletest runs)."""
    script, out = tmp_path / "worker.py", tmp_path / "rank0.json"
    script.write_text(DDP_WORKER)
    port = free_port()
    workers = [
        subprocess.Popen(
            [sys.executable, str(script), str(ROOT), json.dumps(TINY), str(out), json.dumps(config.to_dict())],
            env={
                **os.environ,
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port),
                "RANK": str(rank),
                "WORLD_SIZE": "2",
                "LOCAL_RANK": str(rank),
                "OMP_NUM_THREADS": "1",
            },
            cwd=ROOT,
        )
        for rank in range(2)
    ]
    assert [worker.wait(timeout=120) for worker in workers] == [0, 0]
    result = json.loads(out.read_text())
    assert result["accumulation"] == 4

    single, _ = run(gpt(), TrainConfig(), steps=1)
    expected = parameters(single)
    got = {name: torch.tensor(value) for name, value in result["weights"].items()}
    assert_close(got, expected, atol=1e-5)
