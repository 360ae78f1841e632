"""The dashboard's core: Overview, Runs and Run pages and their /api, the token, errors, the server process.

The app is the real one (``dashboard.app.create_app``) over a real ledger written through the
``Ledger`` API, with the clock fixed at 2025-03-20 12:00 UTC; the server tests start the real
``computewise dashboard`` on a free loopback port, and the live test watches a real
``computewise run -- python -c ...`` child. Figures are checked against dollars worked out by hand
from the runs below and against a Python filter over ``Ledger.runs()``, never against the code that
made them.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from computewise.account.budgets import set_budget
from computewise.account.tags import NO_TAG
from computewise.catalog import Catalog
from computewise.dashboard import run_page
from computewise.dashboard.app import create_app
from computewise.dashboard.context import DashboardContext
from computewise.dashboard.runs import parse_runs_query
from computewise.dashboard.views import MAX_POINTS, RunsQuery
from computewise.ledger import GpuSampleRow, Ledger, NewRun, RunRow, SampleRow, StepRow

CLI = [sys.executable, "-m", "computewise.cli.app"]
NOW_S = datetime(2025, 3, 20, 12, tzinfo=UTC).timestamp()
H = 3600.0
START_TIMEOUT_S = 60.0

Check = Callable[[object, str], None]


def _at(day: int, hour: float = 0.0, month: int = 3) -> float:
    return datetime(2025, month, day, tzinfo=UTC).timestamp() + hour * H


# name: (tags, kind, hourly_usd, start, hours (None: still running), status). Costs by hand below.
RUNS: dict[str, tuple[dict[str, str], str, float, float, float | None, str]] = {
    "big": ({"team": "nlp", "project": "llm"}, "command", 10.0, _at(19, 6), 2.0, "succeeded"),  # $20
    "vision": ({"team": "vision"}, "track", 4.0, _at(15, 9), 1.0, "failed"),  # $4
    "live": ({"team": "nlp"}, "command", 2.0, NOW_S - 3 * H, None, "running"),  # $6 so far
    "old": ({}, "command", 1.0, _at(10, 0, month=2), 1.0, "succeeded"),  # $1, in February
    "resubmitted": ({"team": "vision", "project": "llm"}, "command", 3.0, _at(12, 0), 5.0, "succeeded"),
}
# The resubmitted run is billed for its two attempts only (1 h + 2 h, the wait between them is free): $9.
EXPECTED_COST_USD = {"big": 20.0, "vision": 4.0, "live": 6.0, "old": 1.0, "resubmitted": 9.0}
BIG_SAMPLES = 1500  # more than MAX_POINTS, so the run page must average them


def _fill(
    ledger: Ledger, new_run: Callable[..., NewRun], sample_rows: Callable[..., list[SampleRow]]
) -> dict[str, int]:
    ids: dict[str, int] = {}
    for name, (tags, kind, hourly_usd, start_s, hours, status) in RUNS.items():
        template = new_run()
        run = new_run(
            command=f"python {name}.py --epochs 3",
            argv=("python", f"{name}.py", "--epochs", "3"),
            tags=tags,
            kind=kind,
            started_at_s=start_s,
            price=replace(template.price, hourly_usd=hourly_usd, explanation=f"{name}: ${hourly_usd}/h as given"),
            gpu_count=2 if name == "big" else 1,
        )
        run_id = ledger.start_run(run)
        ids[name] = run_id
        if hours is not None:
            ledger.finish_run(run_id, status, start_s + hours * H, exit_code=0 if status == "succeeded" else 1)  # type: ignore[arg-type]
    big = ids["big"]
    samples = sample_rows(big, RUNS["big"][3] + 1.0, BIG_SAMPLES)
    gpu_rows = [
        GpuSampleRow(
            big, s.t_s, gpu, 50.0 + 20 * gpu, 1410.0, 10_000_000_000 * (gpu + 1), 300.0, None, None, None, None
        )
        for s in samples
        for gpu in range(2)
    ]
    ledger.add_samples(samples, gpu_rows)
    ledger.add_steps([StepRow(big, step, RUNS["big"][3] + step, 0.1, 0.9, samples=32) for step in range(1, 41)])
    res = ids["resubmitted"]
    start_s = RUNS["resubmitted"][3]
    ledger.start_attempt(res, 1, "ray", "raysubmit_1", start_s)
    ledger.finish_attempt(res, 1, "preempted", start_s + 1 * H, 143)
    ledger.start_attempt(res, 2, "ray", "raysubmit_2", start_s + 3 * H)
    ledger.finish_attempt(res, 2, "succeeded", start_s + 5 * H, 0)
    set_budget(ledger, "team=nlp", "100", NOW_S)
    return ids


@pytest.fixture
def filled(
    tmp_path: Path, new_run: Callable[..., NewRun], sample_rows: Callable[..., list[SampleRow]]
) -> Iterator[tuple[Ledger, dict[str, int]]]:
    ledger = Ledger.open(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    try:
        yield ledger, _fill(ledger, new_run, sample_rows)
    finally:
        ledger.close()


def _client(ledger: Ledger, catalog: Catalog, token: str | None = None) -> TestClient:
    context = DashboardContext(ledger=ledger, catalog=lambda: catalog, token=token, plans_dir=None, clock=lambda: NOW_S)
    return TestClient(create_app(context))


def _ids_in(html: str) -> list[int]:
    return [int(m) for m in re.findall(r'<tr data-run-id="(\d+)"', html)]


def _text_of(html: str, element_id: str) -> str:
    match = re.search(rf'id="{element_id}"[^>]*>(.*?)</', html, re.S)
    assert match is not None, f"#{element_id} missing"
    return re.sub(r"<[^>]+>", "", match.group(1)).strip()


# -- Runs -----------------------------------------------------------------------------------------


def _python_filter(runs: list[RunRow], query: dict[str, Any]) -> list[int]:
    """The list a person would pick by hand: every condition of the query, newest first."""
    kept = []
    for run in runs:
        text = str(query.get("q", "")).lower()
        tags = dict(t.split("=", 1) for t in query.get("tag", []))
        since = query.get("since")
        until = query.get("until")
        if (
            text
            and text not in run.command.lower()
            and not any(text in f"{k}={v}".lower() for k, v in run.tags.items())
        ):
            continue
        if any(run.tags.get(k) != v for k, v in tags.items()):
            continue
        if query.get("status") not in (None, run.status) or query.get("kind") not in (None, run.kind):
            continue
        day = datetime.fromtimestamp(run.started_at_s, UTC).date().isoformat()
        if (since and day < since) or (until and day > until):
            continue
        kept.append(run.id)
    return kept


def test_the_runs_list_is_the_python_filter_and_costs_what_the_hand_sum_says(
    ledger: Ledger, catalog: Catalog, new_run: Callable[..., NewRun], sample_rows: Callable[..., list[SampleRow]]
) -> None:
    """Also on PostgreSQL (the ``ledger`` fixture runs both): the one place the SQL dialects differ."""
    ids = _fill(ledger, new_run, sample_rows)
    name_of = {run_id: name for name, run_id in ids.items()}
    everything = ledger.runs(limit=None)
    client = _client(ledger, catalog)
    queries: list[dict[str, Any]] = [
        {},
        {"tag": ["team=nlp"]},
        {"tag": ["team=vision", "project=llm"]},
        {"q": "VISION"},  # in a command and in a tag, any case
        {"q": "project=llm"},
        {"status": "running"},
        {"kind": "track"},
        {"since": "2025-03-12", "until": "2025-03-19"},  # both days included
        {"since": "2025-03-01", "tag": ["team=nlp"], "status": "succeeded"},
    ]
    for query in queries:
        data = client.get("/api/runs", params=query).json()
        expected = _python_filter(everything, query)
        assert [run["id"] for run in data["runs"]] == expected, query
        assert data["matched"] == len(expected)
        hand_usd = sum(EXPECTED_COST_USD[name_of[run_id]] for run_id in expected)
        assert math.isclose(data["total_cost_usd"], hand_usd, rel_tol=1e-9), query
        for run in data["runs"]:
            assert math.isclose(run["cost_usd"], EXPECTED_COST_USD[name_of[run["id"]]], rel_tol=1e-9)
    by_cost = client.get("/api/runs", params={"sort": "cost", "order": "asc"}).json()["runs"]
    assert [name_of[r["id"]] for r in by_cost] == sorted(EXPECTED_COST_USD, key=EXPECTED_COST_USD.__getitem__)


def test_the_runs_page_sorts_pages_and_keeps_its_filters_without_javascript(
    filled: tuple[Ledger, dict[str, int]], catalog: Catalog
) -> None:
    ledger, ids = filled
    client = _client(ledger, catalog)
    html = client.get("/runs", params={"per_page": 2, "sort": "duration"}).text
    assert '<form id="run-filters" method="get"' in html
    for name in ("q", "tag", "status", "kind", "since", "until", "sort", "order", "per_page"):
        assert f'name="{name}"' in html, name
    assert 'id="page-runs"' in html and 'data-nav="runs"' in html
    seen: list[int] = []
    url: str | None = "/runs?per_page=2&sort=duration"
    while url is not None:  # follow rel=next to the end, as a person clicking would
        page = client.get(url.replace("&amp;", "&")).text
        seen += _ids_in(page)
        found = re.search(r'<a rel="next" href="([^"]+)"', page)
        url = found.group(1) if found else None
        assert "sort=duration" in (url or "sort=duration")
    assert len(seen) == len(ids) == len(set(seen))
    assert 'rel="prev"' in page
    # The header link of the current column flips its order.
    assert re.search(r'data-sort="duration" href="[^"]*order=asc', html)
    empty = client.get("/runs", params={"q": "no such run"}).text
    assert 'id="no-runs"' in empty and not _ids_in(empty)
    total = _text_of(client.get("/runs", params={"tag": "team=nlp"}).text, "runs-total-cost")
    assert total == "$26.00"  # big $20 + live $6


# -- one run --------------------------------------------------------------------------------------


def test_the_run_page_draws_every_series_downsampled_with_price_steps_and_attempts(
    filled: tuple[Ledger, dict[str, int]], catalog: Catalog
) -> None:
    ledger, ids = filled
    client = _client(ledger, catalog)
    html = client.get(f"/runs/{ids['big']}").text
    data = client.get(f"/api/runs/{ids['big']}").json()
    assert _text_of(html, "run-status") == "succeeded"
    assert _text_of(html, "sample-count") == str(BIG_SAMPLES)
    drawn = dict(re.findall(r'data-series="([^"]+)" data-points="(\d+)"', html))
    assert set(drawn) == {"cpu", "memory", "power", "cost", "gpu0-util", "gpu0-memory", "gpu1-util", "gpu1-memory"}
    for name, points in drawn.items():
        assert 1 < int(points) <= MAX_POINTS, name
        assert int(points) == len(data["series"][name]), name
    # Independent check of the averaging: the samples' CPU mean over the run equals the points'
    # mean weighted by how many samples each point stands for (equal buckets but maybe the last).
    samples = ledger.samples(ids["big"])
    width = data["bucket_s"]
    counts: dict[int, int] = {}
    for s in samples:
        counts[math.floor((s.t_s - samples[0].t_s) / width)] = (
            counts.get(math.floor((s.t_s - samples[0].t_s) / width), 0) + 1
        )
    weighted = sum(v * n for (_, v), n in zip(data["series"]["cpu"], [counts[k] for k in sorted(counts)], strict=True))
    assert math.isclose(weighted / len(samples), sum(s.cpu_percent for s in samples) / len(samples), rel_tol=1e-9)
    assert all(v == 70.0 for _, v in data["series"]["gpu1-util"])
    # Cost accrues evenly: the last point is the run's cost at that moment, below the $20 total.
    t_last, usd_last = data["series"]["cost"][-1]
    assert math.isclose(usd_last, 10.0 * t_last / H, rel_tol=1e-9)
    assert "big: $10.0/h as given" in _text_of(html, "price") or "big: $10.0/h as given" in html
    steps = re.search(r'<section id="steps">(.*?)</section>', html, re.S)
    assert steps is not None and "40" in steps.group(1)
    assert 'id="diagnosis"' in html
    assert "EventSource" not in html  # a finished run does not stream
    attempts = client.get(f"/runs/{ids['resubmitted']}").text
    section = re.search(r'<section id="attempts">(.*?)</section>', attempts, re.S)
    assert section is not None and "raysubmit_1" in section.group(1) and "preempted" in section.group(1)
    live = client.get(f"/runs/{ids['live']}").text
    assert _text_of(live, "run-status") == "running" and "new EventSource" in live
    assert 'id="no-samples"' in live
    missing = client.get("/runs/99999")
    assert missing.status_code == 404 and "no run with id 99999" in missing.text
    assert client.get("/api/runs/99999").json()["error"].startswith("no run with id 99999")


# -- overview -------------------------------------------------------------------------------------


def test_the_overview_adds_up_this_month_by_hand(
    filled: tuple[Ledger, dict[str, int]], catalog: Catalog, json_schema: Check
) -> None:
    ledger, ids = filled
    client = _client(ledger, catalog)
    data = client.get("/api/overview").json()
    this_month = sum(usd for name, usd in EXPECTED_COST_USD.items() if name != "old")  # "old" ran in February
    assert math.isclose(data["spend_month_usd"], this_month, rel_tol=1e-9)
    # GPU-hours: big 2 GPUs x 2 h, the others one GPU each: 1 h, 3 h so far, 3 h billed.
    assert math.isclose(data["gpu_hours_month"], 2 * 2 + 1 + 3 + 3, rel_tol=1e-9)
    assert data["stack"] == "team" and data["period"] == "2025-03"
    assert [r["id"] for r in data["running"]] == [ids["live"]]
    nlp = next(b for b in data["budgets"] if b["scope"] == "team=nlp")
    assert math.isclose(nlp["spent_usd"], 20.0 + 6.0, rel_tol=1e-9)
    days = dict(
        zip(data["days"], next(s["daily_usd"] for s in data["spend_by_day"] if s["group"] == "nlp"), strict=True)
    )
    assert math.isclose(days["2025-03-19"], 20.0, rel_tol=1e-9)  # big ran 06:00-08:00 on the 19th
    json_schema(data, "dashboard-overview")
    html = client.get("/").text
    assert _text_of(html, "spend-month") == "$39.00"
    for element in ("budgets-summary", "gpu-hours", "idle-cost", "anomalies", "running-now"):
        assert f'id="{element}"' in html, element
    assert 'data-series="spend-by-day" data-points="30"' in html
    assert f'<tr data-run-id="{ids["live"]}">' in html
    by_project = client.get("/api/overview", params={"stack": "project"}).json()
    assert {s["group"] for s in by_project["spend_by_day"]} == {"llm", NO_TAG}  # as the CLI labels it


def test_an_empty_ledger_explains_how_to_record_a_first_run(tmp_path: Path, catalog: Catalog) -> None:
    with Ledger.open(f"sqlite:///{tmp_path / 'empty.sqlite'}") as ledger:
        client = _client(ledger, catalog)
        for path in ("/", "/runs"):
            html = client.get(path).text
            assert 'id="empty-state"' in html and "computewise run -- python train.py" in html, path
            assert "computewise.track()" in html
        assert client.get("/api/overview").json()["total_runs"] == 0
        assert client.get("/api/runs").json() | {"runs": []} == client.get("/api/runs").json()


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ({"per_page": "0"}, "per_page=0 is out of range"),
        ({"per_page": "501"}, "per_page=501 is out of range"),
        ({"page": "two"}, "page='two' is not a whole number"),
        ({"sort": "size"}, "sort='size' is not one of"),
        ({"order": "up"}, "order='up'"),
        ({"since": "2025-02-30"}, "since='2025-02-30' is not a date"),
        ({"until": "yesterday"}, "until='yesterday' is not a date"),
        ({"since": "2025-03-05", "until": "2025-03-01"}, "since is after until"),
        ({"status": "done"}, "status='done'"),
        ({"tag": "team"}, "tag='team' is not key=value"),
    ],
)
def test_bad_query_values_get_400_with_a_fix(
    filled: tuple[Ledger, dict[str, int]], catalog: Catalog, query: dict[str, str], words: str
) -> None:
    ledger, _ = filled
    client = _client(ledger, catalog)
    page = client.get("/runs", params=query)
    assert page.status_code == 400 and 'id="input-error"' in page.text
    assert words in page.text.replace("&#x27;", "'") and "To fix:" in page.text
    api = client.get("/api/runs", params=query)
    assert api.status_code == 400 and words in api.json()["error"] and api.json()["hint"]


def test_the_api_documents_match_their_schemas(
    filled: tuple[Ledger, dict[str, int]], catalog: Catalog, json_schema: Check
) -> None:
    ledger, ids = filled
    client = _client(ledger, catalog)
    json_schema(client.get("/api/runs", params={"per_page": 2}).json(), "dashboard-runs")
    for run_id in ids.values():
        json_schema(client.get(f"/api/runs/{run_id}").json(), "dashboard-run")


def test_a_runs_query_reads_back_from_the_json_it_is_echoed_as() -> None:
    """``/api/runs`` echoes its query in the words of the query string; read back, it is the same query."""
    query = parse_runs_query({"q": "big", "sort": "cost", "order": "asc", "page": "2", "per_page": "5"}, ["team=nlp"])
    echoed = json.loads(json.dumps(query.to_dict()))
    assert echoed["order"] == "asc" and echoed["q"] == "big" and echoed["tags"] == {"team": "nlp"}
    assert RunsQuery.from_dict(echoed) == query


def test_a_token_is_required_everywhere_and_a_link_turns_into_a_cookie(
    filled: tuple[Ledger, dict[str, int]], catalog: Catalog
) -> None:
    ledger, _ = filled
    client = _client(ledger, catalog, token="s3cret-token")
    for path in ("/", "/runs", "/api/runs", "/costs"):
        refused = client.get(path)
        assert refused.status_code == 401, path
    assert 'id="auth-error"' in client.get("/").text
    assert client.get("/api/overview").json()["error"] == "this dashboard needs a token"
    assert client.get("/", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert client.get("/?token=wrong", follow_redirects=False).status_code == 401
    assert client.get("/api/overview", headers={"Authorization": "Bearer s3cret-token"}).status_code == 200
    link = client.get("/runs?status=running&token=s3cret-token", follow_redirects=False)
    assert link.status_code == 303 and link.headers["location"] == "/runs?status=running"
    cookie = link.headers["set-cookie"].lower()
    assert "computewise_token=s3cret-token" in cookie and "httponly" in cookie and "samesite=strict" in cookie
    assert client.get("/runs?status=running").status_code == 200  # the cookie now travels with every request


def test_sample_figures_follow_the_samples_whether_kept_at_the_end_or_live(
    filled: tuple[Ledger, dict[str, int]], catalog: Catalog, sample_rows: Callable[..., list[SampleRow]]
) -> None:
    """A finished run is priced from the totals the ledger kept when it ended, a running one live; a sample
    landing after the end voids the kept totals, so no page shows what the samples no longer say."""
    ledger, ids = filled
    client = _client(ledger, catalog)
    big, live = ids["big"], ids["live"]

    def cpu_means() -> dict[int, float | None]:
        runs = client.get("/api/runs", params={"per_page": 500}).json()["runs"]
        return {item["id"]: item["cpu_percent_mean"] for item in runs}

    def by_hand(run_id: int) -> float | None:
        rows = ledger.samples(run_id)
        seconds = sum(r.interval_s for r in rows)
        return sum(r.cpu_percent * r.interval_s for r in rows) / seconds if rows else None

    ledger.finish_run(big, "succeeded", RUNS["big"][3] + 2 * H, exit_code=0)  # its samples came after: keep them now
    ledger.add_samples(sample_rows(live, NOW_S - 60.0, 30))
    first = cpu_means()
    assert first[big] is not None and abs(first[big] - (by_hand(big) or 0.0)) < 1e-6
    assert first[live] is not None and abs(first[live] - (by_hand(live) or 0.0)) < 1e-6

    late = [replace(row, cpu_percent=900.0) for row in sample_rows(big, RUNS["big"][3] + 7000.0, 50)]
    ledger.add_samples(late)
    ledger.add_samples(sample_rows(live, NOW_S - 20.0, 10))
    second = cpu_means()
    for run_id in (big, live):
        assert second[run_id] is not None and abs(second[run_id] - (by_hand(run_id) or 0.0)) < 1e-6
    assert second[big] > first[big]  # the late, busier samples count


# -- the server process --------------------------------------------------------------------------


class _Server:
    def __init__(self, process: subprocess.Popen[str], url: str, started_s: float) -> None:
        self.process, self.url, self.started_s = process, url, started_s


def _start(*args: str) -> _Server:
    """``computewise dashboard --port 0 ARGS``; returns once it printed its URL and answers."""
    begin = time.perf_counter()
    process = subprocess.Popen(
        [*CLI, "dashboard", "--port", "0", *args], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True
    )
    assert process.stderr is not None
    lines: list[str] = []
    while True:
        line = process.stderr.readline()
        if not line:
            pytest.fail(f"the dashboard exited: {''.join(lines)}")
        lines.append(line)
        if found := re.search(r"(http://127\.0\.0\.1:\d+/)", line):
            url = found.group(1)
            break
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=5)
            break
        except httpx.TransportError:
            time.sleep(0.05)
    return _Server(process, url, time.perf_counter() - begin)


def _stop(server: _Server) -> int:
    server.process.send_signal(signal.SIGTERM)
    return server.process.wait(timeout=30)


def test_the_server_starts_serves_and_stops_on_sigterm(filled: tuple[Ledger, dict[str, int]]) -> None:
    ledger, _ = filled
    server = _start("--db", ledger.url)
    try:
        assert server.process.poll() is None
        assert httpx.get(server.url + "runs").status_code == 200
        assert _ids_in(httpx.get(server.url + "runs").text) == [r.id for r in ledger.runs(limit=None)]
        print(f"dashboard up and answering {server.started_s:.2f} s after the command started")
    finally:
        code = _stop(server)
    assert code == 0


def test_a_host_other_machines_reach_needs_a_token() -> None:
    result = subprocess.run([*CLI, "dashboard", "--host", "0.0.0.0"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "error: refusing to listen on 0.0.0.0" in result.stderr and "To fix:" in result.stderr


def test_a_ledger_that_cannot_be_opened_shows_the_clis_error_and_fix(tmp_path: Path) -> None:
    broken = tmp_path / "ledger.sqlite"
    broken.write_text("this is not a database\n")
    cli = subprocess.run([*CLI, "runs", "--db", str(broken)], capture_output=True, text=True, timeout=60)
    assert cli.returncode == 2
    error_line, fix_line = (line.strip() for line in cli.stderr.strip().splitlines()[:2])
    server = _start("--db", str(broken))
    try:
        page = httpx.get(server.url + "runs")
        api = httpx.get(server.url + "api/overview")
    finally:
        _stop(server)
    assert page.status_code == 503 and 'id="ledger-error"' in page.text
    text = re.sub(r"<[^>]+>", "", page.text).replace("&#x27;", "'")
    assert error_line in text and fix_line in text
    assert api.status_code == 503 and f"error: {api.json()['error']}" == error_line


def test_a_running_run_streams_updates_until_it_ends(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'live.sqlite'}"
    Ledger.open(db).close()
    server = _start("--db", db)
    job = subprocess.Popen(
        [*CLI, "run", "--db", db, "--interval", "0.2s", "--tag", "team=live", "--",
         sys.executable, "-c", "import time; time.sleep(4)"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        runs: list[dict[str, Any]] = []
        while not runs and time.monotonic() < deadline:
            runs = httpx.get(server.url + "api/runs").json()["runs"]
            time.sleep(0.1)
        run_id = runs[0]["id"]
        events: list[tuple[str, dict[str, Any]]] = []
        with httpx.stream("GET", f"{server.url}api/runs/{run_id}/events", timeout=60) as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            name = ""
            for line in stream.iter_lines():  # ends when the server closes the stream
                if line.startswith("event: "):
                    name = line[len("event: ") :]
                elif line.startswith("data: "):
                    events.append((name, json.loads(line[len("data: ") :])))
        assert job.wait(timeout=60) == 0
    finally:
        if job.poll() is None:
            job.kill()
        _stop(server)
    updates = [data for name, data in events if name == "update"]
    assert updates and updates[0]["status"] == "running"
    counts = [data["sample_count"] for data in updates]
    assert counts == sorted(counts) and counts[-1] > counts[0]  # new samples arrived while we watched
    assert events[-1][0] == "end" and events[-1][1]["status"] == "succeeded"
    assert sum(1 for name, _ in events if name == "end") == 1


class _CountingLedger(Ledger):
    """The real ledger, counting how often a live stream polls it."""

    polls = 0

    def sample_span(self, run_id: int) -> tuple[int, float | None, float | None]:
        type(self).polls += 1
        return super().sample_span(run_id)


def test_a_stream_stops_polling_when_its_client_leaves(
    tmp_path: Path, catalog: Catalog, new_run: Callable[..., NewRun]
) -> None:
    import socket
    import threading

    import uvicorn

    opened = Ledger.open(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    ledger = _CountingLedger(opened.engine, opened.url)
    run_id = ledger.start_run(new_run(started_at_s=time.time()))  # running, this very process: never stale here
    context = DashboardContext(ledger=ledger, catalog=lambda: catalog, token=None, plans_dir=None, clock=time.time)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(create_app(context), log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        while not server.started:
            time.sleep(0.01)
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/api/runs/{run_id}/events"
        with httpx.stream("GET", url, timeout=30) as stream:
            lines = stream.iter_lines()  # kept: dropping the iterator would close the response early
            assert next(lines) == "event: update"
            while_watched = _CountingLedger.polls
            time.sleep(2.5 * run_page.POLL_S)
            assert _CountingLedger.polls > while_watched  # the stream polls while someone watches
        time.sleep(2 * run_page.POLL_S)  # the server notices the closed connection and ends the stream
        after_leaving = _CountingLedger.polls
        time.sleep(3 * run_page.POLL_S)
        assert _CountingLedger.polls == after_leaving  # nobody polls for a client that left
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        opened.close()


def test_dashboard_help_is_fast_to_import() -> None:
    """``--help`` must not import the web stack: the CLI module imports it inside the command only."""
    code = "import sys, computewise.cli.app; print(sorted(m for m in ('starlette', 'uvicorn') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=os.environ)
    assert out.stdout.strip() == "[]"
