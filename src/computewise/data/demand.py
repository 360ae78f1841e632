"""What the job consumes: samples per second the GPUs would take if input never made them wait.

Three ways to say it, from most to least assumed: ``--plan plan.json`` (the recommended option's
step time, with ``--global-batch`` samples per step, since a plan does not record its batch),
``--model/--gpu/--gpus`` (``estimate train``'s step for that job, its default batch and sequence
length as ``estimate train`` chooses them), or ``--demand`` (a rate the user measured, e.g. the
samples of a ``track()`` run over its compute time, without the time spent waiting for data).

A sample is what the loader yields one of: a row, a line, one ``--seq-len`` window of tokens. For a
language model it must be one training sequence, or the comparison is between different things.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from computewise.data.result import Demand, Measurement, Verdict
from computewise.errors import InputError
from computewise.units import format_count

__all__ = ["DemandRequest", "demand_from_model", "demand_from_plan", "demand_from_rate", "verdict"]


@dataclass(frozen=True)
class DemandRequest:
    """What the job consumes as ``data bench``'s flags say it: a plan, a model on GPUs, or a rate; one at most."""

    plan: Path | None = None
    global_batch: int | None = None  # samples per optimizer step (a plan does not record it)
    model: str | None = None
    gpu: str | None = None
    gpus: int = 1
    seq_len: int | None = None
    samples_per_s: float | None = None
    catalog_paths: tuple[Path, ...] = ()

    def demand(self) -> Demand | None:
        """The ``Demand`` the flags describe (None: nothing said), refusing two sources or a model without a GPU."""
        sources = (("--plan", self.plan), ("--model", self.model), ("--demand", self.samples_per_s))
        given = [name for name, value in sources if value]
        if len(given) > 1:
            raise InputError(
                f"{' and '.join(given)} both say what the job consumes", "give one of --plan, --model, --demand"
            )
        if (self.model is None) != (self.gpu is None):
            raise InputError("--model and --gpu go together", "e.g. --model llama-3-8b --gpu h100 --gpus 8")
        if self.plan is not None:
            return demand_from_plan(self.plan, self.global_batch)
        if self.model is not None and self.gpu is not None:
            return demand_from_model(
                self.model, self.gpu, self.gpus, self.seq_len, self.global_batch, self.catalog_paths
            )
        if self.samples_per_s is not None:
            return demand_from_rate(self.samples_per_s)
        return None


def demand_from_rate(samples_per_s: float) -> Demand:
    return Demand(samples_per_s, f"{format_count(samples_per_s)} samples/s given with --demand", None, None)


def demand_from_plan(path: Path, global_batch: int | None) -> Demand:
    """The recommended option of a ``plan train --json`` file: ``global_batch`` samples every step."""
    from computewise.plan.result import Plan

    if global_batch is None:
        raise InputError(
            "--plan needs --global-batch: a plan records its step time, not how many samples a step takes",
            "add --global-batch N (sequences per optimizer step, as given to plan train), e.g. --global-batch 512",
        )
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise InputError(
            f"--plan {path}: {error.strerror or error}", "write it with `computewise plan train ... --json > plan.json`"
        ) from error
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise InputError(
            f"--plan {path} is not JSON: {error}", "write it with `computewise plan train ... --json`"
        ) from error
    option = Plan.from_dict(data, str(path)).recommended
    if option.step_s <= 0:
        raise InputError(
            f"--plan {path}: the recommended option has no step time", "re-run plan train with this version"
        )
    rate = global_batch / option.step_s
    basis = (
        f"{option.gpus} x {option.accelerator} ({option.label}): {global_batch} samples per "
        f"{option.step_s:.3g} s step (plan)"
    )
    return Demand(rate, basis, option.gpus, option.accelerator)


def demand_from_model(
    model: str, gpu: str, gpus: int, seq_len: int | None, global_batch: int | None, catalog_paths: tuple[Path, ...]
) -> Demand:
    """``estimate train``'s step for ``model`` on ``gpus`` x ``gpu`` (data parallel, its defaults)."""
    import numpy as np

    from computewise.catalog import load_catalog
    from computewise.estimate import Assumptions, estimate_train
    from computewise.estimate.layout import default_framework
    from computewise.estimate.single import default_precision
    from computewise.estimate.train import default_global_batch
    from computewise.models import resolve_model
    from computewise.specs import Parallelism, TrainJob

    catalog = load_catalog(catalog_paths)
    spec = resolve_model(model)
    accelerator = catalog.accelerator(gpu)
    seq = seq_len if seq_len is not None else (min(spec.max_seq_len, 4096) if spec.is_transformer else 1)
    layout = Parallelism(dp=gpus)
    job = TrainJob(
        tokens=20.0 * spec.params,
        seq_len=seq,
        micro_batch=1,
        global_batch=global_batch
        if global_batch is not None
        else default_global_batch(seq, spec.params, gpus, spec.architecture),
        precision=default_precision(accelerator),
        framework=default_framework(layout),
    )
    estimate = estimate_train(spec, accelerator, gpus, job, layout, catalog, Assumptions.from_catalog(catalog))
    step_s = float(np.ravel(estimate.columns.step_s)[0])
    if estimate.untimed or not step_s > 0:
        raise InputError(
            f"cannot time a step of {spec.name} on {gpus} x {accelerator.slug}: {estimate.untimed or 'no step time'}",
            "pass --demand SAMPLES_PER_S measured on the real job instead",
        )
    basis = (
        f"{gpus} x {accelerator.slug} training {spec.name}: {job.global_batch} samples of {seq} tokens per "
        f"{step_s:.3g} s step (estimate train)"
    )
    return Demand(job.global_batch / step_s, basis, gpus, accelerator.slug)


def verdict(best: Measurement, demand: Demand) -> Verdict:
    """'the loader delivers 1.2k samples/s; 8 x h100 consume 3.4k/s: input-bound by 2.8x'."""
    supply = best.samples_per_s
    who = f"{demand.gpus} x {demand.accelerator} consume" if demand.gpus and demand.accelerator else "the job consumes"
    head = f"the loader delivers {format_count(supply)} samples/s; {who} {format_count(demand.samples_per_s)}/s"
    ratio = demand.samples_per_s / supply if supply > 0 else float("inf")
    if ratio > 1.0:
        text = f"{head}: input-bound by {ratio:.1f}x"
    else:
        text = f"{head}: the loader keeps up with {1.0 / ratio:.1f}x to spare" if ratio > 0 else head
    return Verdict(supply, demand.samples_per_s, text)
