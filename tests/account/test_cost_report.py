"""cost_report on a real ledger (SQLite and PostgreSQL): every figure worked out by hand from the runs' prices."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from accounting_runs import HOUR_S, NOW_S, AddRun

from computewise.account.report import CSV_COLUMNS, CostRow, cost_report
from computewise.account.totals import price_runs
from computewise.errors import InputError
from computewise.ledger import Ledger


@pytest.fixture
def filled(ledger: Ledger, add_run: AddRun) -> Ledger:
    """Five runs in or across the window [NOW - 12 h, NOW), one before it."""
    nlp_llm = {"team": "nlp", "project": "llm"}
    # 2 h x $10, 2 GPUs, one idle sample of four (1800 s), 300 W measured, PUE 1.2, 400 g/kWh
    add_run(ledger, start_s=NOW_S - 10 * HOUR_S, end_s=NOW_S - 8 * HOUR_S, hourly_usd=10.0, tags=nlp_llm,
            gpu_count=2, idle_samples=1, pue=1.2)  # fmt: skip
    # 1 h x $30, 4 GPUs at 90 %, 200 % CPU, a track() run
    add_run(ledger, start_s=NOW_S - 6 * HOUR_S, end_s=NOW_S - 5 * HOUR_S, hourly_usd=30.0, tags=nlp_llm,
            kind="track", gpu_count=4, gpu_util_pct=90.0, cpu_percent=200.0)  # fmt: skip
    # a server still running: 4 h x $5 so far, 200k inferences
    add_run(ledger, start_s=NOW_S - 4 * HOUR_S, end_s=None, hourly_usd=5.0,
            tags={"team": "nlp", "project": "chat"}, kind="serve", inferences=200_000)  # fmt: skip
    # untagged CPU job, energy estimated: 2 h x $2
    add_run(ledger, start_s=NOW_S - 3 * HOUR_S, end_s=NOW_S - 1 * HOUR_S, hourly_usd=2.0, gpu_count=0,
            gpu_util_pct=None, energy_measured=False, assumed=True)  # fmt: skip
    # started before the window: 4 h x $8 = $32, half of it inside
    add_run(ledger, start_s=NOW_S - 14 * HOUR_S, end_s=NOW_S - 10 * HOUR_S, hourly_usd=8.0, tags={"team": "cv"})
    # entirely before the window
    add_run(ledger, start_s=NOW_S - 30 * HOUR_S, end_s=NOW_S - 20 * HOUR_S, hourly_usd=100.0, tags={"team": "cv"})
    return ledger


def _row(rows: tuple[CostRow, ...], **group: str) -> CostRow:
    return next(row for row in rows if dict(row.group) == group)


def test_groups_by_team_and_project_with_hand_worked_figures(filled: Ledger) -> None:
    report = cost_report(filled, ["team", "project"], since_s=NOW_S - 12 * HOUR_S, until_s=None, now_s=NOW_S)

    assert [dict(r.group) for r in report.rows] == [
        {"team": "nlp", "project": "llm"},
        {"team": "nlp", "project": "chat"},
        {"team": "cv", "project": "(none)"},
        {"team": "(none)", "project": "(none)"},
    ]  # highest cost first
    llm = _row(report.rows, team="nlp", project="llm")
    assert llm.runs == 2 and llm.running == 0 and llm.training_runs == 2
    assert llm.cost_usd == pytest.approx(20.0 + 30.0)
    assert llm.gpu_hours == pytest.approx(2 * 2 + 4 * 1)
    # 300 W for 2 h x PUE 1.2 = 0.72 kWh, plus 300 W for 1 h = 0.3 kWh
    assert llm.energy_kwh == pytest.approx(0.72 + 0.3)
    assert llm.co2_kg == pytest.approx((0.72 + 0.3) * 0.4)
    assert llm.energy_all_measured
    # run 1: samples (5 + 80 + 80 + 80) / 4 = 61.25 % over 4 GPU-hours; run 2: 90 % over 4 GPU-hours
    assert llm.gpu_util_pct_mean == pytest.approx((61.25 * 4 + 90.0 * 4) / 8)
    assert llm.cpu_percent_mean == pytest.approx((100.0 * 2 + 200.0 * 1) / 3)
    assert llm.idle_s == pytest.approx(1800.0)
    assert llm.idle_cost_usd == pytest.approx(20.0 * 1800 / 7200)
    assert llm.usd_per_training_run == pytest.approx(25.0)
    assert llm.usd_per_1k_inferences is None

    chat = _row(report.rows, team="nlp", project="chat")
    assert chat.running == 1 and chat.serving_runs == 1 and chat.inferences == 200_000
    assert chat.cost_usd == pytest.approx(20.0)  # still running: priced up to now
    assert chat.usd_per_1k_inferences == pytest.approx(1000 * 20.0 / 200_000)
    assert chat.usd_per_training_run is None

    cv = _row(report.rows, team="cv", project="(none)")
    assert cv.runs == 1
    assert cv.cost_usd == pytest.approx(16.0)  # 2 of its 4 hours fall inside the window
    assert cv.gpu_hours == pytest.approx(2.0)
    assert cv.usd_per_training_run == pytest.approx(32.0)  # unit cost: the whole run

    untagged = _row(report.rows, team="(none)", project="(none)")
    assert untagged.cost_usd == pytest.approx(4.0)
    assert untagged.gpu_hours == 0.0
    assert untagged.gpu_util_pct_mean is None
    assert not untagged.energy_all_measured
    assert untagged.assumed_price_runs == 1

    total = report.total
    assert total.runs == 5
    assert total.cost_usd == pytest.approx(50.0 + 20.0 + 16.0 + 4.0)
    assert total.cost_usd == pytest.approx(sum(r.cost_usd for r in report.rows))
    assert total.usd_per_training_run == pytest.approx((20.0 + 30.0 + 4.0 + 32.0) / 4)
    assert not total.energy_all_measured


def test_accrual_window_takes_each_runs_share_and_all_time_matches_the_cost_formula(filled: Ledger) -> None:
    window = cost_report(filled, [], since_s=NOW_S - 12 * HOUR_S, until_s=NOW_S - 9 * HOUR_S, now_s=NOW_S)
    # run 1: 1 of its 2 hours ($10); the cv run: 2 of its 4 hours ($16); the others start later
    assert window.total.runs == 2
    assert window.total.cost_usd == pytest.approx(10.0 + 16.0)
    assert [dict(r.group) for r in window.rows] == [{}]

    all_time = cost_report(filled, ["team"], since_s=None, until_s=None, now_s=NOW_S)
    formula = price_runs(filled, filled.runs(limit=None), NOW_S)
    assert all_time.total.runs == 6
    assert all_time.total.cost_usd == pytest.approx(sum(c.cost_usd for c in formula))
    assert all_time.total.energy_kwh == pytest.approx(sum(c.energy_kwh for c in formula))
    assert _row(all_time.rows, team="cv").cost_usd == pytest.approx(32.0 + 1000.0)


def test_json_and_csv_are_ready_for_the_cli(filled: Ledger) -> None:
    report = cost_report(filled, ["team", "project"], since_s=NOW_S - 12 * HOUR_S, until_s=None, now_s=NOW_S)

    data = json.loads(json.dumps(report.to_dict()))
    assert data["by"] == ["team", "project"]
    assert data["since"] == "2025-03-20T00:00:00Z" and data["until"] == "2025-03-20T12:00:00Z"
    assert data["rows"][0]["group"] == {"team": "nlp", "project": "llm"}
    assert data["total"]["cost_usd"] == pytest.approx(90.0)

    text = io.StringIO()
    csv.writer(text).writerows(report.csv_rows(include_total=True))
    parsed = list(csv.DictReader(io.StringIO(text.getvalue())))
    assert list(parsed[0]) == ["team", "project", *CSV_COLUMNS]
    assert [(r["team"], r["project"]) for r in parsed] == [
        ("nlp", "llm"),
        ("nlp", "chat"),
        ("cv", "(none)"),
        ("(none)", "(none)"),
        ("(total)", "(total)"),
    ]
    assert float(parsed[0]["cost_usd"]) == pytest.approx(50.0)
    assert parsed[3]["gpu_util_pct_mean"] == ""  # None: no GPU in that group
    assert parsed[0]["energy_all_measured"] == "true"
    assert len(report.csv_rows()) == 1 + 4


def test_csv_keeps_the_precision_of_the_json(ledger: Ledger, add_run: AddRun) -> None:
    # a one-minute CPU job at 0.05 W: energy about 8e-10 kWh and CO2 about 3e-10 kg, which 6 decimals read as 0.0
    add_run(ledger, start_s=NOW_S - 120, end_s=NOW_S - 60, hourly_usd=0.01, gpu_count=0, gpu_util_pct=None,
            power_w=0.05, energy_measured=False)  # fmt: skip
    report = cost_report(ledger, [], since_s=NOW_S - HOUR_S, until_s=None, now_s=NOW_S)
    total = json.loads(json.dumps(report.to_dict()))["total"]
    row = dict(zip(*report.csv_rows(include_total=True)[::2], strict=True))  # header and the total
    for column in ("energy_kwh", "co2_kg", "cost_usd"):
        assert 0.0 < float(row[column]) < 1e-3, (column, row[column])
        assert float(row[column]) == total[column], column


def test_empty_ledger_gives_an_empty_report(ledger: Ledger) -> None:
    report = cost_report(ledger, ["team"], since_s=NOW_S - 3600, until_s=None, now_s=NOW_S)
    assert report.rows == ()
    assert report.total.runs == 0 and report.total.cost_usd == 0.0
    assert report.total.gpu_util_pct_mean is None and report.total.usd_per_training_run is None


@pytest.mark.parametrize(
    ("by", "since_s", "until_s", "message"),
    [
        (["team name"], None, None, "bad tag key"),
        (["team", "team"], None, None, "given twice"),
        (["team"], NOW_S, None, "not before its end"),
        (["team"], NOW_S - 10, NOW_S - 20, "not before its end"),
    ],
)
def test_bad_input_is_an_input_error_with_a_hint(
    tmp_path: Path, by: list[str], since_s: float | None, until_s: float | None, message: str
) -> None:
    with (
        Ledger.open("sqlite:///" + str(tmp_path / "l.sqlite")) as ledger,
        pytest.raises(InputError, match=message) as info,
    ):
        cost_report(ledger, by, since_s=since_s, until_s=until_s, now_s=NOW_S)
    assert info.value.hint
