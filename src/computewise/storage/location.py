"""Where an audit looks: a local folder or an object-store prefix (``s3://bucket/prefix``) through fsspec.

A local path is walked with ``os.scandir`` (a ``stat`` per file, nothing more); a URL goes through
fsspec, opened by ``computewise.system.objectstore`` (which says why a store cannot be read) and only
for a URL, so ``computewise --help`` never pays for it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from computewise.errors import InputError
from computewise.system.objectstore import is_url, locate, open_store

__all__ = ["Location", "open_location"]

# Object stores whose classes the price table knows. S3 and GCS listings say each object's class, and
# an apply can change it (archive); Azure's are listed and priced at the command line's class only.
_CLOUD_BY_PROTOCOL = {"s3": "aws", "gs": "gcp", "gcs": "gcp", "az": "azure", "abfs": "azure"}
_GCS_PROTOCOLS = frozenset({"gs", "gcs"})
_ARCHIVABLE_PROTOCOLS = _GCS_PROTOCOLS | {"s3"}


@dataclass(frozen=True)
class Location:
    """The audited root: ``text`` as the user typed it, a resolved local ``path`` or an fsspec ``fs``."""

    text: str
    path: Path | None
    protocol: str | None
    bucket_path: str
    fs: Any

    @property
    def is_local(self) -> bool:
        return self.path is not None

    @property
    def can_archive(self) -> bool:
        """Whether an apply can move this location's files to a colder class (any local folder can)."""
        return self.is_local or self.protocol in _ARCHIVABLE_PROTOCOLS

    @property
    def cloud(self) -> str | None:
        return None if self.protocol is None else _CLOUD_BY_PROTOCOL.get(self.protocol)

    def url(self, bucket_path: str) -> str:
        """The full URL of an object listed as ``bucket/key``."""
        return f"{self.protocol}://{bucket_path}"

    def set_storage_class(self, url: str, api_name: str) -> None:
        """Change one object's class in place, the way its store documents (see ``can_archive``).

        S3: a copy onto itself with the new ``StorageClass``. GCS: ``objects.rewrite`` onto itself with
        ``storageClass`` in the destination resource (a metadata patch cannot change the class); a large
        object is rewritten over several calls, each continuing from the last one's ``rewriteToken``.
        gcsfs's errors other than ``OSError`` are raised as ``OSError``, as every other store's are.
        """
        if self.protocol not in _GCS_PROTOCOLS:
            self.fs.copy(url, url, StorageClass=api_name)
            return
        from gcsfs.retry import HttpError

        bucket, key, _generation = self.fs.split_path(url)
        token: dict[str, str] = {}
        try:
            while True:
                response = self.fs.call(
                    "POST", "b/{}/o/{}/rewriteTo/b/{}/o/{}", bucket, key, bucket, key,
                    json={"storageClass": api_name}, json_out=True, **token,
                )  # fmt: skip
                if response.get("done") is True:
                    break
                token = {"rewriteToken": response["rewriteToken"]}
        except (HttpError, ValueError, RuntimeError) as error:
            raise OSError(str(error)) from error
        finally:
            self.fs.invalidate_cache(f"{bucket}/{key}")


def open_location(text: str) -> Location:
    """The local folder or object prefix ``text`` names; an ``InputError`` when there is none."""
    if is_url(text):
        fs, bucket_path = open_store(text)
        locate(fs, text, bucket_path)
        protocol = text.split("://", 1)[0].lower()
        return Location(text, None, protocol, str(bucket_path).rstrip("/"), fs)
    path = Path(text.removeprefix("file://")).expanduser()
    if not path.exists():
        raise InputError(f"{text}: no such file or folder", "pass an existing folder (or an s3://bucket/prefix URL)")
    if not path.is_dir():
        raise InputError(f"{text} is a file, not a folder", f"pass the folder that holds it: {path.parent}")
    if not os.access(path, os.R_OK | os.X_OK):
        raise InputError(f"{text}: permission denied", "run as a user who can read the folder, or fix its permissions")
    return Location(text, path.resolve(), None, str(path.resolve()), None)
