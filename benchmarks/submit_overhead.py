"""What submitting through computewise costs against plain ``ray job submit``, on one local Ray cluster.

Three ways to hand the same no-op job (``python -c pass``) to Ray Jobs, each timed from start to the
job id (neither waits for the job):

- ``computewise submit --engine ray --address URL --name N -- python -c pass`` in a fresh process:
  what a user types; it also checks the cluster is reachable and that the request fits a node;
- ``ray job submit --address URL --no-wait -- python -c pass`` in a fresh process: Ray's own CLI;
- ``RayJobsEngine.submit`` in this process, already connected: the cost of computewise's checks
  and the Jobs API call alone.

The fresh-process pairs alternate, so a change in the machine's load reaches both. Prints the
median of each and the ratio computewise / ray. The cluster is a private head on 127.0.0.1 and free
ports (``private_ray.py``), stopped at the end.

Usage: python benchmarks/submit_overhead.py [--repeats 5] [--json OUT] [--quick]
Needs the ray extra: pip install 'computewise[ray]'.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from computewise.scale.engine import JobSpec
from computewise.scale.ray_jobs import RayJobsEngine
from computewise.system.cpu import cpu_model_name
from private_ray import QUIET_ENV, private_head

NO_OP = (sys.executable, "-c", "pass")


def timed_s(command: list[str], env: dict[str, str]) -> float:
    """Wall seconds of one child process, which must succeed."""
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{command[0]} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="fresh-process submissions of each kind")
    parser.add_argument("--quick", action="store_true", help="2 repeats: the CI smoke run")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    repeats = 2 if args.quick else args.repeats
    os.environ.update(QUIET_ENV)
    import ray

    bin_dir = Path(sys.executable).parent
    with private_head(num_cpus=4) as head:
        address = head.address
        env = {**os.environ, "RAY_ADDRESS": "", "RAY_API_SERVER_ADDRESS": ""}
        ours: list[float] = []
        theirs: list[float] = []
        # One untimed submission keeps the first job's set-up out of both sides' figures.
        engine = RayJobsEngine(address)
        engine.submit(JobSpec(name="warm-up", command=NO_OP))
        for index in range(repeats):
            name = f"overhead-{index}"
            ours.append(
                timed_s(
                    [str(bin_dir / "computewise"), "submit", "--engine", "ray", "--address", address,
                     "--name", name, "--", *NO_OP],
                    env,
                )
            )  # fmt: skip
            theirs.append(
                timed_s([str(bin_dir / "ray"), "job", "submit", "--address", address, "--no-wait", "--", *NO_OP], env)
            )
        in_process: list[float] = []
        for index in range(repeats):
            started = time.perf_counter()
            engine.submit(JobSpec(name=f"in-process-{index}", command=NO_OP))
            in_process.append(time.perf_counter() - started)
    ours_s, theirs_s, in_process_s = statistics.median(ours), statistics.median(theirs), statistics.median(in_process)
    figures = {
        "computewise_submit_s": ours_s,
        "ray_job_submit_s": theirs_s,
        "in_process_submit_s": in_process_s,
        "ratio": ours_s / theirs_s,
        "repeats": repeats,
        "cpu": cpu_model_name(),
        "logical_cpus": os.cpu_count(),
        "ray": ray.__version__,
    }
    print(f"submit overhead, local Ray {ray.__version__} cluster; CPU {figures['cpu']} x {figures['logical_cpus']}")
    print(f"  computewise submit (fresh process)  median {ours_s:.2f} s of {repeats}")
    print(f"  ray job submit     (fresh process)  median {theirs_s:.2f} s of {repeats}")
    print(f"  RayJobsEngine.submit (in process)  median {in_process_s * 1000:.0f} ms")
    print(f"  computewise / ray job submit = {ours_s / theirs_s:.2f}x")
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
