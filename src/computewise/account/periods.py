"""Calendar arithmetic for accounting, always in UTC, and the one parser for ``--since``/``--until``.

Budgets are calendar months and spend series are calendar days, both in UTC, so that two machines
in different time zones sharing one ledger agree on which month a dollar belongs to. Every function
takes the instant explicitly (``now_s``); nothing here reads the clock.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta

from computewise.errors import InputError
from computewise.units import parse_duration_s

__all__ = [
    "DAY_S",
    "day_start_s",
    "iso_day",
    "iso_utc",
    "month_period",
    "month_start_s",
    "next_month_start_s",
    "parse_time_s",
]

DAY_S = 86400.0

_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?)?")


def _utc(t_s: float) -> datetime:
    return datetime.fromtimestamp(t_s, UTC)


def day_start_s(t_s: float) -> float:
    """Midnight UTC at or before ``t_s``."""
    return math.floor(t_s / DAY_S) * DAY_S


def month_start_s(t_s: float) -> float:
    """Midnight UTC on the first day of the month that contains ``t_s``."""
    moment = _utc(t_s)
    return datetime(moment.year, moment.month, 1, tzinfo=UTC).timestamp()


def next_month_start_s(t_s: float) -> float:
    """Midnight UTC on the first day of the month after the one that contains ``t_s``."""
    moment = _utc(t_s)
    year, month = (moment.year + 1, 1) if moment.month == 12 else (moment.year, moment.month + 1)
    return datetime(year, month, 1, tzinfo=UTC).timestamp()


def month_period(t_s: float) -> str:
    """The budget period of ``t_s``: ``"YYYY-MM"`` in UTC (the key under which alerts fire once)."""
    return _utc(t_s).strftime("%Y-%m")


def iso_day(t_s: float) -> str:
    """``"YYYY-MM-DD"`` of ``t_s`` in UTC."""
    return _utc(t_s).date().isoformat()


def iso_utc(t_s: float) -> str:
    """``"YYYY-MM-DDTHH:MM:SSZ"``, whole seconds, for JSON and CSV."""
    return _utc(t_s).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time_s(text: str, now_s: float, what: str = "--since") -> float:
    """An instant typed by a user: a duration back from now (``30d``, ``12h``, ``2w``), ``today``,
    ``month`` (the start of this UTC month), or an ISO date or date-time (``2025-03-01``, taken as UTC
    unless it names an offset)."""
    cleaned = text.strip().lower()
    if cleaned == "today":
        return day_start_s(now_s)
    if cleaned == "month":
        return month_start_s(now_s)
    if _ISO_DATE.fullmatch(cleaned.upper()):
        return _parse_iso(text.strip(), what)
    try:
        return now_s - parse_duration_s(cleaned, what)
    except InputError as exc:
        raise InputError(
            f"cannot read {text!r} as {what}",
            f"give a duration back from now (30d, 12h, 2w), 'today', 'month' or a UTC date like "
            f"{(_utc(now_s).date() - timedelta(days=30)).isoformat()}",
        ) from exc


def _parse_iso(text: str, what: str) -> float:
    try:
        moment = datetime.fromisoformat(text.replace("z", "Z"))
    except ValueError as exc:
        raise InputError(f"{what}: {text!r} is not a real date", "write it as YYYY-MM-DD, e.g. 2025-03-01") from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()
