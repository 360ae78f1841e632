"""The host CPU read from /proc/cpuinfo (this machine's and other machines' copies) and the affinity mask."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from computewise.system.cpu import cpu_flags, cpu_model_name, usable_cpus

# Two logical CPUs of a real AMD host, cut to the lines that matter; the second CPU's flags differ
# on purpose: only the first CPU is read.
TWO_CPUS = """\
processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 7B13 64-Core Processor
flags\t\t: fpu sse2 avx avx2 avx512f avx512_vnni
bogomips\t: 4899.99

processor\t: 1
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 7B13 64-Core Processor
flags\t\t: fpu sse2
"""


def test_the_first_cpus_name_and_flags_are_read(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(TWO_CPUS)
    assert cpu_model_name(cpuinfo) == "AMD EPYC 7B13 64-Core Processor"
    assert cpu_flags(cpuinfo) == frozenset({"fpu", "sse2", "avx", "avx2", "avx512f", "avx512_vnni"})


def test_without_cpuinfo_the_name_falls_back_and_the_flags_are_empty(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-cpuinfo"
    assert cpu_model_name(missing) == (platform.processor() or "unknown CPU")
    assert cpu_flags(missing) == frozenset()


@pytest.mark.skipif(not Path("/proc/cpuinfo").exists(), reason="Linux only: /proc/cpuinfo")
def test_this_machines_cpu_has_a_name_and_flags() -> None:
    assert cpu_model_name() not in ("", "unknown CPU")
    assert cpu_flags()  # every x86 and ARM Linux kernel lists some


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs an affinity mask (Linux)")
def test_usable_cpus_follows_the_affinity_mask_not_the_host_count() -> None:
    assert usable_cpus() == len(os.sched_getaffinity(0))
    first_cpu = min(os.sched_getaffinity(0))
    pinned = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import os; os.sched_setaffinity(0, {{{first_cpu}}}); "
            "from computewise.system.cpu import usable_cpus; print(usable_cpus())",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert pinned.stdout.strip() == "1"
