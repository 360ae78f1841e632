"""A budget alert that a spend cap makes reliable: fired on a real ledger, ahead of the budget by the lead asked."""

from __future__ import annotations

import io
from datetime import UTC, datetime

import pytest
from accounting_runs import HOUR_S, AddRun

from computewise.account.alerts import Notifier
from computewise.account.budgets import check_budgets, set_budget
from computewise.errors import InputError
from computewise.ledger import Ledger
from computewise.plan.spendcap import cap_alert

MARCH_S = datetime(2025, 3, 1, tzinfo=UTC).timestamp()


def test_the_threshold_leaves_the_lead_even_at_the_cap() -> None:
    # $100 at $1/h lasts 100 h; 24 h ahead of the end is $76 spent: 76 %
    alert = cap_alert(100.0, 1.0, 24 * HOUR_S)
    assert alert.threshold_pct == pytest.approx(76.0) and alert.hours_at_cap == pytest.approx(100.0)
    assert not alert.never_runs_out
    # $3.60/h for 24 h is $86.40 of $2,000: 95.68 %, rounded down to 95.6 so the lead is never shorter
    assert cap_alert(2000.0, 3.6, 24 * HOUR_S).threshold_pct == pytest.approx(95.6)
    # 31 days x 24 h x $1 = $744 <= $800: the cap alone keeps the month within the budget
    assert cap_alert(800.0, 1.0, 24 * HOUR_S).never_runs_out
    # $10 lasts 10 h at $1/h: no threshold warns 24 h ahead
    assert cap_alert(10.0, 1.0, 24 * HOUR_S).threshold_pct is None
    with pytest.raises(InputError):
        cap_alert(100.0, 0.0, 3600.0)


def test_on_a_real_ledger_the_alert_fires_a_lead_before_the_budget_runs_out(ledger: Ledger, add_run: AddRun) -> None:
    """A deployment spending at its cap ($1/h) from March 1st: checked hourly, the threshold alert comes 24 h
    before the 100 % one, as promised, while the burn-rate forecast alone had no such guarantee."""
    add_run(
        ledger, start_s=MARCH_S, end_s=MARCH_S + 200 * HOUR_S, hourly_usd=1.0, kind="serve",
        tags={"deployment": "minilm"}, samples=200,
    )  # fmt: skip
    alert = cap_alert(100.0, 1.0, 24 * HOUR_S)
    assert alert.threshold_pct is not None
    set_budget(ledger, "deployment=minilm", 100.0, MARCH_S, alert_at=[alert.threshold_pct, 100.0])
    notifier = Notifier(ledger, stream=io.StringIO())
    fired_at: dict[float, float] = {}
    for hour in range(1, 121):
        now_s = MARCH_S + hour * HOUR_S
        for fired in check_budgets(ledger, now_s, notifier):
            assert fired.threshold_pct is not None
            fired_at[fired.threshold_pct] = now_s
    notifier.close(timeout_s=5.0)
    assert set(fired_at) == {76.0, 100.0}
    assert fired_at[100.0] - fired_at[76.0] >= 24 * HOUR_S
    assert fired_at[76.0] == pytest.approx(MARCH_S + 76 * HOUR_S, abs=HOUR_S)  # $76 spent at $1/h
