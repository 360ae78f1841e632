"""Preemption: turn SIGTERM/SIGUSR1 into "finish this step, save, exit 75" instead of a lost run.

Spot and preemptible instances, Slurm and Kubernetes all announce a kill with a signal and a grace
period (30 s by default on Kubernetes and GCE spot, 2 minutes on AWS spot, ``--signal`` on
Slurm) before SIGKILL. The handler installed here does nothing but set a flag and note the time:
the training loop checks the flag between steps, where the state is consistent, saves a
checkpoint and raises ``Preempted``. Doing the save inside the handler instead would run it in
the middle of an optimizer step (half-updated weights) and re-enter torch at an arbitrary point.

Under torchrun the signal may reach one rank only (or the ranks at different moments);
``stop_requested`` all-reduces the flag so every rank stops after the same step and none is left
waiting in a collective for a peer that has gone.
"""

from __future__ import annotations

import math
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from types import FrameType, TracebackType
from typing import Any

from computewise.errors import InputError
from computewise.ledger import PREEMPTED_EXIT_CODE

__all__ = ["DEFAULT_GRACE_S", "PREEMPTED_EXIT_CODE", "Preempted", "PreemptionGuard"]

# Kubernetes' default terminationGracePeriodSeconds and GCE's spot notice: the window a save must fit.
DEFAULT_GRACE_S = 30.0

_SignalHandler = Callable[[int, FrameType | None], Any] | int | None


class Preempted(SystemExit):
    """Training stopped on a preemption signal after saving; exits the process with code 75.

    A ``SystemExit``, so an uncaught one ends the process quietly with the distinct code, while
    ``except Exception`` blocks in user code do not swallow it.
    """

    def __init__(self, step: int, checkpoint: Any, seconds_to_checkpoint_s: float | None, signal_name: str) -> None:
        super().__init__(PREEMPTED_EXIT_CODE)
        self.step = step
        self.checkpoint = checkpoint
        self.seconds_to_checkpoint_s = seconds_to_checkpoint_s
        self.signal_name = signal_name
        # What the interrupted call did (``fit`` attaches its ``FitResult``).
        self.result: Any = None

    def __str__(self) -> str:
        return f"preempted by {self.signal_name} after step {self.step}; resume by running the same command again"


class PreemptionGuard:
    """``with PreemptionGuard() as guard:``: signals set a flag; ``guard.stop_requested()`` reads it.

    The previous handlers come back on exit. Signal handlers can only be installed from the main
    thread; elsewhere the guard warns and never requests a stop (the process's owner handles
    signals then).
    """

    def __init__(
        self, signals: Sequence[signal.Signals] = (signal.SIGTERM, signal.SIGUSR1), grace_s: float = DEFAULT_GRACE_S
    ) -> None:
        if not grace_s > 0:
            raise InputError(f"grace_s must be positive, got {grace_s}", "use the scheduler's grace period, e.g. 30")
        self.signals = tuple(signals)
        self.grace_s = float(grace_s)
        self._previous: dict[signal.Signals, _SignalHandler] = {}
        self._received: signal.Signals | None = None
        self._received_wall_s: float | None = None
        self._agreed_wall_s: float | None = None
        self._agreed = False

    def __enter__(self) -> PreemptionGuard:
        if threading.current_thread() is not threading.main_thread():
            warnings.warn(
                "computewise.train: not in the main thread, so preemption signals cannot be caught here; "
                "a SIGTERM will kill training without a checkpoint",
                RuntimeWarning,
                stacklevel=2,
            )
            return self
        for number in self.signals:
            self._previous[number] = signal.signal(number, self._handle)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for number, previous in self._previous.items():
            signal.signal(number, previous)
        self._previous.clear()

    def _handle(self, number: int, frame: FrameType | None) -> None:
        # Only a flag and a timestamp: anything more would run between two bytecodes of a step.
        if self._received is None:
            self._received = signal.Signals(number)
            self._received_wall_s = time.time()

    @property
    def signal_received(self) -> signal.Signals | None:
        """The first signal this process received (None when none came, or it came to another rank)."""
        return self._received

    @property
    def signal_name(self) -> str:
        """The signal's name, or a description when another rank received it."""
        if self._received is not None:
            return self._received.name
        return "a signal to another rank" if self._agreed else "no signal"

    def stop_requested(self) -> bool:
        """Whether training should stop after this step; the same answer on every rank.

        Under an initialized ``torch.distributed`` group every rank must call it at the same
        point of every step: it is a collective (an all-reduce of two numbers, MAX).
        """
        if self._agreed:
            return True
        signal_wall_s = self._received_wall_s
        if _distributed_world_size() > 1:
            signal_wall_s = _agree(signal_wall_s)
        if signal_wall_s is None:
            return False
        self._agreed = True
        self._agreed_wall_s = signal_wall_s
        return True

    def seconds_since_signal(self) -> float | None:
        """Seconds since the earliest rank received the signal (None before a stop was requested)."""
        if self._agreed_wall_s is None:
            return None
        return max(0.0, time.time() - self._agreed_wall_s)

    def remaining_grace_s(self) -> float | None:
        """Seconds left of the grace window before the scheduler's SIGKILL (None before a signal)."""
        elapsed_s = self.seconds_since_signal()
        return None if elapsed_s is None else self.grace_s - elapsed_s


def _distributed_world_size() -> int:
    # torch is only consulted when the program already imported it: a guard around a plain loop
    # must not pay for importing torch.
    torch = sys.modules.get("torch")
    if torch is None:
        return 1
    distributed = torch.distributed
    if not distributed.is_available() or not distributed.is_initialized():
        return 1
    return int(distributed.get_world_size())


def _agree(signal_wall_s: float | None) -> float | None:
    """All-reduce (MAX) of [got a signal, -time of the signal]: any rank's signal stops every rank,
    timed from the earliest one (wall clock, so ranks on different hosts compare)."""
    import torch
    import torch.distributed as dist

    device = torch.device("cpu")
    if dist.get_backend() == "nccl":
        device = torch.device("cuda", torch.cuda.current_device())
    flag = torch.tensor(
        [1.0 if signal_wall_s is not None else 0.0, -signal_wall_s if signal_wall_s is not None else -math.inf],
        dtype=torch.float64,
        device=device,
    )
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    received, negative_wall_s = flag.tolist()
    return -negative_wall_s if received > 0 else None
