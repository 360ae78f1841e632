"""Trials run for real in forked child processes of a trial server; a failing trial cannot stop the others."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")

from computewise.errors import InputError
from computewise.train.config import TrainConfig
from computewise.tune.trial import TrialRequest, TrialResult, TrialRunner

pytestmark = pytest.mark.torch

ROOT = Path(__file__).resolve().parents[2]
TINY_GPT = {"preset": "smoke"}  # examples/tiny_gpt.py: the smallest model that still trains

TARGETS = textwrap.dedent(
    """
    import os
    import signal
    import time

    import torch

    from computewise.train.setup import TrainingSetup


    def mse(model, batch):
        inputs, targets = batch
        return torch.nn.functional.mse_loss(model(inputs), targets)


    def build(loss):
        data = torch.utils.data.TensorDataset(torch.randn(16, 4), torch.randn(16, 1))
        return TrainingSetup(
            model=torch.nn.Linear(4, 1),
            loss=loss,
            dataset=data,
            global_batch_size=4,
            make_optimizer=lambda parameters, fused: torch.optim.SGD(parameters, lr=0.1),
        )


    def fine(config):
        return build(mse)


    def noisy(config):
        print("a setup that prints must not corrupt the results")
        return build(mse)


    def loss_raises(config):
        def loss(model, batch):
            raise RuntimeError("the loss is broken on purpose")
        return build(loss)


    def no_memory(config):
        def loss(model, batch):
            raise MemoryError()
        return build(loss)


    def killed(config):
        def loss(model, batch):
            os.kill(os.getpid(), signal.SIGKILL)
        return build(loss)


    def aborts(config):
        def loss(model, batch):
            os.abort()
        return build(loss)


    def hangs(config):
        def loss(model, batch):
            time.sleep(120)
        return build(loss)


    def setup_raises(config):
        raise ValueError("no such dataset")
    """
)


@pytest.fixture
def targets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A module of entry points, importable by the trial server (which inherits PYTHONPATH and the cwd)."""
    (tmp_path / "tune_targets.py").write_text(TARGETS)
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}:{ROOT}")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run_one(entry: str, config: TrainConfig, steps: int = 2, timeout_s: float = 120.0) -> TrialResult:
    with TrialRunner(entry, {}, "cpu", threads=1, timeout_s=timeout_s) as runner:
        return runner.run(config, steps)


def test_a_real_trial_measures_tiny_gpt(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(ROOT)
    with TrialRunner("examples.tiny_gpt:setup", TINY_GPT, "cpu", threads=1, log_dir=tmp_path) as runner:
        result = runner.run(TrainConfig(precision="fp32", micro_batch_size=4), steps=3)
    assert result.status == "ok", result.message
    assert len(result.step_times_s) == 3 and all(t > 0 for t in result.step_times_s)
    assert result.median_step_s is not None and result.samples_per_s == pytest.approx(8 / result.median_step_s)
    assert result.tokens_per_s == pytest.approx(result.samples_per_s * 16)
    assert result.warmup_s is not None and result.first_step_s is not None and result.setup_s is not None
    assert result.peak_memory_kind == "process-rss-rise" and result.peak_memory_bytes is not None
    assert result.final_loss is not None and math.isfinite(result.final_loss)
    assert result.threads == 1 and result.wall_s > sum(result.step_times_s)
    assert result.cpu_s is not None and result.cpu_s > 0
    assert (tmp_path / "trial-001.log").exists()


def test_failing_trials_get_a_status_and_the_others_carry_on(targets: Path) -> None:
    outcomes: dict[str, TrialResult] = {}
    config = TrainConfig(precision="fp32")
    with TrialRunner("tune_targets:fine", {}, "cpu", threads=1, timeout_s=120) as runner:
        for name in ("noisy", "loss_raises", "no_memory", "killed", "aborts", "setup_raises", "fine"):
            runner.entry = f"tune_targets:{name}"
            outcomes[f"{name}-{len(outcomes)}"] = runner.run(config, steps=2)
    statuses = {name: (result.status, result.message or "") for name, result in outcomes.items()}
    assert statuses["noisy-0"][0] == "ok" and statuses["fine-6"][0] == "ok"
    assert statuses["loss_raises-1"] == ("error", "RuntimeError: the loss is broken on purpose")
    assert statuses["no_memory-2"][0] == "oom"
    assert statuses["killed-3"][0] == "oom" and "SIGKILL" in statuses["killed-3"][1]
    assert statuses["aborts-4"][0] == "error" and "SIGABRT" in statuses["aborts-4"][1]
    assert statuses["setup_raises-5"][0] == "error"
    assert "tune_targets:setup_raises raised ValueError: no such dataset" in statuses["setup_raises-5"][1]


def test_a_hung_trial_is_killed_at_its_timeout(targets: Path) -> None:
    result = run_one("tune_targets:hangs", TrainConfig(precision="fp32"), timeout_s=3.0)
    assert result.status == "timeout" and "3 s" in (result.message or "")
    assert result.wall_s < 30


def test_settings_the_model_cannot_run_are_errors_with_the_fix() -> None:
    result = run_one("examples.tiny_gpt:setup", TrainConfig(precision="fp32", channels_last=True))
    assert result.status == "error"
    assert "channels_last needs a CNN" in (result.message or "") and "To fix" in (result.message or "")


def test_a_dead_server_is_restarted_for_the_next_trial(targets: Path) -> None:
    with TrialRunner("tune_targets:fine", {}, "cpu", threads=1) as runner:
        assert runner.run(TrainConfig(precision="fp32"), steps=1).status == "ok"
        server = runner._server
        assert server is not None
        server.kill()
        server.wait()
        assert runner.run(TrainConfig(precision="fp32"), steps=1).status == "ok"


def test_without_fork_a_trial_runs_in_a_new_interpreter(targets: Path) -> None:
    """``--single``: the fallback where os.fork does not exist; the setup's prints stay out of the result."""
    request = TrialRequest("tune_targets:noisy", {}, TrainConfig(precision="fp32"), "cpu", steps=2)
    done = subprocess.run(
        [sys.executable, "-m", "computewise.tune.trial", "--single"],
        input=json.dumps(request.to_dict()),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = TrialResult.from_dict(json.loads(done.stdout))
    assert result.status == "ok" and len(result.step_times_s) == 2
    assert "must not corrupt" in done.stderr


def test_requests_and_results_round_trip_through_json() -> None:
    request = TrialRequest("a.b:c", {"n": 1}, TrainConfig(precision="bf16", micro_batch_size=8), "cpu", steps=3)
    assert TrialRequest.from_dict(request.to_dict()) == request
    result = TrialResult("ok", step_times_s=(0.2, 0.1, 0.3), global_batch_size=32, tokens_per_sample=10)
    assert result.median_step_s == 0.2 and result.samples_per_s == pytest.approx(160.0)
    assert TrialResult.from_dict(result.to_dict()) == result


def test_a_result_from_an_older_trial_process_still_reads_and_a_malformed_one_is_named() -> None:
    """A trial server of an older install answers without the keys added since (cpu_s, threads, quality)."""
    older = {"status": "ok", "message": None, "step_times_s": [0.2, 0.4], "wall_s": 1.5, "median_step_s": 0.3}
    assert TrialResult.from_dict(older) == TrialResult("ok", step_times_s=(0.2, 0.4), wall_s=1.5)
    with pytest.raises(InputError, match="step_times_s\\[1\\] must be a number, got 'slow'"):
        TrialResult.from_dict({**older, "step_times_s": [0.2, "slow"]})


def test_a_request_keeps_the_bytes_the_tuner_sends_and_an_older_or_malformed_one_is_read_by_field() -> None:
    """The line a trial process reads: the setup's settings as the user wrote them (nested, nulls kept), every
    key in its order; an older tuner's request (before lora_rank) reads with the default; a wrong key is named."""
    settings = {"preset": "smoke", "nested": {"x": [1, 2.5, None, {"y": "z"}], "t": True}, "empty": {}}
    request = TrialRequest("m:f", settings, TrainConfig(precision="fp32"), "cuda:0", steps=5, log_path="t.log")
    line = json.dumps(request.to_dict())
    assert line == (
        '{"entry": "m:f", "setup_config": {"preset": "smoke", "nested": {"x": [1, 2.5, null, {"y": "z"}], "t": true},'
        ' "empty": {}}, "config": {"precision": "fp32", "micro_batch_size": null, "activation_checkpointing": false,'
        ' "compile": false, "channels_last": false, "fused_optimizer": false, "loader_workers": 0, "pin_memory": false,'
        ' "prefetch_factor": null, "persistent_workers": false, "grad_clip_norm": null}, "device": "cuda:0",'
        ' "steps": 5, "warmup_steps": 2, "threads": 1, "timeout_s": 600.0, "log_path": "t.log", "lora_rank": null}'
    )
    assert TrialRequest.from_dict(json.loads(line)) == request
    older = {k: v for k, v in json.loads(line).items() if k != "lora_rank"}
    assert TrialRequest.from_dict(older) == request
    with pytest.raises(InputError, match="steps must be a whole number, got '5'"):
        TrialRequest.from_dict({**older, "steps": "5"})
    with pytest.raises(InputError, match="precision must be one of 'auto', 'fp32'"):
        TrialRequest.from_dict({**older, "config": {"precision": "fp7"}})
