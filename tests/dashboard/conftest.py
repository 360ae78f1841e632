"""Fixtures of the dashboard's browser tests: a real Chromium, a ledger of real runs, real servers.

``browser`` drives Debian's ``chromium`` through its own ``chromedriver``, both named explicitly (and
``SE_OFFLINE=true``), so Selenium Manager never downloads a browser or a driver. Without them the
tests are skipped, unless ``COMPUTEWISE_REQUIRE_BROWSER=1`` (``make test``, CI), where that is an
error: ``scripts/ensure-browser.sh`` installs them.

``filled_ledger`` is a SQLite ledger written only by real child processes: ``computewise run`` of
commands that succeed and fail, under two teams, and a ``computewise.track()`` loop with steps. It
and the plan files are made once per module, in parallel, because each child costs a second of
interpreter start. ``start_dashboard`` starts the real ``computewise dashboard`` on a loopback port
it picks itself (``--port 0``), reads the URL it prints, waits until it answers, and ends it by PID
when the module is done.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from dashboard_browser import CLI, Dashboard, FilledLedger

from child_server import stop

REQUIRE_BROWSER = os.environ.get("COMPUTEWISE_REQUIRE_BROWSER") == "1"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "dashboard"
WINDOW = (1366, 900)
PAGE_LOAD_TIMEOUT_S = 30.0
START_TIMEOUT_S = 60.0
CHILD_TIMEOUT_S = 120.0

# A job that keeps one core busy for about three seconds, so it leaves a few samples and a CPU curve.
BUSY_S = "import time\nend = time.time() + 3.0\nwhile time.time() < end: sum(range(20000))"
TRACKED = (
    "import time, computewise\n"
    "with computewise.track(tags={'team': 'a', 'project': 'llm'}) as t:\n"
    "    for _ in range(12):\n"
    "        with t.step(samples=32):\n"
    "            sum(range(300000))\n"
    "        time.sleep(0.1)\n"
)


# -- the browser --------------------------------------------------------------------------------


def _unavailable(reason: str) -> None:
    if REQUIRE_BROWSER:
        pytest.fail(
            f"{reason}, and COMPUTEWISE_REQUIRE_BROWSER=1 demands a real browser: run scripts/ensure-browser.sh",
            pytrace=False,
        )
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless Chromium for the module (a fixed window, a short page-load timeout)."""
    chromium, chromedriver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or chromedriver is None:
        _unavailable(
            "chromium and chromedriver are not both on PATH (Debian: apt-get install chromium chromium-driver)"
        )
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _unavailable("selenium is not installed (pip install -e '.[dev]')")
    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must not fetch anything: both paths are given
    options = webdriver.ChromeOptions()
    options.binary_location = str(chromium)
    options.add_argument("--headless=new")
    if os.geteuid() == 0:  # Chromium's sandbox refuses to start as root (containers, CI)
        options.add_argument("--no-sandbox")
    options.add_argument("--disable-dev-shm-usage")
    options.add_argument("--disable-gpu")
    options.add_argument(f"--window-size={WINDOW[0]},{WINDOW[1]}")
    options.add_argument("--force-prefers-reduced-motion")
    driver = webdriver.Chrome(options=options, service=Service(executable_path=str(chromedriver)))
    driver.set_page_load_timeout(PAGE_LOAD_TIMEOUT_S)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="session")
def screenshot() -> Callable[[Any, str], Path]:
    """``screenshot(driver, name)``: the whole page as ``test-artifacts/dashboard/NAME.png``."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)

    def save(driver: Any, name: str) -> Path:
        path = ARTIFACTS / f"{name}.png"
        height = int(driver.execute_script("return document.documentElement.scrollHeight"))
        # Grow the viewport to the page for one capture, so the file shows the whole page.
        driver.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": WINDOW[0], "height": max(height, 200), "deviceScaleFactor": 1, "mobile": False},
        )
        try:
            path.write_bytes(_png(driver))
        finally:
            driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
        return path

    return save


def _png(driver: Any) -> bytes:
    import base64

    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})
    return base64.b64decode(shot["data"])


# -- a ledger of real runs ----------------------------------------------------------------------


def _child_env(url: str) -> dict[str, str]:
    return {**os.environ, "COMPUTEWISE_DB": url, "NO_COLOR": "1", "COLUMNS": "160"}


def _finish(proc: subprocess.Popen[str], what: str) -> str:
    try:
        out, err = proc.communicate(timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"{what} did not finish in {CHILD_TIMEOUT_S:.0f} s:\n{err or ''}"[-2000:], pytrace=False)
    return (out or "") + "\n" + (err or "")


def _run_id(proc: subprocess.Popen[str], what: str, expect_rc: int) -> int:
    """The id a ``computewise run --json`` child reports, after checking it exited as its job did."""
    import json

    try:
        out, err = proc.communicate(timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail(f"{what} did not finish in {CHILD_TIMEOUT_S:.0f} s", pytrace=False)
    assert proc.returncode == expect_rc, f"{what} exited {proc.returncode}:\n{err[-2000:]}"
    return int(json.loads(out)["run"]["id"])


@pytest.fixture(scope="module")
def filled_ledger(tmp_path_factory: pytest.TempPathFactory) -> FilledLedger:
    """Five real runs (two kinds, two statuses, two teams), budgets whose alerts the runs fire, and two saved plans."""
    from computewise.ledger import Ledger

    base = tmp_path_factory.mktemp("dashboard-ledger")
    url = f"sqlite:///{base / 'ledger.sqlite'}"
    with contextlib.closing(Ledger.open(url)) as ledger:  # created and migrated here, not by five racing writers
        for scope, monthly_usd in (("team=a", 0.01), ("all", 500.0)):
            ledger.set_budget(scope, monthly_usd, (50.0, 80.0, 100.0), None, None, time.time())
    env = _child_env(url)

    def run(tags: list[str], code: str, *extra: str) -> subprocess.Popen[str]:
        flags = [flag for tag in tags for flag in ("--tag", tag)]
        command = [*CLI, "run", "--json", "--no-live", *flags, *extra, "--", sys.executable, "-c", code]
        return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    plans_dir = base / "plans"
    plans_dir.mkdir()
    plan_args = {
        "llama-8b-20B-7d.json": ["--model", "llama-3-8b", "--tokens", "20B", "--deadline", "7d"],
        "llama-8b-5B-3d.json": ["--model", "llama-3-8b", "--tokens", "5B", "--deadline", "3d"],
    }
    plans = {}
    for name, args in plan_args.items():
        with (plans_dir / name).open("w") as sink:  # the child holds its own copy of the descriptor
            plans[name] = subprocess.Popen(
                [*CLI, "plan", "train", *args, "--json"], env=env, stdout=sink, stderr=subprocess.PIPE, text=True
            )
    # $40/h makes the busy run cost more than team a's 1-cent budget: its alerts fire.
    busy = run(["team=a", "project=llm"], BUSY_S, "--hourly-usd", "40")
    failed = run(["team=b"], "import sys, time; time.sleep(0.5); sys.exit(1)")
    sleep = run(["team=b", "project=vision"], "import time; time.sleep(2.5)", "--hourly-usd", "3.2")
    quick = run(["team=a"], "import time; time.sleep(1.5)", "--interval", "200ms")
    tracked = subprocess.Popen(
        [sys.executable, "-c", TRACKED], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    ids = {
        "busy_ok": _run_id(busy, "the busy run", 0),
        "failed": _run_id(failed, "the failing run", 1),
        "sleep_ok": _run_id(sleep, "the sleeping run", 0),
        "quick_ok": _run_id(quick, "the quick run", 0),
    }
    tracked_log = _finish(tracked, "the tracked loop")
    assert tracked.returncode == 0, tracked_log[-2000:]
    for name, proc in plans.items():
        log = _finish(proc, f"plan {name}")
        assert proc.returncode == 0, log[-2000:]
    with contextlib.closing(Ledger.open(url, create=False)) as ledger:
        kinds = {run.id: run.kind for run in ledger.runs(limit=None)}
    (tracked_id,) = [run_id for run_id, kind in kinds.items() if kind == "track"]
    return FilledLedger(url=url, tracked=tracked_id, plans_dir=plans_dir, plan_files=tuple(sorted(plans)), **ids)


@pytest.fixture(scope="module")
def empty_ledger_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A created, migrated ledger with no run in it."""
    from computewise.ledger import Ledger

    url = f"sqlite:///{tmp_path_factory.mktemp('dashboard-empty') / 'ledger.sqlite'}"
    Ledger.open(url).close()
    return url


# -- the server ---------------------------------------------------------------------------------


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5):
            return True
    except urllib.error.HTTPError:
        return True  # a 401 or a 503 is an answer: the server is up
    except (urllib.error.URLError, OSError):
        return False


@pytest.fixture(scope="module")
def start_dashboard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Dashboard]]:
    """``start_dashboard(db_url, *flags)``: a real server on a free loopback port, up and answering."""
    started: list[subprocess.Popen[bytes]] = []
    logs = tmp_path_factory.mktemp("dashboard-logs")

    def start(db_url: str, *flags: str) -> Dashboard:
        # --port 0: the server binds a free port itself and prints its URL, so no other process can
        # take the port between a probe here and the bind there.
        log = logs / f"server-{len(started)}.log"
        command = [*CLI, "dashboard", "--db", db_url, "--host", "127.0.0.1", "--port", "0", "--no-open", *flags]
        with log.open("wb") as sink:
            proc = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
        started.append(proc)
        deadline = time.monotonic() + START_TIMEOUT_S
        while proc.poll() is None and time.monotonic() < deadline:
            printed = re.search(r"at (http://127\.0\.0\.1:\d+)/", log.read_text(errors="replace"))
            if printed and _answers(printed.group(1) + "/"):
                return Dashboard(base=printed.group(1), proc=proc)
            time.sleep(0.1)  # polling for readiness, not a wait for correctness
        stop(proc, timeout_s=15)
        pytest.fail(f"computewise dashboard did not start:\n{log.read_text(errors='replace')[-3000:]}", pytrace=False)

    yield start
    for proc in started:
        stop(proc, timeout_s=15)


@pytest.fixture(scope="module")
def dashboard(filled_ledger: FilledLedger, start_dashboard: Callable[..., Dashboard]) -> Dashboard:
    """The dashboard over the filled ledger, with its plan files."""
    return start_dashboard(filled_ledger.url, "--plans-dir", str(filled_ledger.plans_dir))
