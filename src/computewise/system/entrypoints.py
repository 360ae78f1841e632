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
        raise error(f"cannot import {what} {spec}: {failure}", _import_hint(module_name, failure)) from failure


def _import_hint(module_name: str, failure: Exception) -> str:
    """Where the import looked, when the package itself is missing: the usual cause is the directory.

    An entry point is imported as uvicorn imports an app, from the working directory and PYTHONPATH.
    The repository's ``examples.*`` are found from its root only; run elsewhere, the user needs to be
    told which folder to stand in or put on the path, not only that the name is unknown.
    """
    package = module_name.split(".")[0]
    if isinstance(failure, ModuleNotFoundError) and failure.name == package:
        folder = "the computewise repository's root" if package == "examples" else f"the folder that holds {package}/"
        return (
            f"{package} is imported from the working directory ({Path.cwd()}) and PYTHONPATH: "
            f"run from {folder}, or add that folder to PYTHONPATH"
        )
    return "give package.module:function importable from the working directory or PYTHONPATH"
