"""``computewise optimize`` as one call: load the model, search its variants, export the one chosen.

The CLI parses its flags into an ``OptimizeRequest`` and prints the ``SearchResult`` this returns; what
was exported is recorded on the result (``exported_to``), where ``--json`` and the printers read it.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from computewise.errors import InputError
from computewise.optimize.quality import DropBudget, metric_loader
from computewise.optimize.search import Progress, SearchOptions, SearchResult, loading, run_search
from computewise.optimize.source import load_source

__all__ = ["OptimizeRequest", "optimize"]


@dataclass(frozen=True)
class OptimizeRequest:
    """What to optimize (MODEL, its sample inputs and task), how to grade it, how to search, where to export."""

    model: str  # a Hugging Face directory, an .onnx file, or package.module:function
    max_drop: DropBudget
    options: SearchOptions
    eval_spec: str = "agreement"  # package.module:function, or agreement with the FP32 outputs
    inputs: Path | None = None
    task: str | None = None  # None: from the model's outputs
    max_length: int | None = None
    out: Path | None = None  # None: export nothing
    force: bool = False  # export the fastest variant even when none meets the budget


def optimize(request: OptimizeRequest, progress: Progress) -> SearchResult:
    """Search ``request.model``'s variants and export the chosen one (or, forced, the fastest) to ``request.out``.

    What can be refused without the model (an ``--out`` that is a file, a misspelled ``--eval``) is refused
    before it loads, which can take a minute. The variants are built in a scratch directory removed at the end.
    """
    out = request.out
    if out is not None and out.exists() and not out.is_dir():
        raise InputError(f"--out {out} is a file", "give a directory path for the exported model")
    metric_for = metric_loader(request.eval_spec, request.max_drop)
    work = Path(tempfile.mkdtemp(prefix="computewise-optimize-"))
    try:
        progress("loading the model", 0, 0)
        with loading(request.options, request.model):
            source = load_source(request.model, request.inputs, request.task, request.max_length)
        result = run_search(source, metric_for(source.task), request.options, work, progress)
        chosen = result.chosen or (result.best_speed if request.force else None)
        if out is None or chosen is None:
            return result
        from computewise.optimize.artifact import write_artifact

        return replace(result, exported_to=write_artifact(result, chosen, out, forced=result.chosen is None))
    finally:
        shutil.rmtree(work, ignore_errors=True)
