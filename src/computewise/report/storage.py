"""``storage audit`` and ``storage apply`` as terminal tables, from their typed results."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.text import Text

from computewise.report.prose import print_prose
from computewise.report.rows import Grid, plural
from computewise.report.table import print_table
from computewise.storage.retention import RetentionPlan
from computewise.units import format_bytes, format_usd, format_usd_or

if TYPE_CHECKING:
    from computewise.storage.apply import ApplyResult
    from computewise.storage.audit import StorageAudit
    from computewise.storage.retention import PlannedAction
    from computewise.storage.savings import StorageSavings

__all__ = ["print_apply", "print_audit", "savings_line"]

_SHOWN_ACTIONS = 20


def _days(value: float | None) -> str:
    return "" if value is None else f"{value:.0f} d"


def _print_stored(audit: StorageAudit, console: Console) -> None:
    """The bytes by kind and by storage class."""
    kinds = Grid(
        ("kind", "files", "size", "$/month", "oldest", "median age", "last access"),
        tuple(
            (
                row.kind,
                f"{row.files:,}",
                format_bytes(row.size_bytes),
                format_usd(row.usd_per_month),
                _days(row.oldest_days),
                _days(row.median_age_days),
                _days(row.last_access_days) + (" ago" if row.last_access_days is not None else ""),
            )
            for row in audit.kinds
        ),
        frozenset({1, 2, 3, 4, 5, 6}),
        drop_order=(6, 5),
    )
    print_table(kinds, console)
    classes = Grid(
        ("storage class", "files", "size", "$/GiB-month", "$/month"),
        tuple(
            (
                row.storage_class,
                f"{row.files:,}",
                format_bytes(row.size_bytes),
                format_usd_or(row.usd_per_gib_month, ""),
                format_usd_or(row.usd_per_month, "unpriced"),
            )
            for row in audit.classes
        ),
        frozenset({1, 2, 3, 4}),
    )
    print_table(classes, console)


def print_audit(audit: StorageAudit, console: Console) -> None:
    title = (
        f"{audit.location}: {audit.files:,} files, {format_bytes(audit.size_bytes)}, "
        f"{format_usd(audit.usd_per_month)}/month"
    )
    console.print(Text(title, style="bold"))
    if audit.files:
        _print_stored(audit, console)
    else:
        console.print("no files: only empty folders, or none at all", highlight=False)
    if audit.runs:
        runs = Grid(
            ("run (folder)", "checkpoints", "size", "newest", "best", "metric"),
            tuple(
                (
                    row.run if row.run_id is None else f"{row.run} (ledger run {row.run_id})",
                    str(row.checkpoints),
                    format_bytes(row.size_bytes),
                    row.newest,
                    row.best or "",
                    "" if row.best_metric is None else f"{row.best_metric:.4g}",
                )
                for row in audit.runs
            ),
            frozenset({1, 2, 5}),
            drop_order=(5, 4),
        )
        print_table(runs, console)
    dup = audit.duplicates
    if dup.groups:
        print_prose(
            console,
            f"duplicates: {plural(len(dup.groups), 'group')} of identical files waste "
            f"{format_bytes(dup.wasted_bytes)} "
            f"({format_usd(audit.duplicate_usd_per_month)}/month); largest: {', '.join(dup.groups[0].paths[:3])}",
            markup=False,
        )
    else:
        console.print(f"duplicates: none among {dup.hashed_files:,} files whose sizes collide", highlight=False)
    notes = [
        audit.access_note,
        f"files without a class of their own priced as {audit.default_class} in {audit.region}",
    ]
    if audit.unpriced_files:
        notes.append(f"{audit.unpriced_files:,} files in a class the price table lacks are not priced")
    if audit.skipped:
        notes.append(f"{len(audit.skipped)} folders could not be read: {audit.skipped[0]}")
    notes.append(f"walked in {audit.walk_s:.2f} s, hashed in {audit.hash_s:.2f} s")
    for note in notes:
        print_prose(console, f"* {note}", style="dim", markup=False)


def print_apply(result: RetentionPlan | ApplyResult, console: Console) -> None:
    """A retention plan (the dry run) or what an apply did, with each file's outcome."""
    applied = None if isinstance(result, RetentionPlan) else result
    plan = result if isinstance(result, RetentionPlan) else result.plan
    dry = applied is None
    outcomes: tuple[str | None, ...] = (
        (None,) * len(plan.actions) if applied is None else tuple(outcome for outcome, _ in applied.outcomes)
    )
    verb = "would" if dry else "did"
    if not plan.actions:
        console.print(Text(f"{plan.location}: nothing to do under {plan.policy.source}", style="bold"))
    else:
        console.print(
            Text(
                f"{plan.location}: {'plan' if dry else 'applied'} ({len(plan.actions):,} files, "
                f"{format_usd(plan.usd_per_month_saved)}/month {verb} be saved)".replace("did be saved", "saved"),
                style="bold",
            )
        )
        _print_actions(list(zip(plan.actions, outcomes, strict=True)), dry, console)
        for action, row in sorted(plan.totals.items()):
            console.print(
                f"{action}: {plural(row.files, 'file')}, {format_bytes(row.size_bytes)}, "
                f"{format_usd(row.usd_per_month_saved)}/month",
                highlight=False,
            )
    for reason, count in dict(plan.kept_counts).items():
        console.print(f"kept {count:,}: {reason}", style="dim", highlight=False)
    if dry and plan.actions:
        console.print("dry run: nothing changed; add --apply to act", style="bold yellow")
    elif applied is not None and applied.apply_id is not None:
        done = applied.done
        freed, moved = (done[action].size_bytes if action in done else 0 for action in ("delete", "archive"))
        print_prose(
            console,
            f"recorded as storage apply {applied.apply_id} in the ledger: deleted {format_bytes(freed)}, "
            f"archived {format_bytes(moved)}, {format_usd(applied.usd_per_month_saved_done)}/month saved",
            markup=False,
        )


def _print_actions(actions: list[tuple[PlannedAction, str | None]], dry: bool, console: Console) -> None:
    """The largest files acted on (their outcome too once applied); --json lists them all."""
    shown = sorted(actions, key=lambda pair: -pair[0].entry.size_bytes)[:_SHOWN_ACTIONS]
    headers: tuple[str, ...] = ("action", "path", "kind", "size", "age", "to", "$/month saved")
    if not dry:
        headers = (*headers, "outcome")
    rows = tuple(
        (
            a.action, a.entry.relative, a.entry.kind, format_bytes(a.entry.size_bytes), _days(a.age_days),
            a.to_class or "", format_usd(a.usd_per_month_saved),
            *(() if dry else (outcome or "",)),
        )
        for a, outcome in shown
    )  # fmt: skip
    print_table(Grid(headers, rows, frozenset({3, 4, 6}), drop_order=(2, 4)), console)
    if len(actions) > len(shown):
        console.print(f"... and {len(actions) - len(shown):,} smaller files (--json lists all)", style="dim")


def savings_line(savings: StorageSavings) -> str | None:
    """``cost report``'s line on storage: what applies in the window freed and archived, and the $/month saved."""
    if not savings.deleted_files and not savings.archived_files:
        return None
    return (
        f"storage: deleted {plural(savings.deleted_files, 'file')} ({format_bytes(savings.deleted_bytes)}), "
        f"archived {savings.archived_files:,} ({format_bytes(savings.archived_bytes)}): "
        f"{format_usd(savings.usd_per_month_saved)}/month less (computewise storage apply)"
    )
