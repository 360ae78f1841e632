"""The Grafana dashboard against a real Prometheus scraping a real ``computewise run`` and ``serve``.

One module-scoped stack, all children on 127.0.0.1 and ended by PID: Debian's ``prometheus``
(scrape interval 1 s, a temporary TSDB), ``computewise run --prometheus-port`` over a sleeping
``python -c`` with the bundled two-H100 NVML trace replayed (``COMPUTEWISE_FAKE_GPU``) so GPU series
exist on this CPU machine, and ``computewise serve echo`` with greedy batching and a six-input queue,
loaded by the project's own open-loop load tester so that some requests batch and some get 429.

Every PromQL expression is read out of the JSON that the real ``computewise grafana-dashboard``
wrote (walking the document, no second list) and evaluated through ``/api/v1/query`` with
``$__rate_interval`` replaced as Grafana would; each must return a finite sample. Without the
``prometheus`` binary the test is skipped, unless ``COMPUTEWISE_REQUIRE_PROMETHEUS=1`` (``make test``,
CI), where that is a failure: ``scripts/ensure-prometheus.sh`` installs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from computewise.serve.loadtest import run_load
from computewise.specs.loadtest import LoadResult
from computewise.system.ports import free_port

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
REQUIRE_PROMETHEUS = os.environ.get("COMPUTEWISE_REQUIRE_PROMETHEUS") == "1"
CLI = [sys.executable, "-m", "computewise.cli.app"]
JOB_RUN, JOB_SERVE = "cw-test-run", "cw-test-serve"  # not the defaults: the flags must reach the expressions
HOURLY_USD = 98.32  # an 8-GPU on-demand instance, say
SCRAPE_INTERVAL_S = 1
# Grafana's $__rate_interval is max($__interval + scrape interval, 4 x scrape interval); 10 s holds the
# whole load below and enough 1 s scrapes for rate() even when a loaded VM delays a few of them.
RATE_INTERVAL = "10s"
LOAD_RPS, LOAD_S = 100.0, 5.0
START_TIMEOUT_S = 60.0


def _require_prometheus() -> None:
    if Path(PROMETHEUS).is_file():
        return
    reason = f"no prometheus binary ({PROMETHEUS})"
    if REQUIRE_PROMETHEUS:
        pytest.fail(f"{reason}, and COMPUTEWISE_REQUIRE_PROMETHEUS=1 demands one: run scripts/ensure-prometheus.sh")
    pytest.skip(reason)


def _get_json(url: str, params: dict[str, str] | None = None) -> Any:
    if params:
        url = f"{url}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)


def _wait(what: str, ready: Any, children: list[subprocess.Popen[bytes]], logs: list[Path]) -> Any:
    """Poll ``ready()`` until it returns something truthy; fail with the children's logs if one died or time ran out."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError):
            if result := ready():
                return result
        if any(child.poll() is not None for child in children):
            break
        time.sleep(0.2)
    tails = "\n".join(f"--- {log.name}\n{log.read_text(errors='replace')[-2000:]}" for log in logs if log.exists())
    pytest.fail(f"{what} did not happen within {START_TIMEOUT_S:.0f} s\n{tails}")


def _end(child: subprocess.Popen[bytes], sig: signal.Signals = signal.SIGTERM) -> None:
    """Signal our child by its PID, then SIGKILL it and any descendant it left behind, each by PID."""
    try:
        descendants = psutil.Process(child.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        descendants = []
    if child.poll() is None:
        child.send_signal(sig)
        try:
            child.wait(timeout=15)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(timeout=10)
    for process in descendants:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()


@dataclass(frozen=True)
class Stack:
    prometheus_url: str
    dashboard: dict[str, Any]
    load: LoadResult
    load_end_s: float
    serve_url: str


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    _require_prometheus()
    work = tmp_path_factory.mktemp("grafana-prometheus")
    dashboard_path = work / "dashboard.json"
    subprocess.run(
        [*CLI, "grafana-dashboard", "--out", str(dashboard_path), "--job-run", JOB_RUN, "--job-serve", JOB_SERVE],
        check=True,
        capture_output=True,
        timeout=60,
    )
    run_port, serve_port, prometheus_port = free_port(), free_port(), free_port()
    (work / "prometheus.yml").write_text(
        f"global:\n  scrape_interval: {SCRAPE_INTERVAL_S}s\n  scrape_timeout: {SCRAPE_INTERVAL_S}s\n"
        "scrape_configs:\n"
        f"  - job_name: {JOB_RUN}\n    static_configs:\n      - targets: ['127.0.0.1:{run_port}']\n"
        f"  - job_name: {JOB_SERVE}\n    static_configs:\n      - targets: ['127.0.0.1:{serve_port}']\n"
    )
    env = {**os.environ, "COMPUTEWISE_DB": str(work / "ledger.sqlite")}
    logs = [work / "prometheus.log", work / "run.log", work / "serve.log"]
    children: list[subprocess.Popen[bytes]] = []
    ready_file = work / "serve-ready.json"
    try:
        prometheus = [
            PROMETHEUS,
            f"--config.file={work / 'prometheus.yml'}",
            f"--storage.tsdb.path={work / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{prometheus_port}",
        ]
        job = [sys.executable, "-c", "import time; time.sleep(300)"]
        run = [
            *CLI,
            "run",
            "--prometheus-port",
            str(run_port),
            "--hourly-usd",
            str(HOURLY_USD),
            "--no-live",
            "--",
            *job,
        ]
        batching = [
            "--batching",
            "greedy",
            "--max-queue-delay-ms",
            "20",
            "--max-batch-size",
            "16",
            "--queue-limit",
            "6",
        ]
        serve = [*CLI, "serve", "echo", "--port", str(serve_port), *batching, "--hourly-usd", "1.5"]
        serve += ["--ready-file", str(ready_file)]
        replayed_gpus = {"COMPUTEWISE_FAKE_GPU": "2xh100-ddp"}
        for log, command, extra_env in [(logs[0], prometheus, {}), (logs[1], run, replayed_gpus), (logs[2], serve, {})]:
            with log.open("wb") as out:
                child = subprocess.Popen(
                    command, env={**env, **extra_env}, stdin=subprocess.DEVNULL, stdout=out, stderr=out
                )
                children.append(child)
        prometheus_url = f"http://127.0.0.1:{prometheus_port}"

        def targets_up() -> bool:
            active = _get_json(f"{prometheus_url}/api/v1/targets")["data"]["activeTargets"]
            return {t["labels"]["job"] for t in active if t["health"] == "up"} == {JOB_RUN, JOB_SERVE}

        _wait("computewise serve writing its ready file", ready_file.exists, children, logs)
        _wait("both targets up in Prometheus", targets_up, children, logs)
        serve_url = f"http://127.0.0.1:{serve_port}"
        payloads = [{"inputs": [1, 2, 3]}]  # two waiting requests fill the six-input queue: the third gets 429
        load = asyncio.run(run_load(f"{serve_url}/v1/models/echo/infer", payloads, LOAD_RPS, LOAD_S, seed=18))
        load_end_s = time.time()

        def scraped_after_load() -> bool:
            # timestamp(): the time of the latest sample (an instant query's own timestamp is the evaluation time).
            result = _get_json(f"{prometheus_url}/api/v1/query", {"query": f'timestamp(up{{job="{JOB_SERVE}"}})'})
            return float(result["data"]["result"][0]["value"][1]) > load_end_s + SCRAPE_INTERVAL_S

        _wait("a scrape after the load", scraped_after_load, children, logs)
        yield Stack(prometheus_url, json.loads(dashboard_path.read_text()), load, load_end_s, serve_url)
    finally:
        for child in reversed(children):
            _end(child)


def _expressions(node: Any) -> list[str]:
    """Every ``expr`` of every target anywhere in the dashboard document."""
    if isinstance(node, dict):
        found = [node["expr"]] if isinstance(node.get("expr"), str) and "refId" in node else []
        return found + [expr for value in node.values() for expr in _expressions(value)]
    if isinstance(node, list):
        return [expr for value in node for expr in _expressions(value)]
    return []


def _query(stack: Stack, expr: str, at_s: float | None = None) -> list[dict[str, Any]]:
    """``expr`` evaluated at the end of the load (where the rate window covers it), or at ``at_s``."""
    promql = expr.replace("$__rate_interval", RATE_INTERVAL)
    at = stack.load_end_s if at_s is None else at_s
    answer = _get_json(f"{stack.prometheus_url}/api/v1/query", {"query": promql, "time": f"{at:.3f}"})
    assert answer["status"] == "success", (promql, answer)
    return list(answer["data"]["result"])


def test_the_load_got_answers_batches_and_429s(stack: Stack) -> None:
    assert stack.load.sent >= 300 and stack.load.errors == 0
    assert stack.load.ok > 0 and stack.load.rejected > 0, stack.load


def test_every_dashboard_expression_returns_data(stack: Stack) -> None:
    expressions = _expressions(stack.dashboard)
    assert len(expressions) >= 15
    empty, not_finite = [], []
    for expr in expressions:
        result = _query(stack, expr)
        values = [float(series["value"][1]) for series in result]
        if not values:
            empty.append(expr)
        elif not all(math.isfinite(value) for value in values):
            not_finite.append((expr, values))
    assert not empty, f"no data for {empty}"
    assert not not_finite, f"NaN or infinite values for {not_finite}"
    assert all(f'job="{JOB_RUN}"' in expr or f'job="{JOB_SERVE}"' in expr for expr in expressions)


def test_values_agree_with_what_was_sent(stack: Stack) -> None:
    """The series Prometheus stored say what the load tester and the run's flags say, not just something."""
    by_panel = {
        panel["title"]: [target["expr"] for target in panel.get("targets", [])] for panel in stack.dashboard["panels"]
    }
    # Totals from the latest scrape, which came after the last answer (the fixture waited for it).
    now_s = time.time()
    rejected = _query(stack, f'computewise_serve_rejections_total{{job="{JOB_SERVE}"}}', now_s)
    assert float(rejected[0]["value"][1]) == stack.load.rejected
    ok = _query(stack, f'computewise_serve_requests_total{{job="{JOB_SERVE}",code="200"}}', now_s)
    assert float(ok[0]["value"][1]) == stack.load.ok
    # rate(cost counter) x 3600 is the hourly price while the sampler runs steadily; 1 s steps scraped
    # every second make rate() jitter by a step or two in ten, hence the wide band.
    (cost_rate, idle_cost) = (_query(stack, expr) for expr in by_panel["Cost rate ($/h)"])
    assert 0.5 * HOURLY_USD <= float(cost_rate[0]["value"][1]) <= 1.5 * HOURLY_USD
    assert 0.0 <= float(idle_cost[0]["value"][1]) <= 1.5 * HOURLY_USD
    utilization = _query(stack, by_panel["GPU utilization"][0])
    assert sorted(series["metric"]["gpu"] for series in utilization) == ["0", "1"]  # the two replayed H100s
    assert all(0.0 <= float(series["value"][1]) <= 100.0 for series in utilization)
    power = _query(stack, by_panel["GPU power"][0])
    assert all(50.0 <= float(series["value"][1]) <= 700.0 for series in power)  # H100 SXM: idle to its 700 W cap
    p50, p90, p99 = (
        float(_query(stack, expr)[0]["value"][1]) for expr in by_panel["Latency percentiles (answered 200)"]
    )
    assert 0.0 < p50 <= p90 <= p99 <= 10.0
    (mean_batch, p90_batch) = (float(_query(stack, expr)[0]["value"][1]) for expr in by_panel["Batch size"])
    assert 1.0 <= mean_batch <= 16.0 and 1.0 <= p90_batch <= 16.0


def test_dashboard_is_a_grafana_model(stack: Stack) -> None:
    dashboard = stack.dashboard
    assert isinstance(dashboard["schemaVersion"], int) and dashboard["schemaVersion"] >= 36
    assert dashboard["title"] and dashboard["uid"]
    variables = dashboard["templating"]["list"]
    datasource = next(v for v in variables if v["type"] == "datasource")
    assert datasource["query"] == "prometheus"
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert {"h", "w", "x", "y"} <= set(grid) and grid["x"] >= 0 and grid["x"] + grid["w"] <= 24
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps another panel"
                cells.add((x, y))
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == f"${{{datasource['name']}}}"
        assert panel["targets"], panel["title"]
        ref_ids = [target["refId"] for target in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids))
        assert all(target["datasource"] == panel["datasource"] for target in panel["targets"])
