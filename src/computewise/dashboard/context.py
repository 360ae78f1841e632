"""What every dashboard handler needs, fixed once when the server starts.

Handlers reach it as ``request.app.state.context``. The clock is injected so tests and the
"this month" figures agree on what "now" is without patching ``time``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from computewise.catalog import Catalog
from computewise.ledger import Ledger

__all__ = ["DashboardContext"]


@dataclass(frozen=True)
class DashboardContext:
    """The open ledger (read only: the dashboard never writes), the catalog, the access token
    (None on loopback without ``--token``), the folder of saved plans, and the wall clock in seconds."""

    ledger: Ledger
    catalog: Catalog
    token: str | None
    plans_dir: Path | None
    clock: Callable[[], float]
