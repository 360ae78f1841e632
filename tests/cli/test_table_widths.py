"""Every table of the CLI read at 80 and 100 columns: no number loses a digit, no line runs past the edge.

The commands run in one child process of the real CLI (a pipe, as a script sees it) with COLUMNS set,
against a real SQLite ledger with recorded runs, the bundled catalog and the real planners. Each
table's cells come from the same command's ``--json`` run through the report's public grid
function; every numeric cell (and every id, status or date) of a column that is shown must appear
whole, and a column that is not shown must be named in the "hidden to fit" footnote.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from rich.cells import cell_len
from rich.console import Console

from computewise.account.anomalies import spend_anomalies
from computewise.account.budgets import budget_status
from computewise.account.report import cost_report
from computewise.account.totals import list_runs
from computewise.catalog import load_catalog
from computewise.estimate import Assumptions, estimate_infer, estimate_train
from computewise.estimate.comm_report import SWEEP_BYTES, CommEstimate, CommQuery, estimate_comm
from computewise.estimate.single import InferEstimate, TrainEstimate
from computewise.estimate.train import default_global_batch
from computewise.ledger import AttemptRow, Ledger, NewRun, SampleRow
from computewise.models import resolve_model
from computewise.monitor.summary import summarize
from computewise.plan import InferConstraints, InferPlan, Plan, compare_onprem, plan_infer
from computewise.plan.serve import ServePlan, TrafficProfile, plan_serving
from computewise.report.accounts import anomalies_grid, budget_grid, cost_grid
from computewise.report.attempts import attempts_grid, print_attempts
from computewise.report.catalog import (
    accelerator_grid,
    assumption_grid,
    carbon_grid,
    fabric_grid,
    files_grid,
    kernel_profile_grid,
    offering_grid,
    onprem_grid,
)
from computewise.report.comm import comm_grid
from computewise.report.rows import (
    Grid,
    break_even_grid,
    estimate_summary,
    memory_grid,
    option_grid,
    scaling_grid,
)
from computewise.report.runs import runs_grid, summary_rows
from computewise.report.serve import serve_modes_grid, serve_schedule_grid
from computewise.report.table import print_table
from computewise.specs import InferJob, Parallelism, TrainJob
from computewise.system.user import current_user
from prices import given_price

WIDTHS = (80, 100)
DAY_S = 86400.0

# One child runs every command in turn, each with its own stdout, as `computewise ...` on a pipe would.
_DRIVER = """
import contextlib, io, json, os, sys
from computewise.cli.app import whole_app
app = whole_app()
results = []
for width, argv in json.load(sys.stdin):
    if width is None:
        os.environ.pop("COLUMNS", None)
    else:
        os.environ["COLUMNS"] = str(width)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            app(args=argv, standalone_mode=False)
            code = 0
        except SystemExit as stop:
            code = stop.code or 0
    results.append({"argv": argv, "width": width, "code": code, "stdout": out.getvalue()})
json.dump(results, sys.__stdout__)
"""


def _run_all(jobs: list[tuple[int | None, list[str]]]) -> list[dict[str, Any]]:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    done = subprocess.run(
        [sys.executable, "-c", _DRIVER],
        input=json.dumps(jobs),
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    results: list[dict[str, Any]] = json.loads(done.stdout)
    return results


def _seed(url: str, now_s: float) -> None:
    """Three weeks of an 8 x H100 team: a small job a day, a few long ones, one spike yesterday."""
    ledger = Ledger.open(url)
    commands = (
        "python train.py --model llama-3-8b --epochs 3 --lr 3e-4 --batch-size 32 --data /datasets/pile/train",
        "torchrun --nproc-per-node 8 finetune.py --config configs/llama-70b-lora.yaml",
        "python eval.py",
    )
    price = given_price(
        98.32,
        source="catalog offerings.csv: aws p5.48xlarge on-demand us-east-1",
        explanation="AWS p5.48xlarge on-demand in us-east-1 (8x H100 80GB)",
        cloud="aws",
        instance_type="p5.48xlarge",
        pricing="on-demand",
        region="us-east-1",
    )
    for day in range(21):
        hours = 30.0 if day == 1 else 0.5 + (day % 3) * 0.25
        start_s = now_s - day * DAY_S - hours * 3600.0 - 3600.0
        command = commands[day % 3]
        run_id = ledger.start_run(
            NewRun(
                kind="command",
                command=command,
                argv=tuple(command.split()),
                tags={"team": "nlp-research", "project": "llama-finetune" if day % 2 else "search-ranking"},
                host=socket.gethostname(),
                pid=os.getpid(),
                user=current_user(),
                cwd="/srv/jobs",
                started_at_s=start_s,
                interval_s=60.0,
                price=price,
                gpu_count=8,
                gpu_name="NVIDIA H100 80GB HBM3",
                accelerator="h100-sxm",
            )
        )
        step_s = hours * 3600.0 / 10
        ledger.add_samples(
            [
                SampleRow(
                    run_id=run_id,
                    t_s=start_s + (k + 1) * step_s,
                    interval_s=step_s,
                    cpu_percent=185.0,
                    rss_bytes=12_400_000_000,
                    read_bytes=48_000_000,
                    write_bytes=1_200_000,
                    net_sent_bytes=3_000_000,
                    net_recv_bytes=2_500_000,
                    host_cpu_percent=41.5,
                    host_memory_used_bytes=210_000_000_000,
                    gpu_count=8,
                    gpu_util_pct=87.0 if k else 3.0,
                    gpu_memory_used_bytes=8 * 35_500_000_000,
                    gpu_power_w=8 * 650.0,
                    energy_j=8 * 650.0 * step_s,
                    energy_measured=day % 5 != 0,
                    idle=k == 0,
                )
                for k in range(10)
            ]
        )
        ledger.finish_run(run_id, "failed" if day % 4 == 3 else "succeeded", start_s + hours * 3600.0, exit_code=0)
    ledger.close()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("widths")
    _seed(f"sqlite:///{path / 'ledger.db'}", time.time())
    (path / "traffic.csv").write_text(
        "hour,rps\n" + "".join(f"{h},{0 if h < 6 else 40 + 9 * (h % 12)}\n" for h in range(24)), encoding="utf-8"
    )
    yield path


def _commands(db: str, traffic: Path) -> dict[str, list[str]]:
    return {
        "runs": ["runs", "--db", db],
        "runs show": ["runs", "show", "2", "--db", db],
        "cost report": ["cost", "report", "--db", db, "--by", "team,project"],
        "cost anomalies": ["cost", "anomalies", "--db", db, "--by", "team"],
        "budget status": ["budget", "status", "--db", db],
        "plan train": ["plan", "train", "--model", "llama-3-8b", "--tokens", "20B", "--deadline", "7d"],
        "plan infer": ["plan", "infer", "--model", "llama-3-8b", "--rps", "20", "--mean-rps", "5", "--top", "5"],
        "plan compare-onprem": ["plan", "compare-onprem"],
        "plan serve": ["plan", "serve", "--capacity-rps", "37.5", "--traffic", str(traffic), "--hourly-usd", "3.9"],
        "estimate train": ["estimate", "train", "--model", "llama-3-8b", "--gpu", "h100", "--gpus", "8"],
        "estimate infer": ["estimate", "infer", "--model", "llama-3-8b", "--gpu", "l4", "--batch-size", "8"],
        "estimate comm": ["estimate", "comm", "--gpu", "h100", "--gpus", "64"],
        "catalog validate": ["catalog", "validate"],
    }


def _grids(name: str, data: Any) -> list[Grid]:
    """The grids a command prints, rebuilt by the report's public grid functions from its --json or, for a
    report of the ledger, from the typed result the library returns at the moment the --json was taken."""
    by_name: dict[str, Callable[[Any], list[Grid]]] = {
        "runs": lambda listing: [runs_grid(listing.runs)],
        "runs show": lambda d: [],
        "cost report": lambda report: [cost_grid(report)],
        "cost anomalies": lambda report: [anomalies_grid(report)],
        "budget status": lambda statuses: [budget_grid(statuses)],
        "plan train": lambda d: _plan_grids(Plan.from_dict(d)),
        "plan infer": lambda d: _plan_grids(_infer_plan()),
        "plan compare-onprem": lambda d: [break_even_grid(compare_onprem(load_catalog()))],
        "plan serve": lambda d: [serve_modes_grid(_serve_plan(d)), serve_schedule_grid(_serve_plan(d))],
        "estimate train": lambda e: [memory_grid(e.device_memory)],
        "estimate infer": lambda e: [memory_grid(e.device_memory)],
        "estimate comm": lambda d: [comm_grid(_comm())],
        "catalog validate": lambda d: [
            files_grid(
                tuple(
                    (f["path"] + (" (bundled)" if f["bundled"] else ""), f["table"], str(f["rows"])) for f in d["files"]
                )
            )
        ],
    }
    return by_name[name](data)


def _plan_grids(plan: Plan | InferPlan) -> list[Grid]:
    scaling = [scaling_grid(plan.scaling)] if plan.kind == "train" else []
    return [option_grid(plan.pareto), option_grid(plan.shown, True), *scaling]


def _infer_plan() -> InferPlan:
    """``plan infer`` as its command below asks it: the library's typed plan, which has no reader from --json."""
    catalog = load_catalog()
    constraints = InferConstraints(requests_per_s=20, input_len=512, output_len=128, mean_requests_per_s=5)
    plan = plan_infer(resolve_model("llama-3-8b"), catalog, Assumptions.from_catalog(catalog), constraints)
    return replace(plan, top=5)


def _estimates() -> dict[str, TrainEstimate | InferEstimate]:
    """``estimate train`` and ``estimate infer`` as their commands below ask them (the CLI's defaults spelt out):
    the library's typed estimates, which have no reader from --json."""
    catalog = load_catalog()
    assumptions = Assumptions.from_catalog(catalog)
    model = resolve_model("llama-3-8b")
    global_batch = default_global_batch(4096, model.params, step_multiple=8)
    job = TrainJob(tokens=20.0 * model.params, seq_len=4096, micro_batch=1, global_batch=global_batch)
    train = estimate_train(model, catalog.accelerator("h100"), 8, job, Parallelism(dp=8), catalog, assumptions)
    request = InferJob(batch=8, context_len=1024, output_len=256)
    return {
        "estimate train": train,
        "estimate infer": estimate_infer(model, catalog.accelerator("l4"), request, catalog, assumptions),
    }


def _comm() -> CommEstimate:
    """``estimate comm`` as its command below asks it: the library's typed estimate, which has no reader from --json."""
    catalog = load_catalog()
    query = CommQuery(op="all-reduce", gpus=64, sizes_bytes=SWEEP_BYTES)
    return estimate_comm(catalog, catalog.accelerator("h100"), query, Assumptions.from_catalog(catalog))


def _ledger_results(url: str, data: dict[str, Any]) -> dict[str, Any]:
    """``runs``, ``runs show``, ``cost report``, ``cost anomalies`` and ``budget status`` as the library returns
    them at each --json's now (the runs are over, so their figures do not move with the clock)."""
    cost, anomalies = data["cost report"], data["cost anomalies"]
    budgets_now_s = next((b["now_s"] for b in data["budget status"]["budgets"]), cost["now_s"])
    with Ledger.open(url) as ledger:
        return {
            "runs": list_runs(ledger, time.time()),
            "runs show": summarize(ledger, data["runs show"]["run"]["id"], time.time(), load_catalog()),
            "cost report": cost_report(ledger, cost["by"], cost["since_s"], None, cost["now_s"]),
            "cost anomalies": spend_anomalies(
                ledger,
                anomalies["by"],
                anomalies["since_s"],
                anomalies["now_s"],
                window=anomalies["window_days"],
                threshold=anomalies["threshold"],
            ),
            "budget status": budget_status(ledger, budgets_now_s),
        }


def _serve_plan(d: dict[str, Any]) -> ServePlan:
    """The plan ``plan serve --json`` wrote, planned again from the capacity, traffic and price it says it used."""
    capacity, hours = d["capacity"], d["schedule"]
    traffic = TrafficProfile.from_hourly([hour["rps"] for hour in hours], first_hour=hours[0]["hour"])
    return plan_serving(
        capacity["rps_per_replica"],
        traffic,
        d["price"]["usd_per_hour_per_replica"],
        target_utilization=capacity["target_utilization"],
        min_replicas=d["replicas"]["min"],
        scale_to_zero_cold_start_s=d["cold_start_s"],
        latency_s=capacity["latency_s"],
    )


def _values(name: str, data: Any) -> list[str]:
    """Figures printed outside a grid, as label-value lines, that must stay whole too."""
    if name == "runs show":
        return [value for _, value, _ in summary_rows(data)]
    if name.startswith("estimate ") and name != "estimate comm":
        return [value for _, value, _ in estimate_summary(data)]
    return []


def _hidden(text: str) -> set[str]:
    """Headers the "N columns hidden to fit W columns (a, b): ..." footnotes name."""
    names: set[str] = set()
    for found in re.finditer(r"hidden to fit \d+ columns \(([^)]*)\)", " ".join(text.split())):
        names.update(part.strip() for part in found.group(1).split(","))
    return names


def _check(text: str, width: int, grids: list[Grid], values: list[str], where: str) -> None:
    lines = text.splitlines()
    assert lines, where
    too_wide = [line for line in lines if cell_len(line) > width]
    assert not too_wide, f"{where}: lines wider than {width}: {too_wide[:3]}"
    # The runs table cuts a long command at a word boundary, " …"; nothing else may be cut.
    assert "…" not in text.replace(" …", ""), f"{where}: something was cut:\n{text}"
    hidden = _hidden(text)
    for grid in grids:
        for i, header in enumerate(grid.headers):
            if i not in grid.numeric and i not in grid.whole:
                continue
            if header in hidden:
                assert i in grid.drop_order, f"{where}: {header!r} is hidden but may not be"
                continue
            for row in grid.rows:
                cell = row[i]
                assert not cell or any(cell in line for line in lines), f"{where}: {header}={cell!r} not whole:\n{text}"
    for value in values:
        assert any(value in line for line in lines), f"{where}: {value!r} not whole:\n{text}"


def test_every_table_reads_at_80_and_100_columns(workdir: Path) -> None:
    url = f"sqlite:///{workdir / 'ledger.db'}"
    commands = _commands(url, workdir / "traffic.csv")
    jobs: list[tuple[int | None, list[str]]] = [(None, [*argv, "--json"]) for argv in commands.values()]
    jobs += [(width, argv) for width in WIDTHS for argv in commands.values()]
    jobs.append((None, commands["runs"]))  # a pipe without COLUMNS: a file has no edge, so nothing is hidden
    results = _run_all(jobs)
    piped = results.pop()["stdout"]
    assert "hidden to fit" not in piped and "team=nlp-research" in piped
    assert all(r["code"] == 0 for r in results), [(r["argv"], r["code"]) for r in results if r["code"]]
    data = {name: json.loads(result["stdout"]) for name, result in zip(commands, results, strict=False)}
    assert len(data["runs"]["runs"]) == 20 and data["cost anomalies"]["anomalies"], "the ledger is realistic"
    typed = {**_ledger_results(url, data), **_estimates()}
    for result in results[len(commands) :]:
        name = next(n for n, argv in commands.items() if argv == result["argv"])
        where = f"{name} at COLUMNS={result['width']}"
        grids = _grids(name, typed.get(name, data[name]))
        _check(result["stdout"], result["width"], grids, _values(name, typed.get(name, data[name])), where)


@pytest.mark.parametrize("width", WIDTHS)
def test_catalog_tables_read_at_80_and_100_columns(width: int) -> None:
    catalog = load_catalog(())
    h100 = tuple(catalog.offerings_for("h100-sxm"))
    grids = {
        "accelerators": accelerator_grid(catalog.accelerators),
        "offerings": offering_grid(catalog.offerings),
        "carbon": carbon_grid(catalog.carbon),
        "onprem": onprem_grid(catalog, catalog.onprem)[1],
        "assumptions": assumption_grid(catalog.assumptions),
        "fabrics": fabric_grid(catalog.fabrics),
        "kernel_profiles": kernel_profile_grid(catalog.kernel_profiles),
    }
    jobs: list[tuple[int | None, list[str]]] = [(width, ["catalog", "list", table]) for table in grids]
    jobs += [(width, ["catalog", "show", "h100"]), (width, ["catalog", "show", "p5.48xlarge"])]
    results = _run_all(jobs)
    assert all(r["code"] == 0 for r in results), [(r["argv"], r["code"]) for r in results if r["code"]]
    for table, result in zip(grids, results, strict=False):
        _check(result["stdout"], width, [grids[table]], [], f"catalog list {table} at {width}")
    show, instance = results[-2:]
    _check(show["stdout"], width, [offering_grid(h100)], [], f"catalog show h100 at {width}")
    p5 = catalog.instance_offerings("p5.48xlarge")
    _check(instance["stdout"], width, [offering_grid(p5)], [], f"catalog show p5.48xlarge at {width}")


@pytest.mark.parametrize("width", WIDTHS)
def test_attempts_of_a_resubmitted_run_keep_their_job_ids(width: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", str(width))
    start = time.time() - 7200
    attempts = [
        AttemptRow(run_id=1, number=1, backend="ray", job_id="raysubmit_vq8XcH1bM2NwQfZk", outcome="preempted",
                   exit_code=None, started_at_s=start, ended_at_s=start + 2712.4),
        AttemptRow(run_id=1, number=2, backend="ray", job_id="raysubmit_Lk3p0TnYdR9sWu4e", outcome="succeeded",
                   exit_code=0, started_at_s=start + 2800.0, ended_at_s=start + 7100.9),
    ]  # fmt: skip
    console = Console(record=True, color_system=None, file=open(os.devnull, "w"))  # noqa: SIM115
    print_attempts(attempts, console)
    console.file.close()
    _check(console.export_text(), width, [attempts_grid(attempts)], [], f"attempts at {width}")


@pytest.mark.parametrize("columns", [*(str(width) for width in WIDTHS), "20", ""])
def test_a_table_without_rows_prints_its_headers(columns: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A report can have nothing to list; its width is then the headers' (it was a TypeError)."""
    monkeypatch.setenv("COLUMNS", columns)
    grid = Grid(("kind", "files", "last access"), (), frozenset({1}), drop_order=(2,))
    console = Console(record=True, color_system=None, file=open(os.devnull, "w"))  # noqa: SIM115
    print_table(grid, console)
    console.file.close()
    assert "kind" in console.export_text()
