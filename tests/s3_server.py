"""A real S3-compatible server on 127.0.0.1 for the tests: moto in server mode, as a child process.

Tests of ``s3://`` paths (``data bench``, ``storage audit``) talk to it over HTTP through the real
clients (boto3, s3fs via fsspec); nothing in the client is mocked. The server runs as
``python -m moto.server`` in its own process, on a free loopback port, and is ended by its PID.

``S3Server.env`` holds what a child process needs to reach it: dummy credentials, a region, and the
endpoint under the names botocore (``AWS_ENDPOINT_URL``, ``AWS_ENDPOINT_URL_S3``) and fsspec's
config (``FSSPEC_S3_ENDPOINT_URL``, which s3fs receives as ``endpoint_url``) read.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field

from child_server import start_on_free_port, stop


@dataclass(frozen=True)
class S3Server:
    """A running moto server: its URL, the environment that points clients at it, and bucket creation."""

    endpoint_url: str
    env: dict[str, str] = field(default_factory=dict)

    def client(self) -> object:
        """A boto3 S3 client on this server (typed loosely: boto3 has no stubs here)."""
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=self.env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=self.env["AWS_SECRET_ACCESS_KEY"],
            region_name=self.env["AWS_DEFAULT_REGION"],
        )

    def make_bucket(self, name: str) -> None:
        """Create bucket ``name`` (already existing is fine: tests of one session share the server)."""
        client = self.client()
        with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):  # type: ignore[attr-defined]
            client.create_bucket(Bucket=name)  # type: ignore[attr-defined]


@contextlib.contextmanager
def running_s3_server() -> Iterator[S3Server]:
    """Start moto on a free loopback port, yield it, end it by PID (retrying when the port was taken)."""
    process, url = start_on_free_port(
        lambda port: [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        "/moto-api/",
        "moto server (is moto[server] installed?)",
    )
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": url,
        "AWS_ENDPOINT_URL_S3": url,
        "FSSPEC_S3_ENDPOINT_URL": url,
    }
    try:
        yield S3Server(endpoint_url=url, env=env)
    finally:
        stop(process)
