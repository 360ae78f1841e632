"""``computewise data bench|convert``: how fast an input pipeline delivers, against what the GPUs consume."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from computewise.cli.common import (
    CatalogOption,
    JsonOption,
    bounded_float,
    bounded_int,
    print_document,
    progress_callback,
)

app = typer.Typer(
    help="Measure a data loader against the GPUs' appetite; convert row formats to Parquet.", no_args_is_help=True
)


# The flags of data bench, one type each, so the verb's signature reads in a screen.
_Source = Annotated[
    str,
    typer.Argument(
        help="Parquet, CSV, JSON Lines, .npy, WebDataset .tar shards, a folder of images, a folder or "
        "s3:// / gs:// prefix of them, or package.module:function returning a DataLoader or iterable."
    ),
]
_Format = Annotated[
    str | None,
    typer.Option("--format", help="parquet, csv, jsonl, npy, bin, tar or images (default: from the file names)."),
]
_MaxWorkers = Annotated[
    int | None,
    typer.Option(
        "--max-workers", parser=bounded_int("--max-workers"), help="Measure 1, 2, 4, ... up to this many workers."
    ),
]
_TimePerConfig = Annotated[
    float,
    typer.Option(
        "--time-per-config",
        parser=bounded_float("--time-per-config"),
        help="Seconds to read each configuration, at most (a smaller dataset is read whole).",
    ),
]
_BatchSize = Annotated[int, typer.Option("--batch-size", parser=bounded_int("--batch-size"), help="Samples per batch.")]
_SeqLen = Annotated[
    int, typer.Option("--seq-len", parser=bounded_int("--seq-len"), help="Tokens per sample of a 1-D token file.")
]
_TokenDtype = Annotated[
    str, typer.Option("--token-dtype", help="Element type of a headerless .bin token file (nanoGPT: uint16).")
]
_Plan = Annotated[
    Path | None, typer.Option("--plan", help="A `plan train --json` file: its recommended option's step time.")
]
_GlobalBatch = Annotated[
    int | None,
    typer.Option(
        "--global-batch", parser=bounded_int("--global-batch"), help="Samples per optimizer step (with --plan)."
    ),
]
_Model = Annotated[str | None, typer.Option("--model", "-m", help="With --gpu: the job as `estimate train` sizes it.")]
_Gpu = Annotated[str | None, typer.Option("--gpu", "-g", help="Accelerator of the job (with --model).")]
_Gpus = Annotated[int, typer.Option("--gpus", "-n", parser=bounded_int("--gpus"), help="Accelerators of the job.")]
_Demand = Annotated[
    float | None,
    typer.Option(
        "--demand",
        parser=bounded_float("--demand"),
        help="Samples/s the job consumes, measured (e.g. a track() run's samples over its compute time).",
    ),
]


@app.command("bench")
def bench(
    source: _Source,
    data_format: _Format = None,
    max_workers: _MaxWorkers = None,
    time_per_config: _TimePerConfig = 10.0,
    batch_size: _BatchSize = 256,
    seq_len: _SeqLen = 1024,
    token_dtype: _TokenDtype = "uint16",
    plan: _Plan = None,
    global_batch: _GlobalBatch = None,
    model_name: _Model = None,
    gpu: _Gpu = None,
    gpus: _Gpus = 1,
    demand: _Demand = None,
    catalog_paths: CatalogOption = None,
    as_json: JsonOption = False,
) -> None:
    """Samples/s, bytes/s, time to first batch and CPU per worker at 1, 2, 4... workers; input-bound or not."""
    from computewise.data.bench import BenchOptions, run_data_bench
    from computewise.data.demand import DemandRequest
    from computewise.report.data import print_data_bench

    wanted = DemandRequest(
        plan, global_batch, model_name, gpu, gpus, seq_len, demand, tuple(catalog_paths or ())
    ).demand()  # refused before a minute of reading
    options = BenchOptions(
        source=source,
        format=data_format.lower() if data_format else None,
        max_workers=max_workers,
        seconds_per_config=time_per_config,
        batch_rows=batch_size,
        seq_len=seq_len,
        token_dtype=token_dtype,
    )
    with progress_callback("data bench", Console(stderr=True)) as progress:
        result = run_data_bench(options, wanted, progress)
    print_document(result, as_json, print_data_bench)


@app.command("convert")
def convert(
    source: Annotated[str, typer.Argument(help="A CSV or JSON Lines file (local or an fsspec URL).")],
    target: Annotated[Path, typer.Argument(help="The Parquet file to write (replaced atomically).")],
    batch_size: Annotated[
        int,
        typer.Option("--batch-size", parser=bounded_int("--batch-size"), help="Samples per batch when timing reads."),
    ] = 256,
    as_json: JsonOption = False,
) -> None:
    """Rewrite a row format as Parquet with pyarrow, and time reading both."""
    from computewise.data.convert import convert as run_convert
    from computewise.report.data import print_convert

    print_document(run_convert(source, target, batch_size), as_json, print_convert)
