"""``computewise data bench|convert``: how fast an input pipeline delivers, against what the GPUs consume."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from computewise.cli.common import CatalogOption, JsonOption, bounded_float, bounded_int, emit_json, progress_bar
from computewise.errors import InputError

app = typer.Typer(
    help="Measure a data loader against the GPUs' appetite; convert row formats to Parquet.", no_args_is_help=True
)


@app.command("bench")
def bench(
    source: Annotated[
        str,
        typer.Argument(
            help="Parquet, CSV, JSON Lines, .npy, WebDataset .tar shards, a folder of images, a folder or "
            "s3:// / gs:// prefix of them, or package.module:function returning a DataLoader or iterable."
        ),
    ],
    data_format: Annotated[
        str | None,
        typer.Option("--format", help="parquet, csv, jsonl, npy, bin, tar or images (default: from the file names)."),
    ] = None,
    max_workers: Annotated[
        int | None,
        typer.Option(
            "--max-workers", parser=bounded_int("--max-workers"), help="Measure 1, 2, 4, ... up to this many workers."
        ),
    ] = None,
    time_per_config: Annotated[
        float,
        typer.Option(
            "--time-per-config",
            parser=bounded_float("--time-per-config"),
            help="Seconds to read each configuration, at most (a smaller dataset is read whole).",
        ),
    ] = 10.0,
    batch_size: Annotated[
        int, typer.Option("--batch-size", parser=bounded_int("--batch-size"), help="Samples per batch.")
    ] = 256,
    seq_len: Annotated[
        int,
        typer.Option("--seq-len", parser=bounded_int("--seq-len"), help="Tokens per sample of a 1-D token file."),
    ] = 1024,
    token_dtype: Annotated[
        str, typer.Option("--token-dtype", help="Element type of a headerless .bin token file (nanoGPT: uint16).")
    ] = "uint16",
    plan: Annotated[
        Path | None, typer.Option("--plan", help="A `plan train --json` file: its recommended option's step time.")
    ] = None,
    global_batch: Annotated[
        int | None,
        typer.Option(
            "--global-batch", parser=bounded_int("--global-batch"), help="Samples per optimizer step (with --plan)."
        ),
    ] = None,
    model_name: Annotated[
        str | None, typer.Option("--model", "-m", help="With --gpu: the job as `estimate train` sizes it.")
    ] = None,
    gpu: Annotated[str | None, typer.Option("--gpu", "-g", help="Accelerator of the job (with --model).")] = None,
    gpus: Annotated[
        int, typer.Option("--gpus", "-n", parser=bounded_int("--gpus"), help="Accelerators of the job.")
    ] = 1,
    demand: Annotated[
        float | None,
        typer.Option(
            "--demand",
            parser=bounded_float("--demand"),
            help="Samples/s the job consumes, measured (e.g. a track() run's samples over its compute time).",
        ),
    ] = None,
    catalog_paths: CatalogOption = None,
    as_json: JsonOption = False,
) -> None:
    """Samples/s, bytes/s, time to first batch and CPU per worker at 1, 2, 4... workers; input-bound or not."""
    from computewise.data.bench import BenchOptions, run_data_bench

    wanted = _demand(plan, global_batch, model_name, gpu, gpus, seq_len, demand, catalog_paths)
    options = BenchOptions(
        source=source,
        format=data_format.lower() if data_format else None,
        max_workers=max_workers,
        seconds_per_config=time_per_config,
        batch_rows=batch_size,
        seq_len=seq_len,
        token_dtype=token_dtype,
    )
    with progress_bar("data bench", Console(stderr=True)) as bar:
        task_id = bar.add_task("starting", total=None)

        def progress(description: str, done: int, total: int) -> None:
            bar.update(task_id, description=description, completed=done, total=total)

        result = run_data_bench(options, wanted, progress)
    data = result.to_dict()
    if as_json:
        emit_json(data)
    else:
        _print_bench(data, Console())


def _demand(
    plan: Path | None,
    global_batch: int | None,
    model_name: str | None,
    gpu: str | None,
    gpus: int,
    seq_len: int,
    rate: float | None,
    catalog_paths: list[Path] | None,
) -> Any:
    from computewise.data.demand import demand_from_model, demand_from_plan, demand_from_rate

    given = [name for name, value in (("--plan", plan), ("--model", model_name), ("--demand", rate)) if value]
    if len(given) > 1:
        raise InputError(
            f"{' and '.join(given)} both say what the job consumes", "give one of --plan, --model, --demand"
        )
    if (model_name is None) != (gpu is None):
        raise InputError("--model and --gpu go together", "e.g. --model llama-3-8b --gpu h100 --gpus 8")
    if plan is not None:
        return demand_from_plan(plan, global_batch)
    if model_name is not None and gpu is not None:
        return demand_from_model(model_name, gpu, gpus, seq_len, global_batch, tuple(catalog_paths or ()))
    if rate is not None:
        return demand_from_rate(rate)
    return None


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
    from computewise.report.prose import print_prose
    from computewise.units import format_bytes, format_count

    result = run_convert(source, target, batch_size)
    if as_json:
        emit_json(result.to_dict())
        return
    console = Console()
    print_prose(
        console,
        f"wrote {result.target}: {format_count(result.rows)} rows, {format_bytes(result.target_bytes)} "
        f"(from {format_bytes(result.source_bytes)}) in {result.convert_s:.2f} s",
        markup=False,
    )
    print_prose(
        console,
        f"read back: {result.source_read_s:.2f} s as {Path(source).suffix.lstrip('.').upper() or 'text'}, "
        f"{result.target_read_s:.2f} s as Parquet ({result.read_speedup:.1f}x faster)",
        markup=False,
    )


def _print_bench(data: dict[str, Any], console: Console) -> None:
    from rich.text import Text

    from computewise.report.prose import print_prose
    from computewise.report.rows import Grid
    from computewise.report.table import print_table
    from computewise.units import format_bytes, format_count

    size = f", {format_bytes(data['total_bytes'])} in {data['files']} file(s)" if data["files"] else ""
    console.print(f"[bold]{data['source']}[/bold] ({data['format']}{size}); loader: {data['loader']}", highlight=False)
    headers = ("workers", "prefetch", "pin", "samples/s", "read/s", "1st batch", "CPU/worker", "main CPU", "samples")
    rows = tuple(
        (
            str(m["workers"]),
            str(m["prefetch"]),
            "yes" if m["pin_memory"] else "no",
            format_count(m["samples_per_s"]),
            f"{format_bytes(m['bytes_per_s'])}/s",
            f"{m['first_batch_s'] * 1e3:.0f} ms",
            f"{m['cpu_per_worker_pct']:.0f} %",
            f"{100 * m['cpu_main_s'] / m['elapsed_s'] if m['elapsed_s'] > 0 else 0:.0f} %",
            f"{m['samples']:,}" + ("" if m["complete"] else "*"),
        )
        for m in data["measurements"]
    )
    grid = Grid(headers, rows, numeric=frozenset(range(len(headers))), drop_order=(2, 1, 7, 5))
    print_table(grid, console)
    if not all(m["complete"] for m in data["measurements"]):
        console.print("* stopped at --time-per-config before the end of the data", highlight=False)
    console.print(
        f"bytes {data['bytes_kind']}; CPU: {data['cpu']}, {data['usable_cpus']} usable cores", highlight=False
    )
    if data["verdict"] is not None:
        print_prose(console, Text(data["verdict"]["text"], style="bold"))
        print_prose(console, f"  demand: {data['demand']['basis']}", markup=False)
    for advice in data["advice"]:
        how = "measured" if advice["measured"] else "estimated"
        print_prose(console, Text.assemble(f"- {advice['change']}  ", (f"({how}: {advice['evidence']})", "dim")))
    for note in data["notes"]:
        print_prose(console, f"note: {note}", style="dim", markup=False)
