"""A real local Ray cluster for the scale tests, shared by the session (one per xdist worker).

The head is ``benchmarks/private_ray.py``'s: on 127.0.0.1 only, quiet, on free ports for every listener,
stopped by the PIDs of its own processes (never ``ray stop``). It has 4 logical CPUs and one logical GPU
(Ray's GPUs are bookkeeping: jobs asking for 0.5 are placed on it and their memory caps checked, though
this machine has no device; the 4 CPUs let a Serve replica and a job run side by side).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from spot_job import final_loss, spot_command

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from private_ray import RayHead, private_head  # the benchmarks folder is not a package

CLUSTER_CPUS = 4
CLUSTER_GPUS = 1


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[RayHead]:
    """Start a Ray head on loopback for the session; skip when the ``ray`` extra is not installed."""
    pytest.importorskip("ray.job_submission", reason="the Ray tests need the ray extra: pip install 'computewise[ray]'")
    with private_head(num_cpus=CLUSTER_CPUS, num_gpus=CLUSTER_GPUS) as head:
        yield head


@pytest.fixture(scope="session")
def spot_reference_loss(tmp_path_factory: pytest.TempPathFactory) -> float:
    """The final loss of the spot job run once without interruption: what every resumed run must reach."""
    pytest.importorskip("torch", reason="the spot job trains with torch: pip install 'computewise[torch]'")
    work = tmp_path_factory.mktemp("spot-reference")
    command = spot_command(work / "ckpt", work / "pid", work / "progress", step_sleep_s=0)
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "COMPUTEWISE_DB": str(work / "l.sqlite")},
    )
    assert done.returncode == 0, done.stderr
    return final_loss(done.stdout)
