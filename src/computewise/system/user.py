"""The name of the user running this process, as the ledger records it."""

from __future__ import annotations

import getpass
import os


def current_user() -> str:
    """The login name, or the numeric uid where the process has no passwd entry.

    ``getpass.getuser()`` raises ``KeyError`` in containers started with a uid that
    ``/etc/passwd`` does not list; recording a run must never fail for that.
    """
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid()) if hasattr(os, "getuid") else "unknown"
