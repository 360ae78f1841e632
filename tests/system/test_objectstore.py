"""Every way an object store can fail, through the real CLI: its own ``error:``/``To fix:`` and exit 2.

``storage audit``, ``data bench`` and ``data convert`` read buckets through ``system.objectstore``;
each failure is produced for real: the session's S3 (moto) and GCS servers for a missing bucket, an
environment without credentials, a closed 127.0.0.1 port for an unreachable endpoint, a socket
that accepts connections and never answers for a time-out, and a small HTTP server on 127.0.0.1
that answers every request with the store's own 401 or 403 error document for refused credentials.
"""

from __future__ import annotations

import contextlib
import http.server
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from child_server import free_port
from gcs_server import GcsServer
from s3_server import S3Server

VERBS = {
    "storage audit": lambda url: ["storage", "audit", url],
    "data bench": lambda url: ["data", "bench", f"{url}/x.csv", "--max-workers", "1"],
    "data convert": lambda url: ["data", "convert", f"{url}/x.csv", os.devnull + ".parquet"],
}
_STORE_VARIABLES = ("AWS_", "FSSPEC_", "GOOGLE_", "STORAGE_EMULATOR_HOST", "GCSFS_", "AZURE_")


def _cli(verb: str, url: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The CLI in a child whose store settings are ``env`` alone (none of this machine's credentials)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(_STORE_VARIABLES)}
    base |= {
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    }
    return subprocess.run(
        [sys.executable, "-m", "computewise.cli.app", *VERBS[verb](url)],
        capture_output=True, text=True, timeout=120, env={**base, **env}, check=False,
    )  # fmt: skip


def _refused(done: subprocess.CompletedProcess[str], *words: str) -> str:
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and "To fix:" in done.stderr, done.stderr
    message = " ".join(done.stderr.split())
    assert all(word in message for word in words), message
    return message


class _Refusing(http.server.BaseHTTPRequestHandler):
    """Answers every request as a store that does not accept the caller: S3's XML or GCS's JSON error."""

    status = 403

    def _answer(self) -> None:
        if "storage/v1" in self.path:  # GCS's JSON API
            body = f'{{"error": {{"code": {self.status}, "message": "caller has no access"}}}}'.encode()
        else:
            code = "AccessDenied" if self.status == 403 else "InvalidAccessKeyId"
            body = f"<Error><Code>{code}</Code><Message>no access</Message></Error>".encode()
        self.send_response(self.status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_HEAD = do_POST = do_PUT = _answer

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextlib.contextmanager
def _refusing_server(status: int) -> Iterator[str]:
    handler = type("Handler", (_Refusing,), {"status": status})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def _silent_server() -> Iterator[str]:
    """A port whose connections the kernel accepts (the backlog) and nobody ever answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"


def _s3_env(s3: S3Server, endpoint: str | None = None) -> dict[str, str]:
    url = endpoint or s3.endpoint_url
    return {**s3.env, "AWS_ENDPOINT_URL": url, "AWS_ENDPOINT_URL_S3": url, "FSSPEC_S3_ENDPOINT_URL": url}


@pytest.mark.parametrize("verb", VERBS)
def test_s3_without_credentials(s3_server: S3Server, verb: str) -> None:
    s3_server.make_bucket("objectstore-failures")
    env = {k: v for k, v in _s3_env(s3_server).items() if not k.startswith(("AWS_ACCESS", "AWS_SECRET", "AWS_SESSION"))}
    done = _cli(verb, "s3://objectstore-failures", env)
    _refused(done, "S3 found no credentials", "AWS_ACCESS_KEY_ID")


@pytest.mark.parametrize("verb", VERBS)
def test_s3_no_such_bucket(s3_server: S3Server, verb: str) -> None:
    done = _cli(verb, "s3://no-such-bucket-here", _s3_env(s3_server))
    _refused(done, "no such bucket 'no-such-bucket-here'")


@pytest.mark.parametrize("verb", VERBS)
def test_s3_unreachable_endpoint_is_said_at_once(s3_server: S3Server, verb: str) -> None:
    """Named with its port: the probe said it, before botocore and s3fs retried it for twenty seconds."""
    port = free_port()
    done = _cli(verb, "s3://objectstore-failures", _s3_env(s3_server, f"http://127.0.0.1:{port}"))
    _refused(done, f"cannot reach S3 at 127.0.0.1:{port} (Connection refused)")


def test_s3_access_denied(s3_server: S3Server) -> None:
    with _refusing_server(403) as endpoint:
        done = _cli("storage audit", "s3://objectstore-failures", _s3_env(s3_server, endpoint))
    _refused(done, "S3 denied access", "s3:ListBucket")


def test_s3_time_out(s3_server: S3Server) -> None:
    """The read time-out and retries are the user's fsspec configuration's (one second, one try), kept over
    our defaults; s3fs still tries five times."""
    with _silent_server() as endpoint:
        config = '{"config_kwargs": {"read_timeout": 1, "retries": {"max_attempts": 1}}}'
        env = {**_s3_env(s3_server, endpoint), "FSSPEC_S3": config}
        done = _cli("data bench", "s3://objectstore-failures", env)
    _refused(done, "S3 did not answer in time")


def _gcs_env(gcs: GcsServer, endpoint: str | None = None) -> dict[str, str]:
    return {**gcs.env, "STORAGE_EMULATOR_HOST": endpoint or gcs.endpoint_url}


@pytest.mark.parametrize("verb", VERBS)
def test_gcs_no_such_bucket(gcs_server: GcsServer, verb: str) -> None:
    done = _cli(verb, "gs://no-such-bucket-here", _gcs_env(gcs_server))
    _refused(done, "no such bucket 'no-such-bucket-here'")


def test_gcs_unreachable_endpoint_is_said_at_once(gcs_server: GcsServer) -> None:
    """Named with its port: the probe said it, before gcsfs retried it for half a minute."""
    port = free_port()
    done = _cli("storage audit", "gs://bucket", _gcs_env(gcs_server, f"http://127.0.0.1:{port}"))
    _refused(done, f"cannot reach Google Cloud Storage at 127.0.0.1:{port} (Connection refused)")


@pytest.mark.parametrize(("status", "said"), [(401, "did not accept the credentials"), (403, "denied access")])
def test_gcs_refused_credentials_and_access(gcs_server: GcsServer, status: int, said: str) -> None:
    with _refusing_server(status) as endpoint:
        done = _cli("storage audit", "gs://bucket/prefix", _gcs_env(gcs_server, endpoint))
    _refused(done, f"Google Cloud Storage {said}")


@pytest.mark.parametrize("verb", VERBS)
def test_azure_without_its_driver(verb: str) -> None:
    """computewise has no Azure reader of its own: fsspec's needs adlfs, which no extra installs."""
    pytest.importorskip("fsspec")
    if _installed("adlfs"):
        pytest.skip("adlfs is installed here")
    done = _cli(verb, "az://container/prefix", {})
    _refused(done, "needs adlfs", "pip install adlfs")


def _installed(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None
