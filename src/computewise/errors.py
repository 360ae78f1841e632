"""The one small exception hierarchy of computewise.

Every error a user can cause is a ``ComputewiseError``; the CLI turns it into a message on
stderr and exit code 2, never a traceback. Anything else escaping is a bug in computewise.

    ComputewiseError                 base; carries ``hint`` ("To fix: ...")
    ├── InputError                   a value the user typed is malformed or out of range
    │   ├── UnknownNameError         a model / accelerator / cloud name that does not exist
    │   └── ParallelismError         tp * pp * dp != gpus, heads not divisible by tp, ...
    ├── ModelConfigError             a config.json (or traced module) we cannot turn into a ModelSpec
    ├── CatalogError                 a malformed catalog row (file, line and column named)
    ├── InfeasiblePlanError          no candidate survives the constraints (names the last one to cut)
    ├── LedgerError                  the ledger database is unreachable, corrupt, or newer than this version
    └── MissingExtraError            an optional dependency (torch, ...) is not installed
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = [
    "CatalogError",
    "ComputewiseError",
    "InfeasiblePlanError",
    "InputError",
    "LedgerError",
    "MissingExtraError",
    "ModelConfigError",
    "ParallelismError",
    "UnknownNameError",
]


class ComputewiseError(Exception):
    """Base of every error a user can cause; ``hint`` says how to fix it."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        if self.hint:
            return f"{self.message}\nTo fix: {self.hint}"
        return self.message


class InputError(ComputewiseError):
    """A value the user gave is malformed or out of range."""


class UnknownNameError(InputError):
    """A name that is not in the catalog or the presets; suggests the closest ones."""

    def __init__(self, kind: str, name: str, known: Iterable[str], hint: str | None = None) -> None:
        known_list = sorted(set(known))
        close = difflib.get_close_matches(name.lower(), known_list, n=3, cutoff=0.5)
        message = f"unknown {kind} {name!r}"
        if close:
            message += f"; did you mean {', '.join(repr(c) for c in close)}?"
        super().__init__(message, hint or f"pick one of: {', '.join(known_list[:40])}")
        self.suggestions = close


class ParallelismError(InputError):
    """An impossible parallel layout (degrees that do not multiply out, indivisible heads)."""


class ModelConfigError(ComputewiseError):
    """A model description (config.json, traced module) that cannot become a ModelSpec."""


class CatalogError(ComputewiseError):
    """A malformed catalog row; the message names the file, line and column."""

    def __init__(self, path: str, line: int, column: str, problem: str, hint: str | None = None) -> None:
        super().__init__(f"{path}:{line}: column {column!r}: {problem}", hint)
        self.path = path
        self.line = line
        self.column = column


class InfeasiblePlanError(ComputewiseError):
    """No candidate configuration satisfies the constraints."""


class LedgerError(ComputewiseError):
    """The ledger cannot be opened or written: bad URL, unreachable server, corrupt or too-new file."""


class MissingExtraError(ComputewiseError):
    """An optional dependency is needed for this feature but not installed."""

    def __init__(self, package: str, extra: str, feature: str) -> None:
        super().__init__(
            f"{feature} needs {package}, which is not installed",
            f"pip install 'computewise[{extra}]'",
        )
