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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from computewise.ledger import Ledger, StorageAction, StorageOutcome
from computewise.specs.document import SCHEMA_VERSION
from computewise.storage.inventory import mark_archive
from computewise.storage.location import Location
from computewise.storage.retention import PlannedAction, RetentionPlan, action_totals
from computewise.system.user import current_user

__all__ = ["ApplyResult", "apply_plan"]

_FLUSH_EVERY = 200
_FLUSH_S = 1.0

BeforeAction = Callable[[int, PlannedAction], None]


@dataclass(frozen=True)
class ApplyResult:
    """What an apply did: each planned action's outcome, and the ledger's id for it (None: nothing to do)."""

    plan: RetentionPlan
    apply_id: int | None
    outcomes: tuple[tuple[StorageOutcome, str | None], ...]

    def done_totals(self) -> dict[str, dict[str, float]]:
        pairs = zip(self.plan.actions, self.outcomes, strict=True)
        return action_totals(action for action, (outcome, _) in pairs if outcome == "done")

    @property
    def usd_per_month_saved_done(self) -> float:
        """What the files acted on no longer cost a month (failed and skipped ones still do)."""
        return sum(row["usd_per_month_saved"] for row in self.done_totals().values())

    def to_dict(self) -> dict[str, Any]:
        data = self.plan.to_dict()
        for row, (outcome, error) in zip(data["actions"], self.outcomes, strict=True):
            row["outcome"] = outcome
            row["error"] = error
        done = self.done_totals()
        data.update(
            schema_version=SCHEMA_VERSION,
            dry_run=False,
            apply_id=self.apply_id,
            done=done,
            usd_per_month_saved_done=self.usd_per_month_saved_done,
        )
        return data


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
                size_bytes=a.entry.size_bytes,
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
