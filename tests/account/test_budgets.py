"""Budgets on a real ledger: month-to-date accrual, burn-rate forecast, alerts that fire once per threshold."""

from __future__ import annotations

import http.server
import io
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from accounting_runs import DAY_S, HOUR_S, NOW_S, AddRun

from computewise.account.alerts import Alert, Notifier
from computewise.account.budgets import BudgetStatusReport, budget_status, check_budgets, set_budget
from computewise.errors import InputError
from computewise.ledger import Ledger
from computewise.report.accounts import budget_grid


def _utc(year: int, month: int, day: int, hour: int = 0) -> float:
    return datetime(year, month, day, hour, tzinfo=UTC).timestamp()


@pytest.fixture
def spent(ledger: Ledger, add_run: AddRun) -> Ledger:
    """nlp: $240 of a run across the month boundary plus $480 this week; cv: $100."""
    add_run(ledger, start_s=_utc(2025, 2, 28), end_s=_utc(2025, 3, 2), hourly_usd=10.0, tags={"team": "nlp"})
    add_run(ledger, start_s=_utc(2025, 3, 15, 12), end_s=_utc(2025, 3, 19, 12), hourly_usd=5.0,
            tags={"team": "nlp", "project": "x"})  # fmt: skip
    add_run(ledger, start_s=_utc(2025, 3, 10), end_s=_utc(2025, 3, 10, 10), hourly_usd=10.0, tags={"team": "cv"})
    return ledger


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A webhook on 127.0.0.1 that answers 200 and keeps what it got."""
    bodies: list[dict[str, Any]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/budget", bodies
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_status_accrues_this_month_and_forecasts_the_run_out_date(spent: Ledger) -> None:
    set_budget(spent, "team=nlp", "$1k", NOW_S, alert_at="50,80,100")
    set_budget(spent, "all", 10_000, NOW_S)
    set_budget(spent, "team=nlp,project=x", "400", NOW_S)
    statuses = {s.budget.scope: s for s in budget_status(spent, NOW_S)}
    assert list(statuses) == ["all", "project=x,team=nlp", "team=nlp"]

    nlp = statuses["team=nlp"]
    assert nlp.period == "2025-03" and nlp.runs == 2 and nlp.running == 0
    assert nlp.spent_usd == pytest.approx(240.0 + 480.0)  # only March's 24 h of the boundary run
    assert nlp.pct_used == pytest.approx(72.0)
    assert nlp.crossed_pct == (50.0,)
    # trailing 7 days hold the whole $480 run: $68.57/day; $280 left lasts 4.08 days
    assert nlp.burn_window_s == 7 * DAY_S
    assert nlp.burn_rate_usd_per_day == pytest.approx(480.0 / 7)
    assert nlp.runs_out_at_s == pytest.approx(NOW_S + 280.0 / (480.0 / 7) * DAY_S)
    assert nlp.projected_month_end_usd == pytest.approx(720.0 + 480.0 / 7 * 11.5)  # 11.5 days to April 1st
    assert not nlp.exhausted

    everything = statuses["all"]
    assert everything.spent_usd == pytest.approx(820.0)
    assert everything.runs_out_at_s is None  # $117/day will not reach $10k this month
    assert everything.crossed_pct == ()

    project = statuses["project=x,team=nlp"]
    assert project.exhausted and project.pct_used == pytest.approx(120.0) and project.runs_out_at_s is None
    assert project.crossed_pct == (50.0, 80.0, 100.0)
    # $5/h from March 15th 12:00 reaches $400 after 80 h: March 18th 20:00 UTC
    assert project.ran_out_at_s == pytest.approx(_utc(2025, 3, 18, 20), abs=1.0)
    assert project.to_dict()["ran_out_at"] == "2025-03-18T20:00:00Z"
    assert nlp.ran_out_at_s is None and everything.ran_out_at_s is None

    data = json.loads(json.dumps(nlp.to_dict()))
    assert data["runs_out_at"] == "2025-03-24T14:00:00Z"
    assert data["month_start"] == "2025-03-01T00:00:00Z" and data["month_end"] == "2025-04-01T00:00:00Z"
    assert data["webhook"] is False and data["fired_pct"] == []


def test_the_status_table_says_when_a_spent_budget_ran_out(spent: Ledger) -> None:
    """A budget at 120 % has run out: the table says on which day, never "not this month"."""
    set_budget(spent, "team=nlp", "$1k", NOW_S)
    set_budget(spent, "all", 10_000, NOW_S)
    set_budget(spent, "team=nlp,project=x", "400", NOW_S)
    grid = budget_grid(budget_status(spent, NOW_S))
    runs_out = {row[0]: row[grid.headers.index("runs out")] for row in grid.rows}
    assert runs_out == {
        "all": "not this month",
        "project=x,team=nlp": "ran out 2025-03-18",
        "team=nlp": "2025-03-24",
    }


def test_a_young_scope_burns_over_at_least_one_day(ledger: Ledger, add_run: AddRun) -> None:
    add_run(ledger, start_s=NOW_S - 2 * HOUR_S, end_s=NOW_S - HOUR_S, hourly_usd=24.0, tags={"team": "new"})
    set_budget(ledger, "team=new", 1000, NOW_S)
    [status] = budget_status(ledger, NOW_S)
    assert status.burn_window_s == DAY_S
    assert status.burn_rate_usd_per_day == pytest.approx(24.0)  # not 24 x 24


def test_alerts_fire_once_per_threshold_and_month(spent: Ledger, add_run: AddRun, receiver: Any) -> None:
    url, bodies = receiver
    set_budget(spent, "team=nlp", 1000, NOW_S, alert_at="50,80,100", webhook_url=url)
    set_budget(spent, "team=nlp,project=x", 400, NOW_S)
    notifier = Notifier(spent, stream=io.StringIO())

    fired = check_budgets(spent, NOW_S, notifier)
    assert [(a.scope, a.threshold_pct) for a in fired] == [
        ("project=x,team=nlp", 50.0),
        ("project=x,team=nlp", 80.0),
        ("project=x,team=nlp", 100.0),
        ("team=nlp", 50.0),
    ]
    assert "$720 of $1,000 spent in 2025-03 (72 %, alert at 50 %)" in fired[3].message
    assert "runs out on 2025-03-24T14:00:00Z" in fired[3].message
    assert "used up" in fired[0].message
    assert check_budgets(spent, NOW_S + 60, notifier) == []  # nothing new crossed

    # $100 more on the 20th: team=nlp passes 80 % and fires only that
    add_run(spent, start_s=_utc(2025, 3, 20), end_s=_utc(2025, 3, 20, 10), hourly_usd=10.0, tags={"team": "nlp"})
    assert [a.threshold_pct for a in check_budgets(spent, NOW_S + 120, notifier)] == [80.0]

    # April: a job running since the 1st at $30/h has spent $720 by the 2nd; 50 % fires again, for April
    add_run(spent, start_s=_utc(2025, 4, 1), end_s=None, hourly_usd=30.0, tags={"team": "nlp"}, samples=0)
    april = check_budgets(spent, _utc(2025, 4, 2), notifier)
    assert [(a.scope, a.period, a.threshold_pct) for a in april] == [("team=nlp", "2025-04", 50.0)]
    assert notifier.close(5.0)

    stored = [(a.scope, a.period, a.threshold_pct) for a in spent.alerts() if a.kind == "budget"]
    assert len(stored) == len(set(stored)) == 4 + 1 + 1
    assert sorted((b["scope"], b["period"], b["threshold_pct"]) for b in bodies) == [
        ("team=nlp", "2025-03", 50.0),
        ("team=nlp", "2025-03", 80.0),
        ("team=nlp", "2025-04", 50.0),
    ]  # only team=nlp has a webhook; each alert is sent on its own thread, so in any order
    for alert in spent.alerts():
        assert alert.delivery["log"] == "written"
        if alert.scope == "team=nlp":
            assert alert.delivery["webhook"]["status"] == "delivered"


def test_concurrent_checkers_deliver_each_threshold_once(spent: Ledger) -> None:
    set_budget(spent, "team=nlp,project=x", 400, NOW_S)
    others = [Ledger.open(_url(spent)) for _ in range(2)]
    barrier = threading.Barrier(len(others))
    results: list[list[Alert]] = [[] for _ in others]

    def check(index: int) -> None:
        barrier.wait(5)
        results[index] = check_budgets(others[index], NOW_S, Notifier(others[index], stream=io.StringIO()))

    threads = [threading.Thread(target=check, args=(i,)) for i in range(len(others))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    for other in others:
        other.close()
    fired = sorted(a.threshold_pct or 0.0 for result in results for a in result)
    assert fired == [50.0, 80.0, 100.0]


def _url(ledger: Ledger) -> str:
    return ledger.engine.url.render_as_string(hide_password=False)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"scope": "team"}, "cannot read"),
        ({"monthly_usd": "-5"}, r"--monthly-usd must be between \$0.01 and"),
        ({"monthly_usd": "five"}, "cannot read"),
        ({"alert_at": "50,120,50"}, "given twice"),
        ({"alert_at": "0"}, "out of range"),
        ({"webhook_url": "hooks.example.com"}, "webhook URL"),
        ({"command": "notify 'unbalanced"}, "cannot read --command"),
        ({"command": "   "}, "--command is empty"),
    ],
)
def test_bad_budgets_are_input_errors(tmp_path: Path, kwargs: dict[str, Any], message: str) -> None:
    values: dict[str, Any] = {"scope": "team=nlp", "monthly_usd": "5000", "now_s": NOW_S, **kwargs}
    with Ledger.open("sqlite:///" + str(tmp_path / "l.sqlite")) as ledger:
        with pytest.raises(InputError, match=message) as info:
            set_budget(ledger, **values)
        assert info.value.hint
        assert ledger.budgets() == []


def test_setting_a_budget_again_replaces_it_under_its_canonical_scope(ledger: Ledger) -> None:
    first = set_budget(ledger, "team=nlp,project=x", 100, NOW_S)
    second = set_budget(ledger, "project=x, team=nlp", "250", NOW_S + 5, alert_at=[90], command="notify-send budget")
    assert second.id == first.id and second.scope == "project=x,team=nlp"
    assert (second.monthly_usd, second.alert_at_pct, second.command) == (250.0, (90.0,), "notify-send budget")
    assert len(ledger.budgets()) == 1


def _budget_json(*args: str) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, "-m", "computewise.cli.app", "budget", *args, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert isinstance(data, dict)
    return data


def test_budget_set_and_status_print_versioned_documents(
    tmp_path: Path, add_run: AddRun, json_schema: Callable[[object, str], None]
) -> None:
    """Both verbs' --json match budget-status.schema.json, version first; a status nested elsewhere has none."""
    db = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    with Ledger.open(db) as ledger:
        now_s = time.time()
        add_run(ledger, start_s=now_s - 2 * HOUR_S, end_s=now_s - HOUR_S, hourly_usd=24.0, tags={"team": "nlp"})
    set_result = _budget_json("set", "--db", db, "--scope", "team=nlp", "--monthly-usd", "10", "--alert-at", "50")
    _budget_json("set", "--db", db, "--scope", "all", "--monthly-usd", "5000")
    report = _budget_json("status", "--db", db)
    for data in (set_result, report):
        json_schema(data, "budget-status")
        assert next(iter(data)) == "schema_version" and data["schema_version"] == 1
    assert (set_result["scope"], set_result["monthly_usd"], set_result["alert_at_pct"]) == ("team=nlp", 10.0, [50.0])
    assert [b["scope"] for b in report["budgets"]] == ["all", "team=nlp"]
    assert all("schema_version" not in b for b in report["budgets"])
    settings = ("budget_id", "scope", "monthly_usd", "alert_at_pct", "webhook", "command", "period", "spent_usd")
    assert {k: report["budgets"][1][k] for k in settings} == {k: set_result[k] for k in settings}
    Ledger.open(f"sqlite:///{tmp_path / 'empty.sqlite'}").close()
    assert _budget_json("status", "--db", f"sqlite:///{tmp_path / 'empty.sqlite'}") == {
        "schema_version": 1,
        "budgets": [],
    }
    with Ledger.open(db) as ledger:
        statuses = budget_status(ledger, time.time())
    assert BudgetStatusReport(tuple(statuses)).to_dict()["budgets"] == [s.to_dict() for s in statuses]
