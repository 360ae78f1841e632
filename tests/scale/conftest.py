"""A real local Ray cluster for the scale tests, shared by the session (one per xdist worker).

The head runs on 127.0.0.1 only, quiet (no usage stats, no auth), with 4 logical CPUs and one logical
GPU (Ray's GPUs are bookkeeping: jobs asking for 0.5 are placed on it and their memory caps checked,
though this machine has no device; the 4 CPUs let a Serve replica and a job run side by side), in its own
short temp dir (Unix socket paths must stay under ~107 bytes) and on free ports for every listener
that has a fixed default (GCS 6379, dashboard 8265, client server 10001, dashboard agent 52365), so
it never collides with another cluster on the machine. It is stopped by killing the PIDs of its own
processes: those whose command line names its temp dir or its GCS address, and their descendants.
Never ``ray stop``: that kills every Ray cluster of the user.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from spot_job import final_loss, spot_command

_QUIET_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_AUTH_MODE": "disabled",
}
_READY_TIMEOUT_S = 90.0
CLUSTER_CPUS = 4
CLUSTER_GPUS = 1
_STOP_GRACE_S = 3.0


@dataclass(frozen=True)
class RayCluster:
    """A running head node: ``address`` is the dashboard (Jobs API) URL; ``gcs_address`` the bootstrap one."""

    address: str
    gcs_address: str
    temp_dir: Path


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _cluster_processes(temp_dir: Path, gcs_address: str) -> list[psutil.Process]:
    """Our cluster's processes only: matched by temp dir or GCS address, plus everything they started."""
    found: dict[int, psutil.Process] = {}
    for proc in psutil.process_iter(["cmdline"]):
        args: list[str] = proc.info["cmdline"] or []
        if any(_names_cluster(arg, temp_dir, gcs_address) for arg in args):
            found[proc.pid] = proc
    for proc in list(found.values()):
        try:
            for child in proc.children(recursive=True):
                found[child.pid] = child
        except psutil.NoSuchProcess:
            continue
    found.pop(os.getpid(), None)
    return list(found.values())


def _names_cluster(arg: str, temp_dir: Path, gcs_address: str) -> bool:
    """Whole-path / whole-address matches, so a cluster in /tmp/cwrayab is not mistaken for ours in /tmp/cwraya."""
    temp = str(temp_dir)
    return arg == f"--address={gcs_address}" or arg.endswith(f"={temp}") or arg == temp or f"{temp}/" in arg


def _stop(temp_dir: Path, gcs_address: str) -> None:
    processes = _cluster_processes(temp_dir, gcs_address)
    for proc in processes:
        try:
            proc.terminate()
        except psutil.NoSuchProcess:
            continue
    _, alive = psutil.wait_procs(processes, timeout=_STOP_GRACE_S)
    for proc in alive:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            continue
    psutil.wait_procs(alive, timeout=_STOP_GRACE_S)


def _wait_ready(address: str) -> None:
    """The dashboard answers before its job module does: wait for both, bounded."""
    deadline = time.monotonic() + _READY_TIMEOUT_S
    last_error = "no answer yet"
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{address}/api/version", timeout=2) as response:
                json.loads(response.read())
            with urllib.request.urlopen(f"{address}/api/jobs/", timeout=2) as response:
                json.loads(response.read())
            return
        except (urllib.error.URLError, OSError, ValueError) as err:
            last_error = str(err)
        time.sleep(0.25)
    raise RuntimeError(f"the test Ray cluster at {address} did not become ready in {_READY_TIMEOUT_S} s: {last_error}")


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[RayCluster]:
    """Start a Ray head on loopback for the session; skip when the ``ray`` extra is not installed."""
    pytest.importorskip("ray.job_submission", reason="the Ray tests need the ray extra: pip install 'computewise[ray]'")
    ray_binary = Path(sys.executable).with_name("ray")
    if not ray_binary.exists():
        ray_binary = Path(shutil.which("ray") or "ray")
    temp_dir = Path(tempfile.mkdtemp(prefix="cwray", dir="/tmp"))
    gcs_port, dashboard_port, client_port, agent_port = _free_ports(4)
    gcs_address = f"127.0.0.1:{gcs_port}"
    address = f"http://127.0.0.1:{dashboard_port}"
    env = {**os.environ, **_QUIET_ENV}
    for variable in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS"):
        env.pop(variable, None)
    command = [
        str(ray_binary),
        "start",
        "--head",
        "--node-ip-address=127.0.0.1",
        f"--port={gcs_port}",
        "--dashboard-host=127.0.0.1",
        f"--dashboard-port={dashboard_port}",
        f"--ray-client-server-port={client_port}",
        f"--dashboard-agent-listen-port={agent_port}",
        f"--temp-dir={temp_dir}",
        f"--num-cpus={CLUSTER_CPUS}",
        f"--num-gpus={CLUSTER_GPUS}",
        "--object-store-memory=100000000",
        "--include-dashboard=true",
        "--disable-usage-stats",
    ]
    try:
        started = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=False)
        if started.returncode != 0:
            raise RuntimeError(f"`ray start` failed ({started.returncode}):\n{started.stdout}\n{started.stderr}")
        _wait_ready(address)
        yield RayCluster(address=address, gcs_address=gcs_address, temp_dir=temp_dir)
    finally:
        _stop(temp_dir, gcs_address)
        shutil.rmtree(temp_dir, ignore_errors=True)


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
