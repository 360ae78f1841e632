"""The one small exception hierarchy of computewise: user errors in one tree, control flow apart.

Every error a user can cause is a ``ComputewiseError``; the CLI turns it into a message on
stderr and exit code 2, never a traceback. A ``ControlFlow`` is an outcome one part of
computewise raises for another part to handle (the server answers 429, the optimizer reports a
variant as skipped): it is not a ``ComputewiseError``, so one that escapes is shown as the bug it
is, never as the user's mistake. Anything else escaping is a bug in computewise too.

    ComputewiseError                 base; carries ``hint`` ("To fix: ...")
    ├── InputError                   a value the user gave is malformed or out of range
    │   ├── UnknownNameError         a model / accelerator / cloud name that does not exist
    │   ├── ParallelismError         tp * pp * dp != gpus, heads not divisible by tp, ...
    │   ├── ConfigError              train: a training configuration malformed or contradicting itself
    │   ├── SetupError               train: the entry point cannot be imported or returned no setup
    │   ├── CheckpointError          train: the checkpoint directory is unusable or another run's
    │   ├── DistributedError         train: DDP without torchrun, a malformed torchrun environment
    │   ├── SpaceError               tune: a malformed or self-contradicting search space
    │   ├── NothingFitsError         tune: every configuration needs more memory than the device has
    │   ├── ScaleTestError           tune: bad world sizes, a failing single-process run
    │   └── InvalidInput             serve: one request input the model cannot take (HTTP 422)
    ├── ModelConfigError             a config.json (or traced module) we cannot turn into a ModelSpec
    ├── CatalogError                 a malformed catalog row (file, line and column named)
    ├── InfeasiblePlanError          no candidate survives the constraints (names the last one to cut)
    ├── LedgerError                  the ledger database is unreachable, corrupt, or newer than this version
    ├── MissingExtraError            an optional dependency (torch, ...) is not installed
    ├── LaunchError                  monitor: the command could not be started (``exit_code`` as a shell's)
    │   ├── CommandNotFoundError     no such program (127)
    │   └── CommandNotExecutableError  the program exists but cannot be executed (126)
    ├── EvaluationError              optimize: the user's metric raised or returned a non-finite number
    ├── TuneError                    tune: no trial produced a measurement
    └── JobEngineError               scale: an engine refused or could not run a job

    ControlFlow                      base of outcomes handled inside computewise; never a user error
    ├── QueueFull                    serve: not accepted (queue full, SLO unmeetable, draining): 429
    ├── RequestTimeout               serve: not answered within the timeout: 504
    ├── ItemFailed                   serve: the model failed on one item even when run alone: 500
    └── VariantSkipped               optimize: a variant cannot be built here; the reason goes in the report

Two kinds of signal live beside the code that raises them, on purpose: exceptions private to one
module (a leading underscore; raised and caught inside it, such as the load tester's connection
signals or the optimizer's ``BaseException`` alarm, which no ``except Exception`` may eat), and
``computewise.train.Preempted``, a ``SystemExit`` so that an uncaught one ends the process quietly
with exit code 75. ``tests/test_errors.py`` holds every other exception class to this module.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = [
    "CatalogError",
    "CheckpointError",
    "CommandNotExecutableError",
    "CommandNotFoundError",
    "ComputewiseError",
    "ConfigError",
    "ControlFlow",
    "DistributedError",
    "EvaluationError",
    "InfeasiblePlanError",
    "InputError",
    "InvalidInput",
    "ItemFailed",
    "JobEngineError",
    "LaunchError",
    "LedgerError",
    "MissingExtraError",
    "ModelConfigError",
    "NothingFitsError",
    "ParallelismError",
    "QueueFull",
    "RequestTimeout",
    "ScaleTestError",
    "SetupError",
    "SpaceError",
    "TuneError",
    "UnknownNameError",
    "VariantSkipped",
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


# -- train ------------------------------------------------------------------------------------


class ConfigError(InputError):
    """A training configuration is malformed or contradicts itself."""


class SetupError(InputError):
    """The training entry point cannot be imported or returned something that is not a setup."""


class CheckpointError(InputError):
    """The checkpoint directory cannot be used (not writable, or holding another run's checkpoints)."""


class DistributedError(InputError):
    """A distributed setting that cannot work here (DDP without torchrun, a malformed torchrun environment)."""


# -- tune -------------------------------------------------------------------------------------


class SpaceError(InputError):
    """The search space is malformed or asks for settings that contradict each other or the model."""


class NothingFitsError(InputError):
    """Every configuration of the space needs more memory than the device has."""


class ScaleTestError(InputError):
    """The scale test cannot run as asked: bad world sizes, a failing single-process run."""


class TuneError(ComputewiseError):
    """No trial produced a measurement, so there is nothing to recommend."""


# -- serve ------------------------------------------------------------------------------------


class InvalidInput(InputError):
    """One input the model cannot take; the server answers 422.

    ``field`` is the place inside that one input, relative to it: ``""`` for the input itself,
    ``"[3]"`` for its fourth element, ``"input_ids[0]"`` for an element of a named tensor. The
    server prefixes where the input sits in the request (``inputs[2]``), which the model runner cannot know.
    """

    def __init__(self, message: str, field: str = "", hint: str | None = None) -> None:
        super().__init__(message, hint)
        self.field = field


# -- models, catalog, plan, ledger, extras -----------------------------------------------------


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


# -- monitor ----------------------------------------------------------------------------------


class LaunchError(ComputewiseError):
    """The command could not be started; ``exit_code`` is what a shell would return."""

    exit_code = 126


class CommandNotFoundError(LaunchError):
    """No such program (exit code 127, as in a shell)."""

    exit_code = 127


class CommandNotExecutableError(LaunchError):
    """The program exists but cannot be executed (exit code 126, as in a shell)."""

    exit_code = 126


# -- optimize ---------------------------------------------------------------------------------


class EvaluationError(ComputewiseError):
    """The user's metric raised, or returned something that is not a finite number."""


# -- scale ------------------------------------------------------------------------------------


class JobEngineError(ComputewiseError):
    """An engine refused or could not run a job: unreachable, missing binary, impossible request."""


# -- control flow -----------------------------------------------------------------------------


class ControlFlow(Exception):
    """An outcome one part of computewise raises for another to handle; never the user's error.

    Deliberately not a ``ComputewiseError``: the CLI shows those as "the user can fix this" with exit
    code 2, and a control-flow signal that got that far is a bug, which deserves its traceback.
    ``message`` is what the handler passes on (an HTTP error body, a line of the report).
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class QueueFull(ControlFlow):
    """The request was not accepted: the queue is full, the SLO cannot be met, or the server is draining."""

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class RequestTimeout(ControlFlow):
    """The request was not answered within the batcher's timeout; its queued items were dropped."""


class ItemFailed(ControlFlow):
    """The model failed on the request's item ``index`` even when run alone."""

    def __init__(self, message: str, index: int) -> None:
        super().__init__(message)
        self.index = index


class VariantSkipped(ControlFlow):
    """This variant cannot be built here (missing hardware or package); the reason goes in the report."""
