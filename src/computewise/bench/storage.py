"""Read throughput of a directory's storage: sequential 1 MiB and random 4 KiB reads, page cache kept out.

``measure_storage`` writes a test file of random bytes (incompressible, so a compressing file system
cannot flatter it), flushes it to the device with ``fsync``, then times passes of sequential reads
(1 MiB blocks, front to back, as a data loader streams a shard) and of random reads (4 KiB blocks at
distinct aligned offsets, a fixed count, as a loader picks samples from an indexed file), the same
shapes fio's ``rw=read bs=1M`` and ``rw=randread bs=4k`` jobs use, one read at a time (queue
depth 1, as fio's default ``psync`` engine). Python costs about a microsecond a read, nothing beside
a device's 4 KiB latency, but it caps a figure served from memory.

A read served from the page cache measures memory, not storage, so each pass keeps the cache out,
and the figure says how (``StorageFigure.cache``):

- ``O_DIRECT``: reads bypass the cache (into page-aligned buffers from ``mmap``, as the kernel
  requires); tried first, since the kernel refuses it where the file system cannot do it;
- ``dropped with posix_fadvise DONTNEED``: buffered reads, with the file's pages (clean after the
  ``fsync``) dropped from the cache before every pass;
- ``could not be dropped: figure includes cache``: neither works, or the file system keeps files in
  memory (tmpfs, ramfs), where there is no device below the cache to measure.

The test file is deleted whatever happens.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import secrets
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal, Self

from computewise.bench.timing import Measured
from computewise.errors import ComputewiseError, InputError
from computewise.specs.codec import Jsonable, json_field
from computewise.units import format_bytes

__all__ = [
    "CACHE_DIRECT",
    "CACHE_DROPPED",
    "CACHE_INCLUDED",
    "CACHE_METHODS",
    "StorageFigure",
    "measure_storage",
]

Pattern = Literal["sequential", "random"]

CACHE_DIRECT = "O_DIRECT"
CACHE_DROPPED = "dropped with posix_fadvise DONTNEED"
CACHE_INCLUDED = "could not be dropped: figure includes cache"
CACHE_METHODS = (CACHE_DIRECT, CACHE_DROPPED, CACHE_INCLUDED)
"""Every value ``StorageFigure.cache`` takes."""

_MIB = 1024 * 1024
SEQUENTIAL_BLOCK_BYTES = _MIB
RANDOM_BLOCK_BYTES = 4096
QUICK_FILE_BYTES = 64 * _MIB
FULL_FILE_BYTES = 1024 * _MIB
_RESERVE_BYTES = 256 * _MIB  # left free after the test file, so measuring never fills a disk
_RANDOM_READS = {True: 2048, False: 16384}
_WARMUP = 1  # one untimed pass: file-system metadata and the device's own first-access costs
_REPEATS = {True: 3, False: 5}
_MEMORY_FILE_SYSTEMS = frozenset({"tmpfs", "ramfs", "devtmpfs", "hugetlbfs"})
_SEED = 17  # the random offsets are the same on every run, so two runs read the same blocks


@dataclass(frozen=True)
class StorageFigure(Jsonable):
    """Read throughput (decimal GB/s) of one access pattern on one directory's storage."""

    json_description: ClassVar[str] = "Reads of one file in --storage PATH (bench.storage.StorageFigure)."
    path: str
    pattern: Pattern
    block_bytes: int = field(metadata=json_field(minimum=0))
    file_bytes: int = field(metadata=json_field(minimum=0))
    gb_per_s: Measured
    cache: str = field(
        metadata=json_field(
            enum=list(CACHE_METHODS),
            description="How the page cache was kept out of the reads (bench.storage.CACHE_METHODS).",
        )
    )

    @classmethod
    def from_dict(cls, data: object, source: str = "bench result") -> Self:
        read = super().from_dict(data, source)
        if read.cache not in CACHE_METHODS:
            raise InputError(
                f"{source}: a storage figure needs its cache one of "
                f"{', '.join(repr(method) for method in CACHE_METHODS)}; got {read.cache!r}",
                "pass the JSON that computewise bench wrote, unedited",
            )
        return read


def measure_storage(
    directory: Path, *, quick: bool, progress: Callable[[str], None] | None = None
) -> tuple[StorageFigure, ...]:
    """Sequential and random read throughput of a test file written in ``directory``.

    The file is 64 MiB with ``quick`` and 1 GiB otherwise, less where free space is short (never
    leaving under 256 MiB free, never under 64 MiB of file: below that the directory is refused).
    Returns the sequential figure, then the random one.
    """
    say = progress or (lambda _message: None)
    folder = _existing_directory(directory)
    with _test_file(folder) as path:
        file_bytes = _file_bytes(folder, quick)
        say(f"storage: writing a {format_bytes(file_bytes)} test file in {folder}")
        _write(path, file_bytes)
        cache = _cache_method(path, folder)
        blocks = file_bytes // RANDOM_BLOCK_BYTES
        random_offsets = _random_offsets(blocks, min(_RANDOM_READS[quick], blocks))
        passes: tuple[tuple[Pattern, int, Sequence[int]], ...] = (
            ("sequential", SEQUENTIAL_BLOCK_BYTES, range(0, file_bytes, SEQUENTIAL_BLOCK_BYTES)),
            ("random", RANDOM_BLOCK_BYTES, random_offsets),
        )
        figures = []
        for pattern, block_bytes, offsets in passes:
            say(f"storage: {pattern} reads of {format_bytes(block_bytes)} ({cache})")
            rates = [_read_pass(path, pattern, block_bytes, offsets, cache) for _ in range(_WARMUP + _REPEATS[quick])][
                _WARMUP:
            ]
            figures.append(
                StorageFigure(
                    path=str(folder),
                    pattern=pattern,
                    block_bytes=block_bytes,
                    file_bytes=file_bytes,
                    gb_per_s=Measured.of(rates),
                    cache=cache,
                )
            )
    return tuple(figures)


def _existing_directory(directory: Path) -> Path:
    folder = directory.expanduser()
    if not folder.is_dir():
        what = "does not exist" if not folder.exists() else "is not a directory"
        raise InputError(
            f"cannot measure storage at {folder}: it {what}",
            "pass --storage an existing directory on the storage to measure, e.g. your data directory",
        )
    return folder.resolve()


@contextlib.contextmanager
def _test_file(folder: Path) -> Iterator[Path]:
    """Create a new, uniquely named file in ``folder``, and remove it on the way out, always."""
    path = folder / f".computewise-bench-{os.getpid()}-{secrets.token_hex(4)}.tmp"
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except OSError as error:
        raise InputError(
            f"cannot measure storage at {folder}: cannot create a test file there ({error.strerror})",
            "pass --storage a directory you can write to (the test file is deleted afterwards)",
        ) from error
    try:
        yield path
    finally:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _file_bytes(folder: Path, quick: bool) -> int:
    """The test file's size: the mode's size, bounded by the free space less a reserve."""
    wanted = QUICK_FILE_BYTES if quick else FULL_FILE_BYTES
    spare = shutil.disk_usage(folder).free - _RESERVE_BYTES
    size = min(wanted, spare // _MIB * _MIB)
    if size < QUICK_FILE_BYTES:
        raise InputError(
            f"cannot measure storage at {folder}: it has {format_bytes(max(spare + _RESERVE_BYTES, 0))} free,"
            f" and the test needs {format_bytes(QUICK_FILE_BYTES + _RESERVE_BYTES)}"
            f" ({format_bytes(QUICK_FILE_BYTES)} of test file, {format_bytes(_RESERVE_BYTES)} left free)",
            "free some space there, or pass --storage a directory on a file system with more room",
        )
    return size


def _write(path: Path, file_bytes: int) -> None:
    """Fill the file with random bytes, 1 MiB at a time, and flush it to the device."""
    import numpy as np

    rng = np.random.default_rng(_SEED)
    fd = os.open(path, os.O_WRONLY)
    try:
        for _ in range(file_bytes // SEQUENTIAL_BLOCK_BYTES):
            block = rng.bytes(SEQUENTIAL_BLOCK_BYTES)
            written = 0
            while written < len(block):
                written += os.write(fd, block[written:])
        os.fsync(fd)
    except OSError as error:
        if error.errno in (errno.ENOSPC, errno.EDQUOT):
            raise InputError(
                f"cannot measure storage at {path.parent}: the disk filled up while writing the test file",
                "free some space there, or pass --storage a directory on a file system with more room",
            ) from error
        raise
    finally:
        os.close(fd)


def _random_offsets(blocks: int, count: int) -> list[int]:
    """``count`` distinct block-aligned offsets, so no read of a pass is served by an earlier one."""
    import numpy as np

    chosen = np.random.default_rng(_SEED).choice(blocks, size=count, replace=False)
    return [int(block) * RANDOM_BLOCK_BYTES for block in chosen]


def _cache_method(path: Path, folder: Path) -> str:
    """How the page cache is kept out of reads of ``path``: one of ``CACHE_METHODS``."""
    if _file_system(folder) in _MEMORY_FILE_SYSTEMS:
        return CACHE_INCLUDED
    if _direct_reads_work(path):
        return CACHE_DIRECT
    if hasattr(os, "posix_fadvise"):
        return CACHE_DROPPED
    return CACHE_INCLUDED


def _file_system(folder: Path) -> str:
    """The type of the file system holding ``folder`` (the mount point that is its longest prefix)."""
    import psutil

    best, fstype = "", ""
    for partition in psutil.disk_partitions(all=True):
        mount = partition.mountpoint
        inside = folder == Path(mount) or Path(mount) in folder.parents
        if inside and len(mount) > len(best):
            best, fstype = mount, partition.fstype
    return fstype


def _direct_reads_work(path: Path) -> bool:
    """Whether the kernel accepts an O_DIRECT open and an aligned read of ``path``."""
    flag = getattr(os, "O_DIRECT", None)
    if flag is None:
        return False
    try:
        fd = os.open(path, os.O_RDONLY | flag)
    except OSError:
        return False
    buffer = mmap.mmap(-1, RANDOM_BLOCK_BYTES)
    try:
        return os.preadv(fd, [buffer], 0) == RANDOM_BLOCK_BYTES
    except OSError:
        return False
    finally:
        buffer.close()
        os.close(fd)


def _read_pass(path: Path, pattern: Pattern, block_bytes: int, offsets: Sequence[int], cache: str) -> float:
    """One timed pass of reads at ``offsets``; decimal GB/s.

    The buffer comes from ``mmap``, so it is page-aligned as O_DIRECT requires, and is reused, so the
    pass times reads, not allocation. With buffered reads the file's pages are dropped first and the
    kernel is told the pattern (no read-ahead for random reads, as fio's ``fadvise_hint`` does).
    """
    direct = getattr(os, "O_DIRECT", 0) if cache == CACHE_DIRECT else 0
    fd = os.open(path, os.O_RDONLY | direct)
    buffer = mmap.mmap(-1, block_bytes)
    try:
        if cache == CACHE_DROPPED:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            advice = os.POSIX_FADV_SEQUENTIAL if pattern == "sequential" else os.POSIX_FADV_RANDOM
            os.posix_fadvise(fd, 0, 0, advice)
        started = time.perf_counter()
        for offset in offsets:
            if os.preadv(fd, [buffer], offset) != block_bytes:
                raise ComputewiseError(
                    f"the storage test file {path} was shorter than written (read at byte {offset} came back short)",
                    "make sure nothing else truncates files in that directory while computewise bench runs",
                )
        elapsed_s = time.perf_counter() - started
    finally:
        buffer.close()
        os.close(fd)
    return len(offsets) * block_bytes / elapsed_s / 1e9
