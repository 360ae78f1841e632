"""Start the user's command as a child, pass signals on to it, and report its exit like a shell would.

The child shares our stdin, stdout, stderr and process group, so it stays in the terminal's foreground
group: it can read the keyboard, and Ctrl-C / Ctrl-\\ reach it straight from the terminal driver. We
therefore do NOT forward SIGINT or SIGQUIT when the child is in our process group and that group is
the foreground group of our controlling terminal (it already got the signal; forwarding would
deliver it twice, and a second Ctrl-C means "abort the cleanup" to many programs). Otherwise (no
terminal, a background job, the child moved to its own group, ``kill -INT <our pid>``) they are
forwarded. SIGTERM, SIGHUP, SIGUSR1 and SIGUSR2 are always forwarded. This is what ``uv run`` settled
on (astral-sh/uv PRs #11009 and #13925), with the foreground check made exact.

A job may ignore SIGINT (or take forever to clean up), so interrupts escalate: the second SIGINT we
get sends SIGTERM to the job and its descendants, the third sends SIGKILL. Each step is said on
stderr, with what the next Ctrl-C will do.

``Child.wait()`` waits without reaping first (``waitid(WNOWAIT)``) so that a signal forwarded at the
last moment hits a zombie, never a recycled pid, then reaps with ``wait4`` to get the job's exact CPU
and disk totals (``ExitUsage``). Exit codes follow the shell: killed by signal N is 128 + N.

    with SignalForwarder() as forwarder:
        child = Child.start(argv)          # CommandNotFoundError -> 127, CommandNotExecutableError -> 126
        forwarder.attach(child)
        ended = child.wait()
    status = ended.status  # by the rule of every run: computewise.monitor.recorded.run_status
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import FrameType, TracebackType
from typing import Any

import psutil

from computewise.errors import CommandNotExecutableError, CommandNotFoundError, InputError
from computewise.ledger import RunStatus
from computewise.monitor.process import ExitUsage, own_peak_rss_bytes
from computewise.monitor.recorded import INTERRUPT_SIGNALS, run_status
from computewise.units import plural

__all__ = [
    "ESCALATION",
    "FORWARDED_SIGNALS",
    "Child",
    "ChildExit",
    "SignalForwarder",
]

FORWARDED_SIGNALS: tuple[signal.Signals, ...] = (
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGQUIT,
)
_KEYBOARD_SIGNALS: frozenset[int] = frozenset({signal.SIGINT, signal.SIGQUIT})
ESCALATION: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGKILL)
"""What the second and the third (and every later) SIGINT send to the job."""
_STDERR_FD = 2


@dataclass(frozen=True)
class ChildExit:
    """How the job ended: ``exit_code`` shell-style (128 + N for signal N), ``returncode`` as Popen has it."""

    exit_code: int
    returncode: int
    signalled_by: int | None  # the interrupting signal we got or sent (else the last one), None if none
    usage: ExitUsage

    @property
    def status(self) -> RunStatus:
        return run_status(self.exit_code, self.signalled_by)


class Child:
    """A started command. ``send_signal`` may be called from any thread (the idle guard does)."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self._process = process
        self.pid = process.pid
        # Popen returns once the child has exec'd: our peak now bounds the image it inherited (process.py).
        self._launcher_peak_rss_bytes = own_peak_rss_bytes()
        # Reentrant: a signal handler runs on the main thread, possibly while the main thread holds it.
        self._lock = threading.RLock()
        self._exited = False
        self._signals: list[int] = []

    @classmethod
    def start(
        cls,
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        stdout_to_stderr: bool = False,
    ) -> Child:
        """Start ``argv`` with our stdin/stdout/stderr; raises ``LaunchError`` if it cannot run.

        ``stdout_to_stderr``: the job writes its stdout to our stderr, keeping our stdout for a JSON report.
        """
        if not argv:
            raise InputError("no command to run", "put the command after --, e.g. computewise run -- python train.py")
        program = argv[0]
        try:
            process = subprocess.Popen(
                list(argv),
                env=dict(env) if env is not None else None,
                cwd=cwd,
                stdout=_STDERR_FD if stdout_to_stderr else None,
            )
        except FileNotFoundError as error:
            if cwd is not None and not os.path.isdir(cwd):
                raise InputError(f"no such directory: {cwd}", "check the working directory") from error
            raise CommandNotFoundError(
                f"command not found: {program}",
                "check the spelling, or that the program is installed and on PATH"
                + ("" if os.sep in program else f" (PATH={os.environ.get('PATH', '')})"),
            ) from error
        except PermissionError as error:
            if os.sep in program and os.path.isdir(os.path.join(cwd or os.curdir, program)):  # chmod +x would not help
                raise CommandNotExecutableError(
                    f"cannot execute {program}: it is a directory",
                    f"name the program to run, e.g. {os.path.join(program, 'train.sh')} "
                    f"or python {os.path.join(program, 'train.py')}",
                ) from error
            raise CommandNotExecutableError(
                f"cannot execute {program}: permission denied",
                f"make it executable (chmod +x {program}) or run it through its interpreter",
            ) from error
        except OSError as error:  # ENOEXEC (no shebang), ENOTDIR, ELOOP, ...
            raise CommandNotExecutableError(
                f"cannot execute {program}: {error.strerror or error}",
                "a script needs a #! line, or run it through its interpreter (e.g. python script.py)",
            ) from error
        return cls(process)

    @property
    def signals(self) -> tuple[int, ...]:
        """Every signal sent to the job or received for it, in order."""
        with self._lock:
            return tuple(self._signals)

    def send_signal(self, signum: int) -> bool:
        """Deliver ``signum`` to the job; False if it has already exited (nothing is sent)."""
        with self._lock:
            self._signals.append(signum)
            if self._exited:
                return False
            try:
                os.kill(self.pid, signum)
            except ProcessLookupError:
                return False
            return True

    def signal_tree(self, signum: int) -> int:
        """Deliver ``signum`` to the job and every descendant it has now; how many processes got it."""
        with self._lock:
            self._signals.append(signum)
            if self._exited:
                return 0
            try:
                descendants = psutil.Process(self.pid).children(recursive=True)
            except psutil.Error:
                descendants = []
            delivered = 0
            try:
                os.kill(self.pid, signum)
                delivered += 1
            except (ProcessLookupError, PermissionError):
                pass
            for process in descendants:
                try:
                    process.send_signal(signum)  # psutil checks the pid still names the same process
                    delivered += 1
                except psutil.Error:
                    continue
            return delivered

    def note_signal(self, signum: int) -> None:
        """Record a signal the job got without us (the terminal sent it to the whole group)."""
        with self._lock:
            self._signals.append(signum)

    def in_our_foreground_group(self) -> bool:
        """True when the terminal's Ctrl-C already reaches the job: same process group, and it is the foreground."""
        try:
            if os.getpgid(self.pid) != os.getpgrp():
                return False
        except ProcessLookupError:
            return False
        return _foreground_of_terminal()

    def wait(self) -> ChildExit:
        """Wait for the job to end (signal handlers keep running meanwhile) and reap it."""
        if hasattr(os, "waitid"):
            with contextlib.suppress(ChildProcessError):  # already reaped: wait4 below says so
                os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOWAIT)
        with self._lock:
            self._exited = True  # from here on a signal would hit a zombie (or nothing): stop sending
        try:
            _, status, rusage = os.wait4(self.pid, 0)
        except ChildProcessError:  # reaped elsewhere: no totals to be had
            returncode = self._process.returncode if self._process.returncode is not None else 0
            usage = ExitUsage(0.0, 0, 0, None)
        else:
            returncode = os.waitstatus_to_exitcode(status)
            usage = ExitUsage.from_rusage(rusage, self._launcher_peak_rss_bytes)
        self._process.returncode = returncode  # tell Popen the child is reaped
        exit_code = 128 - returncode if returncode < 0 else returncode
        return ChildExit(exit_code, returncode, _signalled_by(self.signals), usage)


def _signalled_by(signals: Sequence[int]) -> int | None:
    interrupts = [s for s in signals if s in INTERRUPT_SIGNALS]
    if interrupts:
        return interrupts[-1]
    return signals[-1] if signals else None


def _foreground_of_terminal() -> bool:
    """Whether our process group is the foreground group of our controlling terminal."""
    for fd in (0, 1, 2):
        try:
            if os.isatty(fd):
                return os.tcgetpgrp(fd) == os.getpgrp()
        except OSError:
            continue
    try:
        fd = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY)
    except OSError:  # no controlling terminal
        return False
    try:
        return os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:
        return False
    finally:
        os.close(fd)


def _say(message: str) -> None:
    """One line on stderr, written straight to the descriptor: this runs inside signal handlers, where a
    buffered ``sys.stderr.write`` could re-enter a write the main thread was in the middle of."""
    with contextlib.suppress(OSError):
        os.write(_STDERR_FD, f"computewise: {message}\n".encode())


class SignalForwarder:
    """While active, signals sent to us go to the attached child (see the module docstring for SIGINT).

    Install it before starting the child: a signal that arrives before ``attach`` is held and
    delivered on attach, instead of killing us and orphaning the job. Main thread only (Python
    installs signal handlers there). Restores the previous handlers on exit.
    """

    def __init__(self, signals: Sequence[signal.Signals] = FORWARDED_SIGNALS) -> None:
        self._signals = tuple(signals)
        self._previous: dict[signal.Signals, Any] = {}
        self._child: Child | None = None
        self._pending: list[int] = []
        self._interrupts = 0

    def __enter__(self) -> SignalForwarder:
        for signum in self._signals:
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def attach(self, child: Child) -> None:
        self._child = child
        pending, self._pending = self._pending, []
        for signum in pending:
            self._deliver(child, signum)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        child = self._child
        if child is None:
            self._pending.append(signum)
        else:
            self._deliver(child, signum)

    def _deliver(self, child: Child, signum: int) -> None:
        """Forward ``signum``; a repeated SIGINT escalates instead (module docstring)."""
        if signum != signal.SIGINT:
            self._forward(child, signum)
            return
        self._interrupts += 1
        if self._interrupts == 1:
            self._forward(child, signum)
            _say(
                f"SIGINT: the job (pid {child.pid}) was interrupted; press Ctrl-C again to send it SIGTERM, "
                "a third time for SIGKILL"
            )
            return
        step = ESCALATION[min(self._interrupts - 2, len(ESCALATION) - 1)]
        delivered = child.signal_tree(step)
        if not delivered:
            _say(f"SIGINT again: the job (pid {child.pid}) has already exited")
            return
        then = "; press Ctrl-C again to send SIGKILL" if step != signal.SIGKILL else ""
        processes = plural(delivered, "process", "processes")
        _say(f"SIGINT again: sent {step.name} to the job (pid {child.pid}, {processes} in all){then}")

    @staticmethod
    def _forward(child: Child, signum: int) -> None:
        if signum in _KEYBOARD_SIGNALS and child.in_our_foreground_group():
            child.note_signal(signum)  # the terminal driver delivered it to the child already
        else:
            try:
                child.send_signal(signum)
            except PermissionError:  # the job became another user's (setuid): nothing we may do
                child.note_signal(signum)
