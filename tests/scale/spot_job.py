"""The spot training job the scale tests preempt: ``examples/spot_train.py`` with its progress visible."""

from __future__ import annotations

import sys
import time
from pathlib import Path

SPOT_SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "spot_train.py"
SPOT_STEPS = 24
SPOT_CHECKPOINT_EVERY = 5


def spot_command(checkpoint_dir: Path, pid_file: Path, progress: Path, step_sleep_s: float = 0.05) -> tuple[str, ...]:
    """``examples/spot_train.py`` as a job: it writes its pid after the first step and one line per step."""
    return (
        sys.executable,
        str(SPOT_SCRIPT),
        "--steps",
        str(SPOT_STEPS),
        "--checkpoint-every",
        str(SPOT_CHECKPOINT_EVERY),
        "--checkpoint-dir",
        str(checkpoint_dir),
        "--pid-file",
        str(pid_file),
        "--progress",
        str(progress),
        "--step-sleep-s",
        str(step_sleep_s),
    )


def final_loss(output: str) -> float:
    """The ``final_loss=`` line spot_train.py prints last."""
    lines = [line for line in output.splitlines() if line.startswith("final_loss=")]
    assert lines, f"no final_loss line in:\n{output[-2000:]}"
    return float(lines[-1].split("=", 1)[1])


def wait_for_steps(progress: Path, steps: int, limit_s: float = 120) -> None:
    """Block until the job has logged ``steps`` steps (bounded)."""
    deadline = time.monotonic() + limit_s
    while not progress.exists() or len(progress.read_text(encoding="utf-8").splitlines()) < steps:
        if time.monotonic() > deadline:
            raise AssertionError(f"the job did not reach step {steps} in {limit_s} s")
        time.sleep(0.02)
