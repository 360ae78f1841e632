"""Rows read back from the ledger, checked: one damaged row is a ``LedgerError`` that names it, never a traceback.

SQLite keeps whatever is written into a column (an ``UPDATE`` by hand, another tool, a disk that
flipped a byte), so a row may hold text that is not JSON where JSON belongs, ``null`` where a list
belongs, or a time past any calendar. JSON columns are therefore decoded leniently (``lenient_json``,
the SQLite engine's ``json_deserializer``, in ``connect``): text that does not parse comes back as ``Unreadable``
instead of raising inside SQLAlchemy's fetch, where nobody knows which row it was. The readers here
then check every column of the row and, at the first bad one, raise a ``LedgerError`` that names the
ledger, the table, the row id and the column, with the ``sqlite3`` commands to look at the row and to
repair or delete it. Every read command stops with that message and exit code 2, as it does for a
file that is not a ledger at all.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any, TypeVar

import sqlalchemy as sa

from computewise.errors import ComputewiseError, LedgerError
from computewise.ledger.connect import Unreadable, display_url, sqlite_file
from computewise.ledger.records import RUN_KINDS, RUN_STATUSES, AlertRow, BudgetRow, PriceSnapshot, RunRow

__all__ = ["alert_row", "budget_row", "run_row"]

T = TypeVar("T")

# Instants a ledger row may hold: from the Unix epoch to 9999-01-01T00:00:00Z, past which no date can be
# written (the reports turn every time into one). Anything outside is damage, not a run.
_LATEST_S = 253_370_764_800.0

# What to set a column to so the row reads again, where a neutral value exists (others have none).
_REPAIRS = {"tags": "'{}'", "argv": "'[]'", "summary": "NULL", "delivery": "'{}'"}


class _BadColumn(Exception):
    """A column that cannot be what the record needs; turned into a ``LedgerError`` by ``_reading``."""

    def __init__(self, column: str, why: str) -> None:
        super().__init__(column, why)
        self.column = column
        self.why = why


def run_row(row: sa.RowMapping, url: sa.URL) -> RunRow:
    """A ``runs`` row as a ``RunRow``, every column checked (``LedgerError`` naming the first bad one)."""
    return _reading("runs", row, url, lambda: _run_row(row))


def budget_row(row: sa.RowMapping, url: sa.URL) -> BudgetRow:
    """A ``budgets`` row as a ``BudgetRow``, checked like ``run_row``."""
    return _reading("budgets", row, url, lambda: _budget_row(row))


def alert_row(row: sa.RowMapping, url: sa.URL) -> AlertRow:
    """An ``alerts`` row as an ``AlertRow``, checked like ``run_row``."""
    return _reading("alerts", row, url, lambda: _alert_row(row))


def _reading(table: str, row: sa.RowMapping, url: sa.URL, build: Callable[[], T]) -> T:
    try:
        return build()
    except _BadColumn as bad:
        raise _damaged(table, row.get("id"), bad.column, bad.why, url) from None


def _damaged(table: str, row_id: object, column: str, why: str, url: sa.URL) -> LedgerError:
    """What is wrong, where (ledger, table, row, column), and how to look at and fix that one row."""
    noun = {"runs": "run", "budgets": "budget", "alerts": "alert"}.get(table, f"{table} row")
    where = f"WHERE id = {row_id}"
    path = sqlite_file(url)
    ledger = str(path) if path is not None else display_url(url)
    client = f'sqlite3 "{path}"' if path is not None else f'psql "{ledger}" -c'
    repair = _REPAIRS.get(column)
    fix = f'set it right ({client} "UPDATE {table} SET {column} = {repair} {where}")' if repair else "set it right"
    cascade = "PRAGMA foreign_keys = ON; " if path is not None else ""
    return LedgerError(
        f"the ledger {ledger} holds a damaged row: {noun} {row_id}, column {column!r}, {why}",
        f'back up the ledger file, look at the row with {client} "SELECT {column} FROM {table} {where}", then '
        f'{fix} or delete the {noun} with {client} "{cascade}DELETE FROM {table} {where}"',
    )


def _run_row(row: sa.RowMapping) -> RunRow:
    price = _json_object(row, "price")
    try:
        snapshot = PriceSnapshot.from_dict(price)
    except ComputewiseError as exc:
        raise _BadColumn("price", f"not a price snapshot ({exc.message})") from exc
    return RunRow(
        id=_integer(row, "id"),
        kind=_choice(row, "kind", RUN_KINDS),
        command=_text(row, "command"),
        argv=tuple(_strings(row, "argv")),
        tags=_tags(row),
        host=_text(row, "host"),
        pid=_integer(row, "pid"),
        user=_text(row, "user"),
        cwd=_text(row, "cwd"),
        started_at_s=_instant(row, "started_at_s"),
        ended_at_s=_optional(row, "ended_at_s", _instant),
        heartbeat_at_s=_instant(row, "heartbeat_at_s"),
        status=_choice(row, "status", RUN_STATUSES),
        exit_code=_optional(row, "exit_code", _integer),
        interval_s=_non_negative(row, "interval_s"),
        price=snapshot,
        logical_cpus=_integer(row, "logical_cpus"),
        gpu_count=_integer(row, "gpu_count"),
        gpu_name=_optional(row, "gpu_name", _text),
        accelerator=_optional(row, "accelerator", _text),
        input_hash=_optional(row, "input_hash", _text),
        inferences=_integer(row, "inferences"),
        error=_optional(row, "error", _text),
        summary=_optional(row, "summary", _json_object),
    )


def _budget_row(row: sa.RowMapping) -> BudgetRow:
    percentages = row["alert_at_pct"]
    if not isinstance(percentages, list) or not all(_is_number(p) for p in percentages):
        raise _BadColumn("alert_at_pct", f"expected a JSON list of percentages, found {_shown(percentages)}")
    return BudgetRow(
        id=_integer(row, "id"),
        scope=_text(row, "scope"),
        monthly_usd=_non_negative(row, "monthly_usd"),
        alert_at_pct=tuple(float(p) for p in percentages),
        webhook_url=_optional(row, "webhook_url", _text),
        command=_optional(row, "command", _text),
        created_at_s=_instant(row, "created_at_s"),
    )


def _alert_row(row: sa.RowMapping) -> AlertRow:
    return AlertRow(
        id=_integer(row, "id"),
        kind=_text(row, "kind"),
        scope=_optional(row, "scope", _text),
        budget_id=_optional(row, "budget_id", _integer),
        run_id=_optional(row, "run_id", _integer),
        period=_optional(row, "period", _text),
        threshold_pct=_optional(row, "threshold_pct", _number),
        message=_text(row, "message"),
        fired_at_s=_instant(row, "fired_at_s"),
        delivery=_json_object(row, "delivery"),
    )


def _optional(row: sa.RowMapping, column: str, read: Callable[[sa.RowMapping, str], T]) -> T | None:
    return None if row[column] is None else read(row, column)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _shown(value: object) -> str:
    """A column's value as the message shows it: JSON that did not parse as its text, long values cut."""
    text = repr(value.text) if isinstance(value, Unreadable) else json.dumps(value) if value is None else repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


def _number(row: sa.RowMapping, column: str) -> float:
    value = row[column]
    if not _is_number(value):
        raise _BadColumn(column, f"expected a finite number, found {_shown(value)}")
    return float(value)


def _non_negative(row: sa.RowMapping, column: str) -> float:
    value = _number(row, column)
    if value < 0:
        raise _BadColumn(column, f"expected a number not below 0, found {value!r}")
    return value


def _instant(row: sa.RowMapping, column: str) -> float:
    value = _number(row, column)
    if not 0.0 <= value < _LATEST_S:
        raise _BadColumn(column, f"expected a Unix time between 1970 and 9999, found {value!r}")
    return value


def _integer(row: sa.RowMapping, column: str) -> int:
    value = row[column]
    if not isinstance(value, int) or isinstance(value, bool):
        raise _BadColumn(column, f"expected a whole number, found {_shown(value)}")
    return value


def _text(row: sa.RowMapping, column: str) -> str:
    value = row[column]
    if not isinstance(value, str):
        raise _BadColumn(column, f"expected text, found {_shown(value)}")
    return value


def _choice(row: sa.RowMapping, column: str, allowed: tuple[str, ...]) -> Any:
    value = _text(row, column)
    if value not in allowed:
        raise _BadColumn(column, f"expected one of {', '.join(allowed)}, found {value!r}")
    return value


def _json_object(row: sa.RowMapping, column: str) -> dict[str, Any]:
    value = row[column]
    if isinstance(value, Unreadable):
        raise _BadColumn(column, f"which is not JSON: {_shown(value)}")
    if not isinstance(value, dict):
        raise _BadColumn(column, f"expected a JSON object, found {_shown(value)}")
    return value


def _strings(row: sa.RowMapping, column: str) -> list[str]:
    value = row[column]
    if isinstance(value, Unreadable):
        raise _BadColumn(column, f"which is not JSON: {_shown(value)}")
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise _BadColumn(column, f"expected a JSON list of strings, found {_shown(value)}")
    return value


def _tags(row: sa.RowMapping) -> dict[str, str]:
    value = _json_object(row, "tags")
    if not all(isinstance(item, str) for item in value.values()):
        raise _BadColumn("tags", f"expected a JSON object of text values, found {_shown(value)}")
    return value
