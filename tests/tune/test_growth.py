"""Growing the micro-batch: doubling, then bisecting below a memory stop; the launch-bound verdict; a real search.

The rules are checked on throughput curves written out (a compute-bound step, whose time grows with
the batch, and a launch-bound one, whose time does not), then on a real tiny model on the CPU,
where the growth goes past the old fixed list of sizes and stops on throughput or on ``--memory``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from computewise.train.config import TrainConfig
from computewise.tune.diagnosis import LAUNCH_BOUND_GPU, diagnose
from computewise.tune.growth import MIN_GAIN, PATIENCE, Growth, Probe, grow_micro_batch, host_bound, start_size
from computewise.tune.savings import Measured


def timed(fixed_s: float, per_sample_s: float, global_batch: int) -> Callable[[int], Probe]:
    """A step of ``global_batch`` samples in micro-batches of ``m``, each ``fixed + m x per_sample`` seconds."""

    def measure(micro: int) -> Probe:
        step_s = (global_batch // micro) * (fixed_s + micro * per_sample_s)
        return Probe("measured", global_batch / step_s, step_s)

    return measure


def test_growth_starts_where_the_old_list_began_and_doubles_through_divisors() -> None:
    assert start_size(512) == 16 and start_size(96) == 3 and start_size(8) == 1
    growth = grow_micro_batch(96, lambda micro: True, timed(1e-3, 0.0, 96))  # launch-bound: every doubling pays
    assert [point.micro for point in growth.points] == [3, 6, 12, 24, 48, 96]
    assert growth.stopped == "global batch" and growth.best == 96


def test_a_compute_bound_step_stops_growing_when_throughput_stops_improving() -> None:
    growth = grow_micro_batch(512, lambda micro: True, timed(1e-3, 1e-3, 512))
    # 16 -> 32 gains 3 %, 16 -> 64 gains 5 %: PATIENCE sizes in a row without MIN_GAIN.
    assert MIN_GAIN == 0.05 and PATIENCE == 2
    assert [point.micro for point in growth.points] == [16, 32, 64]
    assert growth.stopped == "throughput" and growth.best == 16 and growth.largest_fitting == 64


def test_one_size_read_slow_does_not_stop_the_growth() -> None:
    steady = timed(1e-3, 0.0, 64)

    def measure(micro: int) -> Probe:  # a busy machine: the trial at 4 reads half its speed
        answer = steady(micro)
        return (
            Probe("measured", (answer.samples_per_s or 0.0) / 2, (answer.step_s or 0.0) * 2) if micro == 4 else answer
        )

    growth = grow_micro_batch(64, lambda micro: True, measure)
    assert growth.stopped == "global batch" and growth.best == 64


def test_a_memory_stop_is_bisected_to_the_largest_size_that_fits() -> None:
    probed: list[int] = []

    def measure(micro: int) -> Probe:
        probed.append(micro)
        return timed(1e-3, 0.0, 96)(micro)

    growth = grow_micro_batch(96, lambda micro: micro <= 40, measure)
    # 48 does not fit by the estimate (no trial), so the divisors between 24 and 48 are bisected: 32 fits.
    assert [(point.micro, point.outcome) for point in growth.points][-2:] == [(48, "does-not-fit"), (32, "measured")]
    assert 48 not in probed and growth.stopped == "memory model" and growth.best == 32
    assert growth.choices() == (24, 32)


def test_an_out_of_memory_trial_stops_growth_like_the_estimate() -> None:
    def measure(micro: int) -> Probe:
        return Probe("oom", message="CUDA out of memory") if micro >= 64 else timed(1e-3, 0.0, 256)(micro)

    growth = grow_micro_batch(256, lambda micro: True, measure)
    assert growth.stopped == "out of memory" and growth.best == 32
    assert [(point.micro, point.outcome) for point in growth.points][-1] == (64, "oom")


def test_a_step_whose_time_does_not_grow_with_the_batch_is_launch_bound() -> None:
    launch = host_bound(grow_micro_batch(96, lambda micro: True, timed(1e-3, 1e-7, 96)))
    assert launch is not None and launch.launch_bound and launch.fixed_share > 0.95
    compute = host_bound(grow_micro_batch(512, lambda micro: True, timed(1e-5, 1e-3, 512)))
    assert compute is not None and not compute.launch_bound and compute.fixed_share < 0.05
    assert host_bound(Growth((), None, "failed", 8)) is None


def test_the_launch_bound_verdict_is_said_on_a_gpu_with_the_remedy() -> None:
    growth = grow_micro_batch(32, lambda micro: True, timed(1e-3, 1e-7, 32))
    best = Measured(
        1, TrainConfig(precision="bf16", micro_batch_size=32), 0.001, 32e3, None, None, None, None, 1e6, 0.006
    )
    diagnosis = diagnose("cuda", growth, host_bound(growth), best)
    assert diagnosis.verdict is not None and diagnosis.verdict.endswith(LAUNCH_BOUND_GPU)
    assert any("whole global batch (32)" in limit for limit in diagnosis.limits)
    assert any("without CUDA graphs" in limit for limit in diagnosis.limits)


@pytest.mark.torch
def test_tune_grows_a_real_models_micro_batch_past_the_old_list_until_throughput_or_memory_stops_it(
    tmp_path: Path,
) -> None:
    pytest.importorskip("torch")
    from computewise.tune.search import TuneOptions, run_tune

    # 14 MB: the estimate fits 32 samples (11.6 MB) and not 48 (16.8 MB) of this model in FP32.
    options = TuneOptions(
        setup_config={"preset": "smoke", "global_batch": 96, "samples": 192, "block_size": 64, "n_embd": 64},
        space="precision=fp32;checkpointing=off;compile=off;workers=0;fused=off",
        steps=4,
        min_steps=2,
        threads=1,
        memory_bytes=14e6,
        record=False,
    )
    result = run_tune("examples.tiny_gpt:setup", options)
    growth = result.growth
    assert growth is not None and growth.best is not None
    old_list = (2, 4, 8, 16, 32, 96)  # the six largest power-of-two divisors the search used to try
    sizes = [point.micro for point in growth.points]
    assert sizes[:2] == [3, 6] and not set(sizes[:2]) & set(old_list)
    assert growth.stopped in ("throughput", "memory model")
    if growth.stopped == "memory model":
        assert (48, "does-not-fit") in [(p.micro, p.outcome) for p in growth.points] and 32 in sizes
    grown = [t for t in result.trials if t.stage == "batch-growth"]
    assert [t.config.micro_batch_size for t in grown] == [p.micro for p in growth.points if p.outcome == "measured"]
    assert all(t.estimate.total_bytes <= 14e6 for t in result.trials)
    # The rest of the search tries the grown sizes only, and the winner is one of them.
    assert {t.config.micro_batch_size for t in result.trials if t.stage == "halving"} == set(growth.choices())
    assert result.best.config.micro_batch_size in growth.choices()
    document = result.to_dict()
    assert document["search"]["growth"]["stopped"] == growth.stopped
    assert document["diagnosis"]["host"]["micro"] == growth.best
