"""``plan train`` as one call: the typed request in, the plan out, with what it says beside its tables.

The CLI reads the flags into a :class:`TrainRequest`; :func:`plan_train_request` plans it and returns the
:class:`~computewise.plan.result.Plan` with its notes (the default global batch, the calibrations used)
and warnings (a run that takes years) added here, where the plan is built, not patched into its
``--json`` document afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from computewise.catalog.calibration import find_calibration
from computewise.errors import InputError
from computewise.estimate.data_movement import data_site
from computewise.estimate.train import default_global_batch_note
from computewise.limits import ACCELERATORS
from computewise.plan.train import CLOUD_PRICINGS, TrainConstraints, plan_train
from computewise.units import format_duration

if TYPE_CHECKING:
    from computewise.catalog import Catalog
    from computewise.catalog.calibration import Calibration
    from computewise.estimate import Assumptions
    from computewise.estimate.data_movement import DataSite
    from computewise.plan.result import Plan
    from computewise.specs import ModelSpec, Pricing

__all__ = ["TrainRequest", "dataset_site", "offered_pricings", "plan_train_request"]

_YEAR_S = 365.0 * 86400.0


@dataclass(frozen=True)
class TrainRequest:
    """What ``plan train`` is asked."""

    model: ModelSpec
    constraints: TrainConstraints
    calibration: Calibration | None = None  # --calibration: its accelerator timed with what bench measured
    top: int | None = None  # candidates written and shown; None: all
    default_batch: bool = False  # constraints.global_batch is the default, which a note then states


def plan_train_request(request: TrainRequest, catalog: Catalog, assumptions: Assumptions) -> Plan:
    measured = request.calibration
    c = request.constraints
    plan = plan_train(
        request.model, catalog, assumptions, c, None if measured is None else {measured.device_slug: measured}
    )
    notes = (
        [default_global_batch_note(c.global_batch, c.seq_len, request.model.architecture)]
        if request.default_batch
        else []
    )
    for slug in sorted({option.accelerator for option in plan.candidates}):
        used = measured if measured is not None and measured.device_slug == slug else find_calibration(slug)
        if used is not None:
            notes.append(f"{used.note}: {slug} timed with its measured peak and efficiency")
    recommended = catalog.accelerator(plan.recommended.accelerator)
    if recommended.kind == "tpu":
        notes.append(
            f"{recommended.slug} is timed as code XLA compiles runs on it (JAX or PyTorch/XLA), checked against "
            "MaxText's published runs (docs/ACCURACY.md); CUDA-only code cannot run there: name the GPUs to plan "
            "on with --gpu (e.g. --gpu h100 --gpu h200)"
        )
    time_s = plan.recommended.time_s
    warnings = (_long_run_warning(time_s, c.max_gpus),) if time_s > _YEAR_S else ()
    return replace(plan, top=request.top, warnings=warnings, notes=tuple(notes))


def offered_pricings(
    given: tuple[Pricing, ...] = (), *, spot: bool = False, no_spot: bool = False
) -> tuple[Pricing, ...]:
    """The pricings to weigh: those given (default: every cloud pricing), only spot with ``spot``, or the given
    ones less spot with ``no_spot``; none left is refused, since a plan over no price has nothing to rank."""
    if spot and no_spot:
        raise InputError("--spot and --no-spot contradict each other", "give only one of --spot, --no-spot")
    if spot:
        if given and "spot" not in given:
            raise InputError(
                f"--spot plans spot prices only, but --pricing {', '.join(given)} leaves spot out",
                "drop --spot, or add --pricing spot",
            )
        return ("spot",)
    pricings = tuple(p for p in given or CLOUD_PRICINGS if not (no_spot and p == "spot"))
    if not pricings:
        raise InputError("--no-spot removed the only --pricing given", "add --pricing on-demand")
    return pricings


def dataset_site(catalog: Catalog, place: str | None, dataset_bytes: float | None) -> DataSite | None:
    """Where the dataset lives (``--data-region``) with its size (``--dataset-size``): both, or neither."""
    if (place is None) != (dataset_bytes is None):
        raise InputError(
            "--data-region and --dataset-size go together", "e.g. --data-region aws:us-east-1 --dataset-size 2TB"
        )
    return None if place is None or dataset_bytes is None else data_site(catalog, place, dataset_bytes)


def _long_run_warning(time_s: float, max_gpus: int) -> str:
    """Without --deadline the cheapest run wins however slow it is; one that takes years is rarely what
    the user meant, so it is said before anything else rather than left for them to read off a table.
    More GPUs are suggested only below --max-gpus's own ceiling."""
    more_gpus = " or raise --max-gpus" if max_gpus < ACCELERATORS.high else ""
    return (
        f"the recommended run takes {time_s / _YEAR_S:.1f} years ({format_duration(time_s)}): "
        f"give a --deadline (e.g. --deadline 30d){more_gpus} to plan a shorter one"
    )
