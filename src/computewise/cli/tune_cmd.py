"""``computewise tune ENTRYPOINT``: the fastest training configuration in a few short trials, and what it saves."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

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
    print_document,
    progress_bar,
)
from computewise.limits import Limit
from computewise.tune.ranks import DEFAULT_QUALITY_TOLERANCE

if TYPE_CHECKING:
    from computewise.tune.search import TrialExecutorFactory, TuneOptions, TuneResult

_QUALITY_TOLERANCE = Limit(0, 0.99, "a fraction of the best rank's quality: 0.01 is 1 %", "0.01")

_Entry = Annotated[str, typer.Argument(help="package.module:function(config) -> computewise.train.TrainingSetup.")]
_Config = Annotated[
    str | None, typer.Option("--config", help="The entry point's own settings: a JSON object or a JSON file.")
]
_Space = Annotated[
    str | None,
    typer.Option(
        help="Dimensions to try, e.g. 'precision=fp32,bf16;micro=8,16,32;compile=off,on,reduce-overhead'. Others: "
        "compile_loss (the loss compiled with the model), checkpointing, channels_last, workers, fused. Default: "
        "what the device runs fast, the micro-batch grown until memory or throughput stops it."
    ),
]
_Steps = Annotated[
    int, typer.Option(parser=bounded_int("--steps"), help="Measured steps of the longest trials (the top rung).")
]
_Eta = Annotated[
    int, typer.Option(parser=bounded_int("--eta"), help="Keep the best 1/eta of each rung for the next, eta x longer.")
]
_Memory = Annotated[
    str | None, typer.Option(help="Memory a configuration may use: 16GB, 24GiB. Default: the device's.")
]
_Accelerator = Annotated[
    str | None,
    typer.Option("--gpu", "-g", "--accelerator", help="Catalog device for MFU (needed on a CPU), e.g. xeon-8480plus."),
]
_Calibration = Annotated[
    Path | None,
    typer.Option(
        "--calibration",
        help="A calibration file from `computewise bench --save`: MFU against the peak it measured "
        "(default: the one saved for the device, if any).",
    ),
]
_RunHours = Annotated[
    float | None,
    typer.Option(
        parser=bounded_float("--run-hours"),
        help="Length of the planned run as it stands (naive), in hours, to price the saving.",
    ),
]
_Tokens = Annotated[str | None, typer.Option(help="Tokens of the planned run (10B, 3e11), instead of --run-hours.")]
_HourlyUsd = Annotated[str | None, typer.Option(help="Price per hour of this machine. Default: from the catalog.")]
_Out = Annotated[Path | None, typer.Option(help="Write the best configuration here (computewise.train reads it).")]
_Device = Annotated[str | None, typer.Option(help="cpu or cuda. Default: cuda when available.")]
_Threads = Annotated[
    int | None, typer.Option(parser=bounded_int("--threads"), help="torch threads per trial. Default: torch's.")
]
_TrialTimeout = Annotated[str, typer.Option(help="A trial still running after this is killed: 10m, 300s.")]
_TimeBudget = Annotated[
    str | None,
    typer.Option(
        help="Start no search trial after this long (3m, 90s): the best so far wins. The naive baseline and "
        "largest-batch references still run. --engine local only. Default: the whole search."
    ),
]
_Tag = Annotated[
    list[str] | None, typer.Option("--tag", help="KEY=VALUE label of the tuning's ledger run (repeatable).")
]
_Engine = Annotated[
    str,
    typer.Option(
        help="Job engine the trials run on: local (forked here, successive halving) or ray (Ray Tune trials "
        "on a cluster, stopped early by ASHA)."
    ),
]
_Address = Annotated[
    str | None,
    typer.Option(
        help="--engine ray: the cluster's GCS address HOST:PORT (port 6379 by default). Default: $RAY_ADDRESS."
    ),
]
_LoraRanks = Annotated[
    str | None,
    typer.Option(
        "--lora-ranks",
        help="LoRA ranks to search, e.g. 4,8,16,32 (the setup fine-tunes with LoRA or QLoRA): the search runs per "
        "rank and picks the cheapest rank whose quality (the setup's evaluate, else its training loss) is within "
        "--quality-tolerance of the best.",
    ),
]
_QualityTolerance = Annotated[
    float,
    typer.Option(
        parser=bounded_float("--quality-tolerance", _QUALITY_TOLERANCE),
        help="--lora-ranks: how much worse than the best rank's quality a rank may be, as a fraction (0.01: 1 %).",
    ),
]


def tune(
    entry: _Entry, config: _Config = None, space: _Space = None, steps: _Steps = 27, eta: _Eta = 3,
    memory: _Memory = None, accelerator: _Accelerator = None, calibration: _Calibration = None,
    run_hours: _RunHours = None, tokens: _Tokens = None, hourly_usd: _HourlyUsd = None, out: _Out = None,
    device: _Device = None, threads: _Threads = None, trial_timeout: _TrialTimeout = "10m",
    time_budget: _TimeBudget = None, tag: _Tag = None, engine: _Engine = "local", address: _Address = None,
    lora_ranks: _LoraRanks = None,
    quality_tolerance: _QualityTolerance = DEFAULT_QUALITY_TOLERANCE, db: DbOption = None, as_json: JsonOption = False,
) -> None:  # fmt: skip
    """Find the fastest precision, micro-batch, checkpointing, compile, loader and optimizer settings by trials."""
    from computewise.account.tags import parse_tags
    from computewise.report.tune import print_tune
    from computewise.tune.search import TuneOptions
    from computewise.tune.space import DeviceKind
    from computewise.units import parse_bytes, parse_count, parse_duration_s, parse_usd

    devices: tuple[DeviceKind, ...] = ("cpu", "cuda")
    options = TuneOptions(
        setup_config=entry_config(config), space=space, steps=steps, eta=eta,
        memory_bytes=parse_bytes(memory, "--memory") if memory is not None else None,
        accelerator=accelerator, calibration=calibration,
        hourly_usd=parse_usd(hourly_usd, "--hourly-usd") if hourly_usd is not None else None,
        run_hours=run_hours, tokens=parse_count(tokens, "--tokens") if tokens is not None else None, out=out,
        device=choice(device, devices, "--device") if device is not None else None, threads=threads,
        trial_timeout_s=parse_duration_s(trial_timeout, "--trial-timeout"), db=db, tags=parse_tags(tag or []),
        time_budget_s=parse_duration_s(time_budget, "--time-budget") if time_budget is not None else None,
        lora_ranks=_ranks(lora_ranks) if lora_ranks is not None else (), quality_tolerance=quality_tolerance,
    )  # fmt: skip
    trials = _executor(engine, address, options.time_budget_s)
    open_ledger(db, create=True).close()  # a wrong --db fails now, not after the trials
    print_document(_run(entry, options, trials), as_json, print_tune)


def _ranks(text: str) -> tuple[int, ...]:
    """``--lora-ranks 4,8,16``: each a whole rank in ``--lora-rank``'s range, in the order given."""
    from computewise.limits import limit_for
    from computewise.units import parse_flag_number

    parts = [part.strip() for part in text.split(",")]
    return tuple(int(parse_flag_number(part, "--lora-ranks", limit_for("--lora-rank"))) for part in parts)


def _executor(engine: str, address: str | None, time_budget_s: float | None) -> TrialExecutorFactory:
    """Where the trials run: forked here, or Ray Tune trials on the cluster at ``address``."""
    from computewise.errors import InputError
    from computewise.tune.search import LocalTrials

    if choice(engine, ("local", "ray"), "--engine") == "ray":
        if time_budget_s is not None:  # ASHA schedules the cluster's trials; the budget is checked between local ones
            raise InputError(
                "--time-budget bounds the trials forked here (--engine local)",
                "drop --time-budget, or bound each Ray trial with --trial-timeout",
            )
        from computewise.scale.ray_tune import ray_tune_trials

        return ray_tune_trials(address)  # an unreachable cluster fails now, before the setup is even built
    if address is not None:
        raise InputError("--address is the Ray cluster's address, for --engine ray only", "add --engine ray")
    return LocalTrials


def _run(entry: str, options: TuneOptions, trials: TrialExecutorFactory) -> TuneResult:
    """``run_tune`` behind a progress bar on stderr: the stage, trials done of planned, the best so far."""
    from computewise.tune.search import TuneProgress, run_tune

    with progress_bar("tune", Console(stderr=True), "best") as bar:
        task_id = bar.add_task("building the setup", total=None, best="")

        def progress(update: TuneProgress) -> None:
            best = f"best: {update.best}" if update.best else ""
            bar.update(task_id, description=update.stage, completed=update.done, total=update.total, best=best)

        return run_tune(entry, options, progress, trials)
