"""The dashboard's pages opened in a real Chromium, against a ledger written by real runs.

Every expectation is read independently of the dashboard: run ids, tags, statuses, sample and step
counts come from the ledger itself (``Ledger.runs``/``samples``), filters and sort orders are
recomputed here in plain Python, and HTTP statuses come from the browser's own Navigation Timing
entry. Each page is saved as a PNG under ``test-artifacts/dashboard/``.

The tests share one browser, one filled ledger and one server per module, so they run on one xdist
worker; waits are ``WebDriverWait`` conditions with generous timeouts (a loaded 2-core VM), never
fixed sleeps.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import os
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from dashboard_browser import CLI, Dashboard, FilledLedger

from computewise.ledger import Ledger, RunRow, SampleRow

pytestmark = pytest.mark.xdist_group("dashboard-browser")  # one browser and one filled ledger, not two

WAIT_S = 40.0
LIVE_SLEEP_S = 8


# -- helpers ------------------------------------------------------------------------------------


def _wait(driver: Any, timeout_s: float = WAIT_S, *, navigating: bool = False) -> Any:
    """A wait that retries while a live page swaps the element it looks at for a new one.

    ``navigating``: the whole document is being replaced, so any driver error means "not yet" (see
    :func:`_wait_for_next_document`).
    """
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException, WebDriverException
    from selenium.webdriver.support.ui import WebDriverWait

    ignored = (WebDriverException,) if navigating else (NoSuchElementException, StaleElementReferenceException)
    return WebDriverWait(driver, timeout_s, poll_frequency=0.1, ignored_exceptions=ignored)


def _by_css() -> str:
    from selenium.webdriver.common.by import By

    return str(By.CSS_SELECTOR)


def _find(driver: Any, css: str) -> Any:
    return driver.find_element(_by_css(), css)


def _text(driver: Any, css: str) -> str:
    """The trimmed text of the element ``css`` names now, read in one step: a live page may swap the element
    between a lookup and a read of its text, which a found element reports as a stale reference."""
    script = "const found = document.querySelector(arguments[0]); return found && found.textContent.trim();"
    return str(_wait(driver).until(lambda d: d.execute_script(script, css)))


def _find_all(driver: Any, css: str) -> list[Any]:
    return list(driver.find_elements(_by_css(), css))


def _open(driver: Any, url: str, page: str) -> int:
    """Load ``url``, wait for ``<main id="page-PAGE">``, and return the HTTP status the browser got."""
    driver.get(url)
    _wait(driver).until(lambda d: _find_all(d, f"main#page-{page}"))
    return _status(driver)


def _open_run(driver: Any, url: str) -> int:
    """Load a run's page (it sits under the Runs tab: ``main#page-runs``) and wait for its ``#run-status``."""
    status = _open(driver, url, "runs")
    _wait(driver).until(lambda d: _find_all(d, "main#page-runs #run-status"))
    return status


def _status(driver: Any) -> int:
    """The HTTP status of the document now shown (Navigation Timing Level 2 ``responseStatus``)."""
    return int(driver.execute_script("return performance.getEntriesByType('navigation')[0].responseStatus"))


def _click_and_wait(driver: Any, css: str, page: str) -> None:
    """Click a link and wait until the next document (not the old one) shows ``main#page-PAGE``."""
    old = _find(driver, "main")
    _find(driver, css).click()
    _wait_for_next_document(driver, old, page)


def _wait_for_next_document(driver: Any, old_main: Any, page: str) -> None:
    """Wait until ``old_main`` belongs to a document that is gone and the new one shows ``main#page-PAGE``.

    While the browser swaps documents, chromedriver can answer a question about the old element with
    "unhandled inspector error: Cannot find context with specified id" (a plain WebDriverException, not
    a stale reference): the old page's JavaScript context is gone and the new one is not ready. That
    answer means "not yet", so this wait asks again instead of failing.
    """
    from selenium.webdriver.support import expected_conditions

    _wait(driver, navigating=True).until(expected_conditions.staleness_of(old_main))
    _wait(driver).until(lambda d: _find_all(d, f"main#page-{page}"))


def _row_ids(driver: Any) -> list[int]:
    return [int(row.get_attribute("data-run-id")) for row in _find_all(driver, "#runs-table tr[data-run-id]")]


def _query(driver: Any) -> dict[str, list[str]]:
    return urllib.parse.parse_qs(urllib.parse.urlsplit(driver.current_url).query)


@contextlib.contextmanager
def _ledger(url: str) -> Iterator[Ledger]:
    ledger = Ledger.open(url, create=False)
    try:
        yield ledger
    finally:
        ledger.close()


def _runs(url: str) -> list[RunRow]:
    with _ledger(url) as ledger:
        return ledger.runs(limit=None)


def _drawn_points(figure: Any) -> list[int]:
    """How many points each data series of a chart's SVG draws: polyline vertices, else titled markers."""
    counts = [
        len((line.get_attribute("points") or "").split()) for line in figure.find_elements(_by_css(), "svg polyline")
    ]
    if counts:
        return counts
    return [len(figure.find_elements(_by_css(), "svg circle:has(title)"))]


def _http(url: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as error:
        return int(error.code), error.read().decode()


# -- overview and navigation --------------------------------------------------------------------


def test_overview_renders_its_panels_and_the_nav_reaches_every_page(
    browser: Any, dashboard: Dashboard, screenshot: Callable[[Any, str], Path]
) -> None:
    assert _open(browser, dashboard.url("/"), "overview") == 200
    for css in ("#spend-month", "#budgets-summary", "#gpu-hours", "#idle-cost", "#anomalies", "#running-now"):
        assert _find_all(browser, css), f"the overview has no {css}"
    spend = _find(browser, 'figure.chart[data-series="spend-by-day"]')
    assert int(spend.get_attribute("data-points")) >= 1
    assert not _find_all(browser, "#empty-state")
    screenshot(browser, "overview")

    for name, path in (("runs", "/runs"), ("costs", "/costs"), ("budgets", "/budgets"), ("plans", "/plans")):
        _click_and_wait(browser, f'a[data-nav="{name}"]', name)
        assert urllib.parse.urlsplit(browser.current_url).path == path
        assert _status(browser) == 200
    _click_and_wait(browser, 'a[data-nav="overview"]', "overview")
    assert urllib.parse.urlsplit(browser.current_url).path == "/"


# -- the runs list ------------------------------------------------------------------------------


def test_runs_list_shows_exactly_the_runs_of_the_ledger(
    browser: Any, dashboard: Dashboard, filled_ledger: FilledLedger, screenshot: Callable[[Any, str], Path]
) -> None:
    assert _open(browser, dashboard.url("/runs?per_page=500"), "runs") == 200
    expected = {run.id for run in _runs(filled_ledger.url)}
    shown = _row_ids(browser)
    assert len(shown) == len(set(shown)), f"a run is listed twice: {shown}"
    assert set(shown) == expected
    screenshot(browser, "runs")


def _fill(driver: Any, name: str, value: str) -> None:
    """Set the form field ``name`` (a text input or a select) of ``#run-filters`` to ``value``."""
    from selenium.webdriver.support.ui import Select

    field = _find(driver, f'#run-filters [name="{name}"]')
    if field.tag_name == "select":
        Select(field).select_by_value(value)
    else:
        field.clear()
        field.send_keys(value)


def _submit_filters(driver: Any) -> None:
    old = _find(driver, "main")
    _find(driver, "#run-filters button[type=submit], #run-filters input[type=submit], #run-filters button").click()
    _wait_for_next_document(driver, old, "runs")


def _text_match(run: RunRow, text: str) -> bool:
    """The runs list's ``q``: the text, ignoring case, in the command or a ``key=value`` tag."""
    haystack = [run.command, *(f"{key}={value}" for key, value in run.tags.items())]
    return any(text.lower() in item.lower() for item in haystack)


def test_filters_through_the_form_show_the_matching_runs(
    browser: Any, dashboard: Dashboard, filled_ledger: FilledLedger, screenshot: Callable[[Any, str], Path]
) -> None:
    runs = _runs(filled_ledger.url)
    cases: list[tuple[dict[str, str], set[int]]] = [
        ({"tag": "team=a"}, {run.id for run in runs if run.tags.get("team") == "a"}),
        ({"status": "failed"}, {run.id for run in runs if run.status == "failed"}),
        (
            {"tag": "team=b", "status": "succeeded"},
            {run.id for run in runs if run.tags.get("team") == "b" and run.status == "succeeded"},
        ),
        ({"kind": "track"}, {run.id for run in runs if run.kind == "track"}),
        ({"q": "vision"}, {run.id for run in runs if _text_match(run, "vision")}),
    ]
    assert cases[0][1] and cases[1][1] == {filled_ledger.failed} and cases[4][1] == {filled_ledger.sleep_ok}
    for fields, expected in cases:
        _open(browser, dashboard.url("/runs?per_page=500"), "runs")
        for name, value in fields.items():
            _fill(browser, name, value)
        _submit_filters(browser)
        query = _query(browser)
        for name, value in fields.items():
            assert query.get(name) == [value], f"the form did not send {name}={value}: {browser.current_url}"
        assert set(_row_ids(browser)) == expected, fields
        if fields == {"tag": "team=a"}:
            screenshot(browser, "runs-filtered")

    _open(browser, dashboard.url("/runs"), "runs")
    _fill(browser, "q", "no run has this text")
    _submit_filters(browser)
    assert _find_all(browser, "#no-runs")
    assert _row_ids(browser) == []


def _duration_s(run: RunRow) -> float:
    assert run.ended_at_s is not None, f"run {run.id} is still running"
    return run.ended_at_s - run.started_at_s


def test_sort_links_and_pages_follow_the_ledger(
    browser: Any, dashboard: Dashboard, filled_ledger: FilledLedger
) -> None:
    runs = _runs(filled_ledger.url)
    keys: dict[str, Callable[[RunRow], float]] = {"started": lambda run: run.started_at_s, "duration": _duration_s}
    for sort, key in keys.items():
        _open(browser, dashboard.url("/runs?per_page=500"), "runs")
        _click_and_wait(browser, f'a[data-sort="{sort}"]', "runs")
        query = _query(browser)
        assert query.get("sort") == [sort]
        order = query.get("order", ["desc"])[0]
        expected = [run.id for run in sorted(runs, key=key, reverse=order == "desc")]
        assert _row_ids(browser) == expected, (sort, order)
        # A second click on the same header turns the order around.
        _click_and_wait(browser, f'a[data-sort="{sort}"]', "runs")
        assert _query(browser).get("order") == ["asc" if order == "desc" else "desc"]
        assert _row_ids(browser) == expected[::-1], (sort, "flipped")

    # Two runs a page: "next" walks every page in the sorted order, "prev" walks back.
    expected = [run.id for run in sorted(runs, key=_duration_s)]
    _open(browser, dashboard.url("/runs?per_page=2&sort=duration&order=asc"), "runs")
    assert not _find_all(browser, 'a[rel="prev"]')
    pages = [_row_ids(browser)]
    while _find_all(browser, 'a[rel="next"]'):
        _click_and_wait(browser, 'a[rel="next"]', "runs")
        pages.append(_row_ids(browser))
    assert [run_id for page in pages for run_id in page] == expected
    assert all(len(page) == 2 for page in pages[:-1]) and 1 <= len(pages[-1]) <= 2
    assert len(pages) == (len(expected) + 1) // 2
    _click_and_wait(browser, 'a[rel="prev"]', "runs")
    assert _row_ids(browser) == pages[-2]


# -- one run ------------------------------------------------------------------------------------


def _bucket_count(samples: list[SampleRow], bucket_s: float) -> int:
    """How many points a chart of ``samples`` averaged into ``bucket_s`` buckets has: the non-empty buckets."""
    first_s = min(sample.t_s for sample in samples)
    return len({math.floor((sample.t_s - first_s) / bucket_s) for sample in samples})


def test_run_page_charts_draw_every_sample(
    browser: Any, dashboard: Dashboard, filled_ledger: FilledLedger, screenshot: Callable[[Any, str], Path]
) -> None:
    for run_id, name in ((filled_ledger.busy_ok, "run"), (filled_ledger.quick_ok, "run-200ms")):
        with _ledger(filled_ledger.url) as ledger:
            run, samples = ledger.run(run_id), ledger.samples(run_id)
        assert len(samples) >= 2, f"run {run_id} recorded {len(samples)} samples"
        assert _open_run(browser, dashboard.url(f"/runs/{run_id}")) == 200
        assert _text(browser, "#run-status") == run.status == "succeeded"
        assert int(_text(browser, "#sample-count")) == len(samples)
        # A chart averages the samples into buckets at least one sampling interval wide (a run's last
        # sample can follow the one before by milliseconds): one point per bucket that holds a sample.
        status, body = _http(dashboard.url(f"/api/runs/{run_id}"))
        assert status == 200
        bucket_s = float(json.loads(body)["bucket_s"])
        assert run.interval_s <= bucket_s < 1.01 * run.interval_s, "a short run is not downsampled further"
        expected = _bucket_count(samples, bucket_s)
        assert 1 <= expected <= len(samples)
        for series in ("cpu", "memory", "cost"):
            figure = _find(browser, f'figure.chart[data-series="{series}"]')
            points = int(figure.get_attribute("data-points"))
            assert points == expected, f"{series} chart of run {run_id}: {points} points, {len(samples)} samples"
            assert set(_drawn_points(figure)) == {points}, f"the {series} SVG does not draw {points} points"
        for css in ("#diagnosis", "#price", "#steps", "#attempts"):
            assert _find_all(browser, css), f"the run page has no {css}"
        screenshot(browser, name)
    # The busy run was priced at --hourly-usd 40: the page says what it was charged and why.
    _open_run(browser, dashboard.url(f"/runs/{filled_ledger.busy_ok}"))
    assert "40" in _find(browser, "#price").text

    with _ledger(filled_ledger.url) as ledger:
        steps = ledger.steps(filled_ledger.tracked)
    assert len(steps) == 12
    _open_run(browser, dashboard.url(f"/runs/{filled_ledger.tracked}"))
    assert "12" in _find(browser, "#steps").text
    screenshot(browser, "run-tracked")

    _open_run(browser, dashboard.url(f"/runs/{filled_ledger.failed}"))
    assert _text(browser, "#run-status") == "failed"


def test_live_run_page_updates_without_reload(
    browser: Any, dashboard: Dashboard, filled_ledger: FilledLedger, screenshot: Callable[[Any, str], Path]
) -> None:
    command = f"import time; time.sleep({LIVE_SLEEP_S})"
    env = {**os.environ, "COMPUTEWISE_DB": filled_ledger.url}
    before = {run.id for run in _runs(filled_ledger.url)}
    live = subprocess.Popen(
        [*CLI, "run", "--no-live", "--tag", "team=live", "--", sys.executable, "-c", command],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:

        def started(_: object) -> int | None:
            new = [run for run in _runs(filled_ledger.url) if run.id not in before]
            return new[0].id if new else None

        run_id = int(_wait(browser).until(started))
        _open_run(browser, dashboard.url(f"/runs/{run_id}"))
        browser.execute_script("window.__computewiseMarker = 'no reload'")
        status = _text(browser, "#run-status")
        first_count = int(_text(browser, "#sample-count"))
        assert status == "running", f"the run ended before its page opened ({status}): the test needs a longer job"

        _wait(browser).until(lambda d: int(_find(d, "#sample-count").text.strip()) > first_count)
        _wait(browser, WAIT_S + LIVE_SLEEP_S).until(lambda d: _find(d, "#run-status").text.strip() == "succeeded")
        assert browser.execute_script("return window.__computewiseMarker") == "no reload"
        assert live.wait(timeout=WAIT_S) == 0
        with _ledger(filled_ledger.url) as ledger:
            samples = len(ledger.samples(run_id))
        _wait(browser).until(lambda d: int(_find(d, "#sample-count").text.strip()) == samples)
        assert browser.execute_script("return window.__computewiseMarker") == "no reload"
        screenshot(browser, "run-live-finished")
    finally:
        if live.poll() is None:
            live.kill()
            live.wait()


# -- token, empty and broken ledgers -----------------------------------------------------------


def test_a_wrong_token_is_refused_and_the_right_one_opens_the_pages(
    browser: Any,
    filled_ledger: FilledLedger,
    start_dashboard: Callable[..., Dashboard],
    screenshot: Callable[[Any, str], Path],
) -> None:
    token = "s3cret-browser-token"
    guarded = start_dashboard(filled_ledger.url, "--token", token)
    assert _http(guarded.url("/runs"))[0] == 401
    assert _http(guarded.url("/api/runs"), {"Authorization": "Bearer wrong"})[0] == 401
    assert _http(guarded.url("/api/runs"), {"Authorization": f"Bearer {token}"})[0] == 200

    browser.get(guarded.url("/runs?token=wrong"))
    _wait(browser).until(lambda d: _find_all(d, "#auth-error"))
    assert _status(browser) == 401
    assert not _find_all(browser, "#runs-table")
    screenshot(browser, "auth-error")

    assert _open(browser, guarded.url(f"/runs?token={token}"), "runs") == 200
    assert "token" not in _query(browser), "the token stays in the address bar"
    assert set(_row_ids(browser)) <= {run.id for run in _runs(filled_ledger.url)} and _row_ids(browser)
    # The cookie the token set opens the other pages without it.
    assert _open(browser, guarded.url("/costs"), "costs") == 200


def test_empty_ledger_explains_how_to_record_the_first_run(
    browser: Any,
    empty_ledger_url: str,
    start_dashboard: Callable[..., Dashboard],
    screenshot: Callable[[Any, str], Path],
) -> None:
    empty = start_dashboard(empty_ledger_url)
    assert _open(browser, empty.url("/"), "overview") == 200
    advice = _find(browser, "#empty-state").text
    assert "computewise run -- python train.py" in advice and "computewise.track()" in advice
    screenshot(browser, "overview-empty")
    _open(browser, empty.url("/runs"), "runs")
    assert _find_all(browser, "#empty-state") and _row_ids(browser) == []


def test_a_ledger_that_cannot_be_opened_shows_the_clis_error(
    browser: Any, tmp_path: Path, start_dashboard: Callable[..., Dashboard], screenshot: Callable[[Any, str], Path]
) -> None:
    url = f"sqlite:///{tmp_path / 'missing' / 'ledger.sqlite'}"
    env = {**os.environ, "COLUMNS": "1000"}  # the CLI's lines unwrapped, to compare whole
    cli = subprocess.Popen(
        [*CLI, "runs", "--db", url], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    broken = start_dashboard(url)  # meanwhile: the two interpreters start side by side
    _, stderr = cli.communicate(timeout=120)
    assert cli.returncode == 2
    error_line = next(line for line in stderr.splitlines() if line.startswith("error:"))
    fix_line = next(line for line in stderr.splitlines() if line.startswith("To fix:"))

    browser.get(broken.url("/"))
    _wait(browser).until(lambda d: _find_all(d, "#ledger-error"))
    assert _status(browser) == 503
    shown = " ".join(_find(browser, "#ledger-error").text.split())
    assert " ".join(error_line.removeprefix("error:").split()) in shown
    assert " ".join(fix_line.removeprefix("To fix:").split()) in shown
    screenshot(browser, "ledger-error")


# -- costs, budgets, plans ----------------------------------------------------------------------


def test_costs_page_shows_spend_by_tag_with_a_csv(
    browser: Any, dashboard: Dashboard, filled_ledger: FilledLedger, screenshot: Callable[[Any, str], Path]
) -> None:
    assert _open(browser, dashboard.url("/costs?by=team&period=day"), "costs") == 200
    figure = _find(browser, 'figure.chart[data-series="costs"]')
    assert int(figure.get_attribute("data-points")) >= 1
    table = _find(browser, "#costs-table").text
    teams = {run.tags["team"] for run in _runs(filled_ledger.url) if "team" in run.tags}
    assert teams <= {"a", "b", "live"} and {"a", "b"} <= teams
    for team in ("a", "b"):
        assert team in table.split(), f"team {team} is not in the costs table"
    screenshot(browser, "costs")

    href = _find(browser, "a#costs-csv").get_attribute("href")
    status, body = _http(href)
    assert status == 200
    rows = list(csv.reader(io.StringIO(body)))
    assert len(rows) >= 2 and all(len(row) == len(rows[0]) for row in rows)


def test_budgets_page_lists_each_budget_and_its_alerts(
    browser: Any, dashboard: Dashboard, filled_ledger: FilledLedger, screenshot: Callable[[Any, str], Path]
) -> None:
    with _ledger(filled_ledger.url) as ledger:
        budgets, alerts = ledger.budgets(), ledger.alerts()
    assert {budget.scope for budget in budgets} == {"team=a", "all"}
    assert _open(browser, dashboard.url("/budgets"), "budgets") == 200
    for budget in budgets:
        assert _find_all(browser, f'#budgets-table tr[data-budget="{budget.scope}"]'), budget.scope
    budget_alerts = [alert for alert in alerts if alert.budget_id is not None]
    assert budget_alerts, "team a's 1-cent budget fired no alert"
    assert len(_find_all(browser, "#alerts-table tr:has(td)")) == len(budget_alerts)
    screenshot(browser, "budgets")


def _scaling_points(plan: dict[str, Any]) -> int:
    """The points a plan's scaling curve can draw: its GPU counts with a finite time."""
    return sum(1 for point in plan["scaling"] if isinstance(point["time_s"], float) and math.isfinite(point["time_s"]))


def test_plans_page_opens_and_compares_saved_plans(
    browser: Any,
    dashboard: Dashboard,
    filled_ledger: FilledLedger,
    tmp_path: Path,
    screenshot: Callable[[Any, str], Path],
) -> None:
    from selenium.webdriver.support.ui import Select

    assert _open(browser, dashboard.url("/plans"), "plans") == 200
    listed = _find(browser, "#plans-list").text
    for name in filled_ledger.plan_files:
        assert name in listed, f"{name} is not in the plans list"
    screenshot(browser, "plans")

    first, second = filled_ledger.plan_files
    plan = json.loads((filled_ledger.plans_dir / first).read_text())
    assert _open(browser, dashboard.url(f"/plans/view?file={urllib.parse.quote(first)}"), "plans") == 200
    assert int(_find(browser, 'figure.chart[data-series="plan-frontier"]').get_attribute("data-points")) >= len(
        plan["pareto"]
    )
    scaling = _find(browser, 'figure.chart[data-series="plan-scaling"]')
    assert int(scaling.get_attribute("data-points")) == _scaling_points(plan) >= 2
    screenshot(browser, "plan-view")

    # Side by side, through the form on /plans.
    _open(browser, dashboard.url("/plans"), "plans")
    Select(_find(browser, 'select[name="a"]')).select_by_value(first)
    Select(_find(browser, 'select[name="b"]')).select_by_value(second)
    _click_and_wait(browser, "#plan-compare-form button", "plans")
    assert _query(browser) == {"a": [first], "b": [second]}
    assert _find_all(browser, "#plan-compare")
    screenshot(browser, "plan-compare")

    # A plan from the user's disk (outside the plans folder): the file input posts it, the page draws it
    # in place; a file that is not a plan gets the reader's error.
    own = tmp_path / "my-plan.json"
    own.write_text((filled_ledger.plans_dir / second).read_text())
    _open(browser, dashboard.url("/plans"), "plans")
    _find(browser, 'input[type="file"]').send_keys(str(own))
    _wait(browser).until(lambda d: _find_all(d, '#plan-rendered figure.chart[data-series="plan-frontier"]'))
    assert _find_all(browser, '#plan-rendered figure.chart[data-series="plan-scaling"]')
    screenshot(browser, "plan-from-disk")
    broken = tmp_path / "not-a-plan.json"
    broken.write_text('{"hello": "world"}')
    _find(browser, 'input[type="file"]').send_keys(str(broken))
    _wait(browser).until(lambda d: "error" in _find(d, "#plan-rendered").text)
    assert not _find_all(browser, "#plan-rendered figure.chart")
