"""The host CPU: its marketing name, its instruction sets, the cores this process may use.

Reports say what they ran on (``cpu_model_name``), the optimizer chooses quantization settings by
instruction set (``cpu_flags``), and thread counts default to the CPUs the scheduler lets this
process use (``usable_cpus``), which inside a container or under ``taskset`` is fewer than the host has.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

__all__ = ["CPUINFO", "cpu_flags", "cpu_model_name", "usable_cpus"]

CPUINFO = Path("/proc/cpuinfo")


def cpu_model_name(cpuinfo: Path = CPUINFO) -> str:
    """The host CPU's marketing name ("AMD EPYC 7B13"), for reports that must say what they ran on."""
    try:
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def cpu_flags(cpuinfo: Path = CPUINFO) -> frozenset[str]:
    """The instruction-set flags of the first CPU; empty where /proc/cpuinfo does not exist (macOS)."""
    try:
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("flags"):
                return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask), not the host's count where they differ."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
