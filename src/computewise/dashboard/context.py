"""What every dashboard handler needs, fixed once when the server starts.

Handlers reach it as ``request.app.state.context``. The clock is injected so tests and the
"this month" figures agree on what "now" is without patching ``time``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from computewise.ledger import Ledger

if TYPE_CHECKING:
    from computewise.catalog import Catalog

__all__ = ["DashboardContext"]


@dataclass(frozen=True)
class DashboardContext:
    """The open ledger (read only: the dashboard never writes), the catalog, the access token
    (None on loopback without ``--token``), the folder of saved plans, and the wall clock in seconds.

    The catalog is a loader, called when a run page first needs prices: importing and reading it
    took about a tenth of the server's start-up, and the overview that answers first never uses it.
    """

    ledger: Ledger
    catalog: Callable[[], Catalog]
    token: str | None
    plans_dir: Path | None
    clock: Callable[[], float]
