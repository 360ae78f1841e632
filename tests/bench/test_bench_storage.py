"""``computewise.bench.storage`` for real, on the test's temporary directory (and /dev/shm when tmpfs).

Speeds on a shared VM are noise, so the tests assert no speed. They check that a real directory
gives positive figures of the shape asked for and keeps nothing behind, whatever happens; that the
page cache really is kept out, by O_DIRECT and by posix_fadvise, against warm reads of as many
random blocks timed here; that a memory file
system says its figure includes the cache; and that a path that cannot be measured is refused with
an ``InputError`` before anything is written.
"""

from __future__ import annotations

import os
import random
import shutil
import time
from collections import namedtuple
from pathlib import Path

import pytest

from computewise.bench import storage
from computewise.bench.storage import StorageFigure, measure_storage
from computewise.errors import InputError

MiB = 1024 * 1024
# The cache field's documented values (the brief of computewise bench, docs/ARCHITECTURE.md).
CACHE_VALUES = {
    "O_DIRECT",
    "dropped with posix_fadvise DONTNEED",
    "could not be dropped: figure includes cache",
}
Usage = namedtuple("Usage", ["total", "used", "free"])


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, tuple[StorageFigure, ...], list[str]]:
    directory = tmp_path_factory.mktemp("storage")
    messages: list[str] = []
    return directory, measure_storage(directory, quick=True, progress=messages.append), messages


def test_a_real_directory_gives_both_patterns_and_keeps_nothing(
    measured: tuple[Path, tuple[StorageFigure, ...], list[str]],
) -> None:
    directory, figures, messages = measured
    assert [(f.pattern, f.block_bytes, f.file_bytes) for f in figures] == [
        ("sequential", MiB, 64 * MiB),
        ("random", 4096, 64 * MiB),
    ]
    for figure in figures:
        assert figure.path == str(directory.resolve())
        assert figure.cache in CACHE_VALUES
        assert 0 < figure.gb_per_s.low <= figure.gb_per_s.median <= figure.gb_per_s.high
        assert figure.gb_per_s.repeats == 3
    assert list(directory.iterdir()) == []
    assert any("writing a 64.0 MiB test file" in message for message in messages), messages


def _warm_random_gb_per_s(directory: Path) -> float:
    """Warm reads of 2048 random 4 KiB blocks of a cached 64 MiB file, timed with plain ``os.pread``."""
    path = directory / "warm.bin"
    path.write_bytes(os.urandom(64 * MiB))
    offsets = [block * 4096 for block in random.Random(1).sample(range(64 * MiB // 4096), 2048)]
    fd = os.open(path, os.O_RDONLY)
    try:
        os.pread(fd, 64 * MiB, 0)  # now every page is cached
        started = time.perf_counter()
        for offset in offsets:
            os.pread(fd, 4096, offset)
        return len(offsets) * 4096 / (time.perf_counter() - started) / 1e9
    finally:
        os.close(fd)
        path.unlink()


@pytest.mark.parametrize("method", ["O_DIRECT", "dropped with posix_fadvise DONTNEED"])
def test_the_page_cache_is_kept_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, method: str) -> None:
    """Warm random reads come from memory (some 50x the cold figure on this VM's ext4); a figure the
    cache leaked into would come near them, so the measured random figure must stay under half of
    theirs. The fadvise path is forced by refusing O_DIRECT, as a file system without it would."""
    if storage._file_system(tmp_path.resolve()) in ("tmpfs", "ramfs"):
        pytest.skip(f"{tmp_path} is on a file system that keeps files in memory")
    if method != "O_DIRECT":
        monkeypatch.setattr(storage, "_direct_reads_work", lambda _path: False)
    elif not storage._direct_reads_work(_probe_file(tmp_path)):
        pytest.skip(f"the file system of {tmp_path} refuses O_DIRECT")
    figures = measure_storage(tmp_path, quick=True)
    assert {figure.cache for figure in figures} == {method}
    warm_gb_per_s = _warm_random_gb_per_s(tmp_path)
    assert figures[1].gb_per_s.median < warm_gb_per_s / 2, (figures[1], warm_gb_per_s)


def _probe_file(directory: Path) -> Path:
    probe = directory / "probe.bin"
    probe.write_bytes(os.urandom(4096))
    return probe


def test_a_memory_file_system_says_the_cache_is_included() -> None:
    shm = Path("/dev/shm")
    if not shm.is_dir() or storage._file_system(shm) != "tmpfs" or shutil.disk_usage(shm).free < 512 * MiB:
        pytest.skip("no tmpfs /dev/shm with 512 MiB free here")
    figures = measure_storage(shm, quick=True)
    assert {figure.cache for figure in figures} == {"could not be dropped: figure includes cache"}
    assert not any(path.name.startswith(".computewise-bench-") for path in shm.iterdir())


def test_refuses_a_path_that_is_not_a_directory(tmp_path: Path) -> None:
    plain = tmp_path / "file.txt"
    plain.write_text("not a directory")
    with pytest.raises(InputError, match="is not a directory"):
        measure_storage(plain, quick=True)
    with pytest.raises(InputError, match="does not exist"):
        measure_storage(tmp_path / "missing", quick=True)
    assert [path.name for path in tmp_path.iterdir()] == ["file.txt"]


def test_refuses_a_directory_it_cannot_write() -> None:
    """/proc refuses new files even to root, who could write into any chmod-ed directory."""
    if not Path("/proc/self").is_dir():
        pytest.skip("no /proc on this system")
    with pytest.raises(InputError, match="cannot create a test file there"):
        measure_storage(Path("/proc"), quick=True)


def test_refuses_a_directory_without_room_and_removes_its_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "disk_usage", lambda _path: Usage(10**12, 10**12 - 300 * MiB, 300 * MiB))
    with pytest.raises(InputError, match=r"it has 300.0 MiB free, and the test needs 320.0 MiB"):
        measure_storage(tmp_path, quick=True)
    assert list(tmp_path.iterdir()) == []


def test_a_full_run_shrinks_the_file_to_the_free_space(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "disk_usage", lambda _path: Usage(10**12, 0, 256 * MiB + 100 * MiB + 5))
    assert storage._file_bytes(tmp_path, quick=False) == 100 * MiB  # 256 MiB stay free, whole MiB
    monkeypatch.setattr(shutil, "disk_usage", lambda _path: Usage(10**12, 0, 10**12))
    assert storage._file_bytes(tmp_path, quick=False) == 1024 * MiB


def test_the_file_is_deleted_when_a_pass_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_args: object) -> float:
        raise OSError("device went away")

    monkeypatch.setattr(storage, "_read_pass", broken)
    with pytest.raises(OSError, match="device went away"):
        measure_storage(tmp_path, quick=True)
    assert list(tmp_path.iterdir()) == []


def test_round_trips_through_its_dict(measured: tuple[Path, tuple[StorageFigure, ...], list[str]]) -> None:
    for figure in measured[1]:
        assert StorageFigure.from_dict(figure.to_dict()) == figure
    with pytest.raises(InputError, match="cache one of"):
        StorageFigure.from_dict({**measured[1][0].to_dict(), "cache": "hope"})
