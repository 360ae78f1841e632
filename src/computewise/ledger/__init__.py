"""The ledger: every run, its samples and steps, budgets and alerts, in SQLite or PostgreSQL."""

from computewise.ledger import records
from computewise.ledger.aggregates import RunTotals
from computewise.ledger.records import *  # noqa: F403 (every row type; records.__all__ names them once)
from computewise.ledger.store import Ledger

__all__ = ["Ledger", "RunTotals", *records.__all__]
