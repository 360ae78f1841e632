"""The ledger: every run, its samples and steps, budgets and alerts, in SQLite or PostgreSQL."""

from computewise.ledger.aggregates import RunTotals
from computewise.ledger.records import (
    ATTEMPT_OUTCOMES,
    PREEMPTED_EXIT_CODE,
    RUN_KINDS,
    RUN_STATUSES,
    AlertRow,
    AttemptOutcome,
    AttemptRow,
    BudgetRow,
    GpuSampleRow,
    NewRun,
    PriceSnapshot,
    RunKind,
    RunRow,
    RunStatus,
    SampleRow,
    StepRow,
)
from computewise.ledger.store import Ledger

__all__ = [
    "ATTEMPT_OUTCOMES",
    "PREEMPTED_EXIT_CODE",
    "RUN_KINDS",
    "RUN_STATUSES",
    "AlertRow",
    "AttemptOutcome",
    "AttemptRow",
    "BudgetRow",
    "GpuSampleRow",
    "Ledger",
    "NewRun",
    "PriceSnapshot",
    "RunKind",
    "RunRow",
    "RunStatus",
    "RunTotals",
    "SampleRow",
    "StepRow",
]
