"""``run --engine local|ray``: a job request to a supervised run, in one call.

Kubernetes and Slurm restart preempted jobs themselves, so only engines that report exit codes are
supervised here. The price is the flags' or, without ``--hourly-usd`` and ``--instance``, the plan's.
"""

from __future__ import annotations

import dataclasses
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from computewise.catalog import Catalog
from computewise.errors import InputError
from computewise.estimate.quote import PriceRequest
from computewise.ledger import Ledger
from computewise.scale.engine import Supervisable, sanitize_name
from computewise.scale.job_request import JobRequest, job_spec
from computewise.scale.registry import get_engine
from computewise.scale.supervise import AttemptEvent, SupervisedRun, job_price, supervise

__all__ = ["SUPERVISABLE", "EngineRun", "run_on_engine"]

SUPERVISABLE = ("local", "ray")


@dataclass(frozen=True)
class EngineRun:
    """What ``run --engine`` was asked: the job (an empty name: from its command), where, and how to wait."""

    engine: str
    address: str | None
    job: JobRequest
    max_preemptions: int
    poll_s: float


def run_on_engine(
    request: EngineRun,
    catalog: Catalog,
    price: PriceRequest,
    open_ledger: Callable[[], Ledger],
    on_event: Callable[[AttemptEvent], None],
    say: Callable[[str], None],
) -> SupervisedRun:
    """Submit, resubmit after preemptions and failures, and return the run once it is over.

    The ledger is opened (``open_ledger``) only once the request is checked, so a refused one records
    nothing; ``say`` gets the plan's summary and a warning when the job cannot reach the ledger."""
    from computewise.serve.exposure import is_loopback

    if request.engine not in SUPERVISABLE:
        raise InputError(
            f"run --engine takes {' or '.join(SUPERVISABLE)}, got {request.engine!r}",
            "Kubernetes and Slurm restart preempted jobs themselves: render the manifest with "
            "`computewise submit --engine kubernetes|slurm --dry-run -- CMD ...` and submit it there",
        )
    job = request.job
    if not job.name:
        job = dataclasses.replace(job, name=sanitize_name(_script_name(job.command)) or "job")
    spec, planned_usd = job_spec(job, say)
    if planned_usd is not None and price.hourly_usd is None and price.instance_type is None:
        price = dataclasses.replace(price, hourly_usd=planned_usd)
    snapshot = job_price(catalog, price, spec.resources)
    engine = get_engine(request.engine, request.address)
    if not isinstance(engine, Supervisable):  # pragma: no cover - every name in SUPERVISABLE is one
        raise InputError(f"the {request.engine} engine cannot report exit codes", "use local or ray")
    with open_ledger() as ledger:
        ledger_url = ledger.connect_url
        ray_host = urllib.parse.urlsplit(request.address or "").hostname or ""
        if request.engine == "ray" and ledger_url.startswith("sqlite") and not is_loopback(ray_host):
            say(
                "the ledger is a SQLite file on this machine, so a job on a remote Ray node cannot record its "
                "steps there (the attempts are still recorded); use a PostgreSQL ledger (--db) for that"
            )
        return supervise(
            engine,
            spec,
            ledger,
            ledger_url,
            snapshot,
            max_preemptions=request.max_preemptions,
            poll_s=request.poll_s,
            on_event=on_event,
        )


def _script_name(command: tuple[str, ...]) -> str:
    """The script a command runs (``python train.py`` -> ``train``), else the program's name."""
    scripts = [arg for arg in command if arg.endswith(".py")]
    return Path(scripts[0] if scripts else command[0]).stem if command else ""
