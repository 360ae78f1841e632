"""ProcessTreeSampler on real process trees: children and grandchildren that burn CPU, write files, exit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from computewise.monitor.process import ExitUsage, HostSampler, ProcessTreeSampler

Spawn = Callable[..., subprocess.Popen[bytes]]
WaitFor = Callable[..., None]

# The child starts a grandchild that burns 0.5 s of CPU then writes 3 MB, waits for it, and idles.
# CPU time, not wall time, so the test means the same on a loaded machine.
BURN_AND_WRITE = """
import subprocess, sys, time
grandchild = '''
import time
end = time.process_time() + 0.5
while time.process_time() < end:
    pass
with open(sys.argv[1], "wb") as f:
    f.write(b"x" * 3_000_000)
    f.flush()
'''
subprocess.run([sys.executable, "-c", "import sys\\n" + grandchild, sys.argv[1]], check=True)
open(sys.argv[2], "w").close()
time.sleep(30)
"""


@pytest.fixture(params=["proc-children", "host-scan"])
def discovery(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways of finding descendants: /proc/PID/task/TID/children, and a scan of every process
    (what kernels without that file get; simulated here by saying the file is missing)."""
    if request.param == "host-scan":
        monkeypatch.setattr("computewise.monitor.process._has_proc_children", lambda: False)
    return str(request.param)


def _reap(process: subprocess.Popen[bytes]) -> ExitUsage:
    _, _, usage = os.wait4(process.pid, 0)
    process.returncode = 0
    return ExitUsage.from_rusage(usage)


def test_tree_sums_cpu_io_and_memory_of_descendants(
    tmp_path: Path, spawn_python: Spawn, wait_for: WaitFor, discovery: str
) -> None:
    done = tmp_path / "done"
    child = spawn_python(BURN_AND_WRITE, str(tmp_path / "out.bin"), str(done))
    tree = ProcessTreeSampler(child.pid)
    readings = []
    while not done.exists():
        time.sleep(0.25)
        readings.append(tree.sample())
        assert len(readings) < 200, "the grandchild never finished"
    readings.append(tree.sample())

    assert max(r.process_count for r in readings) >= 2  # the grandchild was seen
    assert readings[-1].cpu_s >= 0.5  # the burn, plus two interpreter start-ups
    # The per-interval percentages add up to the cumulative CPU time.
    assert sum(r.cpu_percent * r.interval_s for r in readings) / 100 == pytest.approx(readings[-1].cpu_s)
    assert readings[-1].write_bytes >= 3_000_000  # the reaped grandchild's writes stay counted
    assert all(r.rss_bytes > 0 for r in readings)
    cumulative = [r.cpu_s for r in readings]
    assert cumulative == sorted(cumulative)
    assert [r.write_bytes for r in readings] == sorted(r.write_bytes for r in readings)


def test_reaped_children_are_counted_once(spawn_python: Spawn, discovery: str) -> None:
    # Four short-lived children, each reaped by the root between or during samples: the tree's total
    # must match what the kernel says the root and its reaped descendants used (wait4), not twice that.
    code = """
import subprocess, sys
burn = "import time\\nend = time.process_time() + 0.1\\nwhile time.process_time() < end: pass"
for _ in range(4):
    subprocess.run([sys.executable, "-c", burn], check=True)
"""
    child = spawn_python(code)
    tree = ProcessTreeSampler(child.pid)
    while psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE:
        tree.sample()
        time.sleep(0.03)
    usage = _reap(child)
    final = tree.sample(usage)
    assert usage.cpu_s >= 0.4
    assert final.cpu_s == pytest.approx(usage.cpu_s, rel=0.1, abs=0.05)


def test_exit_usage_counts_a_job_that_ended_before_any_sample(spawn_python: Spawn, wait_for: WaitFor) -> None:
    child = spawn_python("import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass")
    tree = ProcessTreeSampler(child.pid)
    wait_for(lambda: psutil.Process(child.pid).status() == psutil.STATUS_ZOMBIE, "the child to exit")
    usage = _reap(child)
    reading = tree.sample(usage)
    assert reading.process_count == 0
    assert reading.rss_bytes == usage.max_rss_bytes > 0  # its peak, the only memory figure left
    assert reading.cpu_s == pytest.approx(usage.cpu_s, abs=0.05)
    assert reading.cpu_s >= 0.25
    assert tree.sample(usage).cpu_s == reading.cpu_s  # the tail is counted once


def test_exit_usage_counts_a_job_the_sampler_never_saw(spawn_python: Spawn) -> None:
    # On a loaded host a short job can be gone before the sampler's first read: its wait4 totals and peak
    # are then all there is, and must not be dropped (a 200 MiB job once read as 6.7 MiB).
    child = spawn_python("b = b'x' * (200 * 1024 * 1024)\nend = __import__('time').process_time() + 0.2\n"
                         "while __import__('time').process_time() < end: pass")  # fmt: skip
    usage = _reap(child)
    reading = ProcessTreeSampler(child.pid).sample(usage)
    assert reading.process_count == 0
    assert reading.rss_bytes == usage.max_rss_bytes >= 200 * 1024 * 1024
    assert reading.cpu_s == pytest.approx(usage.cpu_s) and reading.cpu_s >= 0.15


def test_orphaned_grandchild_stays_watched(
    tmp_path: Path, spawn_python: Spawn, wait_for: WaitFor, discovery: str
) -> None:
    pid_file, release = tmp_path / "grandchild.pid", tmp_path / "release"
    code = """
import os, subprocess, sys, time
grandchild = subprocess.Popen([sys.executable, "-c", "import time\\ntime.sleep(30)"])
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(grandchild.pid))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
while not os.path.exists(sys.argv[2]):
    time.sleep(0.02)
"""
    child = spawn_python(code, str(pid_file), str(release))
    tree = ProcessTreeSampler(child.pid)
    wait_for(pid_file.exists, "the grandchild's pid")
    grandchild_pid = int(pid_file.read_text())
    try:
        wait_for(lambda: grandchild_pid in tree.sample().pids, "the grandchild to be sampled")
        release.touch()
        child.wait(timeout=20)  # the child exits; the grandchild is re-parented away from the tree
        assert psutil.Process(grandchild_pid).ppid() != child.pid
        reading = tree.sample()
        assert grandchild_pid in reading.pids
        assert child.pid not in reading.pids
    finally:
        os.kill(grandchild_pid, signal.SIGKILL)


def test_a_root_that_is_gone_reads_as_an_empty_tree() -> None:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait(timeout=20)
    tree = ProcessTreeSampler(process.pid)
    reading = tree.sample()
    assert (reading.process_count, reading.cpu_percent, reading.rss_bytes) == (0, 0.0, 0)


def test_host_reading_is_plausible() -> None:
    host = HostSampler()
    time.sleep(0.05)
    reading = host.sample()
    assert 0.0 <= reading.cpu_percent <= 100.0
    assert 0 < reading.memory_used_bytes < psutil.virtual_memory().total
    assert reading.net_sent_bytes >= 0 and reading.net_recv_bytes >= 0
