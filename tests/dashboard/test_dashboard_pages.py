"""The Costs, Budgets and Plans pages of the dashboard, over real HTTP, checked against the CLI and by hand.

The app is the real one (``dashboard.app.create_app``) served by uvicorn on a free loopback port, over
a real SQLite ledger written through the ``Ledger`` API, with the clock fixed at 2025-03-20 12:00 UTC
so this month's budgets and the windows are the same whenever the test runs. Figures are checked
three ways: against ``computewise cost report --json`` / ``--csv`` run as a child process on the same
ledger (the same numbers for the same filter), against dollars worked out by hand from the runs
below, and the chart against the table (each group's bars add up to its row).
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from computewise.account.budgets import set_budget
from computewise.catalog import Catalog
from computewise.dashboard.context import DashboardContext
from computewise.ledger import Ledger, NewRun, PriceSnapshot, SampleRow
from prices import given_price

CLI = [sys.executable, "-m", "computewise.cli.app"]
NOW_S = datetime(2025, 3, 20, 12, tzinfo=UTC).timestamp()
H = 3600.0


def _at(day: int, hour: float = 0.0, month: int = 3) -> float:
    return datetime(2025, month, day, tzinfo=UTC).timestamp() + hour * H


# (tags, kind, user, accelerator, hourly_usd, start, hours): the whole ledger, all runs finished.
RUNS: tuple[tuple[dict[str, str], str, str, str | None, float, float, float], ...] = (
    ({"team": "nlp", "project": "llm"}, "command", "ana", "h100", 6.0, _at(10, 8), 10.0),  # $60 on Mar 10
    ({"team": "vision", "project": "x"}, "command", "bo", "a100-40gb", 8.0, _at(18, 18), 10.0),  # $48 + $32
    ({"team": "nlp"}, "track", "ana", None, 1.0, _at(2, 20), 8.0),  # $8 across Mar 2 and 3
    ({"team": "vision"}, "serve", "cy", "l4", 2.0, _at(28, 12, month=2), 24.0),  # $24 on Feb 28, $24 on Mar 1
    ({}, "command", "bo", None, 0.5, _at(15), 4.0),  # untagged, $2
)


def _price(hourly_usd: float) -> PriceSnapshot:
    return given_price(hourly_usd, explanation=f"${hourly_usd}/h given", carbon_g_per_kwh=400.0)


@dataclass(frozen=True)
class Served:
    base: str
    ledger_url: str
    plans_dir: Path

    def get(self, path: str) -> tuple[int, str, dict[str, str]]:
        return _request(self.base + path)

    def json(self, path: str) -> tuple[int, Any]:
        status, body, _ = self.get(path)
        return status, json.loads(body)

    def post(self, path: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, Any]:
        request = urllib.request.Request(self.base + path, data=body, method="POST", headers=headers or {})
        status, text, _ = _request(request)
        return status, json.loads(text)


def _request(target: str | urllib.request.Request) -> tuple[int, str, dict[str, str]]:
    try:
        with urllib.request.urlopen(target, timeout=30) as response:
            return response.status, response.read().decode(), dict(response.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(), dict(exc.headers)


def _fill(url: str) -> None:
    with Ledger.open(url) as ledger:
        for i, (tags, kind, user, accelerator, hourly_usd, start_s, hours) in enumerate(RUNS):
            run_id = ledger.start_run(
                NewRun(
                    kind=kind,  # type: ignore[arg-type]
                    command=f"python job{i}.py",
                    argv=("python", f"job{i}.py"),
                    tags=tags,
                    host="test",
                    pid=1,
                    user=user,
                    cwd="/tmp",
                    started_at_s=start_s,
                    interval_s=60.0,
                    price=_price(hourly_usd),
                    gpu_count=0 if accelerator is None else 1,
                    accelerator=accelerator,
                )
            )
            samples = [
                SampleRow(run_id, start_s + 60.0 * k, 60.0, 100.0, 10**9, 0, 0, 0, 0, 50.0, 10**10, 0,
                          None, None, None, 600.0, False, k % 4 == 0)
                for k in range(int(hours * 60))
            ]  # fmt: skip
            ledger.add_samples(samples)
            ledger.finish_run(run_id, "succeeded", start_s + hours * H, exit_code=0)


def _plan(plans_dir: Path, name: str, *args: str) -> None:
    with (plans_dir / name).open("w") as sink:
        done = subprocess.run([*CLI, "plan", "train", *args, "--json"], stdout=sink, stderr=subprocess.PIPE, text=True)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, catalog: Catalog) -> Iterator[Served]:
    """The real app on a free loopback port over the ledger above, five budgets' worth of alerts, and plans."""
    import uvicorn

    from computewise.dashboard.app import create_app

    base = tmp_path_factory.mktemp("pages")
    url = f"sqlite:///{base / 'ledger.sqlite'}"
    _fill(url)
    with Ledger.open(url) as ledger:
        for scope, usd in (("team=nlp", "100"), ("team=vision", "50"), ("project=x", "90"), ("all", "1000")):
            set_budget(ledger, scope, usd, _at(1), alert_at="50,100")
        nlp = next(b for b in ledger.budgets() if b.scope == "team=nlp")
        ledger.record_alert("budget", "budget team=nlp: 60 %", _at(10, 18), "team=nlp", nlp.id, None, "2025-03", 50.0)
        ledger.record_alert("idle", "run 1 idle for 10 min", _at(10, 12), run_id=1)
    plans_dir = base / "plans"
    plans_dir.mkdir()
    _plan(plans_dir, "gpt2.json", "-m", "gpt2-medium", "--tokens", "2B", "-g", "a10g", "-g", "l4", "--max-gpus", "8")
    _plan(plans_dir, "llama.json", "-m", "llama-3-8b", "--tokens", "10B", "-g", "h100", "--max-gpus", "64")
    (plans_dir / "notes.json").write_text('{"hello": 1}')
    (plans_dir / "broken.json").write_text("{not json")
    newer = json.loads((plans_dir / "gpt2.json").read_text())
    (plans_dir / "newer.json").write_text(json.dumps({**newer, "schema_version": 99}))
    secret = base / "secret.json"
    secret.write_text(json.dumps({**newer, "considered": 424242}))
    (plans_dir / "outside.json").symlink_to(secret)

    ledger = Ledger.open(url, create=False)
    context = DashboardContext(
        ledger=ledger, catalog=lambda: catalog, token=None, plans_dir=plans_dir, clock=lambda: NOW_S
    )
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        server = uvicorn.Server(uvicorn.Config(create_app(context), log_level="warning", lifespan="off"))
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        deadline = time.monotonic() + 30
        while not server.started:
            assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
            time.sleep(0.01)
        try:
            yield Served(f"http://127.0.0.1:{sock.getsockname()[1]}", url, plans_dir)
        finally:
            server.should_exit = True
            thread.join(10)
            ledger.close()


def _cli(*args: str) -> str:
    done = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120, env=_env())
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _env() -> dict[str, str]:
    import os

    return {**os.environ, "NO_COLOR": "1"}


# -- costs ----------------------------------------------------------------------------------------


def test_costs_match_the_cli_report_for_the_same_window(served: Served) -> None:
    window = "since=2025-03-01&until=2025-03-20"
    status, page = served.json(f"/api/costs?by=team&{window}")
    assert status == 200
    report = json.loads(_cli("cost", "report", "--by", "team", "--since", "2025-03-01", "--until", "2025-03-20",
                             "--db", served.ledger_url, "--json"))  # fmt: skip
    ours = page["report"]
    for key in ("by", "since", "until", "total"):
        assert ours[key] == report[key], key
    assert ours["rows"] == report["rows"]
    # By hand: nlp $60 + $8, vision $80 + half of the Feb 28 - Mar 1 run ($24), untagged $2.
    costs = {row["group"]["team"]: row["cost_usd"] for row in ours["rows"]}
    assert costs == pytest.approx({"nlp": 68.0, "vision": 104.0, "(none)": 2.0})


def test_the_bars_of_each_group_add_up_to_its_row_and_fall_on_the_right_days(served: Served) -> None:
    status, page = served.json("/api/costs?by=team&since=2025-02-25&until=2025-03-21&period=day")
    assert status == 200
    labels = [p["label"] for p in page["periods"]]
    assert labels[0] == "2025-02-25" and labels[-1] == "2025-03-20" and len(labels) == 24
    rows = {row["group"]["team"]: row["cost_usd"] for row in page["report"]["rows"]}
    series = {s["group"]: s["cost_usd"] for s in page["series"]}
    assert list(series) == list(rows)  # highest spend first, as the table
    for group, bars in series.items():
        assert sum(bars) == pytest.approx(rows[group])
    day = {label: i for i, label in enumerate(labels)}
    nlp = series["nlp"]
    assert nlp[day["2025-03-02"]] == pytest.approx(4.0) and nlp[day["2025-03-03"]] == pytest.approx(4.0)
    assert nlp[day["2025-03-10"]] == pytest.approx(60.0)
    vision = series["vision"]
    assert vision[day["2025-02-28"]] == pytest.approx(24.0) and vision[day["2025-03-01"]] == pytest.approx(24.0)
    assert vision[day["2025-03-18"]] == pytest.approx(48.0) and vision[day["2025-03-19"]] == pytest.approx(32.0)


def test_costs_group_by_run_fields_and_by_week_and_month(served: Served) -> None:
    _, by_kind = served.json("/api/costs?by=kind&since=2025-03-01&until=2025-04-01&period=week")
    kinds = {row["group"]["kind"]: row["cost_usd"] for row in by_kind["report"]["rows"]}
    assert kinds == pytest.approx({"command": 142.0, "track": 8.0, "serve": 24.0})
    assert [p["label"] for p in by_kind["periods"]][:2] == ["2025-W09", "2025-W10"]  # Mar 1 is the Saturday of W09
    assert by_kind["periods"][0]["start"] == "2025-03-01T00:00:00Z"  # the first week clipped to the window
    _, by_gpu = served.json("/api/costs?by=gpu&since=all&until=2025-04-01&period=month")
    gpus = {row["group"]["gpu"]: row["cost_usd"] for row in by_gpu["report"]["rows"]}
    assert gpus == pytest.approx({"h100": 60.0, "a100-40gb": 80.0, "l4": 48.0, "(no GPU)": 10.0})
    assert [p["label"] for p in by_gpu["periods"]] == ["2025-02", "2025-03"]
    _, by_user = served.json("/api/costs?by=user&since=2025-03-01&until=2025-04-01&period=month")
    assert {row["group"]["user"] for row in by_user["report"]["rows"]} == {"ana", "bo", "cy"}


def test_the_default_groups_by_the_tag_most_runs_carry(served: Served) -> None:
    _, page = served.json("/api/costs?since=2025-03-01&until=2025-04-01")
    assert page["by"] == "team" and page["period"] == "day"
    assert page["tag_keys"] == ["project", "team"]


def test_the_costs_page_draws_the_chart_the_table_and_the_csv_link(served: Served) -> None:
    status, html, _ = served.get("/costs?by=team&since=2025-03-01&until=2025-03-20")
    assert status == 200 and '<main id="page-costs">' in html
    figure = re.search(r'<figure class="chart" data-series="costs" data-points="(\d+)">', html)
    # Non-zero (group, day) bars by hand: nlp Mar 2, 3, 10; vision Mar 1, 18, 19; (none) Mar 15.
    assert figure is not None and int(figure.group(1)) == 7
    assert html.count("<rect ") >= 7 + 3  # the bars and a legend swatch per group
    assert 'id="costs-table"' in html and "$68.00" in html and "$104" in html
    link = re.search(r'<a id="costs-csv" href="([^"]+)"', html)
    assert link is not None and link.group(1).startswith("/costs.csv?")


def test_the_csv_download_is_the_cli_csv(served: Served) -> None:
    status, body, headers = served.get("/costs.csv?by=team&since=2025-03-01&until=2025-03-20")
    assert status == 200 and headers["content-type"].startswith("text/csv")
    assert 'filename="costs-by-team-2025-03-01-2025-03-19.csv"' in headers["content-disposition"]
    cli = _cli("cost", "report", "--by", "team", "--since", "2025-03-01", "--until", "2025-03-20",
               "--db", served.ledger_url, "--csv")  # fmt: skip
    assert body == cli


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ("since=yesterday-ish", "cannot read 'yesterday-ish' as since"),
        ("since=2025-02-30", "is not a real date"),
        ("period=year", "period='year' is not one of day, week, month"),
        ("by=team,project", "names more than one key"),
        ("by=te%20am", "bad tag key"),
        ("since=2025-03-10&until=2025-03-01", "not before its end"),
        ("since=2000-01-01&period=day", "more than 400 bars"),
    ],
)
def test_bad_costs_queries_are_400_with_a_fix(served: Served, query: str, words: str) -> None:
    status, data = served.json(f"/api/costs?{query}")
    assert status == 400 and words in data["error"] and data["hint"]
    status, html, _ = served.get(f"/costs?{query}")
    assert status == 400 and 'id="input-error"' in html and "To fix:" in html


# -- budgets ----------------------------------------------------------------------------------------


def test_budgets_show_state_forecast_and_alert_history(served: Served) -> None:
    status, data = served.json("/api/budgets")
    assert status == 200
    budgets = {b["scope"]: b for b in data["budgets"]}
    # By hand at Mar 20 12:00: nlp $68 of $100 (crossed 50 %), no spend in the trailing week.
    assert budgets["team=nlp"]["spent_usd"] == pytest.approx(68.0)
    assert budgets["team=nlp"]["burn_rate_usd_per_day"] == pytest.approx(0.0)
    assert budgets["team=nlp"]["state"] == "warning" and budgets["team=nlp"]["fired_pct"] == [50.0]
    # vision: $80 + the March half of the serving run ($24) = $104 of $50.
    assert budgets["team=vision"]["spent_usd"] == pytest.approx(104.0)
    assert budgets["team=vision"]["state"] == "exceeded"
    # project=x: $80 of $90 by one run that started 1.75 days ago (the burn window): $80 / 1.75 d; the
    # $10 left last 10 / (80 / 1.75) = 0.21875 days, 5 h 15 min.
    x = budgets["project=x"]
    assert x["burn_rate_usd_per_day"] == pytest.approx(80.0 / 1.75)
    assert x["state"] == "at risk" and x["runs_out_at"] == "2025-03-20T17:15:00Z"
    assert budgets["all"]["state"] == "ok" and budgets["all"]["spent_usd"] == pytest.approx(174.0)
    assert [a["kind"] for a in data["alerts"]] == ["budget", "idle"]  # newest first
    assert data["alerts"][1]["run_id"] == 1 and data["alerts_total"] == 2


def test_the_budgets_page_has_a_row_and_a_bar_per_budget(served: Served) -> None:
    status, html, _ = served.get("/budgets")
    assert status == 200 and '<main id="page-budgets">' in html
    assert re.search(r'<tr data-budget="team=vision" data-state="exceeded">', html)
    assert re.search(r'<tr data-budget="project=x" data-state="at risk">', html)
    assert html.count('data-series="budget-') == 4
    alerts = html[html.index('id="alerts-table"') :]
    assert alerts.index("budget team=nlp: 60 %") < alerts.index("run 1 idle for 10 min")
    assert '<a href="/runs/1">1</a>' in alerts


# -- plans ------------------------------------------------------------------------------------------


def test_the_plans_list_reads_each_file_and_explains_the_ones_it_cannot(served: Served) -> None:
    status, data = served.json("/api/plans")
    assert status == 200
    plans = {p["name"]: p for p in data["plans"]}
    assert set(plans) == {"broken.json", "gpt2.json", "llama.json", "newer.json", "notes.json", "outside.json"}
    gpt2 = json.loads((served.plans_dir / "gpt2.json").read_text())
    assert plans["gpt2.json"]["ok"] and plans["gpt2.json"]["summary"]["cost_usd"] == gpt2["recommended"]["cost"]["usd"]
    assert "schema_version 99" in plans["newer.json"]["error"] and "upgrade computewise" in plans["newer.json"]["hint"]
    assert "not a computewise training plan" in plans["notes.json"]["error"]
    assert "not JSON" in plans["broken.json"]["error"] and "plan train" in plans["broken.json"]["hint"]
    assert "outside the plans folder" in plans["outside.json"]["error"]
    status, html, _ = served.get("/plans")
    assert status == 200 and 'id="plans-list"' in html and 'type="file"' in html and "/api/plans/render" in html
    assert html.count('data-error="1"') == 4


def test_one_plan_shows_its_frontier_scaling_and_recommendation(served: Served) -> None:
    plan = json.loads((served.plans_dir / "llama.json").read_text())
    status, html, _ = served.get("/plans/view?file=llama.json")
    assert status == 200
    frontier = re.search(r'data-series="plan-frontier" data-points="(\d+)"', html)
    points = len(plan["candidates"]) + (len(plan["pareto"]) if len(plan["pareto"]) > 1 else 0) + 1
    assert frontier is not None and int(frontier.group(1)) == points
    scaling = re.search(r'data-series="plan-scaling" data-points="(\d+)"', html)
    assert scaling is not None and int(scaling.group(1)) == len(plan["scaling"]) > 1
    assert plan["recommended"]["hardware"]["instance_type"] in html
    status, api = served.json("/api/plans/view?file=llama.json")
    assert status == 200 and api["plan"]["recommended"] == plan["recommended"]


def test_two_plans_side_by_side(served: Served) -> None:
    a, b = (json.loads((served.plans_dir / name).read_text()) for name in ("gpt2.json", "llama.json"))
    status, html, _ = served.get("/plans/compare?a=gpt2.json&b=llama.json")
    assert status == 200 and 'id="plan-compare"' in html
    assert html.count('data-series="plan-frontier"') == 2
    ratio = b["recommended"]["cost"]["usd"] / a["recommended"]["cost"]["usd"]
    cost_row = re.search(r"<tr><th>cost</th><td>[^<]*</td><td>[^<]*</td><td class=num>([0-9.]+)x</td>", html)
    assert cost_row is not None and float(cost_row.group(1)) == pytest.approx(ratio, abs=0.005)


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("../etc/passwd", "not a plain file name"),
        ("/etc/passwd", "not a plain file name"),
        ("..", "not a plain file name"),
        ("outside.json", "points outside the plans folder"),
        ("missing.json", "no plan named missing.json"),
        ("newer.json", "schema_version 99"),
        ("notes.json", "not a computewise training plan"),
    ],
)
def test_a_plan_name_that_is_not_a_plan_in_the_folder_is_refused(served: Served, name: str, words: str) -> None:
    quoted = urllib.request.quote(name, safe="")
    status, html, _ = served.get(f"/plans/view?file={quoted}")
    assert status == 400 and words in html and "To fix:" in html and "424242" not in html and "root:" not in html
    status, data = served.json(f"/api/plans/compare?a=gpt2.json&b={quoted}")
    assert status == 400 and words in data["error"]


def test_a_plan_opened_from_disk_renders_the_same_view(served: Served) -> None:
    body = (served.plans_dir / "gpt2.json").read_bytes()
    status, data = served.post(
        "/api/plans/render", body, {"Content-Type": "application/json", "X-Plan-Name": "my%20plan.json"}
    )
    assert status == 200 and data["name"] == "my plan.json"
    assert 'data-series="plan-frontier"' in data["html"] and 'data-plan="my plan.json"' in data["html"]
    status, error = served.post("/api/plans/render", b'{"schema_version": 7}')
    assert status == 400 and "schema_version 7" in error["error"] and error["hint"]
    status, error = served.post("/api/plans/render", b"\xff\xfe not json")
    assert status == 400 and "not JSON" in error["error"]


def test_api_documents_match_their_schemas(served: Served, json_schema: Callable[[object, str], None]) -> None:
    for path, schema in (
        ("/api/costs?by=team&since=2025-02-01&until=2025-04-01", "dashboard-costs"),
        ("/api/budgets", "dashboard-budgets"),
        ("/api/plans", "dashboard-plans"),
    ):
        status, data = served.json(path)
        assert status == 200
        json_schema(data, schema)


def test_costs_view_agrees_with_cost_report_on_both_databases(ledger: Ledger) -> None:
    """The page's one pricing pass and ``cost report``'s own give the same rows, on SQLite and PostgreSQL."""
    from computewise.account.report import cost_report
    from computewise.dashboard.costs import costs_view, parse_costs_query

    _fill(ledger.connect_url)
    query = parse_costs_query({"by": "project", "since": "2025-03-01", "until": "2025-03-20", "period": "week"}, NOW_S)
    view = costs_view(ledger, query, NOW_S)
    report = cost_report(ledger, ["project"], query.since_s, query.until_s, NOW_S)
    assert view.report.to_dict() == report.to_dict()
    series = {s.group: sum(s.cost_usd) for s in view.series}
    assert series == pytest.approx({"llm": 60.0, "x": 80.0, "(none)": 34.0})
