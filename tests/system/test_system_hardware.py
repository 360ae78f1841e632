"""``detect_hardware`` on other machines' /proc/cpuinfo: the flags that decide INT8 and BF16, and the notes."""

from __future__ import annotations

from pathlib import Path

from computewise.system.cpu import usable_cpus
from computewise.system.hardware import Hardware, detect_hardware


def _cpuinfo(tmp_path: Path, flags: str) -> Path:
    path = tmp_path / "cpuinfo"
    path.write_text(f"processor\t: 0\nmodel name\t: Test CPU\nflags\t\t: {flags}\n")
    return path


def test_a_cpu_without_avx2_is_told_to_expect_little_from_int8(tmp_path: Path) -> None:
    hardware = detect_hardware(2, _cpuinfo(tmp_path, "fpu sse2 sse4_2"))
    assert hardware.cpu == "Test CPU"
    assert not hardware.has_vnni
    assert len(hardware.notes) == 1
    assert "lacks AVX2" in hardware.notes[0]


def test_avx2_without_vnni_is_told_about_reduce_range(tmp_path: Path) -> None:
    hardware = detect_hardware(2, _cpuinfo(tmp_path, "sse2 avx avx2 avx512f"))
    assert not hardware.has_vnni
    assert not hardware.cpu_runs_bf16
    assert len(hardware.notes) == 1
    assert "no VNNI" in hardware.notes[0]


def test_vnni_and_amx_need_no_note(tmp_path: Path) -> None:
    hardware = detect_hardware(2, _cpuinfo(tmp_path, "avx2 avx512f avx512_vnni avx512_bf16 amx_bf16 amx_int8"))
    assert hardware.has_vnni
    assert hardware.cpu_runs_bf16
    assert hardware.notes == ()


def test_unknown_flags_make_no_claims(tmp_path: Path) -> None:
    hardware = detect_hardware(None, tmp_path / "missing")
    assert hardware.cpu_flags == frozenset()
    assert hardware.notes == ()
    assert hardware.threads == usable_cpus()


def test_the_report_lists_features_in_reading_order_and_drops_the_rest() -> None:
    hardware = Hardware(cpu="x", cpu_flags=frozenset({"amx_int8", "sse2", "avx2", "avx_vnni"}), threads=4)
    assert hardware.cpu_features == ["avx2", "avx_vnni", "amx_int8"]
    assert hardware.has_vnni is True
