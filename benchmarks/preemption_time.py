"""Seconds from SIGTERM to a durable checkpoint for a ~100M-parameter model on this CPU, against a 30 s grace window.

Method, in one run:

1. A child process trains ``examples.tiny_gpt`` with ``computewise.train.fit`` and a checkpoint
   directory: 9 layers x 768 wide, the GPT-2 vocabulary padded to 50304, 64-token context:
   102M parameters. AdamW keeps two moments per weight, so the full state is ~1.2 GB. Periodic
   checkpoints are off: the only save is the one the signal causes.
2. Once the child has finished ``--warm-steps`` steps (the first pays one-time costs), the parent
   waits half a step time (a real signal lands mid-step, not on a boundary) and sends SIGTERM.
3. The child finishes the step in flight, all of its state is written (temporary file, fsync,
   checksum, manifest, rename, directory fsync) and it exits with code 75.

Reported: the time from the signal to the durable checkpoint as the child measured it (the
figure a grace window must cover; ``fit()`` logs it), split into finishing the step and writing
the checkpoint; the time from ``kill()`` to the process having exited, seen from the parent; the
step time; the checkpoint's size and write rate. Then the checkpoint is loaded back through its
checksum, as a resumed run would. The verdict compares the signal-to-durable time with the grace
window (``--grace-s``, 30 s: Kubernetes' default termination grace period and GCE's spot notice).

Usage: python benchmarks/preemption_time.py [--quick] [--grace-s 30] [--json OUT]
``--quick`` trains the small default tiny_gpt instead (for tests; its figure means little).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))  # examples.tiny_gpt, as from the repository root

# ~100M parameters: 9 x 7.1M in the blocks + 38.6M in the (tied) token embedding.
FULL_MODEL: dict[str, Any] = {
    "n_layer": 9,
    "n_head": 12,
    "n_embd": 768,
    "block_size": 64,
    "vocab_size": 50304,
    "samples": 64,
    "eval_samples": 8,
    "global_batch": 2,
}
QUICK_MODEL: dict[str, Any] = {"samples": 256, "global_batch": 16}
DEFAULT_GRACE_S = 30.0
CHILD_TIMEOUT_S = 900.0


def child(checkpoint_dir: str, progress: str, result: str, model: str) -> int:
    """Train until preempted; write what fit() reported to ``result``."""
    from examples.tiny_gpt import setup

    from computewise.train.fit import fit
    from computewise.train.preemption import Preempted

    def on_step(step: int, loss: float) -> None:
        with open(progress, "a", encoding="utf-8") as stream:
            stream.write(f"{step} {time.time()!r}\n")

    training = setup(json.loads(model))
    parameters = sum(p.numel() for p in training.model.parameters())
    try:
        fit(training, max_steps=1_000_000, checkpoint_dir=checkpoint_dir, checkpoint_every_steps=1_000_000, track=False,
            on_step=on_step)  # fmt: skip
    except Preempted as preempted:
        Path(result).write_text(
            json.dumps(
                {
                    "parameters": parameters,
                    "step": preempted.step,
                    "seconds_to_checkpoint_s": preempted.seconds_to_checkpoint_s,
                    "durable_at_wall_s": time.time(),
                    "checkpoint": str(preempted.checkpoint),
                }
            )
        )
        raise
    return 1  # never reached: max_steps is out of reach


def _steps(progress: Path) -> list[tuple[int, float]]:
    if not progress.exists():
        return []
    lines = progress.read_text(encoding="utf-8").splitlines()
    return [(int(step), float(wall_s)) for step, wall_s in (line.split() for line in lines if line.count(" ") == 1)]


def measure(model: dict[str, Any], warm_steps: int, grace_s: float, work: Path) -> dict[str, Any]:
    """Run the child, signal it mid-step, and collect the figures."""
    import torch

    from computewise.train.checkpoint import CheckpointStore

    progress, result = work / "progress.txt", work / "result.json"
    checkpoint_dir = work / "ckpt"
    command = [sys.executable, __file__, "--child", str(checkpoint_dir), str(progress), str(result), json.dumps(model)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + CHILD_TIMEOUT_S
        while len(_steps(progress)) < warm_steps:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the training child stopped or stalled before step {warm_steps}")
            time.sleep(0.01)
        steps = _steps(progress)
        step_s = steps[-1][1] - steps[-2][1]
        time.sleep(step_s / 2)  # mid-step
        killed_wall_s = time.time()
        killed_perf_s = time.perf_counter()
        process.send_signal(signal.SIGTERM)
        _out, err = process.communicate(timeout=CHILD_TIMEOUT_S)
        exited_s = time.perf_counter() - killed_perf_s
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=60)
    if process.returncode != 75 or not result.exists():
        raise RuntimeError(f"the child exited with {process.returncode}, not 75:\n{err}")
    report = json.loads(result.read_text())
    last_step_end_s = max(wall_s for step, wall_s in _steps(progress) if step == report["step"])
    checkpoint = Path(report["checkpoint"])
    size_bytes = checkpoint.stat().st_size
    finish_step_s = max(0.0, last_step_end_s - killed_wall_s)
    to_durable_s = float(report["seconds_to_checkpoint_s"])
    save_s = max(0.0, to_durable_s - finish_step_s)

    started = time.perf_counter()
    loaded = CheckpointStore(checkpoint_dir).load_latest(map_location="cpu")
    load_s = time.perf_counter() - started
    if loaded is None or loaded.step != report["step"]:
        raise RuntimeError("the checkpoint written on SIGTERM did not load back")
    return {
        "hardware": f"{_cpu()}, {os.cpu_count()} logical cores; torch {torch.__version__}; "
        f"Python {platform.python_version()}",
        "parameters": report["parameters"],
        "model": model,
        "step_time_s": step_s,
        "stopped_after_step": report["step"],
        "signal_to_durable_s": to_durable_s,
        "finish_step_s": finish_step_s,
        "save_s": save_s,
        "kill_to_exit_s": exited_s,
        "checkpoint_bytes": size_bytes,
        "write_bytes_per_s": size_bytes / save_s if save_s > 0 else None,
        "verified_load_s": load_s,
        "exit_code": process.returncode,
        "grace_s": grace_s,
        "verdict": "PASS" if to_durable_s <= grace_s else "FAIL",
    }


def _cpu() -> str:
    from computewise.system.cpu import cpu_model_name

    return cpu_model_name()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="the small default tiny_gpt (for tests)")
    parser.add_argument("--grace-s", type=float, default=DEFAULT_GRACE_S)
    parser.add_argument("--warm-steps", type=int, default=2)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--child", nargs=4, metavar=("CKPT", "PROGRESS", "RESULT", "MODEL"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(*args.child)
    if args.warm_steps < 2:
        parser.error("--warm-steps must be >= 2 (the step time is measured between the last two)")

    model = QUICK_MODEL if args.quick else FULL_MODEL
    with tempfile.TemporaryDirectory(prefix="computewise-preemption-") as tmp:
        results = measure(model, args.warm_steps, args.grace_s, Path(tmp))
    results["quick"] = args.quick
    print(f"hardware: {results['hardware']}")
    print(f"model: tiny_gpt {model}, {results['parameters'] / 1e6:.1f}M parameters, AdamW")
    print(
        f"step time: {results['step_time_s']:.2f} s; SIGTERM sent in the middle of step {results['stopped_after_step']}"
    )
    print(
        f"SIGTERM -> durable checkpoint: {results['signal_to_durable_s']:.2f} s "
        f"(finishing the step {results['finish_step_s']:.2f} s + writing {results['checkpoint_bytes'] / 1e9:.2f} GB "
        f"{results['save_s']:.2f} s); kill -> process exited: {results['kill_to_exit_s']:.2f} s, exit code "
        f"{results['exit_code']}"
    )
    print(f"checkpoint verified (SHA-256) and loaded back in {results['verified_load_s']:.2f} s")
    print(f"grace window {results['grace_s']:.0f} s: {results['verdict']}")
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2))
    return 0 if results["verdict"] == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
