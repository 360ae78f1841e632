"""Every file under a folder or object prefix, typed: size, age, last access, kind, storage class.

A local folder is walked with ``os.scandir`` and one ``lstat`` per file (symbolic links are neither
followed nor listed: acting on a link's target would reach outside the audited root); an object
prefix is one fsspec ``find`` listing. Checkpoints written by ``computewise.train`` are recognised by
their manifest (``step-NNNNNNNN.json``, format ``computewise.train.checkpoint.CHECKPOINT_FORMAT``):
it names the state file, the step, the validation metric and the ledger run that wrote it. A run
is the folder and that run id together: a folder that two ledger runs wrote into (a training resumed
as a new run, two experiments sharing a directory) holds two runs; a manifest without a run id
(untracked training, or written before manifests had one) belongs to its folder's run, as one run
per folder is what ``CheckpointStore`` keeps. Other checkpoints (``*.ckpt``, a ``checkpoints/``
folder) are grouped by folder, without a step, metric or run id.

Files archived by ``storage apply`` on a local disk live under the archive folder as
``<archive>/<cloud:class>/<relative path>``, so their class and original place are read back from
the path alone. The apply leaves ``ARCHIVE_MARKER`` in the archive folder: a policy may put it
anywhere (``archive.folder``), and an audit, which knows no policy, finds it inside the tree by its
marker and reads it as archived, never as more hot files, other runs or duplicates.

A file reached by several hard links is listed once per link (each is a name a policy may act on),
with its ``(st_dev, st_ino)`` and link count: its bytes are stored once, so every size and price is
summed over ``distinct_entries``, and removing one link frees nothing while another remains.

``keep`` tags are marker files: ``NAME.keep`` keeps ``NAME`` and ``NAME.*`` (``step-00000200.keep`` a
checkpoint as a whole), and a file named ``.keep`` keeps everything in its folder and below. Markers
are listed apart, never acted on.
"""

from __future__ import annotations

import json
import os
import stat
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

from computewise.storage.kinds import FolderContext, Kind, classify, folder_context
from computewise.storage.location import Location
from computewise.system.objectstore import translated
from computewise.train.checkpoint import CHECKPOINT_FORMAT

__all__ = [
    "ARCHIVE_FOLDER",
    "ARCHIVE_MARKER",
    "KEEP_SUFFIX",
    "AccessTimes",
    "Checkpoint",
    "Entry",
    "Inventory",
    "access_times",
    "distinct_bytes",
    "distinct_entries",
    "mark_archive",
    "run_order",
    "take_inventory",
]

ARCHIVE_FOLDER = ".computewise-archive"
ARCHIVE_MARKER = ".computewise-archive-root"
KEEP_SUFFIX = ".keep"
_PROGRESS_EVERY = 2000
_MANIFEST_PREFIX = "step-"

Progress = Callable[[int, int], None]


class Entry(NamedTuple):
    """One file. ``relative`` is its path under the root ('/'-separated), for an archived file the path it
    had before archiving; ``storage_class`` is what the store reports (S3's ``STANDARD_IA``) or the
    archive folder's ``cloud:class``, None where the audit's default class applies. ``inode`` is the
    ``(st_dev, st_ino)`` of a local file with more than one hard link (``links`` of them, this one
    included), None for every other file: the entries that share it are one set of stored bytes.

    A named tuple, not a frozen dataclass: an audit makes one per file, and building a hundred
    thousand frozen dataclasses costs a second on its own (each field set through ``object.__setattr__``).
    """

    path: str
    relative: str
    size_bytes: int
    mtime_s: float
    atime_s: float | None
    kind: Kind
    storage_class: str | None = None
    archived: bool = False
    inode: tuple[int, int] | None = None
    links: int = 1

    @property
    def folder(self) -> str:
        head, _, _ = self.relative.rpartition("/")
        return head or "."


@dataclass(frozen=True)
class Checkpoint:
    """One checkpoint: its files (a state file and its manifest, or one file) and what the manifest says.

    ``run`` is its folder and ``run_id`` the ledger run its manifest names (None: not recorded); the
    pair is the run its newest and best are chosen in (``run_key``).
    """

    run: str
    name: str
    files: tuple[Entry, ...]
    step: int | None = None
    metric: float | None = None
    higher_is_better: bool = False
    run_id: int | None = None

    @property
    def run_key(self) -> tuple[str, int | None]:
        """(folder, ledger run id): checkpoints with the same key are one run's."""
        return (self.run, self.run_id)

    @property
    def recognised(self) -> bool:
        """Whether a ``computewise.train`` manifest described it (step and metric known)."""
        return self.step is not None

    @property
    def size_bytes(self) -> int:
        return distinct_bytes(self.files)

    @property
    def mtime_s(self) -> float:
        return max(entry.mtime_s for entry in self.files)


def distinct_entries(entries: Iterable[Entry]) -> list[Entry]:
    """``entries`` with each hard-linked file once (its link with the smallest path, for a stable choice), in
    their order: what sizes, prices and duplicate searches count, since the links share one set of bytes."""
    listed = list(entries)
    chosen: dict[tuple[int, int], Entry] = {}
    for entry in listed:
        if entry.inode is not None and (entry.inode not in chosen or entry.path < chosen[entry.inode].path):
            chosen[entry.inode] = entry
    return [entry for entry in listed if entry.inode is None or chosen[entry.inode] is entry]


def distinct_bytes(entries: Iterable[Entry]) -> int:
    """The bytes ``entries`` occupy: a file reached by several hard links counts once (what ``du`` says)."""
    return sum(entry.size_bytes for entry in distinct_entries(entries))


def run_order(run_key: tuple[str, int | None]) -> tuple[str, int]:
    """Sort position of a run: by folder, then unrecorded (no ledger run id) first, then by id."""
    folder, run_id = run_key
    return (folder, -1 if run_id is None else run_id)


@dataclass(frozen=True)
class AccessTimes:
    """Whether the file system keeps last-access times, and how far to trust them, in words."""

    kept: bool
    note: str


@dataclass(frozen=True)
class Inventory:
    location: str
    entries: tuple[Entry, ...]
    checkpoints: tuple[Checkpoint, ...]
    keep_markers: frozenset[str]
    access: AccessTimes
    walk_s: float
    skipped: tuple[str, ...] = field(default=())  # unreadable folders, with the reason


def access_times(path: Path | None) -> AccessTimes:
    """Read the mount options of the file system holding ``path`` (Linux ``/proc/self/mounts``)."""
    if path is None:
        return AccessTimes(False, "object storage keeps no last-access time")
    best, options = "", ""
    try:
        with open("/proc/self/mounts", encoding="utf-8") as mounts:
            for line in mounts:
                fields = line.split()
                if len(fields) < 4:
                    continue
                point = fields[1].replace("\\040", " ")
                inside = str(path) == point or str(path).startswith(point.rstrip("/") + "/")
                if inside and len(point) >= len(best):
                    best, options = point, fields[3]
    except OSError:
        return AccessTimes(
            True, "mount options unknown (no /proc/self/mounts): last access as the file system reports it"
        )
    flags = set(options.split(","))
    if "noatime" in flags:
        return AccessTimes(False, f"{best} is mounted noatime: last access is not kept")
    if "strictatime" in flags:
        return AccessTimes(True, f"{best} is mounted strictatime: last access is exact")
    return AccessTimes(
        True,
        f"{best} is mounted relatime: last access is updated at most once a day, so it is right to within a day",
    )


def take_inventory(
    location: Location, archive_dir: Path | None = None, on_progress: Progress | None = None
) -> Inventory:
    """List every file under ``location`` (and, locally, the archive folder), typed and grouped."""
    started_s = time.perf_counter()
    access = access_times(location.path)
    skipped: list[str] = []
    markers: set[str] = set()
    if location.path is not None:
        archive = (archive_dir if archive_dir is not None else location.path / ARCHIVE_FOLDER).resolve()
        marked: list[str] = []
        entries = _walk_local(location.path, "", None, access.kept, archive, markers, skipped, on_progress, marked)
        for folder in sorted({archive, *map(Path, marked)}):
            if folder.is_dir():
                for class_dir in sorted(folder.iterdir()):
                    if class_dir.is_dir() and not class_dir.is_symlink():
                        archived = _walk_local(class_dir, "", None, access.kept, None, markers, skipped, on_progress)
                        entries.extend(e._replace(storage_class=class_dir.name, archived=True) for e in archived)
        manifests = _local_manifests(entries)
    else:
        with translated(location.text):
            entries = _list_objects(location, markers, on_progress)
            manifests = _object_manifests(location, entries)
    entries, checkpoints = _group_checkpoints(entries, manifests)
    return Inventory(
        location=location.text,
        entries=tuple(entries),
        checkpoints=tuple(checkpoints),
        keep_markers=frozenset(markers),
        access=access,
        walk_s=time.perf_counter() - started_s,
        skipped=tuple(skipped),
    )


def mark_archive(folder: Path) -> None:
    """Make ``folder`` an archive folder and say so in it, for audits that do not know the policy."""
    folder.mkdir(parents=True, exist_ok=True)
    marker = folder / ARCHIVE_MARKER
    if not marker.exists():
        marker.write_text("Files archived by `computewise storage apply`, as <cloud:class>/<path>.\n", encoding="utf-8")


def _walk_local(
    root: Path,
    prefix: str,
    context: FolderContext | None,
    atime_kept: bool,
    exclude: Path | None,
    markers: set[str],
    skipped: list[str],
    on_progress: Progress | None,
    archives: list[str] | None = None,
) -> list[Entry]:
    """Depth-first with an explicit stack (no recursion limit), one ``scandir`` per folder; a folder below
    ``root`` holding ``ARCHIVE_MARKER`` is not walked but added to ``archives``, when given."""
    found: list[Entry] = []
    total_bytes = 0
    stack: list[tuple[str, str, FolderContext | None]] = [(str(root), prefix, context)]
    excluded = str(exclude) if exclude is not None else None
    while stack:
        folder, relative, folder_ctx = stack.pop()
        here = folder_ctx or FolderContext(False, False, False)
        try:
            with os.scandir(folder) as listing:
                items = list(listing)
        except OSError as error:
            skipped.append(f"{folder}: {error.strerror or error}")
            continue
        if archives is not None and relative and any(item.name == ARCHIVE_MARKER for item in items):
            archives.append(folder)
            continue
        for item in items:
            name = item.name
            child = f"{relative}/{name}" if relative else name
            try:
                info = item.stat(follow_symlinks=False)
            except OSError:
                continue  # gone since the listing
            mode = info.st_mode
            if stat.S_ISDIR(mode):
                if excluded is not None and item.path == excluded:
                    continue
                stack.append((item.path, child, folder_context(folder_ctx, name)))
            elif stat.S_ISREG(mode):
                if name.endswith(KEEP_SUFFIX):
                    markers.add(child)
                    continue
                found.append(
                    Entry(
                        path=item.path,
                        relative=child,
                        size_bytes=info.st_size,
                        mtime_s=info.st_mtime,
                        atime_s=info.st_atime if atime_kept else None,
                        kind=classify(name, here),
                        inode=(info.st_dev, info.st_ino) if info.st_nlink > 1 else None,
                        links=info.st_nlink,
                    )
                )
                total_bytes += info.st_size
                _report(on_progress, found, total_bytes)
    _report(on_progress, found, total_bytes, last=True)
    return found


def _list_objects(location: Location, markers: set[str], on_progress: Progress | None) -> list[Entry]:
    """One listing of the prefix; folders are inferred from the keys, their context computed once each."""
    root = location.bucket_path
    listing: dict[str, dict[str, Any]] = location.fs.find(root, detail=True)
    contexts: dict[str, FolderContext | None] = {"": None}

    def context_of(folder: str) -> FolderContext | None:
        if folder not in contexts:
            parent, _, name = folder.rpartition("/")
            contexts[folder] = folder_context(context_of(parent), name)
        return contexts[folder]

    found: list[Entry] = []
    total_bytes = 0
    for key, info in listing.items():
        if info.get("type") == "directory":
            continue
        relative = key[len(root) :].lstrip("/") if key != root else key.rpartition("/")[2]
        folder, _, name = relative.rpartition("/")
        if name.endswith(KEEP_SUFFIX):
            markers.add(relative)
            continue
        size = int(info.get("size") or 0)
        found.append(
            Entry(
                path=location.url(key),
                relative=relative,
                size_bytes=size,
                mtime_s=_epoch_s(_first(info, _MODIFIED_KEYS)),
                atime_s=None,
                kind=classify(name, context_of(folder) or FolderContext(False, False, False)),
                storage_class=str(_first(info, _CLASS_KEYS) or "STANDARD"),
            )
        )
        total_bytes += size
        _report(on_progress, found, total_bytes)
    _report(on_progress, found, total_bytes, last=True)
    return found


def _report(on_progress: Progress | None, found: list[Entry], total_bytes: int, *, last: bool = False) -> None:
    """A walk's progress every ``_PROGRESS_EVERY`` files, and once more at its end (``last``) with the totals."""
    if on_progress is not None and (last or len(found) % _PROGRESS_EVERY == 0):
        on_progress(len(found), total_bytes)


# What fsspec's drivers call an object's modification time and storage class in a listing: s3fs
# passes S3's own names, gcsfs adds ``mtime`` (a datetime) beside GCS's ``updated`` string and keeps
# ``storageClass``, adlfs says ``last_modified``.
_MODIFIED_KEYS = ("LastModified", "mtime", "last_modified")
_CLASS_KEYS = ("StorageClass", "storageClass")


def _first(info: dict[str, Any], keys: tuple[str, ...]) -> object:
    return next((info[key] for key in keys if info.get(key) is not None), None)


def _epoch_s(value: object) -> float:
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, int | float):
        return float(value)
    return time.time()  # a store that reports no time: treat the object as new, so no policy ages it


def _is_manifest(entry: Entry) -> bool:
    name = entry.relative.rpartition("/")[2]
    return name.startswith(_MANIFEST_PREFIX) and name.endswith(".json") and entry.size_bytes < 1_000_000


def _local_manifests(entries: Iterable[Entry]) -> dict[str, dict[str, Any]]:
    records: dict[str, dict[str, Any]] = {}
    for entry in entries:
        if _is_manifest(entry):
            try:
                with open(entry.path, encoding="utf-8") as text:
                    records[entry.path] = json.load(text)
            except (OSError, UnicodeDecodeError, json.JSONDecodeError):
                continue  # not ours, or half-written: the file stays an ordinary one
    return records


def _object_manifests(location: Location, entries: Iterable[Entry]) -> dict[str, dict[str, Any]]:
    urls = {entry.path.split("://", 1)[1]: entry.path for entry in entries if _is_manifest(entry)}
    if not urls:
        return {}
    contents = location.fs.cat(list(urls), on_error="omit")  # fetched concurrently by s3fs
    records: dict[str, dict[str, Any]] = {}
    for key, data in contents.items():
        try:
            records[urls[key]] = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError):
            continue
    return records


def _group_checkpoints(
    entries: list[Entry], manifests: dict[str, dict[str, Any]]
) -> tuple[list[Entry], list[Checkpoint]]:
    """Turn recognised manifests and their state files into checkpoints; group the other checkpoints by folder."""
    by_path = {entry.path: entry for entry in entries}
    retyped: dict[str, Entry] = {}
    checkpoints: list[Checkpoint] = []
    for path, record in manifests.items():
        parsed = _manifest_fields(record)
        if parsed is None:
            continue
        step, state_name, metric, higher_is_better, run_id = parsed
        manifest = by_path[path]
        state_path = f"{path.rpartition('/')[0]}/{state_name}"
        files = [manifest]
        if state_path in by_path:
            files.append(by_path[state_path])
        files = [entry._replace(kind="checkpoint") for entry in files]
        retyped.update((entry.path, entry) for entry in files)
        checkpoints.append(
            Checkpoint(
                run=manifest.folder,
                name=manifest.relative.rpartition("/")[2].removesuffix(".json"),
                files=tuple(files),
                step=step,
                metric=metric,
                higher_is_better=higher_is_better,
                run_id=run_id,
            )
        )
    typed = [retyped.get(entry.path, entry) for entry in entries]
    for entry in typed:
        if entry.kind == "checkpoint" and entry.path not in retyped:
            name = entry.relative.rpartition("/")[2]
            checkpoints.append(Checkpoint(run=entry.folder, name=name, files=(entry,)))
    checkpoints.sort(key=lambda c: (*run_order(c.run_key), c.step if c.step is not None else -1, c.mtime_s, c.name))
    return typed, checkpoints


def _manifest_fields(record: object) -> tuple[int, str, float | None, bool, int | None] | None:
    """(step, state file name, metric, higher is better, ledger run id) from a train manifest, or None when
    it is not one. ``run_id`` is optional: manifests written before it existed have none."""
    if not isinstance(record, dict) or record.get("format") != CHECKPOINT_FORMAT:
        return None
    try:
        metric, run_id = record.get("metric"), record.get("run_id")
        value = None if metric is None else float(metric)
        if run_id is not None and (isinstance(run_id, bool) or not isinstance(run_id, int)):
            return None  # a run id that is not a whole number: not a manifest we wrote
        higher_is_better = bool(record.get("higher_is_better", False))
        return int(record["step"]), str(record["file"]), value, higher_is_better, run_id
    except (KeyError, TypeError, ValueError):
        return None
