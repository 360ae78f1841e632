"""The default global batch: one rule (``estimate.train.default_global_batch``) for ``estimate train`` and
``plan train``, printed in both, so adding GPUs speeds the same training recipe up instead of changing it."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from computewise.estimate.train import default_global_batch
from computewise.models import preset

CLI = [sys.executable, "-m", "computewise.cli.app"]
NOTE = "global batch 256 sequences (1.05M tokens, default"


def _json(*args: str) -> dict[str, Any]:
    result = subprocess.run([*CLI, *args, "--json"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def _estimate(gpus: int, *extra: str) -> dict[str, Any]:
    return _json(
        "estimate", "train", "--model", "llama-3-8b", "--gpu", "h100", "--gpus", str(gpus), "--tokens", "10B",
        "--seq-len", "4096", *extra,
    )  # fmt: skip


def test_about_a_million_tokens_as_sequences_rounded_to_whole_micro_batches_per_rank() -> None:
    params = preset("llama-3-8b").params
    assert default_global_batch(4096, params) == 256  # 2^20 tokens at 8B parameters
    assert default_global_batch(4096, params, step_multiple=8 * 4) == 256
    assert default_global_batch(4096, params, step_multiple=6) == 258  # nearest multiple of dp x micro = 6
    assert default_global_batch(4096, params, step_multiple=1024) == 1024  # at least one step of every rank
    assert default_global_batch(4096, 70e9) == 1024  # 4M tokens at 70B (Llama 2)
    assert default_global_batch(2048, 125e6) == 256  # 0.5M tokens for GPT-3 small


def test_16_gpus_train_the_same_recipe_faster_than_8() -> None:
    """The batch was dp x micro-batch: 8 sequences on 8 GPUs, 16 on 16, a different recipe per count."""
    eight, sixteen = _estimate(8, "--zero", "3"), _estimate(16, "--zero", "3")
    assert eight["job"]["global_batch"] == sixteen["job"]["global_batch"] == 256
    assert eight["time"]["steps"] == sixteen["time"]["steps"]
    assert sixteen["time"]["seconds"] < 0.6 * eight["time"]["seconds"]
    assert any(note.startswith(NOTE) for note in eight["notes"])


def test_a_pipeline_gets_micro_batches_to_fill_it() -> None:
    """With one micro-batch per step, an 8-stage pipeline idled 7 slots for every one it worked."""
    piped = _estimate(8, "--pp", "8")
    assert piped["job"]["global_batch"] == 256
    assert piped["time"]["pipeline_bubble_fraction"] < 0.05


def test_plan_train_uses_and_prints_the_same_default() -> None:
    plan = _json("plan", "train", "--model", "llama-3-8b", "--gpu", "h100", "--max-gpus", "16", "--tokens", "10B")
    assert any(note.startswith(NOTE) for note in plan["notes"])


@pytest.mark.parametrize("command", ["estimate", "plan"])
def test_a_given_global_batch_is_not_called_the_default(command: str) -> None:
    if command == "estimate":
        data = _estimate(8, "--zero", "3", "--global-batch", "64")
        assert data["job"]["global_batch"] == 64
    else:
        data = _json("plan", "train", "--model", "llama-3-8b", "--gpu", "h100", "--max-gpus", "8",
                     "--tokens", "10B", "--global-batch", "64")  # fmt: skip
    assert not any("default" in note and "global batch" in note for note in data.get("notes", []))


@pytest.mark.parametrize(("model", "images"), [("resnet-50", 256), ("vit-b-16", 4096)])
def test_an_image_model_takes_its_published_batch_of_images(model: str, images: int) -> None:
    """ResNet's 256 (He et al. 2016) and ViT's 4096 (Dosovitskiy et al. 2021), not half a million images a
    step from a token count a CNN does not have; --seq-len, which used to change a ResNet's time at the same
    FLOPs, is refused."""
    data = _json("estimate", "train", "--model", model, "--gpu", "a100", "--gpus", "8", "--tokens", "1e8")
    assert data["job"]["global_batch"] == images
    refused = subprocess.run(
        [*CLI, "estimate", "train", "--model", model, "--gpu", "a100", "--seq-len", "4"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode == 2 and "--seq-len does not apply" in refused.stderr
    assert "Traceback" not in refused.stderr
