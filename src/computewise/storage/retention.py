"""What a retention policy would do to an inventory: the plan, with a reason for every file it keeps.

The safety rules come first and no policy setting reaches past them:

1. a path a running run of the ledger uses is never touched (``inuse``), nor a checkpoint whose
   manifest says a running run wrote it, wherever it lies;
2. a file tagged ``keep`` stays: ``NAME.keep`` beside it keeps ``NAME`` and ``NAME.*`` (``step-00000200.keep``
   keeps that checkpoint's state file and manifest), ``.keep`` in a folder keeps all below it;
3. the newest checkpoint of every run stays, and the best one (by the metric its manifest records,
   lower is better unless the manifest says otherwise), and the last ``keep_last``; a checkpoint is
   one unit (state file and manifest), so it is kept or removed whole;

then the ages: older than ``delete.after_days`` (and of a kind the delete rule names) is deleted;
older than ``archive.after_days`` (of a kind the archive rule names, not already in the target
class, and only where the target is cheaper) is archived. Newest and best are decided per run among
recognised checkpoints by step and metric, and among other checkpoints of a folder by modification
time, so a folder with one ancient checkpoint keeps it. A run is a folder and the ledger run id its
manifests record (``Checkpoint.run_key``): checkpoints that two runs wrote into one folder keep a
newest and a best each.

A file reached by several hard links frees its bytes only when its last link goes, and moves out of
its class only when every link does: each link is planned on its own (it is a name a policy may act
on), but its bytes and saving count once, on the last of its links in the plan, and only when the plan
acts the same way on every link the file has (``counted_bytes``); otherwise on none.

Deleting a checkpoint removes its manifest before its state file, the order ``CheckpointStore``
prunes in: an interrupted delete leaves a state file without a manifest, which training already
reads as an unfinished save, never a manifest that points at nothing.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import ClassVar, Literal

from computewise.catalog.storage_prices import StoragePrice
from computewise.errors import InputError
from computewise.specs.codec import Document, Jsonable, Layout, json_field, json_property
from computewise.storage.inuse import InUse
from computewise.storage.inventory import KEEP_SUFFIX, Checkpoint, Entry, Inventory
from computewise.storage.kinds import Kind
from computewise.storage.location import Location
from computewise.storage.policy import Policy
from computewise.storage.pricing import Pricer

__all__ = [
    "STORAGE_APPLY",
    "Action",
    "ActionTotal",
    "KeptFile",
    "PlannedAction",
    "RetentionPlan",
    "action_totals",
    "best_checkpoint",
    "newest_checkpoint",
    "plan_retention",
]

Action = Literal["delete", "archive"]
_DAY_S = 86_400.0
STORAGE_APPLY = Document(
    "storage-apply",
    "storage apply --json",
    "A retention plan (dry run) or what an apply did: each file deleted or archived with its reason, outcome and "
    "$/month saved; what the safety rules kept (storage.retention.RetentionPlan, storage.apply.ApplyResult).",
)  # one command, two shapes: the plan, and ApplyResult


@dataclass(frozen=True)
class PlannedAction(Jsonable):
    """One file to delete or archive, why, and what it saves a month.

    Its JSON names the file by its path, kind and size, not by the whole inventory entry, so it is
    written only: nothing reads a plan back (an apply plans again). ``counted_bytes`` is what the action
    frees or moves, the file's size but for a hard link whose bytes count on another link or on none
    (see the module's docstring); totals and the ledger sum it, not the size.
    """

    json_layout: ClassVar[Layout] = (
        "path", "relative", "kind", "action", "size_bytes", "age_days", "from_class", "to_class",
        "usd_per_month_saved", "reason",
    )  # fmt: skip

    entry: Entry
    action: Action
    from_class: str
    to_class: str | None
    to_api_name: str | None
    usd_per_month_saved: float
    age_days: float
    reason: str
    counted_bytes: int

    @json_property()
    def path(self) -> str:
        return self.entry.path

    @json_property(
        description="The path under the audited folder or prefix (for an archived file, where it was before archiving)."
    )
    def relative(self) -> str:
        return self.entry.relative

    @json_property()
    def kind(self) -> Kind:
        return self.entry.kind

    @json_property(minimum=0)
    def size_bytes(self) -> int:
        return self.entry.size_bytes


@dataclass(frozen=True)
class ActionTotal(Jsonable):
    """The files of one action (delete or archive), their bytes and what they save a month."""

    files: int = field(metadata=json_field(minimum=0))
    size_bytes: int = field(metadata=json_field(minimum=0))
    usd_per_month_saved: float


@dataclass(frozen=True)
class KeptFile(Jsonable):
    """A file a safety rule kept, and the rule."""

    path: str
    reason: str


@dataclass(frozen=True)
class RetentionPlan(Jsonable):
    """What a policy would do to a location: every action, and why every other file stays (the dry run)."""

    json_document: ClassVar[Document] = STORAGE_APPLY

    location: str
    as_of_s: float
    policy: Policy
    actions: tuple[PlannedAction, ...]
    kept: tuple[KeptFile, ...]  # every file a safety rule kept
    kept_counts: dict[str, int]  # reason -> files, safety rules and "younger than the policy's ages"

    @json_property(after="actions", property_names={"enum": ["delete", "archive"]})
    def totals(self) -> dict[str, ActionTotal]:
        return action_totals(self.actions)

    @json_property(after="totals")
    def usd_per_month_saved(self) -> float:
        return sum(action.usd_per_month_saved for action in self.actions)

    @json_property(const=True)
    def dry_run(self) -> bool:
        """A plan changes nothing (``ApplyResult`` is what an apply did)."""
        return True


def action_totals(actions: Iterable[PlannedAction]) -> dict[str, ActionTotal]:
    """Files, bytes and $/month saved by action (delete, archive): of a plan, or of what an apply did."""
    grouped: dict[str, list[PlannedAction]] = {}
    for action in actions:
        grouped.setdefault(action.action, []).append(action)
    return {
        name: ActionTotal(len(group), sum(a.counted_bytes for a in group), sum(a.usd_per_month_saved for a in group))
        for name, group in grouped.items()
    }


def newest_checkpoint(checkpoints: Sequence[Checkpoint]) -> Checkpoint:
    """The newest: highest step among recognised ones, else the latest modified."""
    recognised = [c for c in checkpoints if c.step is not None]
    if recognised:
        return max(recognised, key=lambda c: (c.step or 0, c.mtime_s))
    return max(checkpoints, key=lambda c: (c.mtime_s, c.name))


def best_checkpoint(checkpoints: Sequence[Checkpoint]) -> Checkpoint | None:
    """The best by the manifest's metric (NaN never wins), in the direction the newest manifest says."""
    scored = [c for c in checkpoints if c.metric is not None and c.metric == c.metric]
    if not scored:
        return None
    higher = newest_checkpoint(scored).higher_is_better
    return (max if higher else min)(scored, key=lambda c: (c.metric or 0.0, c.step or 0))


def plan_retention(
    inventory: Inventory, location: Location, policy: Policy, pricer: Pricer, in_use: InUse, as_of_s: float
) -> RetentionPlan:
    """Every file either gets an action or a reason to stay; the safety rules are checked first."""
    target = _target(policy, pricer, location)
    tagged = _tagged(inventory)
    protected: dict[str, str] = {}
    for checkpoint_group in _checkpoint_groups(inventory.checkpoints):
        ordered = sorted(checkpoint_group, key=lambda c: (c.step if c.step is not None else -1, c.mtime_s, c.name))
        newest, best = newest_checkpoint(ordered), best_checkpoint(ordered)
        last = ordered[-policy.keep_last :]
        for checkpoint in ordered:
            reason = None
            if checkpoint is newest:
                reason = "newest checkpoint of its run"
            elif checkpoint is best:
                reason = f"best checkpoint of its run (metric {checkpoint.metric:g})"
            elif checkpoint in last:
                reason = f"among the last {policy.keep_last} checkpoints of its run"
            if reason is not None:
                protected.update((entry.path, reason) for entry in checkpoint.files)

    written_by = {
        entry.path: checkpoint.run_id
        for checkpoint in inventory.checkpoints
        if checkpoint.run_id is not None
        for entry in checkpoint.files
    }
    units = _units(inventory)
    actions: list[PlannedAction] = []
    kept: list[KeptFile] = []
    counts: Counter[str] = Counter()
    for unit in units:
        reason = _safety_reason(unit, in_use, written_by, tagged, protected)
        if reason is not None:
            kept.extend(KeptFile(entry.path, reason) for entry in unit)
            counts[reason.split(" (")[0]] += len(unit)
            continue
        age_days = (as_of_s - max(entry.mtime_s for entry in unit)) / _DAY_S
        planned = _by_age(unit, age_days, policy, pricer, target)
        if planned:
            actions.extend(planned)
        else:
            counts["younger than the policy's ages, already archived, or of a kind it leaves"] += len(unit)
    return RetentionPlan(
        location=inventory.location,
        as_of_s=as_of_s,
        policy=policy,
        actions=_count_links_once(actions),
        kept=tuple(kept),
        kept_counts=dict(sorted(counts.items())),
    )


def _count_links_once(actions: Sequence[PlannedAction]) -> tuple[PlannedAction, ...]:
    """The actions with each hard-linked file's bytes and saving on one link: the last the plan acts on when
    it acts alike on all the file's links (then that act frees or moves the bytes), else on none of them."""
    links: dict[tuple[tuple[int, int], str], list[int]] = defaultdict(list)
    for number, action in enumerate(actions):
        if action.entry.inode is not None:
            links[(action.entry.inode, action.action)].append(number)
    counted = list(actions)
    for numbers in links.values():
        every = len(numbers) >= actions[numbers[0]].entry.links
        for number in numbers[:-1] if every else numbers:
            action = counted[number]
            note = (
                "its bytes count on the file's last hard link in the plan"
                if every
                else f"one of {action.entry.links} hard links of a file, not all acted on alike, so nothing is freed"
            )
            counted[number] = replace(
                action, counted_bytes=0, usd_per_month_saved=0.0, reason=f"{action.reason}; {note}"
            )
    return tuple(counted)


def _target(policy: Policy, pricer: Pricer, location: Location) -> StoragePrice | None:
    """The archive class's row; on an object store it must be a class of that store the API can set."""
    if policy.archive is None:
        return None
    if not location.can_archive:
        raise InputError(
            f"{policy.source}: computewise archives objects on s3:// and gs:// only, not on {location.text}",
            "drop archive: from the policy, or let the store's own lifecycle rules move objects to a colder tier",
        )
    target = pricer.prices.price(policy.archive.to, pricer.region)
    if not location.is_local and (target.cloud != location.cloud or target.kind != "object"):
        classes = [p.name for p in pricer.prices.rows if p.cloud == location.cloud and p.kind == "object"]
        raise InputError(
            f"{policy.source}: archive.to {target.name} is not a storage class of {location.text}",
            f"archive objects to a class of the same store: {', '.join(sorted(set(classes))) or 'none known'}",
        )
    return target


def _tagged(inventory: Inventory) -> tuple[frozenset[str], tuple[str, ...]]:
    """(files named by a NAME.keep marker, folders holding a .keep marker)."""
    files, folders = set(), []
    for marker in inventory.keep_markers:
        folder, _, name = marker.rpartition("/")
        if name == KEEP_SUFFIX:
            folders.append(folder)
        else:
            files.add(marker.removesuffix(KEEP_SUFFIX))
    return frozenset(files), tuple(folders)


def _is_tagged(entry: Entry, tagged: tuple[frozenset[str], tuple[str, ...]]) -> bool:
    files, folders = tagged
    if entry.relative in files or entry.relative.rpartition(".")[0] in files:
        return True
    return any(folder == "" or entry.relative.startswith(folder + "/") for folder in folders)


def _checkpoint_groups(checkpoints: Sequence[Checkpoint]) -> list[list[Checkpoint]]:
    """One group per run (folder and ledger run id) and per kind of record: recognised checkpoints apart
    from other files of a folder."""
    groups: dict[tuple[str, int | None, bool], list[Checkpoint]] = defaultdict(list)
    for checkpoint in checkpoints:
        groups[(*checkpoint.run_key, checkpoint.recognised)].append(checkpoint)
    return list(groups.values())


def _units(inventory: Inventory) -> list[tuple[Entry, ...]]:
    """A checkpoint's files as one unit (manifest first), every other file alone."""
    in_checkpoint: set[str] = set()
    units: list[tuple[Entry, ...]] = []
    for checkpoint in inventory.checkpoints:
        files = sorted(checkpoint.files, key=lambda e: not e.relative.endswith(".json"))
        units.append(tuple(files))
        in_checkpoint.update(entry.path for entry in files)
    units.extend((entry,) for entry in inventory.entries if entry.path not in in_checkpoint)
    return units


def _safety_reason(
    unit: tuple[Entry, ...],
    in_use: InUse,
    written_by: dict[str, int],
    tagged: tuple[frozenset[str], tuple[str, ...]],
    protected: dict[str, str],
) -> str | None:
    for entry in unit:
        run_id = in_use.holder(entry.path)
        if run_id is not None:
            return f"in use by running run {run_id}"
        writer = written_by.get(entry.path)
        if in_use.is_running(writer):
            return f"written by running run {writer} (its checkpoint manifest says so)"
    if any(_is_tagged(entry, tagged) for entry in unit):
        return "tagged keep"
    for entry in unit:
        if entry.path in protected:
            return protected[entry.path]
    return None


def _by_age(
    unit: tuple[Entry, ...], age_days: float, policy: Policy, pricer: Pricer, target: StoragePrice | None
) -> list[PlannedAction]:
    kind = unit[0].kind
    delete, archive = policy.delete, policy.archive
    if delete is not None and kind in delete.kinds and age_days >= delete.after_days:
        return [
            PlannedAction(
                entry=entry,
                action="delete",
                from_class=pricer.class_name(entry),
                to_class=None,
                to_api_name=None,
                usd_per_month_saved=pricer.usd_per_month(entry) or 0.0,
                age_days=age_days,
                reason=f"unchanged for {age_days:.0f} days >= delete.after_days {delete.after_days:g}",
                counted_bytes=entry.size_bytes,
            )
            for entry in unit
        ]
    if archive is None or target is None or kind not in archive.kinds or age_days < archive.after_days:
        return []
    planned = []
    for entry in unit:
        current = pricer.price_of(entry)
        if current is not None and (
            current.name == target.name or current.usd_per_gib_month <= target.usd_per_gib_month
        ):
            continue  # already there, or already as cold: moving it would save nothing
        from_usd = 0.0 if current is None else current.usd_per_month(entry.size_bytes)
        planned.append(
            PlannedAction(
                entry=entry,
                action="archive",
                from_class=pricer.class_name(entry),
                to_class=target.name,
                to_api_name=target.api_name,
                usd_per_month_saved=max(0.0, from_usd - target.usd_per_month(entry.size_bytes)),
                age_days=age_days,
                reason=f"unchanged for {age_days:.0f} days >= archive.after_days {archive.after_days:g}",
                counted_bytes=entry.size_bytes,
            )
        )
    return planned
