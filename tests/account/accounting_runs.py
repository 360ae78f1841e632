"""Shared values of the accounting tests: a fixed "now" and the signature of the ``add_run`` fixture."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Protocol

from computewise.ledger import Ledger

# Thursday 2025-03-20 12:00 UTC: mid-month, so windows can reach back into the same month.
NOW_S = datetime(2025, 3, 20, 12, 0, tzinfo=UTC).timestamp()
HOUR_S = 3600.0
DAY_S = 86400.0


class AddRun(Protocol):
    def __call__(
        self,
        ledger: Ledger,
        *,
        start_s: float,
        end_s: float | None,
        hourly_usd: float,
        tags: dict[str, str] | None = ...,
        kind: str = ...,
        gpu_count: int = ...,
        samples: int = ...,
        gpu_util_pct: float | None = ...,
        cpu_percent: float = ...,
        idle_samples: int = ...,
        power_w: float = ...,
        energy_measured: bool = ...,
        inferences: int = ...,
        pue: float = ...,
        carbon_g_per_kwh: float = ...,
        assumed: bool = ...,
    ) -> int: ...
