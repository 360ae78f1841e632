"""One run of the ledger, from its row to its status: what every kind of run records, written once.

``computewise run`` (kind ``command``), ``track()``, ``tune``, ``serve`` and a supervised job each
record a run: the hardware it uses, priced and matched to the catalog, in a row with who ran what
where (host, pid, user, cwd, argv), started before the work and finished with a status. The status
follows one rule, so the same ending reads the same whatever kind of run it ended:

    the work returned, exit 0, SystemExit(0)                  succeeded    exit code 0
    an exception                                              failed       1 (Python's own)
    Ctrl-C (KeyboardInterrupt), killed by SIGINT/TERM/HUP     interrupted  128 + N (Ctrl-C: 130)
    exit 75 (PREEMPTED_EXIT_CODE: stopped after a checkpoint) interrupted  75
    any other exit code or SystemExit(code)                   failed       that code (SIGKILL: 137)
    the monitor killed outright (SIGKILL, power lost)         nothing is written: the row stays
        ``running`` until ``Ledger.mark_crashed`` finds its process gone and turns it ``crashed``

    row = new_run("tune", "computewise tune x:setup", hardware=hw, price=price, ...)  # priced: watch.priced_row
    with RecordedRun(ledger, row) as run:   # the row is written before the work starts
        ...                                 # an exception leaving the block ends the run by the rule
        run.declare(Ending.of_exit(code), summary={...})  # or say how it ended: a child's exit, a summary
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from computewise.catalog import Catalog
from computewise.estimate.quote import PriceRequest
from computewise.ledger import PREEMPTED_EXIT_CODE, Ledger, NewRun, PriceSnapshot, RunKind, RunStatus
from computewise.monitor.gpu import GpuStatus
from computewise.monitor.pricing import DetectedHardware, frozen_price
from computewise.system.user import current_user

__all__ = [
    "CTRL_C_EXIT_CODE",
    "INTERRUPT_SIGNALS",
    "RUN_ID_ENV",
    "Ending",
    "RecordedRun",
    "catalog_accelerator",
    "exit_code_of",
    "hardware_of",
    "new_run",
    "run_status",
]

INTERRUPT_SIGNALS: frozenset[int] = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGHUP})
"""Signals that ask a job to stop (a person, a scheduler, a closed terminal): its run is interrupted, not failed."""
CTRL_C_EXIT_CODE = 128 + signal.SIGINT
"""What a shell reports for a Python process that Ctrl-C stopped (it re-raises SIGINT on its way out)."""
RUN_ID_ENV = "COMPUTEWISE_RUN_ID"
"""Names the run a process records into: set by ``computewise run`` for its child and by a supervisor for its job,
so a ``track()`` inside writes its steps into that run instead of a new one and no job is counted twice."""
_ERROR_EXIT_CODE = 1  # Python's exit code for an uncaught exception, and for SystemExit("a message")


def run_status(exit_code: int | None, signalled_by: int | None = None) -> RunStatus:
    """The one rule: 0 succeeded; exit 75 (preempted after a checkpoint) or stopped by SIGINT/SIGTERM/SIGHUP
    (``signalled_by``, or killed by one: 128 + N shell-style, -N as ``Popen`` says) interrupted; else failed.

    An unknown exit code (None) with no stop signal is failed: nothing says the work finished.
    """
    if exit_code == 0:
        return "succeeded"
    if exit_code == PREEMPTED_EXIT_CODE or signalled_by in INTERRUPT_SIGNALS:
        return "interrupted"
    if exit_code is not None and (exit_code - 128 in INTERRUPT_SIGNALS or -exit_code in INTERRUPT_SIGNALS):
        return "interrupted"
    return "failed"


def exit_code_of(error: BaseException | None) -> int:
    """The exit code a Python process ending with ``error`` gives its shell, so an exception and a child's
    exit code go through the same rule: none 0, Ctrl-C 130, ``SystemExit(code)`` its code, else 1."""
    if error is None:
        return 0
    if isinstance(error, KeyboardInterrupt):
        return CTRL_C_EXIT_CODE
    if isinstance(error, SystemExit):
        if error.code is None:
            return 0
        return int(error.code) if isinstance(error.code, int) else _ERROR_EXIT_CODE
    return _ERROR_EXIT_CODE


@dataclass(frozen=True)
class Ending:
    """How a run ended, as the ledger records it: its status, exit code and the error in words."""

    status: RunStatus
    exit_code: int | None
    error: str | None = None

    @classmethod
    def of_exit(cls, exit_code: int | None, signalled_by: int | None = None, error: str | None = None) -> Ending:
        """A process's ending: its exit code, and the stop signal it was sent, if any."""
        return cls(run_status(exit_code, signalled_by), exit_code, error)

    @classmethod
    def of_exception(cls, error: BaseException | None) -> Ending:
        """The ending of work that raised ``error`` (None: it returned), as if the process exited with it."""
        code = exit_code_of(error)
        status = run_status(code)
        if error is None or status == "succeeded":
            return cls(status, code)
        return cls(status, code, f"{type(error).__name__}: {error}" if str(error) else type(error).__name__)


def hardware_of(status: GpuStatus) -> DetectedHardware:
    """What a run on this machine uses: the GPUs the driver reports (maybe none) and the logical CPUs."""
    first = status.devices[0] if status.devices else None
    return DetectedHardware(
        gpu_count=len(status.devices),
        gpu_name=first.name if first else None,
        gpu_memory_total_bytes=float(first.memory_total_bytes) if first and first.memory_total_bytes else None,
        logical_cpus=os.cpu_count() or 1,
    )


def catalog_accelerator(catalog: Catalog, hardware: DetectedHardware) -> str | None:
    """The catalog's slug for the detected GPU (None without a GPU, or for one the catalog does not list)."""
    if hardware.gpu_name is None:
        return None
    accelerator = catalog.match_device(hardware.gpu_name, hardware.gpu_memory_total_bytes)
    return accelerator.slug if accelerator else None


def new_run(
    kind: RunKind,
    command: Sequence[str] | str,
    *,
    hardware: DetectedHardware,
    price: PriceSnapshot,
    tags: Mapping[str, str],
    interval_s: float,
    argv: Sequence[str] | None = None,
    accelerator: str | None = None,
    input_hash: str | None = None,
    started_at_s: float | None = None,
) -> NewRun:
    """The row of a run about to start on this host, by this process and user, in this directory.

    ``command`` is what ``runs`` shows (words are shell-quoted); ``argv`` is how this process was
    started, this interpreter's own by default. The user is never a crash: a container without a
    passwd entry records its uid.
    """
    started_argv = tuple(argv) if argv is not None else tuple(getattr(sys, "orig_argv", sys.argv))
    return NewRun(
        kind=kind,
        command=command if isinstance(command, str) else shlex.join(command),
        argv=started_argv,
        tags=dict(tags),
        host=socket.gethostname(),
        pid=os.getpid(),
        user=current_user(),
        cwd=os.getcwd(),
        started_at_s=time.time() if started_at_s is None else started_at_s,
        interval_s=interval_s,
        price=price,
        logical_cpus=hardware.logical_cpus,
        gpu_count=hardware.gpu_count,
        gpu_name=hardware.gpu_name,
        accelerator=accelerator,
        input_hash=input_hash,
    )


class RecordedRun:
    """One run of the ledger: ``start`` writes its row, ``finish`` its ending, exactly once.

    Used as ``with RecordedRun(ledger, row) as run:``, an exception leaving the block finishes the
    run by the rule (and propagates); otherwise the run ends as ``declare`` said, or succeeded. Work
    whose start and end are hooks rather than a block (``track()`` in a framework) calls ``start`` and
    ``finish(error)`` itself. The ledger stays the caller's to open and close.
    """

    def __init__(self, ledger: Ledger, row: NewRun) -> None:
        self.ledger = ledger
        self.row = row
        self._run_id: int | None = None
        self._declared: Ending | None = None
        self._summary: Mapping[str, Any] | None = None
        self._ending: Ending | None = None
        self.ended_at_s: float | None = None

    @property
    def run_id(self) -> int:
        if self._run_id is None:
            raise RuntimeError("the run has not started: call start() or enter the with-block first")
        return self._run_id

    def start(self) -> int:
        """Write the row (status ``running``); its id."""
        self._run_id = self.ledger.start_run(self.row)
        return self._run_id

    def declare(self, ending: Ending | None = None, summary: Mapping[str, Any] | None = None) -> None:
        """Say how the run ended when no exception says it (a child's exit code, a handled Ctrl-C), and
        the summary to store with it; ``finish`` writes them."""
        if ending is not None:
            self._declared = ending
        if summary is not None:
            self._summary = summary

    def set_hardware(self, catalog: Catalog, hardware: DetectedHardware, accelerator: str | None = None) -> None:
        """Price the run from hardware learnt after it started (``track()`` meets its device at the first step),
        as it would have been priced at launch; ``accelerator`` when the catalog's device is already known."""
        price = frozen_price(catalog, hardware.ask(catalog), PriceRequest())
        slug = accelerator or catalog_accelerator(catalog, hardware)
        self.ledger.set_run_hardware(self.run_id, price, hardware.gpu_count, hardware.gpu_name, slug)

    def finish(self, error: BaseException | None = None) -> Ending:
        """End the run: by ``error`` when the work raised, else as declared, else succeeded.

        Only the first call writes (a second returns the same ending, even if the first write failed),
        so a caller may finish early and let the with-block's exit pass.
        """
        if self._ending is not None:
            return self._ending
        declared = self._declared or Ending.of_exception(None)
        ending = Ending.of_exception(error) if error is not None else declared
        self._ending, self.ended_at_s = ending, time.time()
        self.ledger.finish_run(
            self.run_id,
            ending.status,
            self.ended_at_s,
            exit_code=ending.exit_code,
            summary=self._summary,
            error=ending.error,
        )
        return ending

    def __enter__(self) -> RecordedRun:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.finish(exc)
