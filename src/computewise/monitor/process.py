"""CPU, memory and disk I/O of a whole process tree, and of the host, from cumulative kernel counters.

A training job is rarely one process: data-loader workers, compilers and shells come and go between
two samples. Each Linux process's counters (``cpu_times`` with ``children_*``, and ``/proc/PID/io``)
already include the children it reaped, so the tree's total is the sum of those counters over the
live processes. A child that exits and is reaped by a process we watch moves its total into the
parent's counters; we subtract its last reading so it is not counted twice. A process reaped by
someone we do not watch (the root, by the launcher; an orphan, by init) takes its unseen tail with
it, except the root, whose final totals the launcher hands over from ``wait4`` (``ExitUsage``).
Processes that get orphaned stay watched until they exit. Reported totals never go backwards: a
reap that lands between two reads of the same sample can only delay a count by one interval.

RSS is summed over the tree, so pages shared between processes (fork, shared memory) count once per
process, as ``ps`` shows them. The monitor itself is never part of the tree. Its memory can still leak
into one kernel figure: Linux carries the peak RSS of the image a process had before ``exec`` into
that process's ``ru_maxrss`` (``exec_mmap`` -> ``setmax_mm_hiwater_rss``), and a child forked (or
vforked) by the monitor starts as the monitor's image. So ``wait4``'s peak of a job is trusted only
above the monitor's own image's peak (``VmHWM``) at launch; below it, the job's peak is the largest ``VmHWM`` (peak RSS
since ``exec``) read from ``/proc`` while the job ran. Disk bytes are what reached the storage layer (``read_bytes`` and
``write_bytes``), not reads served from the page cache.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import psutil

__all__ = [
    "ExitUsage",
    "HostReading",
    "HostSampler",
    "ProcessTreeSampler",
    "TreeReading",
    "own_peak_rss_bytes",
]

_BLOCK_BYTES = 512  # getrusage ru_inblock/ru_oublock count 512-byte units (Linux: read_bytes >> 9)


@dataclass(frozen=True)
class ExitUsage:
    """The final totals of a reaped process and its reaped descendants, from ``wait4``."""

    cpu_s: float
    read_bytes: int
    write_bytes: int
    max_rss_bytes: int | None  # None: wait4's figure may be the launcher's image (module docstring)

    @classmethod
    def from_rusage(cls, usage: resource.struct_rusage, launcher_peak_rss_bytes: int = 0) -> ExitUsage:
        """``launcher_peak_rss_bytes``: the launcher's own peak RSS once the child had exec'd; a job peak
        at or below it cannot be told apart from the launcher's image inherited across ``exec``."""
        max_rss_bytes = usage.ru_maxrss * 1024  # kilobytes on Linux
        return cls(
            cpu_s=usage.ru_utime + usage.ru_stime,
            read_bytes=usage.ru_inblock * _BLOCK_BYTES,
            write_bytes=usage.ru_oublock * _BLOCK_BYTES,
            max_rss_bytes=max_rss_bytes if max_rss_bytes > launcher_peak_rss_bytes else None,
        )


def own_peak_rss_bytes() -> int:
    """This process's image's peak RSS so far: ``VmHWM``, what a child forked from it inherits.

    Not ``getrusage(RUSAGE_SELF)``: that carries the peak of whatever this process was before its own
    ``exec`` (a 1.4 GiB test worker or notebook that started the monitor) and would hide every job below it.
    """
    return _peak_rss_bytes(os.getpid(), psutil.Process().memory_info().rss)


@dataclass(frozen=True)
class TreeReading:
    """One sample of the tree: CPU over the interval since the previous sample, totals since the first."""

    interval_s: float
    cpu_percent: float  # 100 = one core busy for the whole interval
    cpu_s: float  # cumulative CPU seconds of the tree since the sampler was made
    rss_bytes: int  # summed over live processes; the job's peak once it has exited (module docstring)
    read_bytes: int  # cumulative since the sampler was made
    write_bytes: int
    process_count: int
    pids: tuple[int, ...]


@dataclass(frozen=True)
class HostReading:
    """The whole machine: CPU busy share (100 = every core), memory in use, cumulative network bytes."""

    cpu_percent: float
    memory_used_bytes: int
    net_sent_bytes: int
    net_recv_bytes: int


@dataclass
class _Seen:
    process: psutil.Process
    ppid: int
    cpu_s: float
    read_bytes: int
    write_bytes: int
    rss_bytes: int
    peak_rss_bytes: int  # VmHWM: this image's peak since exec


@dataclass(frozen=True)
class _Totals:
    cpu_s: float = 0.0
    read_bytes: int = 0
    write_bytes: int = 0

    def __add__(self, other: _Totals) -> _Totals:
        return _Totals(
            self.cpu_s + other.cpu_s, self.read_bytes + other.read_bytes, self.write_bytes + other.write_bytes
        )

    def __sub__(self, other: _Totals) -> _Totals:
        return _Totals(
            self.cpu_s - other.cpu_s, self.read_bytes - other.read_bytes, self.write_bytes - other.write_bytes
        )

    @classmethod
    def of(cls, seen: _Seen) -> _Totals:
        return cls(seen.cpu_s, seen.read_bytes, seen.write_bytes)


class ProcessTreeSampler:
    """Samples ``root_pid`` and all its descendants; counts start when the sampler is made.

    Not thread-safe: one thread calls ``sample()`` at a time (the ``Sampler`` guarantees it).
    """

    def __init__(self, root_pid: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.root_pid = root_pid
        self._clock = clock
        self._seen: dict[int, _Seen] = {}
        self._root_last: _Seen | None = None
        self._root_closed = False  # the root's exit usage is in ``_raw``
        self._owed_to_root = _Totals()  # counted descendants whose totals the root's exit usage repeats
        self._raw = _Totals()  # exact running sum; may dip for one sample around a reap
        self._reported = _Totals()  # what readings show: the running maximum of ``_raw``
        self._last_t = clock()
        self._peak_process_rss_bytes = 0  # the largest VmHWM of any process of the tree
        self._max_cpu_percent = 100.0 * (psutil.cpu_count() or 1)
        self._proc_children = _has_proc_children()
        self._collect(baseline=True)

    def sample(self, exit_usage: ExitUsage | None = None) -> TreeReading:
        """Read the tree now; ``exit_usage`` (the root's ``wait4`` totals) closes the books on a reaped root."""
        rss = self._collect(baseline=False)
        if exit_usage is not None and self.root_pid not in self._seen:
            if not self._root_closed:
                # A root never read (it ended before the first sample, on a loaded host) owes all of it.
                counted = _Totals.of(self._root_last) if self._root_last is not None else _Totals()
                tail = _Totals(exit_usage.cpu_s, exit_usage.read_bytes, exit_usage.write_bytes) - counted
                tail -= self._owed_to_root
                self._owed_to_root = _Totals()
                self._raw += _Totals(max(0.0, tail.cpu_s), max(0, tail.read_bytes), max(0, tail.write_bytes))
                self._root_closed = True  # counted once
            if not self._seen:  # nothing left to measure: the job's peak is the best memory figure
                rss = max(exit_usage.max_rss_bytes or 0, self._peak_process_rss_bytes)
        now = self._clock()
        interval_s = max(now - self._last_t, 1e-9)
        self._last_t = now
        previous = self._reported
        self._reported = _Totals(
            max(previous.cpu_s, self._raw.cpu_s),
            max(previous.read_bytes, self._raw.read_bytes),
            max(previous.write_bytes, self._raw.write_bytes),
        )
        # Kernel CPU counters tick at 10 ms while wait4 is exact, so a very short last interval can
        # show more CPU than the machine has; no tree can use more than every core.
        cpu_percent = min(100.0 * (self._reported.cpu_s - previous.cpu_s) / interval_s, self._max_cpu_percent)
        return TreeReading(
            interval_s=interval_s,
            cpu_percent=cpu_percent,
            cpu_s=self._reported.cpu_s,
            rss_bytes=rss,
            read_bytes=self._reported.read_bytes,
            write_bytes=self._reported.write_bytes,
            process_count=len(self._seen),
            pids=tuple(sorted(self._seen)),
        )

    # -- internals ------------------------------------------------------------------------------

    def _collect(self, baseline: bool) -> int:
        """Read every live process of the tree, fold the deltas into ``_raw``; returns the summed RSS."""
        current: dict[int, _Seen] = {}
        for process in self._tree_processes():
            seen = _read(process, self._seen.get(process.pid))
            if seen is not None:
                current[process.pid] = seen
        if not baseline:
            delta = _Totals()
            for pid, now in current.items():
                before = self._seen.get(pid)
                if before is None or before.process != now.process:
                    delta += _Totals.of(now)  # born since the last sample: all of it is new
                else:
                    delta += _Totals.of(now) - _Totals.of(before)
            vanished = {pid: before for pid, before in self._seen.items() if pid not in current}
            for before in vanished.values():
                # Who reaped it? Follow parents that vanished too, up to a live process or the root.
                ancestor, hops = before.ppid, 0
                while ancestor in vanished and ancestor != self.root_pid and hops < len(vanished):
                    ancestor, hops = vanished[ancestor].ppid, hops + 1
                if ancestor in current:
                    delta -= _Totals.of(before)  # its totals just moved into that ancestor's counters
                elif ancestor == self.root_pid:
                    self._owed_to_root += _Totals.of(before)  # they will arrive in the root's exit usage
            self._raw += delta
        if self.root_pid in current:
            self._root_last = current[self.root_pid]
        self._seen = current
        self._peak_process_rss_bytes = max(
            [self._peak_process_rss_bytes, *(seen.peak_rss_bytes for seen in current.values())]
        )
        return sum(seen.rss_bytes for seen in current.values())

    def _tree_processes(self) -> Iterable[psutil.Process]:
        """The root, its descendants, and processes seen before that got orphaned (and their descendants)."""
        if self._proc_children:
            return self._walk_children()
        return self._scan_all()

    def _walk_children(self) -> Iterable[psutil.Process]:
        """Follow ``/proc/PID/task/TID/children`` from the roots: cost grows with the tree, not the host."""
        found: dict[int, psutil.Process] = {}
        stack = [(self.root_pid, True)] + [(pid, False) for pid in self._seen]
        while stack:
            pid, descendant = stack.pop()
            if pid in found:
                continue
            seen = self._seen.get(pid)
            if seen is not None and seen.process.is_running():
                process = seen.process
            elif descendant:  # new, or its pid was reused by a new descendant
                try:
                    process = psutil.Process(pid)
                except psutil.NoSuchProcess:
                    continue
            else:  # a process seen before that is gone: its pid may belong to a stranger now
                continue
            found[pid] = process
            stack.extend((child, True) for child in _child_pids(pid))
        return found.values()

    def _scan_all(self) -> Iterable[psutil.Process]:
        """Without ``/proc/.../children`` (other kernels, other systems): one parent map of the whole host."""
        parents: dict[int, list[psutil.Process]] = {}
        by_pid: dict[int, psutil.Process] = {}
        for process in psutil.process_iter(["ppid"]):
            ppid = process.info.get("ppid")
            by_pid[process.pid] = process
            if isinstance(ppid, int):
                parents.setdefault(ppid, []).append(process)
        roots = [self.root_pid] + [
            pid for pid, seen in self._seen.items() if pid in by_pid and by_pid[pid] == seen.process
        ]
        found: dict[int, psutil.Process] = {}
        stack = [by_pid[pid] for pid in roots if pid in by_pid]
        while stack:
            process = stack.pop()
            if process.pid in found:
                continue
            found[process.pid] = process
            stack.extend(parents.get(process.pid, ()))
        return found.values()


def _has_proc_children() -> bool:
    pid = os.getpid()
    return os.path.exists(f"/proc/{pid}/task/{pid}/children")


def _child_pids(pid: int) -> list[int]:
    """Children of every thread of ``pid`` (a thread that forks is the child's parent on Linux)."""
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    children: list[int] = []
    for tid in threads:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as listing:
                children.extend(int(child) for child in listing.read().split())
        except OSError:  # the thread or the process ended meanwhile
            continue
    return children


def _read(process: psutil.Process, before: _Seen | None) -> _Seen | None:
    """One process's counters, or None if it is gone; a counter we may not read keeps its last value."""
    same = before is not None and before.process == process
    try:
        with process.oneshot():
            times = process.cpu_times()
            ppid = process.ppid()
            try:
                rss = int(process.memory_info().rss)
            except psutil.ZombieProcess:
                rss = 0
            peak_rss = _peak_rss_bytes(process.pid, rss)
            try:
                io = process.io_counters()
                read_bytes, write_bytes = int(io.read_bytes), int(io.write_bytes)
            except (psutil.AccessDenied, psutil.ZombieProcess, AttributeError):
                read_bytes = before.read_bytes if before is not None and same else 0
                write_bytes = before.write_bytes if before is not None and same else 0
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None
    cpu_s = times.user + times.system + times.children_user + times.children_system
    return _Seen(process, ppid, cpu_s, read_bytes, write_bytes, rss, peak_rss)


def _peak_rss_bytes(pid: int, rss_bytes: int) -> int:
    """``VmHWM`` of ``/proc/PID/status`` (peak RSS of the current image, reset by exec); else the RSS now."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return max(rss_bytes, int(line.split()[1]) * 1024)  # "VmHWM:    1844 kB"
    except (OSError, ValueError, IndexError):
        pass
    return rss_bytes


class HostSampler:
    """Whole-machine CPU share (from ``cpu_times`` deltas of its own), memory and network counters."""

    def __init__(self) -> None:
        self._last = psutil.cpu_times()

    def sample(self) -> HostReading:
        times = psutil.cpu_times()
        busy = _busy_s(times) - _busy_s(self._last)
        total = _total_s(times) - _total_s(self._last)
        self._last = times
        net = psutil.net_io_counters()
        return HostReading(
            cpu_percent=min(100.0, max(0.0, 100.0 * busy / total)) if total > 0 else 0.0,
            memory_used_bytes=int(psutil.virtual_memory().used),
            net_sent_bytes=int(net.bytes_sent) if net is not None else 0,
            net_recv_bytes=int(net.bytes_recv) if net is not None else 0,
        )


def _total_s(times: Any) -> float:
    # Linux counts guest time inside user and nice already (psutil.cpu_percent subtracts it too).
    return float(sum(times)) - getattr(times, "guest", 0.0) - getattr(times, "guest_nice", 0.0)


def _busy_s(times: Any) -> float:
    return _total_s(times) - float(times.idle) - getattr(times, "iowait", 0.0)
