"""A preemptible training job: the tiny GPT of ``tiny_gpt.py`` trained to a fixed step count, resumable.

Checkpoints go to ``--checkpoint-dir`` or ``$COMPUTEWISE_CHECKPOINT_URI`` (a path every node can
reach). On SIGTERM or SIGUSR1 the job finishes its step, saves and exits 75; started again with the
same command it resumes from the newest checkpoint, so a supervisor that resubmits it gets the
same final loss as an uninterrupted run. Its steps go into the ledger run ``$COMPUTEWISE_RUN_ID``
when ``computewise run --engine`` started it. Try it::

    computewise run --engine local --name spot-gpt --checkpoint-uri /tmp/spot-gpt -- \\
        python examples/spot_train.py --steps 40

The last line it prints is ``final_loss=<repr of the float>``. ``--pid-file`` and ``--progress``
let a test find the process and watch its steps; ``--step-sleep-s`` slows it down for demos.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tiny_gpt import setup  # the example next to this one, found through sys.path above

from computewise.train.config import TrainConfig
from computewise.train.fit import fit

SMALL_GPT = {"samples": 256, "global_batch": 8, "n_embd": 32, "block_size": 16, "warmup_steps": 4}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40, help="optimizer steps in total, resumed ones included")
    parser.add_argument("--checkpoint-dir", default=os.environ.get("COMPUTEWISE_CHECKPOINT_URI"))
    parser.add_argument("--checkpoint-every", type=int, default=5, help="steps between periodic checkpoints")
    parser.add_argument("--step-sleep-s", type=float, default=0.0, help="pause after each step (demos, tests)")
    parser.add_argument("--pid-file", type=Path, help="write this process's pid here after the first step")
    parser.add_argument("--progress", type=Path, help="append 'step loss' per step to this file")
    args = parser.parse_args(argv)
    if not args.checkpoint_dir:
        parser.error("give --checkpoint-dir or set COMPUTEWISE_CHECKPOINT_URI: a resumable job needs one")
    torch.set_num_threads(1)  # a tiny model runs fastest on one thread, and leaves the other cores alone

    def on_step(step: int, loss: float) -> None:
        if args.pid_file is not None and not args.pid_file.exists():
            args.pid_file.write_text(str(os.getpid()), encoding="utf-8")  # training is under way: preempt me now
        if args.progress is not None:
            with args.progress.open("a", encoding="utf-8") as out:
                out.write(f"{step} {loss!r}\n")
        time.sleep(args.step_sleep_s)

    result = fit(
        setup(dict(SMALL_GPT)),
        TrainConfig(micro_batch_size=4),
        max_steps=args.steps,
        checkpoint_dir=args.checkpoint_dir,
        checkpoint_every_steps=args.checkpoint_every,
        on_step=on_step,
    )
    final = result.losses[-1] if result.losses else float("nan")
    print(f"resumed_at={result.start_step} steps_done={result.steps_done}")
    print(f"final_loss={final!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
