"""Calendar arithmetic for accounting, always in UTC, and the one parser for ``--since``/``--until``/``--as-of``.

Budgets are calendar months and spend series are calendar days, both in UTC, so that two machines
in different time zones sharing one ledger agree on which month a dollar belongs to. Every function
takes the instant explicitly (``now_s``); nothing here reads the clock.

Every instant a user types lies between ``EARLIEST_S`` (1970-01-01, the Unix epoch: no run was ever
recorded before it) and ``LATEST_S`` (9999-01-01: months after it would need the year 10000, which
no date can be written in), and every duration is at most ``LONGEST_S`` (100 years): anything outside
is a typo (``99999999d``, ``0001-01-01``), refused with the range instead of failing later in a
date conversion.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta

from computewise.errors import InputError
from computewise.units import parse_duration_s

__all__ = [
    "DAY_S",
    "EARLIEST_S",
    "LATEST_S",
    "LONGEST_S",
    "day_start_s",
    "iso_day",
    "iso_utc",
    "month_period",
    "month_start_s",
    "next_month_start_s",
    "parse_later_s",
    "parse_time_s",
]

DAY_S = 86400.0
EARLIEST_S = 0.0
LATEST_S = datetime(9999, 1, 1, tzinfo=UTC).timestamp()
LONGEST_S = 100 * 365 * DAY_S
_RANGE_TEXT = "between 1970-01-01 and 9998-12-31 (UTC)"

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
    unless it names an offset); within ``EARLIEST_S``..``LATEST_S``, else ``InputError``."""
    cleaned = text.strip().lower()
    if cleaned == "today":
        return day_start_s(now_s)
    if cleaned == "month":
        return month_start_s(now_s)
    if _ISO_DATE.fullmatch(cleaned.upper()):
        return _in_range(_parse_iso(text.strip(), what), text, what)
    example = (_utc(now_s).date() - timedelta(days=30)).isoformat()
    forms = f"a duration back from now (30d, 12h, 2w), 'today', 'month' or a UTC date like {example}"
    return _in_range(now_s - _duration_s(text, what, forms), text, what)


def parse_later_s(text: str, now_s: float, what: str = "--as-of") -> float:
    """An instant at or after now, for "what will happen then": a duration forward from now (``30d``) or an
    ISO date or date-time. Today's date means now; an earlier date is refused, because ages counted at a
    moment before files were written would be negative, and a past moment predicts nothing."""
    cleaned = text.strip()
    example = (_utc(now_s).date() + timedelta(days=30)).isoformat()
    if not _ISO_DATE.fullmatch(cleaned.upper()):
        forms = f"a duration forward from now (30d, 12h, 2w) or a UTC date like {example}"
        return _in_range(now_s + _duration_s(text, what, forms), text, what)
    moment_s = _in_range(_parse_iso(cleaned, what), text, what)
    if moment_s < day_start_s(now_s):
        raise InputError(
            f"{what} {text!r} is in the past; it names a moment to come, to show what will happen then",
            f"give today, a later date like {example}, or a duration forward from now such as 30d",
        )
    return max(moment_s, now_s)


def _duration_s(text: str, what: str, forms: str) -> float:
    """A typed duration of at most ``LONGEST_S``; ``forms`` lists what ``what`` accepts, for the hint."""
    try:
        seconds = parse_duration_s(text.strip().lower(), what)
    except InputError as exc:
        raise InputError(f"cannot read {text!r} as {what}", f"give {forms}") from exc
    if seconds > LONGEST_S:
        raise InputError(
            f"{what} {text!r} spans more than 100 years, longer than anything computewise records",
            f"give a duration of at most 100 years (e.g. 365d), or a date {_RANGE_TEXT}",
        )
    return seconds


def _in_range(t_s: float, text: str, what: str) -> float:
    """``t_s`` if it lies in ``EARLIEST_S``..``LATEST_S``: the dates the ledger records and can write out."""
    if not (math.isfinite(t_s) and EARLIEST_S <= t_s < LATEST_S):
        raise InputError(
            f"{what} {text!r} falls outside the dates computewise handles, {_RANGE_TEXT}",
            f"give a date {_RANGE_TEXT}, or a shorter duration (e.g. 30d)",
        )
    return t_s


def _parse_iso(text: str, what: str) -> float:
    try:
        moment = datetime.fromisoformat(text.replace("z", "Z"))
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return moment.timestamp()
    except (ValueError, OverflowError) as exc:  # OverflowError: an offset pushing year 1 or 9999 off the calendar
        raise InputError(f"{what}: {text!r} is not a real date", "write it as YYYY-MM-DD, e.g. 2025-03-01") from exc
