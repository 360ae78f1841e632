"""What counts as idle, and the guard that notices a job sitting idle on paid hardware.

``IdleRule`` decides whether one sample is idle, once, when the sampler makes the row, so every report
counts idle time the same way: with GPUs, mean GPU utilization below a threshold; without, the job's
CPU use below a threshold. ``IdleGuard`` is a sampler sink: after ``idle_s_limit`` seconds of
consecutive idle samples it alerts once per idle period, and with ``action="signal"`` sends the job
SIGUSR1 (a hook a training script can use to checkpoint and exit), then SIGTERM after ``grace_s`` if
it is still idle. Time is the sum of the samples' intervals, so the guard needs no clock of its own.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from computewise.errors import InputError
from computewise.ledger import GpuSampleRow, SampleRow
from computewise.units import format_duration

__all__ = ["IdleAction", "IdleGuard", "IdleRule"]

IdleAction = Literal["none", "signal"]


@dataclass(frozen=True)
class IdleRule:
    """Thresholds below which a sample is idle: GPU utilization (mean over GPUs), else the job's CPU %."""

    gpu_util_pct: float = 5.0
    cpu_percent: float = 5.0

    def is_idle(self, cpu_percent: float, gpu_util_pct: float | None) -> bool:
        """``gpu_util_pct`` None: no GPU (or none reports utilization), so the CPU decides."""
        if gpu_util_pct is not None:
            return gpu_util_pct < self.gpu_util_pct
        return cpu_percent < self.cpu_percent

    def describe(self, gpu: bool) -> str:
        if gpu:
            return f"GPU utilization < {self.gpu_util_pct:g} %"
        return f"CPU use < {self.cpu_percent:g} % of one core"


class IdleGuard:
    """A sampler sink that alerts (and optionally signals the job) when it stays idle too long.

    ``on_alert(message, idle_s)`` is called once when the limit is crossed and once when SIGTERM is
    sent; ``send_signal(signum)`` delivers a signal to the job (``Child.send_signal``). With
    ``dry_run`` the messages say what would be sent and nothing is.
    """

    def __init__(
        self,
        idle_s_limit: float,
        on_alert: Callable[[str, float], None],
        action: IdleAction = "none",
        grace_s: float = 60.0,
        dry_run: bool = False,
        send_signal: Callable[[int], object] | None = None,
        rule: IdleRule | None = None,
    ) -> None:
        if idle_s_limit <= 0:
            raise InputError(f"the idle limit must be positive, not {idle_s_limit:g} s", "e.g. --idle-minutes 30")
        if grace_s < 0:
            raise InputError(f"the grace period cannot be negative ({grace_s:g} s)", "e.g. 60s")
        if action not in ("none", "signal"):
            raise InputError(f"unknown idle action {action!r}", "use --idle-action none or --idle-action signal")
        if action == "signal" and not dry_run and send_signal is None:
            raise InputError("the idle action 'signal' needs a job to signal", "use --idle-action none here")
        self.idle_s_limit = idle_s_limit
        self.action: IdleAction = action
        self.grace_s = grace_s
        self.dry_run = dry_run
        self._on_alert = on_alert
        self._send_signal = send_signal
        self._rule = rule or IdleRule()
        self.idle_s = 0.0
        self._alerted = False
        self._usr1_at_idle_s: float | None = None
        self._term_sent = False

    def __call__(self, row: SampleRow, gpu_rows: Sequence[GpuSampleRow]) -> None:
        if not row.idle:
            self.idle_s = 0.0
            self._alerted = False
            self._usr1_at_idle_s = None
            self._term_sent = False
            return
        self.idle_s += row.interval_s
        what = "GPU" if row.gpu_util_pct is not None else "job"
        why = self._rule.describe(row.gpu_util_pct is not None)
        if not self._alerted and self.idle_s >= self.idle_s_limit:
            self._alerted = True
            message = f"{what} idle for {format_duration(self.idle_s)} ({why})"
            if self.action == "signal":
                plan = f"SIGUSR1 to the job, then SIGTERM after {format_duration(self.grace_s)} if it stays idle"
                if self.dry_run:
                    message += f"; dry run: would send {plan}"
                else:
                    self._signal(signal.SIGUSR1)
                    self._usr1_at_idle_s = self.idle_s
                    message += f"; sent {plan}"
            self._on_alert(message, self.idle_s)
        if (
            self._usr1_at_idle_s is not None
            and not self._term_sent
            and self.idle_s >= self._usr1_at_idle_s + self.grace_s
        ):
            self._term_sent = True
            self._signal(signal.SIGTERM)
            self._on_alert(
                f"{what} still idle {format_duration(self.grace_s)} after SIGUSR1 ({why}); sent SIGTERM to the job",
                self.idle_s,
            )

    def _signal(self, signum: int) -> None:
        if self._send_signal is not None:
            self._send_signal(signum)
