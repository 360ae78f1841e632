"""The input hash of a run: what makes two launches "the same job" for the duplicate-run warning.

Users re-run costly jobs by accident: the same script on the same data with the same tags. The
hash covers the command line and the content of every argument that names an existing file, plus
any ``--input`` paths (files, or directories walked in sorted order). Files above
``FULL_HASH_MAX_BYTES`` are represented by their size and modification time, so hashing a 100 GB
dataset costs a ``stat``, not minutes; a rewritten big file still changes its mtime.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

__all__ = ["FULL_HASH_MAX_BYTES", "input_hash"]

FULL_HASH_MAX_BYTES = 64 * 1024 * 1024
_MAX_DIRECTORY_FILES = 100_000


def _file_digest(path: Path, digest: hashlib._Hash) -> None:
    stat = path.stat()
    digest.update(f"{path}\0{stat.st_size}\0".encode())
    if stat.st_size > FULL_HASH_MAX_BYTES:
        digest.update(f"mtime:{stat.st_mtime_ns}\0".encode())
        return
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)


def _directory_files(root: Path) -> Iterable[Path]:
    count = 0
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            count += 1
            if count > _MAX_DIRECTORY_FILES:
                return
            yield Path(folder) / name


def input_hash(argv: Sequence[str], inputs: Sequence[str | os.PathLike[str]] = ()) -> str:
    """SHA-256 (hex) of the command line, the files it names, and the extra input paths."""
    digest = hashlib.sha256()
    for arg in argv:
        digest.update(arg.encode("utf-8", "surrogateescape") + b"\0")
        path = Path(arg)
        try:
            if path.is_file():
                _file_digest(path, digest)
        except OSError:  # unreadable or too-long names are just arguments
            continue
    for item in inputs:
        path = Path(item)
        files = _directory_files(path) if path.is_dir() else [path]
        for file in files:
            try:
                _file_digest(file, digest)
            except OSError:
                digest.update(f"{file}\0missing\0".encode())
    return digest.hexdigest()
