"""The session's moto server answers real S3 calls from boto3 and from fsspec/s3fs."""

from __future__ import annotations

import pytest

from s3_server import S3Server


def test_s3_server_round_trip_through_fsspec(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in s3_server.env.items():
        monkeypatch.setenv(name, value)
    s3_server.make_bucket("roundtrip")
    s3_server.make_bucket("roundtrip")  # a second time is fine
    import fsspec

    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    with fs.open("roundtrip/a/hello.txt", "wb") as handle:
        handle.write(b"hello s3")
    assert fs.cat("roundtrip/a/hello.txt") == b"hello s3"
    assert s3_server.endpoint_url.startswith("http://127.0.0.1:")
