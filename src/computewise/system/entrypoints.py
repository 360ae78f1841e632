"""``package.module:function`` resolved the way uvicorn does: importable from the working directory.

Models (``optimize MODEL``), metrics (``--eval``), model runners (``serve pkg.mod:fn``) and training
entry points (``tune``, ``fit``) are all named this way; one resolver keeps the search path and the
error the same for all of them.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

from computewise.errors import ComputewiseError

__all__ = ["import_entry_point"]


def import_entry_point(spec: str, what: str, error: type[ComputewiseError]) -> Any:
    """The object ``spec`` names; ``error`` (naming ``what``) when it cannot be imported."""
    module_name, colon, attribute = spec.partition(":")
    if not (colon and module_name and attribute):
        raise error(f"{what} {spec!r} is not an entry point", "write package.module:function")
    if str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        return getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as failure:
        raise error(
            f"cannot import {what} {spec}: {failure}", "give package.module:function importable from this directory"
        ) from failure
