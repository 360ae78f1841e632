"""``computewise.tune.scaletest`` for real: torchrun with gloo on 127.0.0.1, one and two processes.

The runs train ``examples.tiny_gpt`` (137K parameters) for a few steps, so the figures are noisy
on a shared 2-core machine; the tests check what must hold whatever the load: every rank answered,
the weak-scaling arithmetic, the prediction's shape, and that a hung rank is stopped and killed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

pytest.importorskip("torch")

from computewise.errors import ConfigError, ScaleTestError
from computewise.train.config import TrainConfig
from computewise.tune.scaletest import (
    CPU_LINK_BYTES_PER_S,
    ScaleOptions,
    ScaleTestResult,
    _check_world_sizes,
    _Hardware,
    _measure,
    parse_nproc,
    run_scaletest,
    stops_paying,
)

pytestmark = pytest.mark.torch

ROOT = Path(__file__).resolve().parents[2]

# A tiny_gpt that hangs once it runs distributed and ignores SIGTERM: only a kill by PID stops its ranks.
STUBBORN = """
import signal
import time

import torch.distributed as dist

from examples.tiny_gpt import setup as tiny_setup


def setup(config):
    built = tiny_setup(config)
    if dist.is_initialized():
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        real_loss = built.loss

        def loss(model, batch):
            time.sleep(3600)
            return real_loss(model, batch)

        built.loss = loss
    return built
"""


def test_nproc_is_sorted_deduplicated_and_always_has_one() -> None:
    assert parse_nproc("4,2,2") == (1, 2, 4)
    assert parse_nproc(" 1 , 2 ") == (1, 2)
    for bad in ("0,2", "two", "", "-1"):
        with pytest.raises(ScaleTestError, match="--nproc"):
            parse_nproc(bad)


def test_scaling_stops_paying_below_the_floor_or_when_throughput_stops_growing() -> None:
    assert stops_paying([(1, 100.0), (2, 190.0), (4, 360.0)]) is None
    assert stops_paying([(1, 100.0), (2, 190.0), (4, 250.0)]) == 4  # 62 % < 70 %
    assert stops_paying([(1, 100.0), (2, 100.0)]) == 2  # no gain at all
    assert stops_paying([(1, 100.0), (2, 180.0), (3, 175.0)]) == 3  # throughput fell
    assert stops_paying([(2, 100.0)]) is None  # no baseline, no verdict
    # The documented floor is 70 % efficiency: 141 of 200 ideal pays, 139 does not; a floor passed in moves it.
    assert stops_paying([(1, 100.0), (2, 141.0)]) is None
    assert stops_paying([(1, 100.0), (2, 139.0)]) == 2
    assert stops_paying([(1, 100.0), (2, 139.0)], floor=0.5) is None


def test_more_ranks_than_gpus_is_refused_and_oversubscribed_cores_warned() -> None:
    gpu = _Hardware("cuda", "NVIDIA H100 80GB HBM3", cores=16, gpus=1, memory_bytes=80e9)
    with pytest.raises(ScaleTestError, match="needs 2 GPUs, but this machine has 1") as caught:
        _check_world_sizes((1, 2), 1, gpu)
    assert caught.value.hint is not None and "--nproc up to 1" in caught.value.hint
    cpu = _Hardware("cpu", "test CPU", cores=2, gpus=0, memory_bytes=None)
    assert _check_world_sizes((1, 2), 1, cpu) == []
    (warning,) = _check_world_sizes((1, 4), 1, cpu)
    assert "oversubscribe the 2 usable CPU cores" in warning


def test_options_refuse_nonsense() -> None:
    with pytest.raises(ScaleTestError, match="--steps"):
        ScaleOptions(nproc=(1,), steps=0)
    with pytest.raises(ScaleTestError, match="--timeout"):
        ScaleOptions(nproc=(1,), timeout_s=0)


def test_one_and_two_processes_under_torchrun(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    seen: list[tuple[int, int, int]] = []
    options = ScaleOptions(nproc=(2,), steps=4, warmup_steps=1, config={"global_batch": 16}, device="cpu")
    result = run_scaletest("examples.tiny_gpt:setup", options, lambda *args: seen.append(args))

    assert seen == [(1, 0, 2), (2, 1, 2), (2, 2, 2)]
    one, two = result.rows
    assert (one.nproc, two.nproc) == (1, 2)
    assert (one.status, two.status) == ("ok", "ok"), (one.message, two.message)
    # Weak scaling: each rank keeps the setup's 16 samples, so the global batch doubles.
    assert (one.global_batch_size, two.global_batch_size) == (16, 32)
    assert result.batch_per_rank == 16 and result.micro_batch_size == 16
    assert len(one.rank_median_step_s) == 1 and len(two.rank_median_step_s) == 2
    assert two.step_s == max(two.rank_median_step_s)
    assert one.samples_per_s == pytest.approx(16 / one.step_s)
    assert two.samples_per_s == pytest.approx(32 / two.step_s)
    assert two.tokens_per_s == pytest.approx(two.samples_per_s * 64)  # block_size 64
    assert one.efficiency == pytest.approx(1.0) and one.speedup == pytest.approx(1.0)
    assert two.efficiency == pytest.approx(two.samples_per_s / (2 * one.samples_per_s))
    assert two.efficiency is not None and two.efficiency > 0

    # The prediction: one process's step plus a ring all-reduce of every fp32 gradient over the assumed link.
    assert result.link is not None and result.link.bytes_per_s == CPU_LINK_BYTES_PER_S
    assert result.gradient_bytes == 4 * result.params
    assert two.predicted_allreduce_s == pytest.approx(2 * 0.5 * result.gradient_bytes / CPU_LINK_BYTES_PER_S)
    assert two.predicted_step_s == pytest.approx(one.step_s + two.predicted_allreduce_s)
    assert two.predicted_efficiency is not None and 0 < two.predicted_efficiency < 1
    assert result.predicted_stops_paying_at is None  # 0.5 MB over 1 GB/s is nothing beside a ~50 ms step

    data = result.to_dict()
    assert data["rows"][1]["rank_median_step_s"] == list(two.rank_median_step_s)
    assert data["stops_paying_at"] in (None, 2)
    assert ScaleTestResult.from_dict(json.loads(json.dumps(data))) == result  # what --json printed reads back


def test_a_hung_rank_is_stopped_and_killed_by_pid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make_module: Callable[[str, str], str]
) -> None:
    # The launch of one world size on its own: the single-process baseline adds nothing to this test.
    entry = make_module("scaletest_stubborn", STUBBORN) + ":setup"
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # the ranks import the entry point from tmp_path
    options = ScaleOptions(nproc=(2,), steps=1, warmup_steps=0, device="cpu", timeout_s=15)
    hardware = _Hardware("cpu", "test CPU", cores=2, gpus=0, memory_bytes=None)
    work = tmp_path / "work"
    work.mkdir()

    started = time.perf_counter()
    measured = _measure(entry, options, 2, 1, hardware, work)
    elapsed_s = time.perf_counter() - started

    assert measured.status == "timeout" and measured.message is not None
    assert "did not finish within 15 s" in measured.message
    # The ranks ignore SIGTERM and torchrun would wait 30 s before killing them: our kill by PID came first.
    survivors = [
        process for process in psutil.process_iter(["cmdline"]) if str(work) in " ".join(process.info["cmdline"] or [])
    ]
    assert survivors == []
    assert elapsed_s < 15 + 30


def test_an_accumulation_split_that_does_not_divide_the_batch_fails_before_launching(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(ROOT)
    options = ScaleOptions(nproc=(2,), train_config=TrainConfig(micro_batch_size=5))
    with pytest.raises(ConfigError, match="micro_batch_size 5 does not divide the global batch 32"):
        run_scaletest("examples.tiny_gpt:setup", options)
