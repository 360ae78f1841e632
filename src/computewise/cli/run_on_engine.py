"""``computewise run --engine local|ray -- CMD``: the job on an engine, resubmitted after preemption, one ledger run.

Without ``--engine``, ``run`` watches the command here (samples, diagnosis). With it, the command
is submitted as a job and ``computewise.scale.supervise`` waits for it, resubmits it when it is
preempted (exit 75) or fails (up to ``--max-restarts``), and records the attempts and what the
interruptions cost. The exit code is the job's last one (0 once it succeeded).
"""

from __future__ import annotations

import dataclasses
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

import typer
from rich.console import Console
from rich.text import Text

from computewise.cli.common import PriceFlags, emit_json, open_ledger
from computewise.cli.submit_cmd import JobResources, job_spec, with_plan

_SUPERVISABLE = ("local", "ray")
# A failure with no exit code (the engine lost the job) still exits non-zero.
_UNKNOWN_FAILURE_EXIT = 1


@dataclass(frozen=True)
class EngineRun:
    """What ``run --engine`` was asked, as typed."""

    engine: str
    address: str | None
    name: str | None
    command: list[str]
    resources: JobResources
    plan: Path | None
    tags: list[str] | None
    checkpoint_uri: str | None
    max_restarts: int
    max_preemptions: int
    poll_interval: str


def run_on_engine(request: EngineRun, price_flags: PriceFlags, db: str | None, as_json: bool) -> None:
    """Submit, supervise and report; raises ``typer.Exit`` with the job's exit code."""
    from computewise.catalog import load_catalog
    from computewise.errors import InputError
    from computewise.report.attempts import print_supervised_run
    from computewise.scale.engine import Supervisable, sanitize_name
    from computewise.scale.registry import get_engine
    from computewise.scale.supervise import AttemptEvent, job_price, supervise
    from computewise.serve.exposure import is_loopback
    from computewise.units import parse_duration_s

    if request.engine not in _SUPERVISABLE:
        raise InputError(
            f"run --engine takes {' or '.join(_SUPERVISABLE)}, got {request.engine!r}",
            "Kubernetes and Slurm restart preempted jobs themselves: render the manifest with "
            "`computewise submit --engine kubernetes|slurm --dry-run -- CMD ...` and submit it there",
        )
    name = request.name or sanitize_name(_script_name(request.command)) or "job"
    resources, planned_usd = with_plan(request.plan, request.resources)
    if planned_usd is not None and price_flags.hourly_usd is None and price_flags.instance is None:
        price_flags = dataclasses.replace(price_flags, hourly_usd=str(planned_usd))
    spec = job_spec(
        name,
        request.command,
        resources,
        request.tags,
        checkpoint_uri=request.checkpoint_uri,
        max_restarts=request.max_restarts,
    )
    poll_s = parse_duration_s(request.poll_interval, "--interval")
    price = job_price(load_catalog(), price_flags.request(), spec.resources)
    engine = get_engine(request.engine, request.address)
    if not isinstance(engine, Supervisable):  # pragma: no cover - every name in _SUPERVISABLE is one
        raise InputError(f"the {request.engine} engine cannot report exit codes", "use local or ray")
    ledger = open_ledger(db, create=True)
    ledger_url = ledger.connect_url
    stderr = Console(stderr=True)
    ray_host = urllib.parse.urlsplit(request.address or "").hostname or ""
    if request.engine == "ray" and ledger_url.startswith("sqlite") and not is_loopback(ray_host):
        stderr.print(
            "computewise: the ledger is a SQLite file on this machine, so a job on a remote Ray node cannot "
            "record its steps there (the attempts are still recorded); use a PostgreSQL ledger (--db) for that",
            highlight=False,
        )

    def progress(event: AttemptEvent) -> None:
        detail = f": {event.detail}" if event.detail else ""
        job = f" ({event.job_id})" if event.job_id else ""
        line = f"computewise: attempt {event.number}{job} {event.state}{detail}"
        stderr.print(line, highlight=False, markup=False, emoji=False)

    try:
        result = supervise(
            engine,
            spec,
            ledger,
            ledger_url,
            price,
            max_preemptions=request.max_preemptions,
            poll_s=poll_s,
            on_event=progress,
        )
    finally:
        ledger.close()
    if as_json:
        emit_json(result.to_dict())
    else:
        stderr.print(Text(result.log_tail.rstrip("\n")), highlight=False)  # the last attempt's output
        print_supervised_run(result, stderr)
    if result.status == "succeeded":
        raise typer.Exit(0)
    raise typer.Exit(result.exit_code if result.exit_code not in (None, 0) else _UNKNOWN_FAILURE_EXIT)


def _script_name(command: list[str]) -> str:
    """The script a command runs (``python train.py`` -> ``train``), else the program's name."""
    scripts = [arg for arg in command if arg.endswith(".py")]
    return Path(scripts[0] if scripts else command[0]).stem if command else ""
