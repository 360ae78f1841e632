"""``computewise run -- CMD ...``: run any command under watch, record it in the ledger, print what it cost."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from computewise.cli.common import (
    DbOption,
    HtmlOption,
    JsonOption,
    PriceFlags,
    bounded_float,
    bounded_int,
    emit,
    open_ledger,
    print_error,
)
from computewise.limits import ACCELERATOR_SHARE


def run(
    command: Annotated[
        list[str] | None,
        typer.Argument(help="The command to run, after --: computewise run -- python train.py", show_default=False),
    ] = None,
    tag: Annotated[
        list[str] | None, typer.Option("--tag", help="KEY=VALUE label for reports and budgets (repeatable).")
    ] = None,
    interval: Annotated[str, typer.Option(help="Sampling interval: 1s, 500ms, 5s.")] = "1s",
    hourly_usd: Annotated[str | None, typer.Option(help="Price per hour of the machine, e.g. 32.77.")] = None,
    instance: Annotated[
        str | None, typer.Option(help="Catalog instance type to price the run, e.g. p4d.24xlarge.")
    ] = None,
    cloud: Annotated[str | None, typer.Option(help="Cloud of --instance, and of the grid carbon intensity.")] = None,
    region: Annotated[str | None, typer.Option(help="Region of --instance, and of the grid carbon intensity.")] = None,
    pricing: Annotated[str, typer.Option(help="on-demand, spot, reserved-1y or reserved-3y.")] = "on-demand",
    input_path: Annotated[
        list[Path] | None,
        typer.Option("--input", help="Data file or directory the job reads, for the duplicate-run check (repeatable)."),
    ] = None,
    prometheus_port: Annotated[
        int | None,
        typer.Option(
            parser=bounded_int("--prometheus-port"),
            help="Serve live metrics at http://127.0.0.1:PORT/metrics (0: any free port).",
        ),
    ] = None,
    idle_minutes: Annotated[
        str | None, typer.Option(help="Alert when the GPU (or, without one, the job) is idle this long, e.g. 15.")
    ] = None,
    idle_action: Annotated[
        str, typer.Option(help="none, or signal: SIGUSR1, then SIGTERM after --idle-grace.")
    ] = "none",
    idle_grace: Annotated[str, typer.Option(help="Time between SIGUSR1 and SIGTERM for --idle-action signal.")] = "60s",
    idle_enforce: Annotated[
        bool, typer.Option(help="Really send the idle signals; by default it only says what it would do.")
    ] = False,
    live: Annotated[bool, typer.Option(help="Pin a status line to the terminal while the job runs (TTY only).")] = True,
    engine: Annotated[
        str | None,
        typer.Option(
            help="Job engine to submit to instead of watching here: local (a detached process) or ray. The job is "
            "resubmitted after preemption (exit 75) and failures; the ledger keeps one run with its attempts."
        ),
    ] = None,
    address: Annotated[
        str | None, typer.Option(envvar="RAY_ADDRESS", help="Ray dashboard address for --engine ray ($RAY_ADDRESS).")
    ] = None,
    name: Annotated[str | None, typer.Option(help="Stable run name for --engine. Default: from the command.")] = None,
    gpus: Annotated[
        float,
        typer.Option(
            parser=bounded_float("--gpus", ACCELERATOR_SHARE),
            help="GPUs for --engine: a count, or a fraction below 1 (ray).",
        ),
    ] = 0,
    accelerator: Annotated[
        str | None, typer.Option("--gpu", "-g", "--accelerator", help="Catalog accelerator for --engine, e.g. h100.")
    ] = None,
    cpus: Annotated[
        float | None,
        typer.Option(
            parser=bounded_float("--cpus"),
            help="CPU cores for --engine. Default: with --plan, the plan's share of its instance's vCPUs; "
            "else one per process.",
        ),
    ] = None,
    nproc: Annotated[
        int, typer.Option(parser=bounded_int("--nproc"), help="For --engine: processes on one node under torchrun.")
    ] = 1,
    plan: Annotated[
        Path | None, typer.Option(help="For --engine: GPUs, accelerator, processes and price from a plan's JSON.")
    ] = None,
    memory: Annotated[str | None, typer.Option(help="Memory for --engine: 32GB, 64GiB.")] = None,
    checkpoint_uri: Annotated[
        str | None, typer.Option(help="For --engine: checkpoint storage that survives the node (a shared path).")
    ] = None,
    max_restarts: Annotated[
        int, typer.Option(parser=bounded_int("--max-restarts"), help="For --engine: resubmissions after failures.")
    ] = 3,
    max_preemptions: Annotated[
        int,
        typer.Option(
            parser=bounded_int("--max-preemptions"), help="For --engine: resubmissions after preemptions (exit 75)."
        ),
    ] = 20,
    db: DbOption = None,
    as_json: JsonOption = False,
    html: HtmlOption = None,
) -> None:
    """Run a command, sample it every second (CPU, memory, disk, network, NVIDIA GPUs), price it, diagnose it.

    The command's exit code becomes ours; the summary goes to stderr. With --json, stdout carries one JSON
    object and nothing else: the command's own stdout goes to stderr ("child_stdout": "stderr" in the JSON).
    """
    from computewise.account.tags import parse_tags
    from computewise.catalog import load_catalog
    from computewise.cli.common import choice, refuse_option_as_command
    from computewise.errors import InputError
    from computewise.monitor.gpu import open_gpu_source
    from computewise.monitor.idle import IdleAction
    from computewise.monitor.runner import RunOptions, monitored_run
    from computewise.report.live import LiveStatus
    from computewise.report.runs import print_run_summary, run_html
    from computewise.units import parse_duration_s

    if not command:
        raise InputError("no command to run", "put the command after --, e.g. computewise run -- python train.py")
    refuse_option_as_command(command, "run")
    if engine is not None:
        from computewise.cli.run_on_engine import EngineRun, run_on_engine
        from computewise.cli.submit_cmd import JobResources

        run_on_engine(
            EngineRun(
                engine=engine,
                address=address,
                name=name,
                command=command,
                resources=JobResources(gpus, accelerator, cpus, memory, nproc),
                plan=plan,
                tags=tag,
                checkpoint_uri=checkpoint_uri,
                max_restarts=max_restarts,
                max_preemptions=max_preemptions,
                poll_interval=interval,
            ),
            PriceFlags(hourly_usd, instance, cloud, region, pricing),
            db,
            as_json,
        )
    for path in input_path or []:
        if not path.exists():
            raise InputError(f"--input {path} does not exist", "give a data file or directory the job reads")
    idle_actions: tuple[IdleAction, ...] = ("none", "signal")
    catalog = load_catalog()
    options = RunOptions(
        argv=tuple(command),
        tags=parse_tags(tag or []),
        interval_s=parse_duration_s(interval, "--interval"),
        price=PriceFlags(hourly_usd, instance, cloud, region, pricing).request().placed(catalog),
        inputs=tuple(str(p) for p in input_path or []),
        prometheus_port=prometheus_port,
        idle_s_limit=parse_duration_s(_minutes(idle_minutes), "--idle-minutes") if idle_minutes is not None else None,
        idle_action=choice(idle_action, idle_actions, "--idle-action"),
        idle_grace_s=parse_duration_s(idle_grace, "--idle-grace"),
        idle_enforce=idle_enforce,
        child_stdout_to_stderr=as_json,
    )
    ledger = open_ledger(db, create=True)
    gpu = open_gpu_source()
    stderr = Console(stderr=True)
    try:
        with LiveStatus(sys.stderr, wanted=live) as view:
            outcome = monitored_run(ledger, catalog, gpu, options, live=view.update if view.enabled else None)
    finally:
        gpu.close()
    if outcome.launch_error is not None:
        print_error(outcome.launch_error)
        stderr.print(f"(recorded as run {outcome.run_id})", highlight=False)
        if as_json and outcome.summary is not None:  # the failed run, as a script reading stdout expects
            emit(outcome.summary, True, None, print_run_summary, run_html)
        raise typer.Exit(outcome.launch_error.exit_code)
    if outcome.summary is not None:
        emit(outcome.summary, as_json, html, lambda summary, _console: print_run_summary(summary, stderr), run_html)
    raise typer.Exit(outcome.exit_code)


def _minutes(text: str) -> str:
    """``--idle-minutes 15`` means minutes; ``15min`` or ``2h`` are read as written."""
    stripped = text.strip()
    return f"{stripped}min" if stripped.replace(".", "", 1).isdigit() else stripped
