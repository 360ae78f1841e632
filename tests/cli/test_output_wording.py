"""Counts read as a person writes them: "1 round", "1e15 tokens", no "0 candidate configurations", no "0/None"."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

from rich.console import Console

from computewise.cli.common import progress_bar, progress_callback  # noqa: TID251
from computewise.estimate.layout import layout_problem
from computewise.models import resolve_model

CLI = [sys.executable, "-m", "computewise.cli.app"]


def run(*args: str) -> str:
    env = {**os.environ, "COLUMNS": "200"}
    done = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120, env=env, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_one_of_a_thing_is_singular() -> None:
    federated = run(
        *("plan", "federated", "-m", "gpt2", "--clients", "10", "--client-device", "apple-m2"),
        *("--uplink", "20Mbps", "--rounds", "1", "--local-steps", "1"),
    )
    assert "1 round of 1 local step x 16 samples" in federated
    assert re.search(r"for 1 round\s*$", federated, re.MULTILINE), federated
    assert "1 rounds" not in federated and "1 local steps" not in federated
    problem = layout_problem(resolve_model("gpt2"), 1, 2, 1, 8, 1)
    assert problem is not None and "does not divide 1 GPU" in problem[0]


def test_no_golden_output_counts_one_of_a_thing_in_the_plural() -> None:
    """Every verb's README example as printed (tests/cli/golden/, kept current by test_golden_output)."""
    one_in_plural = re.compile(r"(?<![\d.,])1 (GPUs|rounds|steps|runs|files|instances|replicas)\b")
    for path in sorted((Path(__file__).parent / "golden").iterdir()):
        assert not one_in_plural.search(path.read_text()), path


def test_a_count_beyond_a_thousand_trillion_reads_as_typed() -> None:
    estimate = run("estimate", "train", "--model", "gpt2", "--gpu", "h100", "--tokens", "1e15")
    assert "1e15 tokens" in estimate and "e+03T" not in estimate


def test_a_stage_that_removed_no_configuration_counts_its_rejections_only() -> None:
    plan = run("plan", "train", "--model", "gpt2", "--deadline", "30d")
    network = next(line for line in plan.splitlines() if line.strip().startswith("network:"))
    assert network.strip().endswith(" rejections") and "candidate" not in network


def test_progress_before_the_total_is_known_shows_a_question_mark() -> None:
    out = io.StringIO()
    with progress_bar("data bench", Console(file=out, force_terminal=True, width=100)) as bar:
        task = bar.add_task("starting", total=None)
        bar.refresh()
        bar.update(task, completed=2, total=8)
        bar.refresh()
    assert "0/?" in out.getvalue() and "2/8" in out.getvalue() and "None" not in out.getvalue()


def test_the_progress_callback_reads_a_total_of_zero_as_not_known_yet() -> None:
    """optimize reports ("loading the model", 0, 0) before it knows how many variants there are."""
    out = io.StringIO()
    with progress_callback("optimize", Console(file=out, force_terminal=True, width=100), "") as progress:
        progress("loading the model", 0, 0)
    text = out.getvalue()  # the bar's last drawing, as it stops
    assert "loading the model" in text and "0/?" in text and "0/0" not in text
