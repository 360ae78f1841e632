"""Start-up and planning speed of the CLI, against the targets of the foundation issue.

Targets: `computewise --help` and `computewise plan` start in under 0.3 s; `plan train` over the
whole catalog (>= 100k candidate configurations) answers in under 1 s on a 2-core machine.
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
from pathlib import Path

from computewise.monitor.process import cpu_model_name

CLI = [sys.executable, "-m", "computewise.cli.app"]
PLAN_MODELS = ("llama-3-8b", "gpt2", "llama-2-70b")


def _median_s(command: list[str], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _in_process_plan_s(model_name: str, repeat: int) -> tuple[float, int]:
    """Planning time without interpreter start-up, and the candidates it considered."""
    from computewise.catalog import load_catalog
    from computewise.estimate import Assumptions
    from computewise.models import resolve_model
    from computewise.plan import TrainConstraints, plan_train

    catalog = load_catalog()
    assumptions = Assumptions.from_catalog(catalog)
    model = resolve_model(model_name)
    constraints = TrainConstraints(tokens=20.0 * model.params, seq_len=min(model.max_seq_len, 4096), global_batch=256)
    times, considered = [], 0
    for _ in range(repeat):
        start = time.perf_counter()
        considered = plan_train(model, catalog, assumptions, constraints).considered
        times.append(time.perf_counter() - start)
    return statistics.median(times), considered


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
    }
    for name in PLAN_MODELS:
        seconds, considered = _in_process_plan_s(name, args.repeat)
        rows[f"plan_{name}_s"] = seconds
        rows[f"plan_{name}_candidates"] = considered

    print(f"hardware: {rows['hardware']}")
    print(f"python -c pass             {baseline:7.3f} s  (baseline)")
    for key, target in (("help_s", 0.3), ("plan_help_s", 0.3), ("plan_cli_s", 1.0)):
        value = float(rows[key])
        print(
            f"{key:26} {value:7.3f} s  {value / baseline:5.1f}x baseline  target < {target} s: "
            f"{'PASS' if value < target else 'FAIL'}"
        )
    for name in PLAN_MODELS:
        value = float(rows[f"plan_{name}_s"])
        print(
            f"plan {name:21} {value:7.3f} s  in-process, {rows[f'plan_{name}_candidates']:,} candidates; "
            f"target < 1 s: {'PASS' if value < 1.0 else 'FAIL'}"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
