"""A private Ray head node on loopback, for the benchmarks and the scale tests.

``ray.init()`` starting a local cluster cannot move the dashboard agent off its fixed port 52365, so two
such clusters on one machine (two benchmarks, or a benchmark beside a test worker) fight for it: the
loser's agent never registers and every job submission is answered "No available agent to submit
job". This head is started with ``ray start`` on free ports for every listener that has a fixed default
(GCS 6379, dashboard 8265, client server 10001, dashboard agent 52365), quiet (no usage stats, no auth),
in its own short temp dir (Unix socket paths must stay under ~107 bytes). It is stopped by killing the
PIDs of its own processes: those whose command line names its temp dir or its GCS address, and their
descendants. Never ``ray stop``: that kills every Ray cluster of the user.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psutil

from computewise.system.ports import free_ports

QUIET_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_AUTH_MODE": "disabled",
}
_START_TIMEOUT_S = 120.0
_READY_TIMEOUT_S = 90.0
_STOP_GRACE_S = 3.0


@dataclass(frozen=True)
class RayHead:
    """A running head node: ``address`` is the dashboard (Jobs API) URL; ``gcs_address`` the bootstrap one."""

    address: str
    gcs_address: str
    temp_dir: Path


@contextmanager
def private_head(num_cpus: int, num_gpus: int = 0, dashboard: bool = True) -> Iterator[RayHead]:
    """Start a head node on loopback, wait until its Jobs API accepts work, and stop it on the way out.

    ``dashboard=False`` leaves out the dashboard and so the Jobs API (``address`` then answers nothing):
    a Serve-only benchmark does not pay for a process it never uses."""
    ray_binary = Path(sys.executable).with_name("ray")
    if not ray_binary.exists():
        ray_binary = Path(shutil.which("ray") or "ray")
    temp_dir = Path(tempfile.mkdtemp(prefix="cwray", dir="/tmp"))
    gcs_port, dashboard_port, client_port, agent_port = free_ports(4)
    head = RayHead(f"http://127.0.0.1:{dashboard_port}", f"127.0.0.1:{gcs_port}", temp_dir)
    env = {**os.environ, **QUIET_ENV}
    for variable in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS"):
        env.pop(variable, None)
    command = [
        str(ray_binary), "start", "--head", "--node-ip-address=127.0.0.1", f"--port={gcs_port}",
        "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard_port}", f"--ray-client-server-port={client_port}",
        f"--dashboard-agent-listen-port={agent_port}", f"--temp-dir={temp_dir}", f"--num-cpus={num_cpus}",
        f"--num-gpus={num_gpus}", "--object-store-memory=100000000", f"--include-dashboard={str(dashboard).lower()}",
        "--disable-usage-stats",
    ]  # fmt: skip
    try:
        started = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=_START_TIMEOUT_S, check=False
        )
        if started.returncode != 0:
            raise RuntimeError(f"`ray start` failed ({started.returncode}):\n{started.stdout}\n{started.stderr}")
        if dashboard:
            _wait_ready(head.address)
        yield head
    finally:
        _stop(head)
        shutil.rmtree(temp_dir, ignore_errors=True)


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
    raise RuntimeError(f"the Ray head at {address} did not become ready in {_READY_TIMEOUT_S} s: {last_error}")


def _head_processes(head: RayHead) -> list[psutil.Process]:
    """This head's processes only: matched by temp dir or GCS address, plus everything they started."""
    found: dict[int, psutil.Process] = {}
    for proc in psutil.process_iter(["cmdline"]):
        args: list[str] = proc.info["cmdline"] or []
        if any(_names_head(arg, head) for arg in args):
            found[proc.pid] = proc
    for proc in list(found.values()):
        try:
            for child in proc.children(recursive=True):
                found[child.pid] = child
        except psutil.NoSuchProcess:
            continue
    found.pop(os.getpid(), None)
    return list(found.values())


def _names_head(arg: str, head: RayHead) -> bool:
    """Whole-path / whole-address matches, so a head in /tmp/cwrayab is not mistaken for one in /tmp/cwraya."""
    temp = str(head.temp_dir)
    return arg == f"--address={head.gcs_address}" or arg.endswith(f"={temp}") or arg == temp or f"{temp}/" in arg


def _stop(head: RayHead) -> None:
    processes = _head_processes(head)
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
