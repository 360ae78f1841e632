"""Files written later or whole.

``write_text_atomic``: a text file replaced whole: a temporary file in the same directory, flushed to
disk, then ``os.replace``. A reader (another ``computewise`` process, a crash recovered from) sees the
old file or the new one, never half of one: ``os.replace`` is atomic within a file system, which is why
the temporary file lives beside its target rather than in the system's temporary directory.

``check_writable``: an output that is written only after minutes or hours of work (``run --html``,
``optimize``/``bench --html``, ``serve --ready-file``) is checked before that work starts, by creating
and removing a file beside it as the real write will, so a bad path costs nothing.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from computewise.errors import InputError

__all__ = ["check_writable", "write_text_atomic"]


def check_writable(path: Path, flag: str, not_done: str) -> None:
    """Refuse ``path`` (given as ``flag``) unless a file can be created there now; ``not_done`` says what did
    not happen because of it ("nothing was run"). A probe file is created and removed: ``os.access`` says
    yes to root on a read-only mount."""
    directory = path.parent
    if path.is_dir():
        raise InputError(f"{flag} {path} is a directory", f"give a file's path in it, e.g. {flag} {path}/<name>")
    if not directory.is_dir():
        raise InputError(
            f"{flag} {path}: directory {directory} does not exist",
            f"create it (mkdir -p {directory}) or give another {flag} path; {not_done}",
        )
    probe = directory / f".{path.name}.{os.urandom(4).hex()}.check"
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except OSError as error:
        raise InputError(
            f"{flag} {path}: cannot write in {directory}: {error.strerror or error}",
            f"give a {flag} path in a directory you can write to; {not_done}",
        ) from error
    probe.unlink(missing_ok=True)


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
