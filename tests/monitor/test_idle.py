"""The idle rule and the idle guard: synthetic samples for the arithmetic, a real job for the signal."""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from computewise.catalog import Catalog
from computewise.errors import InputError
from computewise.ledger import SampleRow
from computewise.monitor.energy import EnergyModel
from computewise.monitor.gpu import NvmlGpuSource
from computewise.monitor.idle import IdleGuard, IdleRule
from computewise.monitor.launcher import Child
from computewise.monitor.process import ProcessTreeSampler
from computewise.monitor.sampler import Sampler

WaitFor = Callable[..., None]


def _row(idle: bool, interval_s: float = 60.0, gpu: bool = True) -> SampleRow:
    return SampleRow(
        run_id=1,
        t_s=0.0,
        interval_s=interval_s,
        cpu_percent=1.0 if idle else 250.0,
        rss_bytes=1,
        read_bytes=0,
        write_bytes=0,
        net_sent_bytes=0,
        net_recv_bytes=0,
        host_cpu_percent=1.0,
        host_memory_used_bytes=1,
        gpu_count=1 if gpu else 0,
        gpu_util_pct=(0.0 if idle else 97.0) if gpu else None,
        gpu_memory_used_bytes=None,
        gpu_power_w=None,
        energy_j=0.0,
        energy_measured=False,
        idle=idle,
    )


class Recorder:
    def __init__(self) -> None:
        self.alerts: list[tuple[str, float]] = []
        self.signals: list[int] = []

    def alert(self, message: str, idle_s: float) -> None:
        self.alerts.append((message, idle_s))

    def send(self, signum: int) -> None:
        self.signals.append(signum)


def test_idle_rule_uses_the_gpu_when_there_is_one() -> None:
    rule = IdleRule(gpu_util_pct=5.0, cpu_percent=10.0)
    assert rule.is_idle(cpu_percent=300.0, gpu_util_pct=4.9)  # busy CPU, idle GPU: the GPU is what costs
    assert not rule.is_idle(cpu_percent=0.0, gpu_util_pct=5.0)
    assert rule.is_idle(cpu_percent=9.9, gpu_util_pct=None)
    assert not rule.is_idle(cpu_percent=10.0, gpu_util_pct=None)


def test_alerts_once_per_idle_period_and_resets_on_activity() -> None:
    seen = Recorder()
    guard = IdleGuard(12 * 60, seen.alert)
    for _ in range(20):  # 20 idle minutes: one alert, at 12
        guard(_row(True), ())
    assert seen.alerts == [("GPU idle for 12.0 min (GPU utilization < 5 %)", 720.0)]
    guard(_row(False), ())
    assert guard.idle_s == 0
    for _ in range(12):
        guard(_row(True), ())
    assert len(seen.alerts) == 2


def test_cpu_only_message() -> None:
    seen = Recorder()
    guard = IdleGuard(30.0, seen.alert)
    for _ in range(3):
        guard(_row(True, interval_s=10.0, gpu=False), ())
    assert seen.alerts == [("job idle for 30.0 s (CPU use < 5 % of one core)", 30.0)]


def test_signal_action_sends_sigusr1_then_sigterm_after_the_grace_period() -> None:
    seen = Recorder()
    guard = IdleGuard(600.0, seen.alert, action="signal", grace_s=120.0, send_signal=seen.send)
    for _ in range(9):
        guard(_row(True), ())
    assert seen.signals == []
    guard(_row(True), ())  # 10 min
    assert seen.signals == [signal.SIGUSR1]
    assert "sent SIGUSR1 to the job, then SIGTERM after 2.0 min" in seen.alerts[0][0]
    guard(_row(True), ())  # 11 min: within the grace period
    assert seen.signals == [signal.SIGUSR1]
    guard(_row(True), ())  # 12 min: grace over, still idle
    assert seen.signals == [signal.SIGUSR1, signal.SIGTERM]
    assert "sent SIGTERM" in seen.alerts[1][0]
    for _ in range(10):
        guard(_row(True), ())
    assert len(seen.signals) == 2 and len(seen.alerts) == 2


def test_activity_during_the_grace_period_cancels_sigterm() -> None:
    seen = Recorder()
    guard = IdleGuard(60.0, seen.alert, action="signal", grace_s=120.0, send_signal=seen.send)
    guard(_row(True), ())
    guard(_row(False), ())  # the job woke up after SIGUSR1 (it checkpointed, say)
    guard(_row(True), ())
    assert seen.signals == [signal.SIGUSR1, signal.SIGUSR1]  # a new idle period, a new warning; no SIGTERM


def test_dry_run_only_says_what_it_would_do() -> None:
    seen = Recorder()
    guard = IdleGuard(60.0, seen.alert, action="signal", grace_s=0.0, dry_run=True)
    for _ in range(5):
        guard(_row(True), ())
    assert seen.signals == []
    assert len(seen.alerts) == 1 and "dry run: would send SIGUSR1" in seen.alerts[0][0]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"idle_s_limit": 0.0}, "must be positive"),
        ({"idle_s_limit": 60.0, "grace_s": -1.0}, "cannot be negative"),
        ({"idle_s_limit": 60.0, "action": "kill"}, "unknown idle action"),
        ({"idle_s_limit": 60.0, "action": "signal"}, "needs a job to signal"),
    ],
)
def test_bad_settings_are_input_errors(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(InputError, match=match):
        IdleGuard(on_alert=Recorder().alert, **kwargs)  # type: ignore[arg-type]


def test_an_idle_real_job_gets_sigusr1(tmp_path: Path, catalog: Catalog, wait_for: WaitFor) -> None:
    ready, marker = tmp_path / "ready", tmp_path / "usr1"
    job = """
import signal, sys, time
def on_usr1(signum, frame):
    open(sys.argv[2], "w").write("checkpointed")
    sys.exit(0)
signal.signal(signal.SIGUSR1, on_usr1)
open(sys.argv[1], "w").close()
time.sleep(60)
"""
    child = Child.start([sys.executable, "-c", job, str(ready), str(marker)])
    try:
        wait_for(ready.exists, "the job's handler")
        seen = Recorder()
        guard = IdleGuard(0.3, seen.alert, action="signal", grace_s=30.0, send_signal=child.send_signal)
        gpu = NvmlGpuSource(visible=())  # CPU only: the sleeping job is idle by its CPU use
        tree = ProcessTreeSampler(child.pid)
        sampler = Sampler(1, tree, gpu, EnergyModel.from_catalog(catalog), 0.1, [guard])
        sampler.start()
        ended = child.wait()
        sampler.stop(ended.usage)
    finally:
        if child.send_signal(signal.SIGKILL):  # only if the test failed before the job ended
            child.wait()
    assert marker.read_text() == "checkpointed"
    assert (ended.exit_code, ended.signalled_by, ended.status) == (0, signal.SIGUSR1, "succeeded")
    assert len(seen.alerts) == 1 and "job idle for" in seen.alerts[0][0]
