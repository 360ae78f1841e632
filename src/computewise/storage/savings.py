"""What storage applies saved in a window, read back from the ledger for ``cost report``.

Only actions whose outcome is ``done`` count (a file that vanished or was skipped freed nothing),
attributed to the instant each was done. The saving is a rate, $/month from then on, not money
already saved: it sits beside compute spend as what the bill no longer carries.
"""

from __future__ import annotations

from dataclasses import dataclass

from computewise.ledger import Ledger
from computewise.specs.codec import Jsonable

__all__ = ["StorageSavings", "storage_savings"]


@dataclass(frozen=True)
class StorageSavings(Jsonable):
    deleted_files: int
    deleted_bytes: int
    archived_files: int
    archived_bytes: int
    usd_per_month_saved: float


def storage_savings(ledger: Ledger, since_s: float | None, until_s: float) -> StorageSavings:
    totals = ledger.storage_done_totals(since_s, until_s)
    deleted = totals.get("delete", (0, 0, 0.0))
    archived = totals.get("archive", (0, 0, 0.0))
    return StorageSavings(
        deleted_files=deleted[0],
        deleted_bytes=deleted[1],
        archived_files=archived[0],
        archived_bytes=archived[1],
        usd_per_month_saved=deleted[2] + archived[2],
    )
