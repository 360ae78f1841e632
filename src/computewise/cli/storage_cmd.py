"""``computewise storage audit|apply``: what stored bytes cost, and a retention policy that frees the stale ones."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from computewise.cli.common import DbOption, JsonOption, emit_json, open_ledger

if TYPE_CHECKING:
    from computewise.ledger import Ledger
    from computewise.storage.location import Location
    from computewise.storage.pricing import Pricer

app = typer.Typer(
    help="Audit checkpoints, models, datasets, logs and caches by kind, age and $/month; apply a retention policy.",
    no_args_is_help=True,
)

PathArgument = Annotated[str, typer.Argument(help="A folder, or an object prefix such as s3://bucket/prefix.")]
ClassOption = Annotated[
    str | None,
    typer.Option(
        "--storage-class",
        help="The class files without one of their own are priced at, as cloud:class (default aws:ebs-gp3 "
        "for a folder; for a bucket its store's standard class: aws:s3-standard, gcp:gcs-standard, azure:blob-hot).",
    ),
]
RegionOption = Annotated[
    str | None,
    typer.Option(
        "--region",
        help="The region whose prices apply (default: us-east-1 for AWS, us-central1 for GCP, eastus for Azure, "
        "after the class's cloud).",
    ),
]
AsOfOption = Annotated[
    str | None,
    typer.Option(
        "--as-of",
        help="Compute ages at a moment to come instead of now: a date (2027-01-31) or a duration from now (30d), "
        "up to 100 years ahead: what the policy will do then. Today's date means now; earlier dates are refused.",
    ),
]


def _pricer(location: Location, storage_class: str | None, region: str | None) -> Pricer:
    from computewise.catalog.storage_prices import load_storage_prices
    from computewise.storage.pricing import Pricer, default_class, default_region

    prices = load_storage_prices()
    default = storage_class or default_class(location)
    return Pricer(prices, prices.price(default, region or default_region(default)), location.cloud)


def _as_of_s(text: str | None) -> float:
    """Now, or the later moment ``--as-of`` names: a past one would count ages before files were written."""
    from computewise.account.periods import parse_later_s

    now_s = time.time()
    return now_s if text is None else parse_later_s(text, now_s, "--as-of")


@app.command("audit")
def audit(
    path: PathArgument,
    storage_class: ClassOption = None,
    region: RegionOption = None,
    as_of: AsOfOption = None,
    as_json: JsonOption = False,
) -> None:
    """Files by kind (checkpoint, exported model, dataset, log, cache), age, last access, duplicates and $/month."""
    from computewise.report.storage import print_audit
    from computewise.storage.audit import audit_location
    from computewise.storage.location import open_location

    location = open_location(path)
    pricer = _pricer(location, storage_class, region)
    as_of_s = _as_of_s(as_of)
    with _Progress() as progress:
        result = audit_location(location, pricer, as_of_s, progress.walked, progress.hashed)
    if as_json:
        emit_json(result.to_dict())
    else:
        print_audit(result, Console())


@app.command("apply")
def apply(
    path: PathArgument,
    policy: Annotated[
        Path,
        typer.Option(
            "--policy",
            help="Retention policy (YAML): keep_last N; archive: {after_days, to: cloud:class, folder, kinds}; "
            "delete: {after_days, kinds}. Tag a file with NAME.keep beside it, a folder with .keep inside.",
        ),
    ],
    act: Annotated[
        bool, typer.Option("--apply", help="Act on the plan; without it nothing is changed (dry run).")
    ] = False,
    storage_class: ClassOption = None,
    region: RegionOption = None,
    as_of: AsOfOption = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Plan (dry run) or carry out a retention policy; newest and best checkpoints, running runs, keep tags stay."""
    from computewise.report.storage import print_apply
    from computewise.storage.apply import ApplyResult, apply_plan
    from computewise.storage.inuse import InUse, paths_in_use
    from computewise.storage.inventory import take_inventory
    from computewise.storage.location import open_location
    from computewise.storage.policy import read_policy
    from computewise.storage.retention import RetentionPlan, plan_retention

    rules = read_policy(policy)
    location = open_location(path)
    pricer = _pricer(location, storage_class, region)
    as_of_s = _as_of_s(as_of)
    archive_dir = None
    if rules.archive is not None:
        pricer.prices.price(rules.archive.to, pricer.region)  # an unknown class fails before the ledger is opened
    if location.path is not None and rules.archive is not None:
        archive_dir = (location.path / Path(rules.archive.folder).expanduser()).resolve()
    ledger = _ledger(db, act)
    with _Progress() as progress:
        inventory = take_inventory(location, archive_dir, progress.walked)
    in_use = paths_in_use(ledger) if ledger is not None else InUse((), ())
    plan = plan_retention(inventory, location, rules, pricer, in_use, as_of_s)
    result: RetentionPlan | ApplyResult = plan
    if act and ledger is not None:
        total = len(plan.actions)
        with _Progress() as progress:
            result = apply_plan(plan, location, ledger, archive_dir, lambda i, _: progress.acted(i, total))
    if as_json:
        emit_json(result.to_dict())
    else:
        print_apply(result, Console())


def _ledger(db: str | None, act: bool) -> Ledger | None:
    """The ledger (made if missing) for an apply; for a dry run, None when there is none yet to read.

    Without a ledger no run is recorded as running, so nothing is in use: the dry run says so.
    """
    from computewise.errors import LedgerError

    if act:
        return open_ledger(db, create=True)
    try:
        return open_ledger(db)
    except LedgerError as error:
        Console(stderr=True).print(
            f"computewise: no ledger to read running runs from ({error.message}); the plan assumes none is running",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )
        return None


class _Progress:
    """One status line on stderr while the walk, the hashing or the apply runs; gone when done."""

    def __init__(self) -> None:
        from rich.status import Status

        self._status = Status("storage: starting", console=Console(stderr=True))

    def __enter__(self) -> _Progress:
        self._status.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._status.stop()

    def walked(self, files: int, size_bytes: int) -> None:
        from computewise.units import format_bytes

        self._status.update(f"storage: listed {files:,} files, {format_bytes(size_bytes)}")

    def hashed(self, done: int, total: int) -> None:
        self._status.update(f"storage: hashing files whose sizes collide {done:,}/{total:,}")

    def acted(self, done: int, total: int) -> None:
        self._status.update(f"storage: acting {done + 1:,}/{total:,}")
