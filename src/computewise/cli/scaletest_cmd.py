"""``computewise scaletest ENTRYPOINT --nproc 1,2,4``: measured data-parallel scaling under torchrun."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from computewise.cli.common import (
    JsonOption,
    bounded_float,
    bounded_int,
    choice,
    entry_config,
    print_document,
    progress_bar,
    whole_numbers,
)

EXIT_SOME_FAILED = 1
"""A world size above 1 failed or timed out; the others were measured and reported."""


# The flags that take more than a line, one type each, so the verb's signature reads in a screen.
_Entry = Annotated[str, typer.Argument(help="Training entry point: package.module:function(config) -> TrainingSetup.")]
_Steps = Annotated[
    int, typer.Option(parser=bounded_int("--steps"), help="Measured steps per world size (median step time).")
]
_WarmupSteps = Annotated[
    int, typer.Option(parser=bounded_int("--warmup-steps"), help="Untimed steps first (allocation, compilation).")
]
_Config = Annotated[str | None, typer.Option(help="The entry point's own config: a JSON object or a JSON file.")]
_TrainConfig = Annotated[
    Path | None,
    typer.Option(
        help="A training configuration written by `computewise tune ENTRY --out FILE` (default: plain settings)."
    ),
]
_Threads = Annotated[
    int | None,
    typer.Option(
        parser=bounded_int("--threads"),
        help="Threads per process. Default: the usable cores over the largest --nproc.",
    ),
]
_LinkGbPerS = Annotated[
    float | None,
    typer.Option(
        parser=bounded_float("--link-gb-per-s"),
        help="All-reduce bandwidth for the prediction, GB/s. Default: catalog (GPU) or assumed (CPU).",
    ),
]


def scaletest(
    entry: _Entry,
    nproc: Annotated[str, typer.Option(help="World sizes to measure, comma-separated (1 is always included).")] = "1,2",
    steps: _Steps = 10,
    warmup_steps: _WarmupSteps = 3,
    config: _Config = None,
    train_config: _TrainConfig = None,
    threads: _Threads = None,
    device: Annotated[str, typer.Option(help="auto (CUDA when present), cpu or cuda.")] = "auto",
    timeout: Annotated[str, typer.Option(help="Limit for each world size's launch: 5m, 300s.")] = "5m",
    link_gb_per_s: _LinkGbPerS = None,
    as_json: JsonOption = False,
) -> None:
    """Train a few steps at each world size under torchrun; print measured vs predicted scaling efficiency."""
    from computewise.report.scaletest import print_scaletest
    from computewise.train.config import TrainConfig, load_config
    from computewise.tune.scaletest import ScaleOptions, parse_nproc, run_scaletest
    from computewise.units import parse_duration_s, plural

    options = ScaleOptions(
        nproc=parse_nproc(",".join(map(str, whole_numbers(nproc, "--nproc")))),
        steps=steps,
        warmup_steps=warmup_steps,
        config=entry_config(config),
        train_config=load_config(train_config) if train_config is not None else TrainConfig(),
        threads=threads,
        device=choice(device, ("auto", "cpu", "cuda"), "--device"),
        timeout_s=parse_duration_s(timeout, "--timeout"),
        link_bytes_per_s=link_gb_per_s * 1e9 if link_gb_per_s is not None else None,
    )
    stderr = Console(stderr=True)
    with progress_bar("scaletest", stderr) as bar:
        task_id = bar.add_task("loading", total=len(options.nproc))

        def progress(size: int, done: int, total: int) -> None:
            bar.update(task_id, description=plural(size, "process", "processes"), completed=done, total=total)

        result = run_scaletest(entry, options, progress)
    print_document(result.to_dict(), as_json, lambda _, console: print_scaletest(result, console))
    failed = [row.nproc for row in result.rows if row.status != "ok"]
    if failed:
        sizes = ", ".join([*map(str, failed[:-1]), plural(failed[-1], "process", "processes")])
        stderr.print(f"not measured: {sizes} (see the notes)", highlight=False)
        sys.exit(EXIT_SOME_FAILED)
