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
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from child_server import start_on_free_port, stop

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


@contextlib.contextmanager
def running_gcs_server() -> Iterator[GcsServer]:
    """Start the emulator on a free loopback port, yield it, end it by PID (retrying when the port was taken)."""
    process, url = start_on_free_port(
        lambda port: [sys.executable, str(_MAIN), str(port)],
        "/storage/v1/b",
        "the GCS emulator (is gcp-storage-emulator installed?)",
    )
    env = {
        "STORAGE_EMULATOR_HOST": url,
        "FSSPEC_GCS_TOKEN": "anon",
        "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
    }
    try:
        yield GcsServer(endpoint_url=url, env=env)
    finally:
        stop(process)
