"""Start-up and planning speed of the CLI, against the targets of the foundation issue.

Targets: `computewise --help` and `computewise plan` start in under 0.3 s; `plan train` over the
whole catalog (>= 100k candidate configurations) answers in under 1 s on a 2-core machine, and in
under 3 s with `--max-gpus 16384` (frontier scale: every TP/PP/CP/virtual-stage layout of up to
16,384 GPUs), including Llama 3.1 405B on 15.6T tokens on H100s within 120 days.
Each figure is printed next to a baseline measured in the same run (a bare `python -c pass`),
so a slow shared machine shows up as a slow baseline, not as a false regression.

Usage: python benchmarks/speed.py [--repeat 7] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from computewise.system.cpu import cpu_model_name

CLI = [sys.executable, "-m", "computewise.cli.app"]
PLAN_MODELS = ("llama-3-8b", "gpt2", "llama-2-70b")
FRONTIER_GPUS = 16384
# Llama 3 405B's run (arXiv:2407.21783): 15.6T tokens at 8K, 16M-token batches, H100s.
FRONTIER_CLI = (
    "plan", "train", "--model", "llama-3.1-405b", "--tokens", "15.6T", "--seq-len", "8192",
    "--global-batch", "2048", "--gpu", "h100", "--deadline", "120d", "--max-gpus", str(FRONTIER_GPUS), "--json",
)  # fmt: skip


def _median_s(command: list[str], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _in_process_plan_s(model_name: str, repeat: int, frontier: str = "") -> tuple[float, int, str]:
    """Planning time without interpreter start-up, the candidates it considered, and what it recommends.

    ``frontier``: "" is the default search (``TrainConstraints``' own max_gpus); "gpus" raises
    max_gpus to FRONTIER_GPUS; "405b" is the Llama 3 405B run of FRONTIER_CLI.
    """
    from computewise.catalog import load_catalog
    from computewise.estimate import Assumptions
    from computewise.models import resolve_model
    from computewise.plan import TrainConstraints, plan_train

    catalog = load_catalog()
    assumptions = Assumptions.from_catalog(catalog)
    model = resolve_model(model_name)
    constraints = TrainConstraints(tokens=20.0 * model.params, seq_len=min(model.max_seq_len, 4096), global_batch=256)
    if frontier == "gpus":
        constraints = replace(constraints, max_gpus=FRONTIER_GPUS)
    elif frontier == "405b":
        constraints = TrainConstraints(
            tokens=15.6e12,
            seq_len=8192,
            global_batch=2048,
            accelerators=(catalog.accelerator("h100").slug,),
            max_gpus=FRONTIER_GPUS,
            deadline_s=120 * 86400.0,
        )
    times, considered, best = [], 0, ""
    for _ in range(repeat):
        start = time.perf_counter()
        plan = plan_train(model, catalog, assumptions, constraints)
        times.append(time.perf_counter() - start)
        considered, r = plan.considered, plan.recommended
        best = (
            f"{r.gpus} x {r.accelerator}: tp {r.tp} pp {r.pp} cp {r.cp} dp {r.dp} v {r.virtual_stages} "
            f"ZeRO-{r.zero} mb {r.micro_batch} {r.recompute}, {r.time_s / 86400:.1f} d"
        )
    return statistics.median(times), considered, best


def _catalog_load_s(repeat: int) -> tuple[float, float]:
    """Median seconds to parse the bundled catalog (cold) and to get it from ``load_catalog``'s cache."""
    from computewise.catalog import load_catalog
    from computewise.catalog.loader import discover_files, load_files

    files = discover_files()
    cold, cached = [], []
    load_catalog()
    for _ in range(repeat):
        start = time.perf_counter()
        load_files(files)
        cold.append(time.perf_counter() - start)
        start = time.perf_counter()
        load_catalog()
        cached.append(time.perf_counter() - start)
    return statistics.median(cold), statistics.median(cached)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    baseline = _median_s([sys.executable, "-c", "pass"], args.repeat)
    rows: dict[str, float | int | str] = {
        "hardware": f"{cpu_model_name()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "python_startup_s": baseline,
        "help_s": _median_s([*CLI, "--help"], args.repeat),
        "plan_help_s": _median_s([*CLI, "plan", "train", "--help"], args.repeat),
        "plan_cli_s": _median_s([*CLI, "plan", "train", "--model", PLAN_MODELS[0], "--json"], args.repeat),
        "plan_cli_16k_s": _median_s(
            [*CLI, "plan", "train", "--model", PLAN_MODELS[0], "--max-gpus", str(FRONTIER_GPUS), "--json"], args.repeat
        ),
        "plan_cli_405b_s": _median_s([*CLI, *FRONTIER_CLI], args.repeat),
    }
    for name in PLAN_MODELS:
        seconds, considered, _ = _in_process_plan_s(name, args.repeat)
        rows[f"plan_{name}_s"] = seconds
        rows[f"plan_{name}_candidates"] = considered
    frontier = {
        "16k": _in_process_plan_s(PLAN_MODELS[0], args.repeat, "gpus"),
        "405b": _in_process_plan_s("llama-3.1-405b", args.repeat, "405b"),
    }
    for key, (seconds, considered, best) in frontier.items():
        rows[f"plan_{key}_s"], rows[f"plan_{key}_candidates"], rows[f"plan_{key}_recommended"] = (
            seconds,
            considered,
            best,
        )

    rows["catalog_parse_s"], rows["catalog_cached_s"] = _catalog_load_s(args.repeat)

    print(f"hardware: {rows['hardware']}")
    print(f"python -c pass             {baseline:7.3f} s  (baseline)")
    for key, target in (
        ("help_s", 0.3),
        ("plan_help_s", 0.3),
        ("plan_cli_s", 1.0),
        ("plan_cli_16k_s", 3.0),
        ("plan_cli_405b_s", 3.0),
    ):
        value = float(rows[key])
        print(
            f"{key:26} {value:7.3f} s  {value / baseline:5.1f}x baseline  target < {target} s: "
            f"{'PASS' if value < target else 'FAIL'}"
        )
    for key, target in (("catalog_parse_s", 0.030), ("catalog_cached_s", 0.005)):
        value = float(rows[key])
        print(
            f"{key:26} {value * 1000:7.1f} ms in-process; target < {target * 1000:.0f} ms: "
            f"{'PASS' if value < target else 'FAIL'}"
        )
    for name in PLAN_MODELS:
        value = float(rows[f"plan_{name}_s"])
        print(
            f"plan {name:21} {value:7.3f} s  in-process, {rows[f'plan_{name}_candidates']:,} candidates; "
            f"target < 1 s: {'PASS' if value < 1.0 else 'FAIL'}"
        )
    for key, label in (("16k", f"{PLAN_MODELS[0]} <= {FRONTIER_GPUS}"), ("405b", "llama-3.1-405b 16k H100")):
        value = float(rows[f"plan_{key}_s"])
        print(
            f"plan {label:21} {value:7.3f} s  in-process, {rows[f'plan_{key}_candidates']:,} candidates; "
            f"target < 3 s: {'PASS' if value < 3.0 else 'FAIL'}"
        )
        print(f"  recommended: {rows[f'plan_{key}_recommended']}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
