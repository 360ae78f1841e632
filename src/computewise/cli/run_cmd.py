"""``computewise run -- CMD ...``: run any command under watch, record it in the ledger, print what it cost.

Two journeys: without ``--engine`` the command runs here, sampled, priced and diagnosed
(:func:`computewise.monitor.runner.monitored_run`); with ``--engine local|ray`` it is submitted as a job
and resubmitted after preemptions and failures (:func:`computewise.scale.engine_run.run_on_engine`),
one ledger run with its attempts. The exit code is the command's (the job's last one).
"""

from __future__ import annotations

import re
import sys
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer
from rich.console import Console

from computewise.cli.common import (
    DbOption,
    HtmlOption,
    JobFlags,
    JsonOption,
    PriceFlags,
    bounded_int,
    emit_json,
    flag_groups,
    open_ledger,
    print_error,
)
from computewise.system.files import check_writable

if TYPE_CHECKING:
    from computewise.catalog import Catalog
    from computewise.monitor.runner import RunOptions
    from computewise.monitor.summary import RunSummary
    from computewise.scale.engine_run import EngineRun

# A failure with no exit code (the engine lost the job) still exits non-zero.
_UNKNOWN_FAILURE_EXIT = 1

# The flags, one type each, so the verb's signature reads in a screen.
_Command = Annotated[
    list[str] | None,
    typer.Argument(help="The command to run, after --: computewise run -- python train.py", show_default=False),
]
_Tag = Annotated[list[str] | None, typer.Option("--tag", help="KEY=VALUE label for reports and budgets (repeatable).")]
_Interval = Annotated[str, typer.Option(help="Sampling interval: 1s, 500ms, 5s.")]
_HourlyUsd = Annotated[str | None, typer.Option(help="Price per hour of the machine, e.g. 32.77.")]
_Instance = Annotated[str | None, typer.Option(help="Catalog instance type to price the run, e.g. p4d.24xlarge.")]
_Cloud = Annotated[str | None, typer.Option(help="Cloud of --instance, and of the grid carbon intensity.")]
_Region = Annotated[str | None, typer.Option(help="Region of --instance, and of the grid carbon intensity.")]
_Pricing = Annotated[str, typer.Option(help="on-demand, spot, reserved-1y or reserved-3y.")]
_Input = Annotated[
    list[Path] | None,
    typer.Option("--input", help="Data file or directory the job reads, for the duplicate-run check (repeatable)."),
]
_PrometheusPort = Annotated[
    int | None,
    typer.Option(
        parser=bounded_int("--prometheus-port"),
        help="Serve live metrics at http://127.0.0.1:PORT/metrics (0: any free port).",
    ),
]
_IdleMinutes = Annotated[
    str | None, typer.Option(help="Alert when the GPU (or, without one, the job) is idle this long, e.g. 15.")
]
_IdleAction = Annotated[str, typer.Option(help="none, or signal: SIGUSR1, then SIGTERM after --idle-grace.")]
_IdleGrace = Annotated[str, typer.Option(help="Time between SIGUSR1 and SIGTERM for --idle-action signal.")]
_IdleEnforce = Annotated[
    bool, typer.Option(help="Really send the idle signals; by default it only says what it would do.")
]
_Live = Annotated[bool, typer.Option(help="Pin a status line to the terminal while the job runs (TTY only).")]
_Engine = Annotated[
    str | None,
    typer.Option(
        help="Job engine to submit to instead of watching here: local (a detached process) or ray. The job is "
        "resubmitted after preemption (exit 75) and failures; the ledger keeps one run with its attempts. "
        "The job's resources are the flags from --gpus to --checkpoint-uri."
    ),
]
_Address = Annotated[
    str | None, typer.Option(envvar="RAY_ADDRESS", help="Ray dashboard address for --engine ray ($RAY_ADDRESS).")
]
_Name = Annotated[str | None, typer.Option(help="Stable run name for --engine. Default: from the command.")]
_MaxRestarts = Annotated[
    int, typer.Option(parser=bounded_int("--max-restarts"), help="For --engine: resubmissions after failures.")
]
_MaxPreemptions = Annotated[
    int,
    typer.Option(
        parser=bounded_int("--max-preemptions"), help="For --engine: resubmissions after preemptions (exit 75)."
    ),
]


@flag_groups
def run(
    *,
    command: _Command = None,
    tag: _Tag = None,
    interval: _Interval = "1s",
    hourly_usd: _HourlyUsd = None,
    instance: _Instance = None,
    cloud: _Cloud = None,
    region: _Region = None,
    pricing: _Pricing = "on-demand",
    input_path: _Input = None,
    prometheus_port: _PrometheusPort = None,
    idle_minutes: _IdleMinutes = None,
    idle_action: _IdleAction = "none",
    idle_grace: _IdleGrace = "60s",
    idle_enforce: _IdleEnforce = False,
    live: _Live = True,
    engine: _Engine = None,
    address: _Address = None,
    name: _Name = None,
    resources: JobFlags,
    max_restarts: _MaxRestarts = 3,
    max_preemptions: _MaxPreemptions = 20,
    db: DbOption = None,
    as_json: JsonOption = False,
    html: HtmlOption = None,
) -> None:
    """Run a command, sample it every second (CPU, memory, disk, network, NVIDIA GPUs), price it, diagnose it.

    The command's exit code becomes ours; the summary goes to stderr. With --json, stdout carries one JSON
    object and nothing else: the command's own stdout goes to stderr ("child_stdout": "stderr" in the JSON).
    """
    from computewise.cli.common import refuse_option_as_command
    from computewise.errors import InputError
    from computewise.scale.engine_run import EngineRun
    from computewise.units import parse_duration_s

    if not command:
        raise InputError("no command to run", "put the command after --, e.g. computewise run -- python train.py")
    if not command[0].strip():  # `run -- ''`: exec would say "permission denied", about a program never named
        raise InputError(
            f"the command to run is empty ({command[0]!r})",
            "put the program after --, e.g. computewise run -- python train.py",
        )
    refuse_option_as_command(command, "run")
    price = PriceFlags(hourly_usd, instance, cloud, region, pricing)
    if engine is not None:
        job = resources.request(name or "", command, tag, max_restarts)
        poll_s = parse_duration_s(interval, "--interval")
        _on_engine(EngineRun(engine, address, job, max_preemptions, poll_s), price, db, as_json)
    idle = (idle_minutes, idle_action, idle_grace, idle_enforce)
    options, catalog = _run_options(command, tag, interval, price, input_path, prometheus_port, idle, as_json)
    _watch_here(options, catalog, db, as_json, html, live)


def _run_options(
    command: list[str],
    tag: list[str] | None,
    interval: str,
    price: PriceFlags,
    input_path: list[Path] | None,
    prometheus_port: int | None,
    idle: tuple[str | None, str, str, bool],
    as_json: bool,
) -> tuple[RunOptions, Catalog]:
    """The flags of a run watched here as ``RunOptions``, and the catalog that prices it; nothing is opened yet."""
    from computewise.account.tags import parse_tags
    from computewise.catalog import load_catalog
    from computewise.cli.common import choice
    from computewise.errors import InputError
    from computewise.monitor.idle import IdleAction
    from computewise.monitor.runner import RunOptions
    from computewise.units import parse_duration_s

    for path in input_path or []:
        if not path.exists():
            raise InputError(f"--input {path} does not exist", "give a data file or directory the job reads")
    idle_minutes, idle_action, idle_grace, idle_enforce = idle
    idle_actions: tuple[IdleAction, ...] = ("none", "signal")
    catalog = load_catalog()
    options = RunOptions(
        argv=tuple(command),
        tags=parse_tags(tag or []),
        interval_s=parse_duration_s(interval, "--interval"),
        price=price.request().placed(catalog),
        inputs=tuple(str(p) for p in input_path or []),
        prometheus_port=prometheus_port,
        idle_s_limit=parse_duration_s(_minutes(idle_minutes), "--idle-minutes") if idle_minutes is not None else None,
        idle_action=choice(idle_action, idle_actions, "--idle-action"),
        idle_grace_s=parse_duration_s(idle_grace, "--idle-grace"),
        idle_enforce=idle_enforce,
        child_stdout_to_stderr=as_json,
    )
    return options, catalog


def _watch_here(
    options: RunOptions, catalog: Catalog, db: str | None, as_json: bool, html: Path | None, live: bool
) -> NoReturn:
    """Run the command here under watch and print its summary; raises ``typer.Exit`` with its exit code."""
    from computewise.monitor.gpu import open_gpu_source
    from computewise.monitor.runner import monitored_run
    from computewise.report.live import LiveStatus

    if html is not None:
        check_writable(html, "--html", "nothing was run")
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
            emit_json(outcome.summary.to_dict())
        raise typer.Exit(outcome.launch_error.exit_code)
    if outcome.summary is not None:
        _report(outcome.summary, as_json, html, stderr)
    raise typer.Exit(outcome.exit_code)


def _report(summary: RunSummary, as_json: bool, html: Path | None, stderr: Console) -> None:
    """The summary (JSON or terminal) and the HTML report; if the report cannot be written after all (the disk
    filled, the directory went away), the summary is still printed and the error said after it: the job's exit
    code, not this, is what the caller gets."""
    from computewise.cli.common import print_document
    from computewise.errors import ComputewiseError, InputError
    from computewise.report.html import write_html
    from computewise.report.runs import print_run_summary, run_html

    failure: ComputewiseError | None = None
    if html is not None:
        try:
            write_html(html, run_html(summary))
        except ComputewiseError as error:
            failure = error
    written = () if html is None or failure is not None else (html,)
    print_document(summary, as_json, lambda shown, _console: print_run_summary(shown, stderr), written)
    if failure is not None:
        again = f"`computewise runs show {summary.run.id} --html {html}` writes it from the ledger"
        fix = f"{failure.hint}; then {again}" if failure.hint else again
        print_error(InputError(f"the HTML report was not written: {failure.message}", fix))


def _on_engine(request: EngineRun, price: PriceFlags, db: str | None, as_json: bool) -> NoReturn:
    """Submit, supervise and report; raises ``typer.Exit`` with the job's exit code."""
    from rich.text import Text

    from computewise.catalog import load_catalog
    from computewise.monitor.watch import say
    from computewise.report.attempts import print_supervised_run
    from computewise.scale.engine_run import run_on_engine
    from computewise.scale.supervise import AttemptEvent

    stderr = Console(stderr=True)

    def progress(event: AttemptEvent) -> None:
        detail = f": {event.detail}" if event.detail else ""
        job = f" ({event.job_id})" if event.job_id else ""
        line = f"computewise: attempt {event.number}{job} {event.state}{detail}"
        stderr.print(line, highlight=False, markup=False, emoji=False)

    ledger = partial(open_ledger, db, create=True)  # opened once the request is checked
    result = run_on_engine(request, load_catalog(), price.request(), ledger, progress, partial(say, sys.stderr))
    if as_json:
        emit_json(result.to_dict())
    else:
        stderr.print(Text(result.log_tail.rstrip("\n")), highlight=False)  # the last attempt's output
        print_supervised_run(result, stderr)
    if result.status == "succeeded":
        raise typer.Exit(0)
    raise typer.Exit(result.exit_code if result.exit_code not in (None, 0) else _UNKNOWN_FAILURE_EXIT)


def _minutes(text: str) -> str:
    """``--idle-minutes 15`` means minutes; ``15min`` or ``2h`` are read as written. A signed number (``-5``)
    is minutes too, so it is refused for its range rather than for a unit the flag never needs."""
    stripped = text.strip()
    return f"{stripped}min" if re.fullmatch(r"[+-]?[0-9]*\.?[0-9]+", stripped) else stripped
