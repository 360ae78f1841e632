"""``storage audit`` and ``storage apply`` as terminal tables, from their JSON documents."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.text import Text

from computewise.report.prose import print_prose
from computewise.report.rows import Grid, plural
from computewise.report.table import print_table
from computewise.units import format_bytes, format_usd, format_usd_or

__all__ = ["print_apply", "print_audit", "savings_line"]

_SHOWN_ACTIONS = 20


def _days(value: float | None) -> str:
    return "" if value is None else f"{value:.0f} d"


def _print_stored(d: dict[str, Any], console: Console) -> None:
    """The bytes by kind and by storage class."""
    kinds = Grid(
        ("kind", "files", "size", "$/month", "oldest", "median age", "last access"),
        tuple(
            (
                row["kind"],
                f"{row['files']:,}",
                format_bytes(row["size_bytes"]),
                format_usd(row["usd_per_month"]),
                _days(row["oldest_days"]),
                _days(row["median_age_days"]),
                _days(row["last_access_days"]) + (" ago" if row["last_access_days"] is not None else ""),
            )
            for row in d["kinds"]
        ),
        frozenset({1, 2, 3, 4, 5, 6}),
        drop_order=(6, 5),
    )
    print_table(kinds, console)
    classes = Grid(
        ("storage class", "files", "size", "$/GiB-month", "$/month"),
        tuple(
            (
                row["storage_class"],
                f"{row['files']:,}",
                format_bytes(row["size_bytes"]),
                format_usd_or(row["usd_per_gib_month"], ""),
                format_usd_or(row["usd_per_month"], "unpriced"),
            )
            for row in d["classes"]
        ),
        frozenset({1, 2, 3, 4}),
    )
    print_table(classes, console)


def print_audit(d: dict[str, Any], console: Console) -> None:
    title = (
        f"{d['location']}: {d['files']:,} files, {format_bytes(d['size_bytes'])}, "
        f"{format_usd(d['usd_per_month'])}/month"
    )
    console.print(Text(title, style="bold"))
    if d["files"]:
        _print_stored(d, console)
    else:
        console.print("no files: only empty folders, or none at all", highlight=False)
    if d["runs"]:
        runs = Grid(
            ("run (folder)", "checkpoints", "size", "newest", "best", "metric"),
            tuple(
                (
                    row["run"] if row["run_id"] is None else f"{row['run']} (ledger run {row['run_id']})",
                    str(row["checkpoints"]),
                    format_bytes(row["size_bytes"]),
                    row["newest"],
                    row["best"] or "",
                    "" if row["best_metric"] is None else f"{row['best_metric']:.4g}",
                )
                for row in d["runs"]
            ),
            frozenset({1, 2, 5}),
            drop_order=(5, 4),
        )
        print_table(runs, console)
    dup = d["duplicates"]
    if dup["groups"]:
        print_prose(
            console,
            f"duplicates: {plural(dup['groups'], 'group')} of identical files waste "
            f"{format_bytes(dup['wasted_bytes'])} "
            f"({format_usd(dup['usd_per_month'])}/month); largest: {', '.join(dup['top'][0]['paths'][:3])}",
            markup=False,
        )
    else:
        console.print(f"duplicates: none among {dup['hashed_files']:,} files whose sizes collide", highlight=False)
    notes = [
        d["access_times"]["note"],
        f"files without a class of their own priced as {d['default_class']} in {d['region']}",
    ]
    if d["unpriced_files"]:
        notes.append(f"{d['unpriced_files']:,} files in a class the price table lacks are not priced")
    if d["skipped"]:
        notes.append(f"{len(d['skipped'])} folders could not be read: {d['skipped'][0]}")
    notes.append(f"walked in {d['walk_s']:.2f} s, hashed in {d['hash_s']:.2f} s")
    for note in notes:
        print_prose(console, f"* {note}", style="dim", markup=False)


def print_apply(d: dict[str, Any], console: Console) -> None:
    dry = d.get("dry_run", True)
    actions = d["actions"]
    verb = "would" if dry else "did"
    if not actions:
        console.print(Text(f"{d['location']}: nothing to do under {d['policy']['source']}", style="bold"))
    else:
        console.print(
            Text(
                f"{d['location']}: {'plan' if dry else 'applied'} ({len(actions):,} files, "
                f"{format_usd(d['usd_per_month_saved'])}/month {verb} be saved)".replace("did be saved", "saved"),
                style="bold",
            )
        )
        shown = sorted(actions, key=lambda a: -a["size_bytes"])[:_SHOWN_ACTIONS]
        headers: tuple[str, ...] = ("action", "path", "kind", "size", "age", "to", "$/month saved")
        if not dry:
            headers = (*headers, "outcome")
        rows = tuple(
            (
                a["action"], a["relative"], a["kind"], format_bytes(a["size_bytes"]), _days(a["age_days"]),
                a["to_class"] or "", format_usd(a["usd_per_month_saved"]),
                *(() if dry else (a["outcome"],)),
            )
            for a in shown
        )  # fmt: skip
        print_table(Grid(headers, rows, frozenset({3, 4, 6}), drop_order=(2, 4)), console)
        if len(actions) > len(shown):
            console.print(f"... and {len(actions) - len(shown):,} smaller files (--json lists all)", style="dim")
        for action, row in sorted(d["totals"].items()):
            console.print(
                f"{action}: {plural(int(row['files']), 'file')}, {format_bytes(row['size_bytes'])}, "
                f"{format_usd(row['usd_per_month_saved'])}/month",
                highlight=False,
            )
    for reason, count in d["kept_counts"].items():
        console.print(f"kept {count:,}: {reason}", style="dim", highlight=False)
    if dry and actions:
        console.print("dry run: nothing changed; add --apply to act", style="bold yellow")
    elif not dry and d.get("apply_id") is not None:
        done = d["done"]
        freed = done.get("delete", {}).get("size_bytes", 0)
        moved = done.get("archive", {}).get("size_bytes", 0)
        print_prose(
            console,
            f"recorded as storage apply {d['apply_id']} in the ledger: deleted {format_bytes(freed)}, "
            f"archived {format_bytes(moved)}, {format_usd(d['usd_per_month_saved_done'])}/month saved",
            markup=False,
        )


def savings_line(d: dict[str, Any]) -> str | None:
    """``cost report``'s line on storage: what applies in the window freed and archived, and the $/month saved."""
    if not d["deleted_files"] and not d["archived_files"]:
        return None
    return (
        f"storage: deleted {plural(d['deleted_files'], 'file')} ({format_bytes(d['deleted_bytes'])}), archived "
        f"{d['archived_files']:,} ({format_bytes(d['archived_bytes'])}): "
        f"{format_usd(d['usd_per_month_saved'])}/month less (computewise storage apply)"
    )
