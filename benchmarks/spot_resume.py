"""A preempted-and-resumed run on a local Ray cluster ends at the loss of an uninterrupted one; what it cost.

The job is ``examples/spot_train.py`` (tiny GPT, a checkpoint every 5 steps) run through
``computewise.scale.supervise`` on Ray Jobs, three times:

- uninterrupted;
- preempted: SIGTERM half-way (the spot warning): it saves, exits 75, is resubmitted and resumes;
- killed: SIGKILL half-way (no warning): it is restarted from its last periodic checkpoint.

For each it prints the final loss, the attempts, the billed time and cost from the ledger, and what
the ledger says the interruption added (``account.interruptions``), beside the measured difference
in billed time against the uninterrupted run: the check that the ledger's figure is right.
Target: every final loss equal to the uninterrupted one, bit for bit (exit 1 otherwise).

The cluster is a private head on 127.0.0.1 and free ports (``private_ray.py``), stopped at the end.
Usage: python benchmarks/spot_resume.py [--steps 60] [--json OUT] [--quick]
Needs the ray and torch extras: pip install 'computewise[ray,torch]'.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from computewise.ledger import Ledger, PriceSnapshot
from computewise.scale.engine import JobSpec, Resources
from computewise.scale.ray_jobs import RayJobsEngine
from computewise.scale.supervise import SupervisedRun, supervise
from computewise.system.cpu import cpu_model_name
from private_ray import QUIET_ENV, private_head

ROOT = Path(__file__).resolve().parents[1]
SPOT_SCRIPT = ROOT / "examples" / "spot_train.py"
HOURLY_USD = 4.0  # an illustrative price: the ratio of added to billed time does not depend on it
PRICE = PriceSnapshot(
    hourly_usd=HOURLY_USD,
    source="benchmark",
    explanation="illustrative",
    assumed=True,
    carbon_g_per_kwh=475.0,
    carbon_source="benchmark",
    pue=1.0,
)


def final_loss(log: str) -> float | None:
    lines = [line for line in log.splitlines() if line.startswith("final_loss=")]
    return float(lines[-1].split("=", 1)[1]) if lines else None


def one_run(
    engine: RayJobsEngine, work: Path, label: str, steps: int, interrupt: signal.Signals | None
) -> dict[str, Any]:
    """Supervise one spot job; send ``interrupt`` to it half-way through."""
    pid_file, progress = work / f"{label}.pid", work / f"{label}.progress"
    command = (
        sys.executable, str(SPOT_SCRIPT), "--steps", str(steps), "--checkpoint-every", "5",
        "--checkpoint-dir", str(work / f"{label}-ckpt"), "--pid-file", str(pid_file), "--progress", str(progress),
    )  # fmt: skip
    url = f"sqlite:///{work / 'ledger.sqlite'}"
    ledger = Ledger.open(url)
    spec = JobSpec(name=f"spot-{label}", command=command, resources=Resources(cpus=1), max_restarts=1)
    results: list[SupervisedRun] = []
    thread = threading.Thread(target=lambda: results.append(supervise(engine, spec, ledger, url, PRICE, poll_s=0.2)))
    thread.start()
    if interrupt is not None:
        deadline = time.monotonic() + 300
        while not progress.exists() or len(progress.read_text().splitlines()) < steps // 2 + 2:
            if time.monotonic() > deadline:
                raise SystemExit(f"{label}: the job never got half-way")
            time.sleep(0.02)
        os.kill(int(pid_file.read_text()), interrupt)
    thread.join()
    run = results[0]
    ledger.close()
    return {
        "label": label,
        "status": run.status,
        "final_loss": final_loss(run.log_tail),
        "attempts": [(a.outcome, a.exit_code) for a in run.attempts],
        "billed_s": run.interruption.billed_s,
        "cost_usd": run.cost.cost_usd,
        "ledger_added_s": run.interruption.added_s,
        "ledger_added_usd": run.interruption.added_usd,
        "lost_s": run.interruption.lost_s,
        "restart_s": run.interruption.restart_s,
    }


def warm_up(engine: RayJobsEngine) -> None:
    """A fresh cluster's first job pays for starting its job machinery; without this, the uninterrupted
    run (measured first) would carry that cost and the measured difference would understate the others."""
    spec = JobSpec(name="spot-warm-up", command=(sys.executable, "-c", "import torch"), resources=Resources(cpus=1))
    handle = engine.submit(spec)
    deadline = time.monotonic() + 120
    while engine.status(handle) not in ("succeeded", "failed", "stopped") and time.monotonic() < deadline:
        time.sleep(0.2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--quick", action="store_true", help="20 steps: the CI smoke run")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    steps = 20 if args.quick else args.steps
    os.environ.update(QUIET_ENV)

    with tempfile.TemporaryDirectory(prefix="cwspot", dir="/tmp") as tmp:
        work = Path(tmp)
        with private_head(num_cpus=4) as head:
            engine = RayJobsEngine(head.address)
            warm_up(engine)
            runs = [
                one_run(engine, work, "uninterrupted", steps, None),
                one_run(engine, work, "preempted", steps, signal.SIGTERM),
                one_run(engine, work, "killed", steps, signal.SIGKILL),
            ]
    reference = runs[0]
    print(f"spot resume, local Ray cluster: {steps} steps of tiny GPT, a checkpoint every 5; CPU {cpu_model_name()}")
    print(f"{'run':<14}{'final loss':>22}{'same':>6}{'attempts':>34}{'billed':>9}{'+measured':>11}{'+ledger':>9}")
    for run in runs:
        same = run["final_loss"] == reference["final_loss"]
        run["same_loss"] = same
        run["measured_added_s"] = run["billed_s"] - reference["billed_s"]
        attempts = ", ".join(f"{outcome}({code})" for outcome, code in run["attempts"])
        ledger_added = f"{run['ledger_added_s']:.2f}s" if run["ledger_added_s"] is not None else "-"
        print(
            f"{run['label']:<14}{run['final_loss']!r:>22}{'yes' if same else 'NO':>6}{attempts:>34}"
            f"{run['billed_s']:>8.2f}s{run['measured_added_s']:>+10.2f}s{ledger_added:>9}"
        )
    if args.json is not None:
        args.json.write_text(json.dumps({"steps": steps, "hourly_usd": HOURLY_USD, "runs": runs}, indent=2))
    if not all(run["same_loss"] and run["status"] == "succeeded" for run in runs):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
