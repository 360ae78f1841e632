"""``computewise tune`` end to end: the real CLI in a child process, its refusals (exit 2) and one small search."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip("torch")

from computewise.train.config import load_config
from computewise.tune.savings import TuneWorth

pytestmark = pytest.mark.torch

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "computewise.cli.app", "tune"]
TINY_GPT = '{"preset": "smoke"}'  # examples/tiny_gpt.py: the smallest model that still trains


def tune(*args: str, db: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [*CLI, *args, "--db", f"sqlite:///{db}"], capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT
    )


def test_an_entry_point_that_cannot_be_imported_is_named(tmp_path: Path) -> None:
    result = tune("examples.no_such_module:setup", db=tmp_path / "l.db")
    assert result.returncode == 2, result.stderr
    assert "examples.no_such_module:setup" in result.stderr and "To fix" in result.stderr
    wrong = tune("examples.tiny_gpt:settings", db=tmp_path / "l.db")
    assert wrong.returncode == 2, wrong.stderr
    assert "examples.tiny_gpt:settings returned dict, not a TrainingSetup" in " ".join(wrong.stderr.split())


def test_when_every_configuration_runs_out_of_memory_the_estimate_and_the_batch_that_fits_are_given(
    tmp_path: Path,
) -> None:
    result = tune(
        "examples.tiny_gpt:setup", "--space", "precision=fp32;micro=32;checkpointing=off", "--memory", "6MB",
        db=tmp_path / "l.db",
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    stderr = " ".join(result.stderr.split())
    assert "every configuration of the search space runs out of memory" in stderr
    assert "needs" in stderr and "MiB of the 5.7 MiB available (--memory 5.7 MiB)" in stderr
    assert "the largest micro-batch that would fit is 4" in stderr


@pytest.mark.parametrize(
    ("space", "named"),
    [
        ("precision=fp32,fp16", "precision=fp16 contradicts the device"),
        ("channels_last=on", "channels_last=on contradicts the model"),
        ("micro=5,7", "micro=5,7 contradicts the global batch of 32"),
        ("speed=max", "'speed=max' is not DIMENSION=VALUES"),
    ],
)
def test_a_contradictory_space_is_refused_by_name(tmp_path: Path, space: str, named: str) -> None:
    result = tune("examples.tiny_gpt:setup", "--space", space, db=tmp_path / "l.db")
    assert result.returncode == 2, result.stderr
    assert named in " ".join(result.stderr.split())


def test_a_planned_run_has_one_length(tmp_path: Path) -> None:
    result = tune("examples.tiny_gpt:setup", "--run-hours", "3", "--tokens", "1B", db=tmp_path / "l.db")
    assert result.returncode == 2 and "--run-hours or --tokens, not both" in result.stderr


def test_a_time_budget_bounds_local_trials_only(tmp_path: Path) -> None:
    result = tune("examples.tiny_gpt:setup", "--engine", "ray", "--time-budget", "3m", db=tmp_path / "l.db")
    assert result.returncode == 2 and "--time-budget bounds the trials forked here" in result.stderr


def test_a_small_search_prints_json_and_writes_the_best_configuration(
    tmp_path: Path, json_schema: Callable[[object, str], None]
) -> None:
    out = tmp_path / "best.json"
    result = tune(
        "examples.tiny_gpt:setup", "--config", TINY_GPT,
        "--space", "precision=fp32,bf16;micro=4,8;checkpointing=off;compile=off;workers=0;fused=off",
        "--steps", "3", "--threads", "1", "--tokens", "1B", "--accelerator", "xeon-8480plus",
        "--out", str(out), "--json",
        db=tmp_path / "l.db",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    written = json.loads(out.read_text())
    json_schema(data, "tune")
    json_schema(written, "tune-config")
    worth = TuneWorth.from_dict(data)
    assert worth.to_dict().items() <= data.items() and written["measured"] == worth.best.to_dict()
    assert data["schema_version"] == written["schema_version"] == 1
    assert data["best"]["config"] == load_config(out).to_dict() and data["out"] == str(
        out
    )  # computewise.train reads it
    assert data["plan"]["basis"] == "tokens" and data["plan"]["naive_hours"] > 0
    assert data["mfu"]["peak"]["accelerator"] == "xeon-8480plus" and data["best"]["mfu"] > 0
    assert data["ledger_run_id"] is not None and len(data["trials"]) >= 4
