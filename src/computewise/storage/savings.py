"""What storage applies saved in a window, read back from the ledger for ``cost report``.

Only actions whose outcome is ``done`` count (a file that vanished or was skipped freed nothing),
attributed to the instant each was done. The saving is a rate, $/month from then on, not money
already saved: it sits beside compute spend as what the bill no longer carries.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from computewise.account.report import CostReport, cost_report
from computewise.ledger import Ledger
from computewise.specs.codec import Document, Jsonable, json_field

__all__ = ["CostReportWithStorage", "StorageSavings", "cost_report_with_storage", "storage_savings"]

_COUNT = json_field(minimum=0)


@dataclass(frozen=True)
class StorageSavings(Jsonable):
    json_description: ClassVar[str] = "What storage apply did in the window (outcome done only)."

    deleted_files: int = field(metadata=_COUNT)
    deleted_bytes: int = field(metadata=_COUNT)
    archived_files: int = field(metadata=_COUNT)
    archived_bytes: int = field(metadata=_COUNT)
    usd_per_month_saved: float = field(
        metadata=json_field(description="US dollars a month no longer billed from then on: a rate, not money saved.")
    )


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


@dataclass(frozen=True)
class CostReportWithStorage(Jsonable):
    """What ``cost report`` shows: compute spend by group, and beside it the storage applies of the same
    window. It lives here, above ``account``, because the savings are ``storage``'s own figures."""

    json_document: ClassVar[Document] = Document(
        "cost-report",
        "cost report --json",
        "Spend, GPU-hours, energy, CO2, utilization and idle cost per group over a window "
        "(account.report.CostReport), and what storage applies done in it no longer bill "
        "(storage.savings.StorageSavings).",
    )

    report: CostReport = field(metadata=json_field(inline=True))
    storage: StorageSavings


def cost_report_with_storage(
    ledger: Ledger, by: Sequence[str], since_s: float | None, until_s: float | None, now_s: float
) -> CostReportWithStorage:
    """``account.report.cost_report`` over ``[since_s, until_s)`` and the storage savings of that window."""
    report = cost_report(ledger, by, since_s, until_s, now_s)
    return CostReportWithStorage(report, storage_savings(ledger, since_s, report.until_s))
