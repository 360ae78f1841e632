"""A server the tests start as a child process on a free 127.0.0.1 port, and end by its PID.

Shared by the object-store servers (``s3_server``: moto, ``gcs_server``: a GCS emulator) and the
dashboard's fixtures: pick a free port, start the command on it, poll a URL until it answers, and
retry on another port when the probe's port was taken before the child could bind it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable

from computewise.system.ports import free_port

_START_TIMEOUT_S = 30.0


def stop(process: subprocess.Popen[bytes], timeout_s: float = 10.0) -> None:
    """SIGTERM, then SIGKILL if it has not ended within ``timeout_s``; an ended process is left alone."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=timeout_s)


def _answers(url: str, process: subprocess.Popen[bytes]) -> bool:
    deadline = time.monotonic() + _START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(url, timeout=2):
                return True
        except (urllib.error.URLError, OSError):
            time.sleep(0.1)
    return False


def start_on_free_port(
    command: Callable[[int], list[str]], probe_path: str, what: str
) -> tuple[subprocess.Popen[bytes], str]:
    """Run ``command(port)`` until ``http://127.0.0.1:PORT{probe_path}`` answers: (the process, its base URL)."""
    for _attempt in range(3):  # another process may take the free port between probe and bind
        port = free_port()
        process = subprocess.Popen(command(port), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        if _answers(url + probe_path, process):
            return process, url
        stop(process)
    raise RuntimeError(f"{what} did not start on 127.0.0.1")
