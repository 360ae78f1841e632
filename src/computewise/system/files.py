"""A text file replaced whole: a temporary file in the same directory, flushed to disk, then ``os.replace``.

A reader (another ``computewise`` process, a crash recovered from) sees the old file or the new one,
never half of one: ``os.replace`` is atomic within a file system, which is why the temporary file
lives beside its target rather than in the system's temporary directory.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["write_text_atomic"]


def write_text_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` (UTF-8) in one step; the temporary file is removed if anything fails."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
