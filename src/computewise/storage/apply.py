"""Carry out a retention plan and record it in the ledger, so that what was freed is never a guess.

Order of work, chosen so the ledger and the disk agree at every instant that matters:

1. the whole plan goes into the ledger as ``planned`` rows (``Ledger.start_storage_apply``) before
   the first file is touched: an apply killed at any point leaves its unreached files visibly planned;
2. each file is checked again just before acting: gone is ``vanished`` (nothing freed, nothing counted
   as saved), changed since planned (size or modification time) is ``skipped``, left alone;
3. then deleted, or archived: on a local disk moved to ``<archive folder>/<cloud:class>/<relative path>``
   (a rename on the same file system, else copy with its times, then remove; the folder is marked by
   ``inventory.mark_archive`` so an audit that knows no policy reads it as archived); on S3 copied onto
   itself with the colder ``StorageClass``, on GCS rewritten onto itself with the colder ``storageClass``;
4. outcomes are written in batches (every ``_FLUSH_EVERY`` files or ``_FLUSH_S`` seconds) and, in a
   ``finally``, at the end, with the apply marked ``finished`` or ``interrupted``.

A plan with no actions records nothing: a second apply right after the first is a no-op.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from computewise.ledger import Ledger, StorageAction, StorageOutcome
from computewise.specs.codec import Document, Jsonable, Layout, json_field, json_property
from computewise.storage.inventory import mark_archive
from computewise.storage.location import Location
from computewise.storage.policy import Policy
from computewise.storage.retention import (
    STORAGE_APPLY,
    ActionTotal,
    KeptFile,
    PlannedAction,
    RetentionPlan,
    action_totals,
)
from computewise.system.user import current_user

__all__ = ["AppliedAction", "ApplyResult", "apply_plan"]

_FLUSH_EVERY = 200
_FLUSH_S = 1.0

BeforeAction = Callable[[int, PlannedAction], None]


@dataclass(frozen=True)
class AppliedAction(Jsonable):
    """A planned action and what became of it."""

    planned: PlannedAction = field(metadata=json_field(inline=True))
    outcome: StorageOutcome
    error: str | None


@dataclass(frozen=True)
class ApplyResult(Jsonable):
    """What an apply did: each planned action's outcome, and the ledger's id for it (None: nothing to do).

    Its JSON is the plan's, each action with its outcome, then what was done: the keys the plan writes are
    taken from it one by one, since each action's object gains two keys.
    """

    json_document: ClassVar[Document] = STORAGE_APPLY
    json_layout: ClassVar[Layout] = (
        "location", "as_of_s", "policy", "actions", "totals", "usd_per_month_saved", "kept", "kept_counts", "dry_run",
        "apply_id", "done", "usd_per_month_saved_done",
    )  # fmt: skip

    plan: RetentionPlan
    apply_id: int | None
    outcomes: tuple[tuple[StorageOutcome, str | None], ...]

    @json_property()
    def location(self) -> str:
        return self.plan.location

    @json_property()
    def as_of_s(self) -> float:
        return self.plan.as_of_s

    @json_property()
    def policy(self) -> Policy:
        return self.plan.policy

    @json_property()
    def actions(self) -> tuple[AppliedAction, ...]:
        pairs = zip(self.plan.actions, self.outcomes, strict=True)
        return tuple(AppliedAction(action, outcome, error) for action, (outcome, error) in pairs)

    @json_property(property_names={"enum": ["delete", "archive"]})
    def totals(self) -> dict[str, ActionTotal]:
        return self.plan.totals

    @json_property()
    def usd_per_month_saved(self) -> float:
        return self.plan.usd_per_month_saved

    @json_property()
    def kept(self) -> tuple[KeptFile, ...]:
        return self.plan.kept

    @json_property()
    def kept_counts(self) -> dict[str, int]:
        return self.plan.kept_counts

    @json_property(const=False)
    def dry_run(self) -> bool:
        return False

    @json_property(property_names={"enum": ["delete", "archive"]})
    def done(self) -> dict[str, ActionTotal]:
        """The totals of the actions done (failed, skipped and vanished ones are not)."""
        return action_totals(action for action, (outcome, _) in zip(self.plan.actions, self.outcomes, strict=True)
                             if outcome == "done")  # fmt: skip

    @json_property()
    def usd_per_month_saved_done(self) -> float:
        """What the files acted on no longer cost a month (failed and skipped ones still do)."""
        return sum(row.usd_per_month_saved for row in self.done.values())


def apply_plan(
    plan: RetentionPlan,
    location: Location,
    ledger: Ledger,
    archive_dir: Path | None,
    before_action: BeforeAction | None = None,
) -> ApplyResult:
    """Act on every planned file, recording each outcome; ``before_action(i, action)`` reports progress."""
    if not plan.actions:
        return ApplyResult(plan, None, ())
    apply_id = ledger.start_storage_apply(
        location=location.text,
        policy_sha256=plan.policy.sha256,
        started_at_s=time.time(),
        host=socket.gethostname(),
        pid=os.getpid(),
        user=current_user(),
        actions=[
            StorageAction(
                path=a.entry.path,
                action=a.action,
                kind=a.entry.kind,
                size_bytes=a.counted_bytes,  # what it frees or moves: a hard link's bytes count once
                from_class=a.from_class,
                to_class=a.to_class,
                usd_per_month_saved=a.usd_per_month_saved,
            )
            for a in plan.actions
        ],
    )
    if location.fs is not None:
        location.fs.invalidate_cache()  # the re-check before each object must ask the store, not the listing
    elif archive_dir is not None and any(a.action == "archive" for a in plan.actions):
        with contextlib.suppress(OSError):  # a folder we cannot write to fails each move, recorded as such
            mark_archive(archive_dir)
    outcomes: list[tuple[StorageOutcome, str | None]] = []
    pending: list[tuple[int, StorageOutcome, float, str | None]] = []
    flushed_at_s = time.monotonic()
    status = "interrupted"
    try:
        for number, action in enumerate(plan.actions):
            if before_action is not None:
                before_action(number, action)
            outcome, error = _act(action, location, archive_dir)
            outcomes.append((outcome, error))
            pending.append((number, outcome, time.time(), error))
            if len(pending) >= _FLUSH_EVERY or time.monotonic() - flushed_at_s > _FLUSH_S:
                ledger.finish_storage_actions(apply_id, pending)
                pending, flushed_at_s = [], time.monotonic()
        status = "finished"
    finally:
        ledger.finish_storage_actions(apply_id, pending)
        ledger.finish_storage_apply(apply_id, status, time.time())
    return ApplyResult(plan, apply_id, tuple(outcomes))


def _act(action: PlannedAction, location: Location, archive_dir: Path | None) -> tuple[StorageOutcome, str | None]:
    entry = action.entry
    try:
        if location.fs is None:
            info = os.lstat(entry.path)
            size, mtime_s = info.st_size, info.st_mtime
        else:
            details = location.fs.info(entry.path)
            size, mtime_s = int(details.get("size") or 0), None
    except FileNotFoundError:
        return "vanished", "gone before it was reached; nothing freed"
    except OSError as error:
        return "failed", f"cannot stat it: {error.strerror or error}"
    if size != entry.size_bytes or (mtime_s is not None and mtime_s != entry.mtime_s):
        return "skipped", "changed since the plan was made; left alone"
    try:
        if location.fs is None:
            if action.action == "delete":
                os.unlink(entry.path)
            else:
                _move_local(entry.path, _archive_path(archive_dir, action))
        elif action.action == "delete":
            location.fs.rm_file(entry.path)
        else:
            location.set_storage_class(entry.path, str(action.to_api_name))
    except FileNotFoundError:
        return "vanished", "gone while being acted on; nothing freed"
    except OSError as error:
        return "failed", str(error.strerror or error)
    return "done", None


def _archive_path(archive_dir: Path | None, action: PlannedAction) -> Path:
    if archive_dir is None or action.to_class is None:
        raise OSError("no archive folder for a local archive")
    return archive_dir / action.to_class / action.entry.relative


def _move_local(source: str, destination: Path) -> None:
    """A rename within one file system; across two, a copy (data and times) then removal of the source."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.replace(source, destination)
    except OSError as error:
        if error.errno != errno.EXDEV:  # not another file system: a real failure
            raise
        partial = destination.with_name(f".partial-{destination.name}")
        shutil.copy2(source, partial)
        os.replace(partial, destination)
        os.unlink(source)
