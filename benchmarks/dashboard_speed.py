"""How fast `computewise dashboard` starts and answers over a big ledger: targets start < 1 s, every page < 1 s.

Builds a SQLite ledger of 1,000 runs and 1,000,000 samples (1,000 per run) in one transaction with
SQLAlchemy Core (the ledger's own ``schema`` tables, created by ``Ledger.open``, so the script follows
the schema), then ends each finished run through ``Ledger.finish_run`` as ``computewise run`` does
(which keeps the run's sample totals): runs spread over the last 60 days before now with tags
team/project, four kinds, a few still running; one run with 1,000 per-GPU samples and 100 steps
for the run page; budgets on four teams with alerts; two plan files written by `computewise plan train --json`.

It then starts the real `computewise dashboard` process on 127.0.0.1 (a free port) ``--starts``
times and measures spawn -> first 200 on ``/`` (the target; its start-up part, spawn -> first answer of
any kind, is printed beside it), and GETs every page and every ``/api`` document
``--repeat`` times (overview, runs filtered, sorted and a far page, a run page, costs by team for
this month, budgets, plans), printing the first, median and max of each with PASS/FAIL against
the 1 s target. The first GET of a page counts: it is what the person who opened it waits for.

Usage: python benchmarks/dashboard_speed.py [--runs 1000] [--samples 1000000] [--repeat 5] [--starts 3]
                                            [--quick] [--json OUT]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import sqlalchemy as sa

from computewise.ledger import GpuSampleRow, Ledger, SampleRow, StepRow, schema
from computewise.system.cpu import cpu_model_name
from computewise.system.ports import free_port

TARGET_START_S = 1.0
TARGET_PAGE_S = 1.0
DAY_S = 86400.0
TEAMS = ("nlp", "vision", "speech", "recsys", "infra", "research", "ads", "search")
KINDS = ("command", "command", "track", "serve")
CLI = [sys.executable, "-m", "computewise.cli.app"]
START_TIMEOUT_S = 60.0
GET_TIMEOUT_S = 120.0
BATCH = 100_000


@dataclass(frozen=True)
class Built:
    """What ``build`` wrote: the ids a page needs and how long the writing took."""

    url: str
    run_ids: tuple[int, ...]
    detail_run: int  # the run with per-GPU samples and steps
    samples: int
    build_s: float


@dataclass(frozen=True)
class Server:
    """A started dashboard: where it answers, its pid, seconds from spawn to its first answer of any kind (a 404
    on a URL no page reads: start-up alone) and to the first 200 on ``/`` (start-up plus the cold overview),
    and the CPU seconds the process had used by then (a busy shared machine inflates those less than wall time)."""

    base: str
    pid: int
    listening_s: float
    listening_cpu_s: float
    start_s: float
    start_cpu_s: float


def build(path: Path, n_runs: int, n_samples: int, now_s: float, seed: int = 0) -> Built:
    """The ledger described in the module docstring, at ``path``; every row in one transaction."""
    rng = random.Random(seed)
    url = f"sqlite:///{path}"
    started = time.perf_counter()
    Ledger.open(url).close()  # created and migrated: the schema is the ledger's own
    per_run = max(1, n_samples // n_runs)
    engine = sa.create_engine(url)
    runs: list[dict[str, Any]] = []
    tags: list[dict[str, Any]] = []
    for i in range(n_runs):
        run_id = i + 1
        start_s = now_s - rng.uniform(0.02, 60) * DAY_S
        gpus = rng.choice((0, 1, 2, 4, 8))
        hours = rng.uniform(0.1, 48)
        running = i % 50 == 0
        end_s = None if running else min(now_s - 60, start_s + hours * 3600)
        team = rng.choice(TEAMS)
        run_tags = {"team": team, "project": f"p{rng.randrange(30)}"} if rng.random() < 0.9 else {"team": team}
        hourly_usd = 0.5 + 4.0 * gpus
        runs.append(
            {
                "id": run_id, "kind": rng.choice(KINDS), "command": f"python job_{i}.py --lr 3e-4",
                "argv": ["python", f"job_{i}.py", "--lr", "3e-4"], "tags": run_tags, "host": "bench",
                "pid": 10_000 + i, "user": f"user{i % 12}", "cwd": "/work", "input_hash": None,
                "started_at_s": start_s, "ended_at_s": end_s, "heartbeat_at_s": end_s or now_s - 5,
                "status": "running" if running else rng.choice(("succeeded", "succeeded", "succeeded", "failed")),
                "exit_code": None if running else 0, "interval_s": 1.0, "logical_cpus": 16, "gpu_count": gpus,
                "gpu_name": "NVIDIA H100 80GB HBM3" if gpus else None, "accelerator": "h100" if gpus else None,
                "hourly_usd": hourly_usd, "inferences": rng.randrange(1_000, 5_000_000) if i % 4 == 3 else 0,
                "price": {"hourly_usd": hourly_usd, "source": "benchmark", "explanation": "synthetic",
                          "assumed": False, "carbon_g_per_kwh": 400.0, "carbon_source": "benchmark", "pue": 1.1},
                "error": None, "summary": None,
            }
        )  # fmt: skip
        tags.extend({"run_id": run_id, "key": key, "value": value} for key, value in run_tags.items())
    detail = next(r for r in runs if r["gpu_count"] and r["ended_at_s"] is not None)
    fields = tuple(SampleRow.__dataclass_fields__)
    sample_sql = f"INSERT INTO samples ({', '.join(fields)}) VALUES ({', '.join('?' * len(fields))})"
    with engine.begin() as conn:
        conn.execute(schema.runs.insert(), runs)
        conn.execute(schema.run_tags.insert(), tags)
        rows: list[tuple[Any, ...]] = []
        for n in range(n_samples):
            run = runs[min(n // per_run, n_runs - 1)]
            k = n % per_run
            end_s = run["ended_at_s"] or now_s
            step_s = max(1.0, (end_s - run["started_at_s"]) / per_run)
            busy = n % 17 != 0
            gpu = run["gpu_count"]
            rows.append(
                (run["id"], run["started_at_s"] + k * step_s, step_s, 95.0 + n % 13, 2_000_000_000 + k * 1_000_000,
                 0, 0, 0, 0, 40.0, 8_000_000_000, gpu, (80.0 + n % 7 if busy else 3.0) if gpu else None,
                 10_000_000_000 * gpu if gpu else None, 300.0 * gpu if gpu else None, 300.0 * step_s,
                 bool(gpu), not busy)
            )  # fmt: skip
            if len(rows) == BATCH:
                conn.exec_driver_sql(sample_sql, rows)
                rows.clear()
        if rows:
            conn.exec_driver_sql(sample_sql, rows)
        conn.execute(schema.gpu_samples.insert(), _gpu_rows(detail, per_run))
        conn.execute(schema.steps.insert(), _step_rows(detail))
        for j, team in enumerate(TEAMS[:4]):
            conn.execute(
                schema.budgets.insert().values(
                    id=j + 1, scope=f"team={team}", monthly_usd=2_000.0 * (j + 1), alert_at_pct=[50.0, 80.0, 100.0],
                    webhook_url=None, command=None, created_at_s=now_s - 90 * DAY_S,
                )
            )  # fmt: skip
        conn.execute(
            schema.alerts.insert(),
            [
                {"kind": "idle", "scope": None, "budget_id": None, "run_id": runs[a]["id"], "period": None,
                 "threshold_pct": None, "message": f"run {runs[a]['id']} idle for 10 min",
                 "fired_at_s": now_s - a * 3600.0, "delivery": {"log": "written"}}
                for a in range(50)
            ],
        )  # fmt: skip
    engine.dispose()
    # Every run ended the way `computewise run` ends one: Ledger.finish_run, which also keeps its sample totals.
    with Ledger.open(url) as ledger:
        for run in runs:
            if run["ended_at_s"] is not None:
                ledger.finish_run(run["id"], run["status"], run["ended_at_s"], exit_code=run["exit_code"])
    build_s = time.perf_counter() - started
    return Built(url, tuple(r["id"] for r in runs), int(detail["id"]), n_samples, build_s)


def _gpu_rows(run: dict[str, Any], count: int) -> list[dict[str, Any]]:
    start_s, end_s = run["started_at_s"], run["ended_at_s"]
    step_s = (end_s - start_s) / count
    fields = tuple(GpuSampleRow.__dataclass_fields__)
    return [
        dict(zip(fields, (run["id"], start_s + k * step_s, 0, 85.0 + k % 9, 1980.0, 60e9, 650.0, None, 2e9, 1e9, 55e9),
                 strict=True))
        for k in range(count)
    ]  # fmt: skip


def _step_rows(run: dict[str, Any]) -> list[dict[str, Any]]:
    start_s = run["started_at_s"]
    fields = tuple(StepRow.__dataclass_fields__)
    return [
        dict(zip(fields, (run["id"], s, start_s + 10.0 * s, 0.05, 0.9, 32, 65_536, 6 * 7e9 * 65_536), strict=True))
        for s in range(100)
    ]  # fmt: skip


def write_plans(plans_dir: Path) -> tuple[str, str]:
    """Two real `plan train --json` files, made in parallel."""
    plans_dir.mkdir(parents=True, exist_ok=True)
    args = {
        "llama-8b.json": ["-m", "llama-3-8b", "--tokens", "20B", "--deadline", "7d"],
        "gpt2-medium.json": ["-m", "gpt2-medium", "--tokens", "2B", "--max-gpus", "16"],
    }
    procs = []
    for name, flags in args.items():
        with (plans_dir / name).open("w") as sink:
            procs.append(subprocess.Popen([*CLI, "plan", "train", *flags, "--json"], stdout=sink))
    for proc in procs:
        if proc.wait(timeout=300) != 0:
            raise SystemExit("computewise plan train failed")
    first, second = args
    return first, second


def _get(url: str) -> tuple[int, int]:
    """(status, body bytes) of one GET."""
    try:
        with urllib.request.urlopen(url, timeout=GET_TIMEOUT_S) as response:
            return response.status, len(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, len(exc.read())


@contextlib.contextmanager
def dashboard(url: str, plans_dir: Path, log: Path) -> Iterator[Server]:
    """The real server on a free loopback port, up: it answered, then its first 200 on ``/`` came back."""
    port = free_port()
    command = [*CLI, "dashboard", "--db", url, "--host", "127.0.0.1", "--port", str(port), "--no-open"]
    base = f"http://127.0.0.1:{port}"
    with log.open("ab") as sink:
        spawned = time.perf_counter()
        proc = subprocess.Popen([*command, "--plans-dir", str(plans_dir)], stdout=sink, stderr=subprocess.STDOUT)
    try:
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"computewise dashboard exited {proc.returncode}:\n{log.read_text()[-3000:]}")
            if time.perf_counter() - spawned > START_TIMEOUT_S:
                raise SystemExit(f"computewise dashboard did not answer in {START_TIMEOUT_S:.0f} s")
            try:
                _get(base + "/not-a-page")  # any answer: the server is up; no page's work is done for it
                break
            except (urllib.error.URLError, OSError):
                time.sleep(0.005)  # not listening yet
        listening_s, listening_cpu_s = time.perf_counter() - spawned, _cpu_s(proc.pid)
        status = _get(base + "/")[0]
        start_s = time.perf_counter() - spawned
        if status != 200:
            raise SystemExit(f"computewise dashboard answered {status} on /:\n{log.read_text()[-3000:]}")
        yield Server(base, proc.pid, listening_s, listening_cpu_s, start_s, _cpu_s(proc.pid))
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=15)


def _cpu_s(pid: int) -> float:
    cpu = psutil.Process(pid).cpu_times()
    return float(cpu.user + cpu.system)


def _settle(pid: int, timeout_s: float = 60.0) -> None:
    """Wait until the server stops using CPU (its background warm-up of the totals is done), so each page's
    CPU time below is that page's own."""
    deadline = time.monotonic() + timeout_s
    last = _cpu_s(pid)
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = _cpu_s(pid)
        if now - last < 0.02:
            return
        last = now


def pages(built: Built, plans: tuple[str, str]) -> list[tuple[str, str]]:
    """(name, path) of every page and every ``/api`` document the benchmark times."""
    run = built.detail_run
    far = max(1, len(built.run_ids) // 50)  # the last page of 50
    filters = "status=succeeded&tag=team=nlp&sort=cost&order=desc"
    costs = "by=team&since=month&period=day"
    a, b = plans
    out = [
        ("overview", "/"),
        ("runs", "/runs"),
        ("runs filtered, by cost", f"/runs?{filters}"),
        ("runs text search, by duration", "/runs?q=job_5&sort=duration&order=asc"),
        (f"runs page {far}", f"/runs?page={far}"),
        ("run (1,000 samples)", f"/runs/{run}"),
        ("costs by team, this month", f"/costs?{costs}"),
        ("costs CSV", f"/costs.csv?{costs}"),
        ("budgets", "/budgets"),
        ("plans", "/plans"),
        ("plan view", f"/plans/view?file={a}"),
        ("plans compare", f"/plans/compare?a={a}&b={b}"),
    ]
    api = [
        ("api overview", "/api/overview"),
        ("api runs filtered", f"/api/runs?{filters}"),
        (f"api runs page {far}", f"/api/runs?page={far}"),
        ("api run", f"/api/runs/{run}"),
        ("api costs", f"/api/costs?{costs}"),
        ("api budgets", "/api/budgets"),
        ("api plans", "/api/plans"),
        ("api plan view", f"/api/plans/view?file={a}"),
    ]
    return out + api


def time_pages(server: Server, targets: list[tuple[str, str]], repeat: int) -> list[dict[str, Any]]:
    """Every page ``repeat`` times, in rounds (page 1..n, then again), so no page is only ever timed warm.

    Beside the wall time of each GET, the server process's CPU time spent on it: one request at a time
    and nothing else running in the server, so it is the page's cost, which neighbours on a shared
    machine inflate far less than they inflate wall time.
    """
    times: dict[str, list[float]] = {name: [] for name, _ in targets}
    cpus: dict[str, list[float]] = {name: [] for name, _ in targets}
    status: dict[str, int] = {}
    size: dict[str, int] = {}
    _settle(server.pid)
    for _ in range(repeat):
        for name, path in targets:
            cpu_before = _cpu_s(server.pid)
            start = time.perf_counter()
            code, length = _get(server.base + path)
            times[name].append(time.perf_counter() - start)
            cpus[name].append(_cpu_s(server.pid) - cpu_before)
            status[name] = code if status.get(name, 200) == 200 else status[name]
            size[name] = length
    return [
        {
            "page": name,
            "path": path,
            "status": status[name],
            "bytes": size[name],
            "first_s": times[name][0],
            "median_s": statistics.median(times[name]),
            "max_s": max(times[name]),
            "cpu_median_s": statistics.median(cpus[name]),
            "pass": status[name] == 200 and max(times[name]) < TARGET_PAGE_S,
        }
        for name, path in targets
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=1_000)
    parser.add_argument("--samples", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5, help="GETs of each page")
    parser.add_argument("--starts", type=int, default=3, help="server starts timed")
    parser.add_argument("--quick", action="store_true", help="50 runs, 5,000 samples, 1 start, 2 GETs (for tests)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.quick:
        args.runs, args.samples, args.repeat, args.starts = 50, 5_000, 2, 1

    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="computewise-dashboard-bench-") as tmp:
        work = Path(tmp)
        built = build(work / "ledger.sqlite", args.runs, args.samples, time.time())
        plans = write_plans(work / "plans")
        log = work / "server.log"
        starts: list[float] = []
        start_cpus: list[float] = []
        listening: list[float] = []
        listening_cpus: list[float] = []
        results: list[dict[str, Any]] = []
        for n in range(args.starts):
            with dashboard(built.url, work / "plans", log) as server:
                starts.append(server.start_s)
                start_cpus.append(server.start_cpu_s)
                listening.append(server.listening_s)
                listening_cpus.append(server.listening_cpu_s)
                if n == args.starts - 1:  # pages timed on the last server, started like the others
                    results = time_pages(server, pages(built, plans), args.repeat)
    summary: dict[str, Any] = {
        "hardware": f"{cpu_model_name()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"SQLite {sqlite3.sqlite_version}",
        "load_average_1m": [load_before, os.getloadavg()[0]],  # before and after: this machine may be shared
        "runs": args.runs,
        "samples": built.samples,
        "build_s": built.build_s,
        "start_s": {"median": statistics.median(starts), "max": max(starts), "all": starts},
        "start_cpu_s": {"median": statistics.median(start_cpus), "all": start_cpus},
        "listening_s": {"median": statistics.median(listening), "max": max(listening), "all": listening},
        "listening_cpu_s": {"median": statistics.median(listening_cpus), "all": listening_cpus},
        "start_pass": max(starts) < TARGET_START_S,
        "target_start_s": TARGET_START_S,
        "target_page_s": TARGET_PAGE_S,
        "repeat": args.repeat,
        "pages": results,
        "all_pass": max(starts) < TARGET_START_S and all(r["pass"] for r in results),
    }
    _print(summary)
    if args.json is not None:
        args.json.write_text(json.dumps(summary, indent=2) + "\n")


def _print(summary: dict[str, Any]) -> None:
    before, after = summary["load_average_1m"]
    print(f"hardware  {summary['hardware']}; load average {before:.1f} before, {after:.1f} after")
    print(f"ledger    {summary['runs']:,} runs, {summary['samples']:,} samples, built in {summary['build_s']:.2f} s")
    start = summary["start_s"]
    verdict = "PASS" if summary["start_pass"] else "FAIL"
    print(
        f"start     spawn -> first 200 on /: median {start['median']:.3f} s, max {start['max']:.3f} s "
        f"over {len(start['all'])} starts (target < {summary['target_start_s']:g} s): {verdict}; "
        f"server CPU time by then: median {summary['start_cpu_s']['median']:.3f} s"
    )
    up = summary["listening_s"]
    print(
        f"          of which spawn -> first answer (start-up alone): median {up['median']:.3f} s, "
        f"max {up['max']:.3f} s; CPU median {summary['listening_cpu_s']['median']:.3f} s"
    )
    width = max(len(r["page"]) for r in summary["pages"])
    print(
        f"\n{'page':<{width}}  status  {'KiB':>6}  first_s  median_s  max_s  cpu_s   "
        f"target < {summary['target_page_s']:g} s"
    )
    for r in summary["pages"]:
        print(
            f"{r['page']:<{width}}  {r['status']:>6}  {r['bytes'] / 1024:>6.0f}  {r['first_s']:>7.3f}  "
            f"{r['median_s']:>8.3f}  {r['max_s']:>5.3f}  {r['cpu_median_s']:>5.3f}   {'PASS' if r['pass'] else 'FAIL'}"
        )
    print(f"\nall targets met: {'PASS' if summary['all_pass'] else 'FAIL'}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
