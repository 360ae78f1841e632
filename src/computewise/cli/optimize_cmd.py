"""``computewise optimize MODEL``: the fastest variant of a model that keeps its accuracy, exported."""

from __future__ import annotations

import contextlib
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from computewise.cli.common import HtmlOption, JsonOption, bounded_int, emit, progress_bar, whole_numbers
from computewise.errors import InputError

if TYPE_CHECKING:
    from computewise.optimize.search import Progress, SearchOptions, SearchResult

EXIT_NO_VARIANT = 1


def optimize(
    model: Annotated[
        str, typer.Argument(help="A Hugging Face model directory, an .onnx file, or package.module:function.")
    ],
    eval_spec: Annotated[
        str,
        typer.Option(
            "--eval",
            help="package.module:function called as fn(predict) -> float (higher is better), or 'agreement' "
            "with the FP32 outputs (cosine for embeddings, top-1 for classifiers, relative error for regressors).",
        ),
    ] = "agreement",
    inputs: Annotated[
        Path | None,
        typer.Option(help="Sample inputs: sentences (.txt, one per line, or .jsonl with 'text') or arrays (.npz)."),
    ] = None,
    max_drop: Annotated[
        str, typer.Option(help="Quality the variant may lose: 1% (relative to the baseline) or 0.01 (absolute).")
    ] = "1%",
    batch_sizes: Annotated[str, typer.Option(help="Batch sizes to benchmark, comma-separated.")] = "1,32",
    target: Annotated[
        str, typer.Option(help="throughput (largest batch size) or latency (p50 at the smallest batch size).")
    ] = "throughput",
    out: Annotated[
        Path | None, typer.Option(help="Export the chosen variant and its manifest to this directory.")
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Export the fastest variant even when none meets the budget.")
    ] = False,
    batch_invariant: Annotated[
        bool,
        typer.Option("--batch-invariant", help="Rule out variants whose outputs depend on their batch neighbours."),
    ] = False,
    time_budget: Annotated[
        str, typer.Option(help="Wall-clock cap on the whole command, model loading and export included: 10m, 900s.")
    ] = "15m",
    variants: Annotated[
        str | None, typer.Option(help="Only variants matching these glob patterns, comma-separated: 'ort-int8-*'.")
    ] = None,
    task: Annotated[
        str | None, typer.Option(help="embedding, classifier or regressor. Default: from the model's outputs.")
    ] = None,
    threads: Annotated[
        int | None,
        typer.Option(parser=bounded_int("--threads"), help="Threads per variant. Default: every usable CPU."),
    ] = None,
    max_length: Annotated[
        int | None, typer.Option(parser=bounded_int("--max-length"), help="Truncate sentences to this many tokens.")
    ] = None,
    as_json: JsonOption = False,
    html: HtmlOption = None,
) -> None:
    """Build, grade and time quantized, pruned and compiled variants; export the fastest inside --max-drop."""

    import psutil

    from computewise.optimize.quality import metric_loader, parse_drop
    from computewise.optimize.search import SearchOptions, loading, run_search
    from computewise.optimize.source import load_source
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
    if out is not None and out.exists() and not out.is_dir():
        raise InputError(f"--out {out} is a file", "give a directory path for the exported model")
    metric_for = metric_loader(eval_spec, budget)  # a misspelled --eval is refused before the model loads
    work = Path(tempfile.mkdtemp(prefix="computewise-optimize-"))
    stderr = Console(stderr=True)
    try:
        with _progress(stderr, options) as progress:
            progress("loading the model", 0, 0)
            with loading(options, model):
                source = load_source(model, inputs, task, max_length)
            result = run_search(source, metric_for(source.task), options, work, progress)
        data: dict[str, Any] = result.to_dict()
        chosen = result.chosen or (result.best_speed if force else None)
        data["exported_to"] = None
        if out is not None and chosen is not None:
            from computewise.optimize.artifact import write_artifact

            data["exported_to"] = str(write_artifact(result, chosen, out, forced=result.chosen is None))
        # The printers read the typed result; the dict (with exported_to) is what --json writes.
        emit(data, as_json, html, lambda _, console: print_optimize(result, console), lambda _: optimize_html(result))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if data["exported_to"] is not None and not as_json:
        stderr.print(f"exported {data['exported_to']}", markup=False, emoji=False)
    if result.chosen is None and not force:
        stderr.print(
            f"nothing exported: {_why_nothing(result)} (use --force to export the fastest anyway)",
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
        with progress_bar("optimize", stderr) as bar:
            task_id = bar.add_task("", total=None)
            yield lambda name, done, total: bar.update(task_id, description=name, completed=done, total=total or None)
        return
    started = options.started_at if options.started_at is not None else time.time()

    def line(name: str, done: int, total: int) -> None:
        step = f"{done}/{total} " if total else ""
        elapsed = time.time() - started
        sys.stderr.write(f"optimize: {step}{name} ({elapsed:.0f} s of the {options.time_budget_s:g} s budget)\n")
        sys.stderr.flush()

    yield line


def _why_nothing(result: SearchResult) -> str:
    """The reason no variant was chosen, in the terms of the rule that ruled them out."""
    from computewise.optimize.search import BASELINE

    measured = [v for v in result.variants if v.name != BASELINE and v.status == "ok"]
    if not measured:
        return "no variant could be built and measured"
    fits = [v for v in measured if v.meets_budget]
    if not fits:
        return "no variant meets the quality budget"
    if not any(v.exportable for v in fits):
        return "the variants within the quality budget cannot be exported"
    if result.options.batch_invariant and not any(v.batch_invariant for v in fits):
        return "no variant within the quality budget is batch-invariant"
    return "no exportable variant within the quality budget is faster than the FP32 baseline"
