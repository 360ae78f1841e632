"""Query-string values of the dashboard, read once and refused with a fix when they cannot be used.

Every parser raises ``InputError`` (message and hint); the app turns it into a 400 page, or a JSON
``{"error", "hint"}`` under ``/api``. Pure functions over strings, so the page modules and the tests
share them without a web framework.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime

from computewise.errors import InputError

__all__ = ["DAY_S", "parse_choice", "parse_day_s", "parse_int", "parse_tag_filters"]

DAY_S = 86400.0
_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")


def parse_day_s(text: str | None, name: str, *, end_of_day: bool = False) -> float | None:
    """``YYYY-MM-DD`` (UTC) as the epoch second it starts, or the one after it ends with ``end_of_day``
    (so ``until=2025-03-01`` includes that whole day); None for an empty value."""
    if text is None or not text.strip():
        return None
    cleaned = text.strip()
    try:
        if not _DAY.fullmatch(cleaned):
            raise ValueError(cleaned)
        start_s = datetime.strptime(cleaned, "%Y-%m-%d").replace(tzinfo=UTC).timestamp()
    except ValueError as exc:
        raise InputError(
            f"{name}={text!r} is not a date", f"write {name} as YYYY-MM-DD (UTC), e.g. 2025-03-01"
        ) from exc
    return start_s + DAY_S if end_of_day else start_s


def parse_int(text: str | None, name: str, *, default: int, low: int, high: int) -> int:
    """A whole number in ``[low, high]``; ``default`` when the value is absent or empty."""
    if text is None or not text.strip():
        return default
    try:
        value = int(text.strip())
    except ValueError as exc:
        raise InputError(f"{name}={text!r} is not a whole number", f"give {name} between {low} and {high}") from exc
    if not low <= value <= high:
        raise InputError(f"{name}={value} is out of range", f"give {name} between {low} and {high}")
    return value


def parse_choice(text: str | None, name: str, allowed: Sequence[str], *, default: str | None) -> str | None:
    """One of ``allowed``; ``default`` when absent or empty."""
    if text is None or not text.strip():
        return default
    if text.strip() not in allowed:
        raise InputError(f"{name}={text!r} is not one of {', '.join(allowed)}", f"use {name}={allowed[0]}")
    return text.strip()


def parse_tag_filters(values: Sequence[str]) -> dict[str, str]:
    """``tag=key=value`` filters (repeatable; all must match); empty values are ignored."""
    tags: dict[str, str] = {}
    for raw in values:
        if not raw.strip():
            continue
        key, sep, value = raw.strip().partition("=")
        if not sep or not key.strip():
            raise InputError(f"tag={raw!r} is not key=value", "write a tag filter as key=value, e.g. tag=team=vision")
        tags[key.strip()] = value.strip()
    return tags
