"""``computewise run`` end to end: real child processes, a real SQLite ledger, real signals and HTTP.

Each test launches the CLI as its own process (as a user would), so exit codes, signal forwarding
and what lands in the ledger are observed from outside. The GPU path replays the bundled A100
trace through ``COMPUTEWISE_FAKE_GPU``: the one seam this machine cannot provide.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from computewise.errors import LedgerError
from computewise.ledger import Ledger
from computewise.plan.result import Plan
from computewise.scale.from_plan import planned_job

CLI = [sys.executable, "-m", "computewise.cli.app"]
BUSY = "import time\nt = time.time()\nwhile time.time() - t < {s}: pass\n"


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "COMPUTEWISE_FAKE_GPU": "", **(env or {})}
    return subprocess.run([*CLI, *args], capture_output=True, text=True, env=full_env, timeout=timeout)


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'ledger.sqlite'}"


def test_exit_code_propagates_and_summary_is_json(db: str) -> None:
    result = cli(
        "run", "--db", db, "--json", "--tag", "team=nlp", "--", sys.executable, "-c", "import sys; sys.exit(3)"
    )
    assert result.returncode == 3
    summary = json.loads(result.stdout)
    assert summary["run"]["status"] == "failed" and summary["run"]["exit_code"] == 3
    assert summary["run"]["tags"] == {"team": "nlp"}
    assert summary["price"]["assumed"] is True
    assert "not available" in result.stderr  # no NVIDIA driver here: said, not crashed


def test_cpu_job_is_sampled_priced_and_diagnosed(db: str, tmp_path: Path) -> None:
    html = tmp_path / "run.html"
    result = cli(
        "run",
        "--db",
        db,
        "--json",
        "--hourly-usd",
        "3.6",
        "--html",
        str(html),
        "--",
        sys.executable,
        "-c",
        BUSY.format(s=2.5),
    )
    assert result.returncode == 0, result.stderr
    d = json.loads(result.stdout)
    assert d["run"]["status"] == "succeeded"
    assert d["utilization"]["samples"] >= 2
    assert d["cpu_percent_mean"] > 30  # a busy loop: far from idle even on a loaded 2-core machine
    assert d["cost_usd"] == pytest.approx(3.6 * d["duration_s"] / 3600, rel=1e-6)
    assert d["energy_kwh"] > 0 and not d["energy_measured"]
    assert d["diagnosis"] and d["diagnosis"][0]["verdict"]
    page = html.read_text()
    assert page.startswith("<!DOCTYPE html>") and "<svg" in page


def test_command_not_found_exits_127_and_is_recorded(db: str) -> None:
    result = cli("run", "--db", db, "--", "no-such-program-xyz")
    assert result.returncode == 127
    assert "command not found: no-such-program-xyz" in result.stderr
    ledger = Ledger.open(db)
    [run] = ledger.runs()
    assert run.status == "failed" and run.exit_code == 127 and run.error


def test_bad_database_fails_before_the_child_starts(tmp_path: Path) -> None:
    marker = tmp_path / "started"
    code = f"open({str(marker)!r}, 'w').close()"
    result = cli("run", "--db", "postgresql://nobody@127.0.0.1:1/none", "--", sys.executable, "-c", code)
    assert result.returncode == 2
    assert "error:" in result.stderr and "To fix:" in result.stderr
    assert not marker.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tag", "team"], "KEY=VALUE"),
        (["--interval", "fast"], "--interval"),
        (["--hourly-usd", "lots"], "--hourly-usd"),
        (["--pricing", "cheap"], "--pricing"),
        (["--idle-minutes", "soon"], "--idle-minutes"),
    ],
)
def test_malformed_flags_exit_2_with_a_hint(db: str, args: list[str], message: str) -> None:
    result = cli("run", "--db", db, *args, "--", "true")
    assert result.returncode == 2
    assert message in result.stderr and "To fix:" in result.stderr


def test_gpu_trace_gives_measured_energy_and_gpu_columns(db: str) -> None:
    result = cli(
        "run",
        "--db",
        db,
        "--json",
        "--",
        sys.executable,
        "-c",
        "import time; time.sleep(3)",
        env={"COMPUTEWISE_FAKE_GPU": "a100-training"},
    )
    assert result.returncode == 0, result.stderr
    d = json.loads(result.stdout)
    assert d["run"]["gpu_count"] >= 1 and d["run"]["accelerator"].startswith("a100")
    assert d["energy_measured"] is True
    assert d["utilization"]["gpu_util_pct"]["mean"] > 0
    assert d["gpu_hours"] > 0
    assert "a100" in d["price"]["explanation"]


def test_sigterm_is_forwarded_and_the_run_is_interrupted(db: str, tmp_path: Path) -> None:
    got, armed = tmp_path / "got-term", tmp_path / "armed"
    code = (
        "import signal, sys, time\n"
        f"signal.signal(signal.SIGTERM, lambda *a: (open({str(got)!r}, 'w').close(), sys.exit(42)))\n"
        f"open({str(armed)!r}, 'w').close()\n"
        "time.sleep(60)\n"
    )
    env = {**os.environ, "COMPUTEWISE_FAKE_GPU": ""}
    proc = subprocess.Popen(
        [*CLI, "run", "--db", db, "--", sys.executable, "-c", code], env=env, stderr=subprocess.PIPE, text=True
    )
    try:
        _wait_for_run(db, lambda runs: bool(runs))
        _wait_until(armed.exists, "the child never installed its SIGTERM handler")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 42
    finally:
        if proc.poll() is None:
            proc.kill()
    assert got.exists()
    [run] = Ledger.open(db).runs()
    assert run.status == "interrupted" and run.exit_code == 42


def test_sigkilled_monitor_loses_at_most_two_seconds_and_is_marked_crashed(db: str) -> None:
    env = {**os.environ, "COMPUTEWISE_FAKE_GPU": ""}
    proc = subprocess.Popen(
        [*CLI, "run", "--db", db, "--interval", "0.5s", "--", sys.executable, "-c", "import time; time.sleep(30)"],
        env=env,
        start_new_session=True,
    )
    try:
        ledger = _wait_for_run(db, lambda runs: bool(runs) and len(Ledger.open(db).samples(runs[0].id)) >= 6)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        killed_at = time.time()
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the orphaned sleeper too
    [run] = ledger.runs()
    samples = ledger.samples(run.id)
    assert killed_at - samples[-1].t_s <= 2.0 + 1.0  # flush every <= 2 s, plus the loaded machine's slack
    listing = cli("runs", "--db", db, "--json")
    assert json.loads(listing.stdout)["runs"][0]["status"] == "crashed"


def test_duplicate_run_is_announced(db: str, tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("print('trained')\n")
    first = cli("run", "--db", db, "--tag", "p=x", "--", sys.executable, str(script))
    assert first.returncode == 0 and "same command" not in first.stderr
    second = cli("run", "--db", db, "--tag", "p=x", "--", sys.executable, str(script))
    assert "run 1 ran this same command" in second.stderr
    script.write_text("print('trained differently')\n")
    third = cli("run", "--db", db, "--tag", "p=x", "--", sys.executable, str(script))
    assert "same command" not in third.stderr


def test_prometheus_endpoint_serves_live_metrics(db: str) -> None:
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    env = {**os.environ, "COMPUTEWISE_FAKE_GPU": ""}
    proc = subprocess.Popen(
        [*CLI, "run", "--db", db, "--prometheus-port", "0", "--", sys.executable, "-c", BUSY.format(s=6)],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = ""
        assert proc.stderr is not None
        for line in proc.stderr:
            if "Prometheus metrics at" in line:
                url = line.split("at", 1)[1].strip()
                break
        assert url.startswith("http://127.0.0.1:")

        def sampled() -> bool:  # the first sample is taken an interval after the start
            body = urllib.request.urlopen(url, timeout=10).read().decode()
            return "computewise_process_cpu_percent" in {f.name for f in text_string_to_metric_families(body)}

        _wait_until(sampled, "the endpoint never served the process's CPU metric")
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


class _Hook(BaseHTTPRequestHandler):
    received: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        _Hook.received.append(json.loads(body))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def webhook() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), _Hook)
    _Hook.received = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook"
    server.shutdown()
    server.server_close()


def test_budget_alert_fires_once_to_the_webhook(db: str, webhook: str) -> None:
    assert (
        cli(
            "budget",
            "set",
            "--db",
            db,
            "--scope",
            "team=nlp",
            "--monthly-usd",
            "0.01",  # the smallest budget; one second at $100/h is $0.028
            "--alert-at",
            "50,100",
            "--webhook",
            webhook,
        ).returncode
        == 0
    )
    for _ in range(2):
        result = cli(
            "run",
            "--db",
            db,
            "--tag",
            "team=nlp",
            "--hourly-usd",
            "100",
            "--",
            sys.executable,
            "-c",
            "import time; time.sleep(1)",
        )
        assert result.returncode == 0
    thresholds = sorted(alert["threshold_pct"] for alert in _Hook.received)
    assert thresholds == [50.0, 100.0]
    status = json.loads(cli("budget", "status", "--db", db, "--json").stdout)
    assert status["budgets"][0]["fired_pct"] == [50.0, 100.0]
    report = cli("cost", "report", "--db", db, "--by", "team", "--csv")
    assert report.stdout.splitlines()[0].startswith("team,runs,")


def _wait_until(condition: Callable[[], bool], failure: str, timeout_s: float = 60.0) -> None:
    """Poll ``condition`` until it holds: a condition, not a fixed sleep, so a slow machine only waits longer."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, failure
        time.sleep(0.05)


def _wait_for_run(db: str, ready: Any, timeout_s: float = 60.0) -> Ledger:
    """The ledger once ``ready(its runs)`` holds; while ``run`` is still creating it, the ledger may refuse
    to open (a ``LedgerError``: locked, or no schema yet), which only means "not yet"."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            ledger = Ledger.open(db)
            runs = ledger.runs()
        except LedgerError:
            time.sleep(0.2)
            continue
        if ready(runs):
            return ledger
        ledger.close()
        time.sleep(0.2)
    raise AssertionError("the run never showed up in the ledger")


TRACKED = """
import time
import computewise

def batches():
    for _ in range(12):
        time.sleep(0.05)  # the loader
        yield [0] * 8

with computewise.track(tags={"ignored": "inside run"}) as t:
    for batch in t.loader(batches()):
        end = time.perf_counter() + 0.05
        while time.perf_counter() < end:
            pass
"""


def test_track_inside_run_records_into_that_run(db: str, tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(TRACKED)
    result = cli("run", "--db", db, "--json", "--", sys.executable, str(script))
    assert result.returncode == 0, result.stderr
    d = json.loads(result.stdout)
    assert d["steps"]["steps"] == 12
    assert 0.2 < d["steps"]["data_wait_share"] < 0.8
    assert [r.kind for r in Ledger.open(db).runs()] == ["command"]  # one run: no double counting


def test_standalone_track_is_priced_when_it_finishes(db: str, tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(TRACKED)
    env = {**os.environ, "COMPUTEWISE_DB": db, "COMPUTEWISE_FAKE_GPU": ""}
    env.pop("COMPUTEWISE_RUN_ID", None)
    subprocess.run([sys.executable, str(script)], env=env, check=True, timeout=120)
    [run] = Ledger.open(db).runs()
    assert run.kind == "track" and run.status == "succeeded"
    assert run.price.hourly_usd > 0 and "vCPU" in run.price.explanation
    assert len(Ledger.open(db).steps(run.id)) == 12


def test_run_on_an_engine_with_a_plan_asks_for_the_plans_cpus_unless_told(db: str, tmp_path: Path) -> None:
    """``run --engine --plan`` once asked for 1 CPU whatever the plan (its --cpus defaulted to 1, which beat the
    plan's share): the job now gets the plan's CPUs, as ``submit --plan`` does, and an explicit --cpus still wins."""
    planned = cli(
        "plan", "train", "--model", "gpt2", "--tokens", "100M", "--gpu", "xeon-8488c", "--deadline", "1000d", "--json"
    )
    assert planned.returncode == 0, planned.stderr
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(planned.stdout, encoding="utf-8")
    home = {"COMPUTEWISE_HOME": str(tmp_path / "home")}  # the local engine's job folders
    job = ("--engine", "local", "--plan", str(plan_file), "--interval", "100ms", "--db", db, "--json")
    cpus: dict[str, int] = {}
    for name, extra in (("planned", ()), ("told", ("--cpus", "3"))):
        done = cli("run", *job, "--name", name, *extra, "--", sys.executable, "-c", "pass", env=home)
        assert done.returncode == 0, done.stderr
        cpus[name] = Ledger.open(db).run(json.loads(done.stdout)["run_id"]).logical_cpus
    share = planned_job(Plan.from_dict(json.loads(planned.stdout), str(plan_file))).cpus
    assert share > 1 and cpus == {"planned": share, "told": 3}  # the c7i instance's vCPUs less its daemons' share
