"""Reference steps of tiny_gpt: their structure, their FLOP count, and their time against a plain loop.

Speeds are never asserted. The FLOPs come from ``estimate.flops`` and are checked against PyTorch's
own counter on the real model (an independent count); the step time against a training loop
written here with plain torch (same model, same AdamW), within a factor of 2.5 both ways: on a
loaded 2-core VM two timings of the same work taken seconds apart differ by that much. One torch
thread: with two, another process on the VM stalls every OpenMP barrier and a step takes 10x longer
for as long as it runs, which would make the comparison a coin toss.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from computewise.bench import reference  # noqa: E402
from computewise.bench.reference import ReferenceStep, measure_reference_steps, reference_config  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def from_repository_root(monkeypatch: pytest.MonkeyPatch) -> None:
    """The example is imported by entry point, as bench does when run from the repository root."""
    monkeypatch.chdir(REPO_ROOT)
    monkeypatch.syspath_prepend(str(REPO_ROOT))


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def steps(one_thread: None) -> tuple[ReferenceStep, ...]:
    sys.path.insert(0, str(REPO_ROOT))
    return measure_reference_steps("cpu", 1e11, quick=True)


def test_quick_measures_a_train_and_an_infer_step_per_width(steps: tuple[ReferenceStep, ...]) -> None:
    assert [(s.kind, s.width) for s in steps] == [("train", 64), ("infer", 64), ("train", 128), ("infer", 128)]
    for step in steps:
        assert step.device == "cpu" and step.dtype == "fp32"
        assert step.step_s.repeats == 5
        assert 0 < step.step_s.low <= step.step_s.median <= step.step_s.high
        assert step.tflops == pytest.approx(step.flops / step.step_s.median / 1e12)
        assert step.mfu == pytest.approx(step.tflops * 1e12 / 1e11)
        assert ReferenceStep.from_dict(step.to_dict()) == step
    train, infer = steps[0], steps[1]
    assert train.flops == pytest.approx(3 * infer.flops)  # backward = 2x forward, as estimate counts it
    assert train.matmul_size == infer.matmul_size < steps[2].matmul_size


def test_flops_agree_with_pytorchs_counter(steps: tuple[ReferenceStep, ...]) -> None:
    """estimate.flops' forward FLOPs of tiny_gpt vs torch.utils.flop_counter on the model itself (within 10 %)."""
    from examples.tiny_gpt import setup
    from torch.utils.flop_counter import FlopCounterMode

    config = reference_config(128)
    training = setup(config)
    tokens = training.dataset.windows[: config["global_batch"], :-1]
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        training.model(tokens)
    counted = counter.get_total_flops()
    # PyTorch counts causal attention in full; estimate.flops counts half of it.
    estimated = next(s for s in steps if s.kind == "infer" and s.width == 128).flops
    assert estimated == pytest.approx(counted, rel=0.10)


def test_train_step_time_agrees_with_a_plain_torch_loop(steps: tuple[ReferenceStep, ...]) -> None:
    from examples.tiny_gpt import lm_loss, setup

    training = setup(reference_config(128))
    model = training.model
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    batch = training.dataset.windows[: training.global_batch_size]
    inputs, targets = batch[:, :-1], batch[:, 1:]
    times_s = []
    for index in range(7):
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        lm_loss(model, (inputs, targets)).backward()  # type: ignore[no-untyped-call]
        optimizer.step()
        if index >= 2:
            times_s.append(time.perf_counter() - start)
    measured = next(s for s in steps if s.kind == "train" and s.width == 128).step_s.median
    assert 1 / 2.5 < measured / statistics.median(times_s) < 2.5


def test_without_the_example_the_steps_are_skipped_and_said_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reference, "REFERENCE_ENTRY_POINT", "no_such_examples.tiny_gpt:setup")
    said: list[str] = []
    assert measure_reference_steps("cpu", None, quick=True, progress=said.append) == ()
    assert said and "reference steps skipped" in said[0]
