"""``storage audit``: an inventory summed by kind, storage class and run, duplicates, and $/month.

The document is computed once from the inventory, the duplicate search and the price table, and
printed as tables or ``--json`` (``docs/schemas/storage-audit.schema.json``). Ages are days since the
last modification at ``as_of_s``; "last access" is the most recent access time where the file system
keeps one (``Inventory.access`` says how far to trust it). ``files`` counts names; bytes and dollars
count each hard-linked file once (``inventory.distinct_entries``), so the total is what ``du`` reports
and what deleting every name would free.
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from computewise.specs.codec import Document, Jsonable, Layout, json_field, json_property
from computewise.storage.duplicates import DuplicateGroup, Duplicates, find_duplicates
from computewise.storage.inventory import (
    Checkpoint,
    Entry,
    Inventory,
    distinct_bytes,
    distinct_entries,
    run_order,
    take_inventory,
)
from computewise.storage.kinds import KINDS
from computewise.storage.location import Location
from computewise.storage.pricing import Pricer
from computewise.storage.retention import best_checkpoint, newest_checkpoint

__all__ = ["ClassRow", "KindRow", "RunSummary", "StorageAudit", "audit_location", "build_audit"]

_DAY_S = 86_400.0
_TOP_DUPLICATES = 10
_AT_LEAST_0 = json_field(minimum=0)


@dataclass(frozen=True)
class KindRow(Jsonable):
    kind: str = field(metadata=json_field(enum=list(KINDS)))
    files: int = field(metadata=_AT_LEAST_0)
    size_bytes: int = field(metadata=_AT_LEAST_0)
    usd_per_month: float
    oldest_days: float
    median_age_days: float
    last_access_days: float | None  # since the most recent access of any file of the kind


@dataclass(frozen=True)
class ClassRow(Jsonable):
    storage_class: str
    files: int = field(metadata=_AT_LEAST_0)
    size_bytes: int = field(metadata=_AT_LEAST_0)
    usd_per_gib_month: float | None
    usd_per_month: float | None


@dataclass(frozen=True)
class RunSummary(Jsonable):
    """The checkpoints of one run: how many, the newest and the best by the manifest's metric.

    A run is a folder (``run``) and the ledger run its manifests name (``run_id``; None where they name
    none, or the checkpoints have no manifest), so a folder two runs wrote into is two rows.
    """

    run: str = field(metadata=json_field(description="the folder holding the run's checkpoints"))
    run_id: int | None = field(
        metadata=json_field(
            description="the ledger run that wrote them, as their computewise.train manifests record it; null where "
            "they record none (a folder and a run id together are one run)"
        )
    )
    checkpoints: int = field(metadata=_AT_LEAST_0)
    recognised: bool
    newest: str
    newest_step: int | None
    best: str | None
    best_metric: float | None
    size_bytes: int = field(metadata=_AT_LEAST_0)


@dataclass(frozen=True)
class StorageAudit(Jsonable):
    json_document: ClassVar[Document] = Document(
        "storage-audit",
        "storage audit --json",
        "Files under a folder or object prefix by kind, storage class and run, duplicates by content hash, and "
        "$/month at catalog storage prices (storage.audit.StorageAudit).",
    )
    json_layout: ClassVar[Layout] = (
        "location",
        "as_of_s",
        "files",
        "size_bytes",
        "usd_per_month",
        "unpriced_files",
        "default_class",
        "region",
        "walk_s",
        "hash_s",
        ("access_times", ("access_times_kept", "access_note")),
        "kinds",
        "classes",
        "runs",
        (
            "duplicates",
            (
                "duplicate_groups",
                "wasted_bytes",
                "duplicate_usd_per_month",
                "hashed_files",
                "hashed_bytes",
                "unreadable_files",
                "top_duplicates",
            ),
        ),
        "keep_markers",
        "skipped",
    )

    location: str
    as_of_s: float
    files: int = field(metadata=_AT_LEAST_0)
    size_bytes: int = field(metadata=_AT_LEAST_0)
    usd_per_month: float
    unpriced_files: int = field(metadata=_AT_LEAST_0)
    default_class: str
    region: str
    walk_s: float
    hash_s: float
    access_times_kept: bool = field(metadata=json_field(name="kept"))
    access_note: str = field(metadata=json_field(name="note"))
    kinds: tuple[KindRow, ...]
    classes: tuple[ClassRow, ...]
    runs: tuple[RunSummary, ...]
    duplicates: Duplicates
    duplicate_usd_per_month: float = field(metadata=json_field(name="usd_per_month"))
    keep_markers: int = field(metadata=_AT_LEAST_0)
    skipped: tuple[str, ...]

    @json_property(name="groups", minimum=0)
    def duplicate_groups(self) -> int:
        return len(self.duplicates.groups)

    @json_property(minimum=0)
    def wasted_bytes(self) -> int:
        return self.duplicates.wasted_bytes

    @json_property(minimum=0)
    def hashed_files(self) -> int:
        return self.duplicates.hashed_files

    @json_property(minimum=0)
    def hashed_bytes(self) -> int:
        return self.duplicates.hashed_bytes

    @json_property(minimum=0)
    def unreadable_files(self) -> int:
        return self.duplicates.unreadable

    @json_property(name="top")
    def top_duplicates(self) -> tuple[DuplicateGroup, ...]:
        """The groups that waste the most bytes."""
        return self.duplicates.groups[:_TOP_DUPLICATES]


def build_audit(
    inventory: Inventory, duplicates: Duplicates, pricer: Pricer, as_of_s: float, hash_s: float
) -> StorageAudit:
    entries = inventory.entries
    total_usd = 0.0
    unpriced = 0
    for entry in distinct_entries(entries):
        usd = pricer.usd_per_month(entry)
        if usd is None:
            unpriced += 1
        else:
            total_usd += usd
    wasted_usd = 0.0
    by_path = {entry.path: entry for entry in entries} if duplicates.groups else {}
    for group in duplicates.groups:
        for path in group.paths[1:]:
            wasted_usd += pricer.usd_per_month(by_path[path]) or 0.0
    return StorageAudit(
        location=inventory.location,
        as_of_s=as_of_s,
        files=len(entries),
        size_bytes=distinct_bytes(entries),
        usd_per_month=total_usd,
        unpriced_files=unpriced,
        default_class=pricer.default.name,
        region=pricer.region,
        walk_s=inventory.walk_s,
        hash_s=hash_s,
        access_times_kept=inventory.access.kept,
        access_note=inventory.access.note,
        kinds=_kinds(entries, pricer, as_of_s),
        classes=_classes(entries, pricer),
        runs=tuple(_run(key, members) for key, members in _by_run(inventory.checkpoints).items()),
        duplicates=duplicates,
        duplicate_usd_per_month=wasted_usd,
        keep_markers=len(inventory.keep_markers),
        skipped=inventory.skipped,
    )


def _kinds(entries: Sequence[Entry], pricer: Pricer, as_of_s: float) -> tuple[KindRow, ...]:
    groups: dict[str, list[Entry]] = defaultdict(list)
    for entry in entries:
        groups[entry.kind].append(entry)
    rows = []
    for kind in KINDS:
        members = groups.get(kind)
        if not members:
            continue
        ages = [(as_of_s - entry.mtime_s) / _DAY_S for entry in members]
        accessed = [entry.atime_s for entry in members if entry.atime_s is not None]
        rows.append(
            KindRow(
                kind=kind,
                files=len(members),
                size_bytes=distinct_bytes(members),
                usd_per_month=sum(pricer.usd_per_month(entry) or 0.0 for entry in distinct_entries(members)),
                oldest_days=max(ages),
                median_age_days=statistics.median(ages),
                last_access_days=(as_of_s - max(accessed)) / _DAY_S if accessed else None,
            )
        )
    return tuple(rows)


def _classes(entries: Sequence[Entry], pricer: Pricer) -> tuple[ClassRow, ...]:
    groups: dict[str, list[Entry]] = defaultdict(list)
    for entry in entries:
        groups[pricer.class_name(entry)].append(entry)
    rows = []
    for name, members in groups.items():
        price = pricer.price_of(members[0])
        size = distinct_bytes(members)
        rows.append(
            ClassRow(
                storage_class=name,
                files=len(members),
                size_bytes=size,
                usd_per_gib_month=None if price is None else price.usd_per_gib_month,
                usd_per_month=None if price is None else price.usd_per_month(size),
            )
        )
    return tuple(sorted(rows, key=lambda row: -row.size_bytes))


def _by_run(checkpoints: Sequence[Checkpoint]) -> dict[tuple[str, int | None], list[Checkpoint]]:
    """Checkpoints by (folder, ledger run id), in folder order and, within a folder, unrecorded first."""
    runs: dict[tuple[str, int | None], list[Checkpoint]] = defaultdict(list)
    for checkpoint in checkpoints:
        runs[checkpoint.run_key].append(checkpoint)
    return dict(sorted(runs.items(), key=lambda item: run_order(item[0])))


def _run(key: tuple[str, int | None], members: list[Checkpoint]) -> RunSummary:
    newest = newest_checkpoint(members)
    best = best_checkpoint(members)
    return RunSummary(
        run=key[0],
        run_id=key[1],
        checkpoints=len(members),
        recognised=all(member.recognised for member in members),
        newest=newest.name,
        newest_step=newest.step,
        best=None if best is None else best.name,
        best_metric=None if best is None else best.metric,
        size_bytes=distinct_bytes(entry for member in members for entry in member.files),
    )


def audit_location(
    location: Location,
    pricer: Pricer,
    as_of_s: float,
    on_walk: Callable[[int, int], None] | None = None,
    on_hash: Callable[[int, int], None] | None = None,
) -> StorageAudit:
    """Walk, find duplicates, price: the whole audit of one folder or prefix (its archive folder included)."""
    inventory = take_inventory(location, None, on_walk)
    started_s = time.perf_counter()
    duplicates = find_duplicates(location, inventory.entries, on_hash)
    return build_audit(inventory, duplicates, pricer, as_of_s, time.perf_counter() - started_s)
