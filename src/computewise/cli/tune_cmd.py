"""``computewise tune ENTRYPOINT``: the fastest training configuration in a few short trials, and what it saves."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from computewise.cli.common import (
    DbOption,
    JsonOption,
    bounded_float,
    bounded_int,
    choice,
    entry_config,
    open_ledger,
    progress_bar,
)


def tune(
    entry: Annotated[str, typer.Argument(help="package.module:function(config) -> computewise.train.TrainingSetup.")],
    config: Annotated[
        str | None, typer.Option("--config", help="The entry point's own settings: a JSON object or a JSON file.")
    ] = None,
    space: Annotated[
        str | None,
        typer.Option(
            help="Dimensions to try, e.g. 'precision=fp32,bf16;micro=8,16,32;compile=off,on,reduce-overhead'. Others: "
            "checkpointing, channels_last, workers, fused. Default: what the device runs fast, the micro-batch grown "
            "until memory or throughput stops it."
        ),
    ] = None,
    steps: Annotated[
        int, typer.Option(parser=bounded_int("--steps"), help="Measured steps of the longest trials (the top rung).")
    ] = 27,
    eta: Annotated[
        int,
        typer.Option(parser=bounded_int("--eta"), help="Keep the best 1/eta of each rung for the next, eta x longer."),
    ] = 3,
    memory: Annotated[
        str | None, typer.Option(help="Memory a configuration may use: 16GB, 24GiB. Default: the device's.")
    ] = None,
    accelerator: Annotated[
        str | None,
        typer.Option(
            "--gpu", "-g", "--accelerator", help="Catalog device for MFU (needed on a CPU), e.g. xeon-8480plus."
        ),
    ] = None,
    calibration: Annotated[
        Path | None,
        typer.Option(
            "--calibration",
            help="A calibration file from `computewise bench --save`: MFU against the peak it measured "
            "(default: the one saved for the device, if any).",
        ),
    ] = None,
    run_hours: Annotated[
        float | None,
        typer.Option(
            parser=bounded_float("--run-hours"),
            help="Length of the planned run as it stands (naive), in hours, to price the saving.",
        ),
    ] = None,
    tokens: Annotated[
        str | None, typer.Option(help="Tokens of the planned run (10B, 3e11), instead of --run-hours.")
    ] = None,
    hourly_usd: Annotated[
        str | None, typer.Option(help="Price per hour of this machine. Default: from the catalog.")
    ] = None,
    out: Annotated[
        Path | None, typer.Option(help="Write the best configuration here (computewise.train reads it).")
    ] = None,
    device: Annotated[str | None, typer.Option(help="cpu or cuda. Default: cuda when available.")] = None,
    threads: Annotated[
        int | None, typer.Option(parser=bounded_int("--threads"), help="torch threads per trial. Default: torch's.")
    ] = None,
    trial_timeout: Annotated[str, typer.Option(help="A trial still running after this is killed: 10m, 300s.")] = "10m",
    tag: Annotated[
        list[str] | None, typer.Option("--tag", help="KEY=VALUE label of the tuning's ledger run (repeatable).")
    ] = None,
    engine: Annotated[
        str,
        typer.Option(
            help="Job engine the trials run on: local (forked here, successive halving) or ray (Ray Tune trials "
            "on a cluster, stopped early by ASHA)."
        ),
    ] = "local",
    address: Annotated[
        str | None,
        typer.Option(
            help="--engine ray: the cluster's GCS address HOST:PORT (port 6379 by default). Default: $RAY_ADDRESS."
        ),
    ] = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Find the fastest precision, micro-batch, checkpointing, compile, loader and optimizer settings by trials."""

    from computewise.account.tags import parse_tags
    from computewise.errors import InputError
    from computewise.report.tune import print_tune
    from computewise.tune.search import LocalTrials, TrialExecutorFactory, TuneOptions, TuneProgress, run_tune
    from computewise.tune.space import DeviceKind
    from computewise.units import parse_bytes, parse_count, parse_duration_s, parse_usd

    devices: tuple[DeviceKind, ...] = ("cpu", "cuda")
    engines = ("local", "ray")
    chosen_engine = choice(engine, engines, "--engine")
    options = TuneOptions(
        setup_config=entry_config(config),
        space=space,
        steps=steps,
        eta=eta,
        memory_bytes=parse_bytes(memory, "--memory") if memory is not None else None,
        accelerator=accelerator,
        calibration=calibration,
        hourly_usd=parse_usd(hourly_usd, "--hourly-usd") if hourly_usd is not None else None,
        run_hours=run_hours,
        tokens=parse_count(tokens, "--tokens") if tokens is not None else None,
        out=out,
        device=choice(device, devices, "--device") if device is not None else None,
        threads=threads,
        trial_timeout_s=parse_duration_s(trial_timeout, "--trial-timeout"),
        db=db,
        tags=parse_tags(tag or []),
    )
    trials: TrialExecutorFactory = LocalTrials
    if chosen_engine == "ray":
        from computewise.scale.ray_tune import ray_tune_trials

        trials = ray_tune_trials(address)  # an unreachable cluster fails now, before the setup is even built
    elif address is not None:
        raise InputError("--address is the Ray cluster's address, for --engine ray only", "add --engine ray")
    open_ledger(db, create=True).close()  # a wrong --db fails now, not after the trials
    stderr = Console(stderr=True)
    with progress_bar("tune", stderr, "best") as bar:
        task_id = bar.add_task("building the setup", total=None, best="")

        def progress(update: TuneProgress) -> None:
            best = f"best: {update.best}" if update.best else ""
            bar.update(task_id, description=update.stage, completed=update.done, total=update.total, best=best)

        result = run_tune(entry, options, progress, trials)
    data = result.to_dict()
    if as_json:
        typer.echo(json.dumps(data, indent=2))
    else:
        print_tune(data, Console())
