"""Exact resume and preemption in fit(): interrupted runs continue with the same losses, step for step.

Everything is real: tiny_gpt trains on the CPU (dropout on, so the RNG streams matter; 2
micro-batches per step; a warm-up scheduler), signals are real signals, and one run is a child
process killed from outside with SIGTERM.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from computewise.errors import CheckpointError  # noqa: E402
from computewise.ledger import Ledger  # noqa: E402
from computewise.train.checkpoint import CheckpointStore, CorruptCheckpointWarning  # noqa: E402
from computewise.train.config import TrainConfig  # noqa: E402
from computewise.train.fit import FitResult, fit  # noqa: E402
from computewise.train.preemption import PREEMPTED_EXIT_CODE, Preempted, PreemptionGuard  # noqa: E402

pytestmark = pytest.mark.torch

REPO_ROOT = Path(__file__).resolve().parents[2]
GPT = {"dropout": 0.1, "samples": 128, "global_batch": 8, "warmup_steps": 4, "n_embd": 32, "block_size": 16}
CONFIG = TrainConfig(micro_batch_size=4)  # 2 micro-batches per step


@pytest.fixture(autouse=True)
def _examples_importable(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.syspath_prepend(str(REPO_ROOT))  # examples.tiny_gpt, as the CLI finds it from the repository root
    yield


@pytest.fixture(autouse=True, scope="module")
def _one_thread() -> Iterator[None]:
    """Tiny models run fastest on one thread, and a shared 2-core machine has no second one to give."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _setup() -> Any:
    from examples.tiny_gpt import setup

    return setup(dict(GPT))


def _sigterm_at(step: int) -> Callable[[int, float], None]:
    def on_step(done: int, loss: float) -> None:
        if done == step:
            os.kill(os.getpid(), signal.SIGTERM)

    return on_step


def _preempted(run: Callable[[], FitResult]) -> FitResult:
    with pytest.raises(Preempted) as raised:
        run()
    assert raised.value.code == PREEMPTED_EXIT_CODE
    result: FitResult = raised.value.result
    return result


def test_an_interrupted_run_resumes_to_the_same_losses_and_weights(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    straight = fit(_setup(), CONFIG, max_steps=12, checkpoint_dir=tmp_path / "straight", db=db)
    assert straight.stopped == "max_steps" and len(straight.losses) == 12
    assert straight.losses[-1] < straight.losses[0]  # it trains

    first = _preempted(
        lambda: fit(
            _setup(), CONFIG, max_steps=12, checkpoint_dir=tmp_path / "cut", track=False, on_step=_sigterm_at(5)
        )
    )
    assert first.stopped == "preempted" and first.steps_done == 5 and first.checkpoint is not None
    assert first.checkpoint.name == "step-00000005.pt"
    assert first.seconds_to_checkpoint_s is not None and 0 <= first.seconds_to_checkpoint_s < 30

    second = fit(_setup(), CONFIG, max_steps=12, checkpoint_dir=tmp_path / "cut", track=False)
    assert (second.start_step, second.steps_done) == (5, 7)
    assert first.losses + second.losses == straight.losses  # bit for bit

    ends = [CheckpointStore(tmp_path / name).load_latest() for name in ("straight", "cut")]
    assert all(end is not None and end.step == 12 for end in ends)
    straight_state, cut_state = (end.state["engine"] for end in ends if end is not None)
    for key, tensor in straight_state["model"].items():
        assert torch.equal(tensor, cut_state["model"][key]), key
    assert straight_state["scheduler"] == cut_state["scheduler"]

    # The uninterrupted run's steps are in the (test's own) ledger.
    assert straight.run_id is not None and straight.tracking is not None and straight.tracking["steps"] == 12
    with Ledger.open(db) as ledger:
        steps = ledger.steps(straight.run_id)
        assert len(steps) == 12 and all(step.samples == 8 and step.tokens == 8 * 16 for step in steps)
        assert all(step.flops is not None and step.flops > 0 for step in steps)
        assert ledger.run(straight.run_id).status == "succeeded"


def test_a_child_killed_with_sigterm_exits_75_and_resumes_to_identical_losses(tmp_path: Path) -> None:
    """A real child process, SIGTERMed from outside mid-run, then started again with the same command."""
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import sys, time, torch
            sys.path.insert(0, {str(REPO_ROOT)!r})
            torch.set_num_threads(1)
            from examples.tiny_gpt import setup
            from computewise.train.config import TrainConfig
            from computewise.train.fit import fit

            checkpoint_dir, progress = sys.argv[1], sys.argv[2]

            def on_step(step, loss):
                with open(progress, "a") as out:
                    out.write(f"{{step}} {{loss!r}}\\n")
                time.sleep(0.05)  # slow enough for the parent to catch it mid-run

            fit(setup({GPT!r}), TrainConfig(micro_batch_size=4), max_steps=16, checkpoint_dir=checkpoint_dir,
                checkpoint_every_steps=4, track=False, on_step=on_step)
            """
        )
    )

    def start(directory: str, progress: Path) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, str(script), str(tmp_path / directory), str(progress)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def finish(child: subprocess.Popen[str]) -> tuple[int, str]:
        try:
            _out, err = child.communicate(timeout=120)
        finally:
            if child.poll() is None:
                os.kill(child.pid, signal.SIGKILL)
                child.wait(timeout=30)
        return child.returncode, err

    def losses(progress: Path) -> list[tuple[int, float]]:
        return [(int(step), float(loss)) for step, loss in (line.split() for line in progress.read_text().splitlines())]

    reference_progress, cut_progress = tmp_path / "reference.txt", tmp_path / "cut.txt"
    code, err = finish(start("reference", reference_progress))
    assert code == 0, err

    child = start("cut", cut_progress)
    try:
        deadline = time.monotonic() + 60
        while (not cut_progress.exists() or len(cut_progress.read_text().splitlines()) < 5) and child.poll() is None:
            assert time.monotonic() < deadline, "the child never reached step 5"
            time.sleep(0.01)
        os.kill(child.pid, signal.SIGTERM)
    finally:
        code, err = finish(child)
    assert code == PREEMPTED_EXIT_CODE, err
    assert "preempted by SIGTERM" in err and "within the 30 s grace window" in err
    stopped_at = len(cut_progress.read_text().splitlines())
    assert 5 <= stopped_at < 16
    assert CheckpointStore(tmp_path / "cut").checkpoints()[-1].step == stopped_at

    code, err = finish(start("cut", cut_progress))  # the same command again
    assert code == 0, err
    assert losses(cut_progress) == losses(reference_progress)
    assert [step for step, _ in losses(cut_progress)] == list(range(1, 17))


def test_a_corrupt_newest_checkpoint_resumes_from_the_one_before_and_still_matches(tmp_path: Path) -> None:
    straight = fit(_setup(), CONFIG, max_steps=10, track=False)
    directory = tmp_path / "ckpt"
    first = _preempted(
        lambda: fit(
            _setup(),
            CONFIG,
            max_steps=10,
            checkpoint_dir=directory,
            checkpoint_every_steps=3,
            track=False,
            on_step=_sigterm_at(7),
        )
    )
    assert [info.step for info in CheckpointStore(directory).checkpoints()] == [3, 6, 7]
    assert first.checkpoint is not None
    first.checkpoint.write_bytes(first.checkpoint.read_bytes()[:-100])  # a torn write

    with pytest.warns(CorruptCheckpointWarning, match="step-00000007 is corrupt .*falling back to step-00000006"):
        resumed = fit(_setup(), CONFIG, max_steps=10, checkpoint_dir=directory, track=False)
    assert resumed.start_step == 6
    assert resumed.losses == straight.losses[6:]


def test_resume_false_refuses_a_directory_holding_checkpoints(tmp_path: Path) -> None:
    fit(_setup(), CONFIG, max_steps=2, checkpoint_dir=tmp_path, track=False)
    with pytest.raises(CheckpointError, match="already holds checkpoints") as raised:
        fit(_setup(), CONFIG, max_steps=4, checkpoint_dir=tmp_path, resume=False, track=False)
    assert raised.value.hint is not None and "resume=True" in raised.value.hint
    again = fit(_setup(), CONFIG, max_steps=2, checkpoint_dir=tmp_path, track=False)  # already done: no steps
    assert again.start_step == 2 and again.steps_done == 0 and again.losses == []


def test_an_unwritable_checkpoint_directory_fails_before_training_starts(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    steps: list[int] = []
    with pytest.raises(CheckpointError, match="not writable"):
        fit(
            _setup(),
            CONFIG,
            max_steps=3,
            checkpoint_dir=tmp_path / "file" / "ckpt",
            on_step=lambda s, _: steps.append(s),
        )
    assert steps == []


def test_the_guard_only_flags_signals_and_restores_the_handlers() -> None:
    before = signal.getsignal(signal.SIGUSR1)
    with PreemptionGuard(grace_s=5.0) as guard:
        assert not guard.stop_requested() and guard.remaining_grace_s() is None
        os.kill(os.getpid(), signal.SIGUSR1)  # would end the process with the default handler
        assert guard.signal_received == signal.SIGUSR1
        assert guard.stop_requested() and guard.signal_name == "SIGUSR1"
        remaining = guard.remaining_grace_s()
        assert remaining is not None and 4.0 < remaining <= 5.0
    assert signal.getsignal(signal.SIGUSR1) == before
