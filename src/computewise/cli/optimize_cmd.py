"""``computewise optimize MODEL``: the fastest variant of a model that keeps its accuracy, exported."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from computewise.cli.common import (
    EVAL_HELP,
    HtmlOption,
    JsonOption,
    bounded_int,
    emit,
    progress_callback,
    whole_numbers,
)
from computewise.system.files import check_writable

if TYPE_CHECKING:
    from computewise.optimize.search import Progress, SearchOptions

EXIT_NO_VARIANT = 1

# The flags of optimize, one type each, so the verb's signature reads in a screen.
_Model = Annotated[
    str, typer.Argument(help="A Hugging Face model directory, an .onnx file, or package.module:function.")
]
_EvalSpec = Annotated[
    str,
    typer.Option(
        "--eval",
        help=EVAL_HELP
        + "the FP32 outputs (cosine for embeddings, top-1 for classifiers, relative error for regressors).",
    ),
]
_Inputs = Annotated[
    Path | None,
    typer.Option(help="Sample inputs: sentences (.txt, one per line, or .jsonl with 'text') or arrays (.npz)."),
]
_MaxDrop = Annotated[
    str, typer.Option(help="Quality the variant may lose: 1% (relative to the baseline) or 0.01 (absolute).")
]
_BatchSizes = Annotated[str, typer.Option(help="Batch sizes to benchmark, comma-separated.")]
_Target = Annotated[
    str, typer.Option(help="throughput (largest batch size) or latency (p50 at the smallest batch size).")
]
_Out = Annotated[Path | None, typer.Option(help="Export the chosen variant and its manifest to this directory.")]
_Force = Annotated[bool, typer.Option("--force", help="Export the fastest variant even when none meets the budget.")]
_BatchInvariant = Annotated[
    bool, typer.Option("--batch-invariant", help="Rule out variants whose outputs depend on their batch neighbours.")
]
_TimeBudget = Annotated[
    str, typer.Option(help="Wall-clock cap on the whole command, model loading and export included: 10m, 900s.")
]
_Variants = Annotated[
    str | None, typer.Option(help="Only variants matching these glob patterns, comma-separated: 'ort-int8-*'.")
]
_Task = Annotated[
    str | None, typer.Option(help="embedding, classifier or regressor. Default: from the model's outputs.")
]
_Threads = Annotated[
    int | None, typer.Option(parser=bounded_int("--threads"), help="Threads per variant. Default: every usable CPU.")
]
_MaxLength = Annotated[
    int | None, typer.Option(parser=bounded_int("--max-length"), help="Truncate sentences to this many tokens.")
]


def optimize(
    model: _Model,
    eval_spec: _EvalSpec = "agreement",
    inputs: _Inputs = None,
    max_drop: _MaxDrop = "1%",
    batch_sizes: _BatchSizes = "1,32",
    target: _Target = "throughput",
    out: _Out = None,
    force: _Force = False,
    batch_invariant: _BatchInvariant = False,
    time_budget: _TimeBudget = "15m",
    variants: _Variants = None,
    task: _Task = None,
    threads: _Threads = None,
    max_length: _MaxLength = None,
    as_json: JsonOption = False,
    html: HtmlOption = None,
) -> None:
    """Build, grade and time quantized, pruned and compiled variants; export the fastest inside --max-drop."""

    import psutil

    from computewise.optimize.quality import parse_drop
    from computewise.optimize.run import OptimizeRequest
    from computewise.optimize.run import optimize as run_optimize
    from computewise.optimize.search import SearchOptions
    from computewise.report.optimize import optimize_html, print_optimize
    from computewise.units import parse_duration_s

    budget = parse_drop(max_drop)
    options = SearchOptions(
        batch_sizes=whole_numbers(batch_sizes, "--batch-sizes"),
        target=target,
        time_budget_s=parse_duration_s(time_budget, "--time-budget"),
        batch_invariant=batch_invariant,
        only=tuple(part.strip() for part in (variants or "").split(",") if part.strip()),
        threads=threads,
        started_at=psutil.Process().create_time(),  # the budget covers start-up and model loading too
    )
    request = OptimizeRequest(model, budget, options, eval_spec, inputs, task, max_length, out, force)
    if html is not None:
        check_writable(html, "--html", "nothing was run")
    stderr = Console(stderr=True)
    with _progress(stderr, options) as progress:
        result = run_optimize(request, progress)
    emit(result, as_json, html, print_optimize, optimize_html)
    if result.exported_to is not None and not as_json:
        stderr.print(f"exported {result.exported_to}", markup=False, emoji=False)
    if result.chosen is None and not force:
        stderr.print(
            f"nothing exported: {result.why_nothing_chosen()} (use --force to export the fastest anyway)",
            markup=False,
            emoji=False,
        )
        sys.exit(EXIT_NO_VARIANT)


@contextlib.contextmanager
def _progress(stderr: Console, options: SearchOptions) -> Iterator[Progress]:
    """Where the search is: a bar on a terminal; elsewhere (a pipe, a CI log) one plain line per step.

    A bar drawn to a pipe stays silent until the end, and a search can take the whole budget.
    """
    if stderr.is_terminal:
        with progress_callback("optimize", stderr, "") as progress:
            yield progress
        return
    started = options.started_at if options.started_at is not None else time.time()

    def line(name: str, done: int, total: int) -> None:
        step = f"{done}/{total} " if total else ""
        elapsed = time.time() - started
        sys.stderr.write(f"optimize: {step}{name} ({elapsed:.0f} s of the {options.time_budget_s:g} s budget)\n")
        sys.stderr.flush()

    yield line
