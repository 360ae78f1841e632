"""A real Google Cloud Storage emulator on 127.0.0.1 for the tests, as a child process.

Tests of ``gs://`` paths talk to it over HTTP through the real client (gcsfs via fsspec); nothing in
the client is mocked. The server is ``gcp-storage-emulator`` (pure Python, from PyPI), started by
``gcs_emulator_main.py`` in its own process on a free loopback port, in memory, ended by its PID.

``GcsServer.env`` holds what a child process needs to reach it:

- ``STORAGE_EMULATOR_HOST``: where gcsfs (and Google's own client) send requests instead of Google;
- ``FSSPEC_GCS_TOKEN=anon``: no credentials, which fsspec hands gcsfs as ``token="anon"``;
- ``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false``: gcsfs's default file system first asks Google's gRPC
  control API what kind of bucket it is, which an HTTP emulator cannot answer (each ask waits 60 s).
  The plain HTTP file system this selects is the one that lists, reads, rewrites and deletes.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_START_TIMEOUT_S = 30.0
_MAIN = Path(__file__).with_name("gcs_emulator_main.py")


@dataclass(frozen=True)
class GcsServer:
    """A running emulator: its URL, the environment that points clients at it, and bucket creation."""

    endpoint_url: str
    env: dict[str, str] = field(default_factory=dict)

    def fs(self) -> Any:
        """A gcsfs file system on this server (typed loosely: gcsfs has no stubs)."""
        import gcsfs.core

        return gcsfs.core.GCSFileSystem(endpoint_url=self.endpoint_url, token="anon", skip_instance_cache=True)

    def make_bucket(self, name: str) -> None:
        """Create bucket ``name`` (already existing is fine: tests of one session share the server)."""
        fs = self.fs()
        if not fs.exists(name):
            fs.mkdir(name)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_until_up(url: str, process: subprocess.Popen[bytes]) -> bool:
    deadline = time.monotonic() + _START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(url + "/storage/v1/b", timeout=2):
                return True
        except (urllib.error.URLError, OSError):
            time.sleep(0.1)
    return False


def _stop(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


@contextlib.contextmanager
def running_gcs_server() -> Iterator[GcsServer]:
    """Start the emulator on a free loopback port, yield it, end it by PID (retrying when the port was taken)."""
    for _attempt in range(3):  # another process may take the free port between probe and bind
        port = _free_port()
        process = subprocess.Popen(
            [sys.executable, str(_MAIN), str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        url = f"http://127.0.0.1:{port}"
        if _wait_until_up(url, process):
            break
        _stop(process)
    else:
        raise RuntimeError("the GCS emulator did not start on 127.0.0.1 (is gcp-storage-emulator installed?)")
    env = {
        "STORAGE_EMULATOR_HOST": url,
        "FSSPEC_GCS_TOKEN": "anon",
        "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
    }
    try:
        yield GcsServer(endpoint_url=url, env=env)
    finally:
        _stop(process)
