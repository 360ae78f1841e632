"""Golden output: each verb's README example, run by the real CLI, prints what is committed here byte for byte.

This is the safety net under refactors of the CLI and the printers (issue 28): a change that moves one
digit, one space or one key of ``--json`` or of the 80-column table shows here as a diff. Each example
runs as ``python -m computewise.cli.app ...`` in a child process, on a pipe with ``COLUMNS=80`` and
``TZ=UTC``, in a fresh folder holding the files the README writes first (``surge.csv``,
``pipeline.yaml``) and, for the ledger verbs, a SQLite ledger seeded with four runs at fixed times.
Its stdout is compared with ``tests/cli/golden/<example>.json`` (with ``--json``) and
``<example>.txt`` (the table); a file the example writes (``--hpa hpa.yaml``) with
``<example>.<file>``.

Only examples that run offline, deterministically and in about a second are here; ``budget status``
is not (its month, burn rate and forecast are those of today), nor are the measuring verbs (``run``,
``bench``, ``optimize``, ``loadtest``, ``data bench``). The few things that vary between machines and
days are replaced before comparing, each by one substitution in ``SUBSTITUTIONS`` (and the example's own
temporary folder, which the ledger's URL names, by ``<FOLDER>``). ``catalog validate`` is left out: it
counts the catalog's rows, which every added price changes, and its table's width follows the
checkout's absolute path.

``UPDATE_GOLDEN=1 pytest tests/cli/test_golden_output.py`` rewrites the golden files from the current
output: do that only for a change of output that is meant, and read the diff before committing it.
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from computewise.ledger import Ledger, NewRun, RunStatus, SampleRow
from prices import given_price

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parent / "golden"
CLI = [sys.executable, "-m", "computewise.cli.app"]
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"

# What differs between checkouts and days, and what stands in for it in the golden files.
SUBSTITUTIONS: tuple[tuple[re.Pattern[str], str], ...] = (
    # The repository's absolute path (catalog rows say which bundled file they came from).
    (re.compile(re.escape(str(ROOT))), "<ROOT>"),
    # The age of the catalog's data counts days up to today.
    (re.compile(r'"age_days": \d+'), '"age_days": <DAYS>'),
    (re.compile(r"\d+ days ago"), "<DAYS> days ago"),
    # The instant a ledger report was made (cost report --json), which --until does not move.
    (re.compile(r'"now_s": [\d.]+'), '"now_s": <NOW>'),
)

SURGE_CSV = "hour,rps\n0,20\n1,40\n2,60\n3,180\n4,60\n5,0\n"
PIPELINE_YAML = """slo_p99_ms: 3000
stages:
  - name: detect
    model: vit-b-16
    accelerator: t4
    batch: 8
    fan_out: 1
  - name: caption
    model: llama-3-8b
    accelerator: a100-80gb
    batch: 16
    fan_out: 3
    input_len: 256
    output_len: 32
"""
LEDGER = "ledger.sqlite"
JAN_2026_S = 1_767_225_600.0  # 2026-01-01T00:00:00Z: the seeded runs start in that month


@dataclass(frozen=True)
class Example:
    """One README example: its words after ``computewise``, and how its output is compared."""

    name: str
    line: str  # as typed after `computewise`, split as a shell would
    json: bool = True  # compare its --json output (a verb that only prints JSON: its plain stdout)
    table: bool = True  # compare its table at 80 columns
    json_flag: bool = True  # whether --json is a flag of the verb (else its plain output is the JSON)
    inputs: dict[str, str] = field(default_factory=dict)  # files written into the folder first
    outputs: tuple[str, ...] = ()  # files it writes, compared too
    ledger: bool = False  # run against the seeded ledger


EXAMPLES = (
    Example(
        "estimate_train", "estimate train --model llama-3-8b --gpu h100 --gpus 8 --zero 3 --micro-batch 2 --tokens 10B"
    ),
    Example("plan_train", "plan train --model llama-3-8b --tokens 20B --deadline 7d --top 3"),
    Example(
        "plan_train_methods",
        "plan train --model llama-3-8b --tokens 50M --method lora,qlora,full --gpu rtx-4090 --pricing on-prem "
        "--max-gpus 1",
    ),
    Example(
        "estimate_infer_llama",
        "estimate infer --model llama-3-8b --gpu l4 --batch-size 8 --input-len 1024 --output-len 256",
    ),
    Example("estimate_infer_resnet", "estimate infer --model resnet-50 --gpu t4 --batch-size 64"),
    Example("estimate_comm", "estimate comm --gpu h100 --gpus 64 --op all-reduce --bytes 1GiB --cloud aws"),
    Example(
        "plan_infer",
        "plan infer --model llama-3-8b --peak-rps 20 --mean-rps 5 --max-latency 10s --input-len 512 --output-len 128 "
        "--top 3",
    ),
    Example("plan_compare_onprem", "plan compare-onprem --gpu h100"),
    Example(
        "plan_serve_cache",
        "plan serve --capacity-rps 40 --peak-rps 200 --mean-rps 80 --hourly-usd 0.10 --cache-hit-ratio 0.5",
    ),
    Example(
        "plan_serve_cap",
        "plan serve --capacity-rps 50 --latency-ms 40 --traffic surge.csv --gpu l4 --max-usd-per-hour 2.2 "
        "--monthly-usd 1500 --name minilm --hpa hpa.yaml --ray-config ray.json",
        inputs={"surge.csv": SURGE_CSV},
        outputs=("hpa.yaml", "ray.json"),
    ),
    Example(
        "plan_serve_pipeline",
        "plan serve --pipeline pipeline.yaml --peak-rps 20",
        inputs={"pipeline.yaml": PIPELINE_YAML},
    ),
    Example(
        "plan_federated",
        "plan federated -m gpt2 --clients 1000 --client-device apple-a17-pro --uplink 20Mbps --downlink 100Mbps "
        "--rounds 100 --local-steps 5 --participation 0.1 --compression int8 --seq-len 128 --local-batch 8",
    ),
    Example("catalog_list_offerings", "catalog list offerings --cloud lambda"),
    Example(
        "grafana_dashboard",
        "grafana-dashboard --job-run train --job-serve inference --datasource-uid prom-main",
        table=False,
        json_flag=False,
    ),
    Example("runs", f"runs --db {LEDGER}", ledger=True),
    Example(
        "cost_report_by_team", f"cost report --by team --since 2026-01-01 --until 2026-02-01 --db {LEDGER}", ledger=True
    ),
)


def seed_ledger(path: Path) -> None:
    """The README's four runs (two teams; a success, a failure), at fixed times in January 2026."""
    runs: tuple[tuple[str, dict[str, str], float, RunStatus, int], ...] = (
        ("python train.py", {"team": "nlp", "project": "search"}, 22.2, "succeeded", 0),
        ("python -c 'import time; time.sleep(2)'", {"team": "vision", "project": "detect"}, 2.1, "succeeded", 0),
        ("python -c 'import sys; sys.exit(3)'", {"team": "nlp", "project": "search"}, 0.097, "failed", 3),
        ("no-such-command", {"team": "nlp"}, 0.0055, "failed", 127),
    )
    with Ledger.open(f"sqlite:///{path}", create=True) as ledger:
        for index, (command, tags, seconds, status, code) in enumerate(runs):
            start_s = JAN_2026_S + 86400.0 * (index + 3) + 3600.0 * 11
            run_id = ledger.start_run(
                NewRun(
                    kind="command",
                    command=command,
                    argv=tuple(command.split()),
                    tags=tags,
                    host="golden-host",
                    pid=1000 + index,
                    user="golden",
                    cwd="/srv/jobs",
                    started_at_s=start_s,
                    interval_s=1.0,
                    price=given_price(2.5),
                    logical_cpus=2,
                )
            )
            samples = max(1, int(seconds))
            ledger.add_samples(
                [
                    SampleRow(
                        run_id=run_id,
                        t_s=start_s + i + 1.0,
                        interval_s=1.0,
                        cpu_percent=95.0,
                        rss_bytes=200_000_000,
                        read_bytes=0,
                        write_bytes=0,
                        net_sent_bytes=0,
                        net_recv_bytes=0,
                        host_cpu_percent=60.0,
                        host_memory_used_bytes=4_000_000_000,
                        gpu_count=0,
                        gpu_util_pct=None,
                        gpu_memory_used_bytes=None,
                        gpu_power_w=None,
                        energy_j=30.0,
                        energy_measured=False,
                        idle=False,
                    )
                    for i in range(samples)
                ]
            )
            ledger.finish_run(run_id, status, start_s + seconds, exit_code=code)


def normalised(text: str, folder: Path) -> str:
    """``text`` with the example's own folder (the ledger's URL names it) and each of ``SUBSTITUTIONS`` replaced."""
    text = text.replace(str(folder), "<FOLDER>")
    for pattern, replacement in SUBSTITUTIONS:
        text = pattern.sub(replacement, text)
    return text


def check(actual: str, golden: Path, folder: Path) -> None:
    """``actual`` (normalised) is the golden file's text; with UPDATE_GOLDEN=1 it becomes it."""
    text = normalised(actual, folder)
    if UPDATE:
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(text, encoding="utf-8")
        return
    assert golden.is_file(), f"no golden file {golden.name}: run with UPDATE_GOLDEN=1 to write it"
    assert text == golden.read_text(encoding="utf-8"), f"{golden.name} differs (UPDATE_GOLDEN=1 rewrites it)"


def run_example(example: Example, folder: Path, extra: tuple[str, ...]) -> str:
    for name, content in example.inputs.items():
        (folder / name).write_text(content, encoding="utf-8")
    if example.ledger and not (folder / LEDGER).exists():
        seed_ledger(folder / LEDGER)
    env = {**os.environ, "COLUMNS": "80", "TZ": "UTC"}
    env.pop("COMPUTEWISE_DB", None)
    done = subprocess.run(
        [*CLI, *shlex.split(example.line), *extra],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


Case = tuple[Example, str]
CASES: list[Case] = [(e, "json") for e in EXAMPLES if e.json] + [(e, "txt") for e in EXAMPLES if e.table]


@pytest.mark.parametrize(("example", "kind"), CASES, ids=[f"{e.name}-{kind}" for e, kind in CASES])
def test_readme_example_prints_its_golden_output(example: Example, kind: str, tmp_path: Path) -> None:
    extra = ("--json",) if kind == "json" and example.json_flag else ()
    check(run_example(example, tmp_path, extra), GOLDEN / f"{example.name}.{kind}", tmp_path)
    for written in example.outputs:
        check((tmp_path / written).read_text(encoding="utf-8"), GOLDEN / f"{example.name}.{written}", tmp_path)


def test_every_golden_file_belongs_to_an_example() -> None:
    """A golden file left behind by a renamed example would protect nothing."""
    expected = {f"{e.name}.{kind}" for e, kind in CASES} | {f"{e.name}.{o}" for e in EXAMPLES for o in e.outputs}
    assert {path.name for path in GOLDEN.iterdir()} == expected


@functools.cache
def _readme_outputs() -> dict[tuple[str, ...], str]:
    """Each README command after ``$ computewise`` (continuation lines joined, as words) and what its block shows."""
    shown: dict[tuple[str, ...], str] = {}
    command: tuple[str, ...] | None = None
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.startswith("$ computewise "):
            typed = line
            while typed.endswith("\\") and index + 1 < len(lines):
                index += 1
                typed = typed[:-1] + " " + lines[index].strip()
            command = tuple(shlex.split(typed.removeprefix("$ computewise ")))
            shown[command] = ""
        elif line.startswith(("```", "$ ")):
            command = None
        elif command is not None:
            shown[command] += line + "\n"
        index += 1
    return shown


def _figures(text: str) -> set[str]:
    """The words of ``text`` that hold a digit (amounts, times, sizes, shares), stripped of table punctuation."""
    words = (word.strip("│╭╮╰╯─·,;:()") for word in text.split())
    return {word for word in words if any(char.isdigit() for char in word)}


SHOWN_IN_README = [e for e in EXAMPLES if e.table and _readme_outputs().get(tuple(shlex.split(e.line)))]


def test_the_readme_shows_the_output_of_most_examples() -> None:
    """The check below covers the README's own blocks; a README that stopped showing them would pass it."""
    assert len(SHOWN_IN_README) >= 10, [e.name for e in SHOWN_IN_README]


@pytest.mark.parametrize("example", SHOWN_IN_README, ids=lambda e: e.name)
def test_the_readme_shows_the_figures_its_example_prints_today(example: Example) -> None:
    """A README block under an example's command shows no figure that the command no longer prints: the
    README's tables were once pasted by hand and kept their numbers after the estimator changed."""
    shown = _readme_outputs()[tuple(shlex.split(example.line))]
    printed = (GOLDEN / f"{example.name}.txt").read_text(encoding="utf-8")
    stale = sorted(_figures(shown) - _figures(printed))
    assert not stale, f"README.md shows figures `computewise {example.line}` no longer prints: {stale}"
