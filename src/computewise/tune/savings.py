"""What the tuned configuration is worth: speed-ups, MFU, and the time and dollars of a planned run.

All comparisons are between step times measured the same way (the top rung's trial length), so
they are ratios of like with like. Every configuration trains the same global batch, so a ratio
of step times is a ratio of samples (and tokens) per second.

- **MFU** = achieved FLOP/s / the device's dense peak at the step's precision (catalog). A
  training step counts 3 x the traced forward FLOPs (backward ~ 2 x forward), the convention of
  PaLM (Chowdhery et al. 2022, appendix B) that ``computewise.track`` uses too; recomputation
  by activation checkpointing is not counted, so checkpointed configurations read lower.
- **The planned run**: ``--run-hours H`` is the run's length as it stands (the naive
  configuration); ``--tokens N`` derives it from the naive token throughput. The tuned run takes
  ``H x tuned / naive``; the saving is priced at the hourly rate the tuning ran at.
- **Break-even**: the length of run (at naive speed) from which the time saved pays for the
  tuning: ``tuning hours / (1 - tuned step / naive step)``; none when tuning found nothing faster.

``tune_worth`` computes all of it once, when the search's result is built, into ``TuneWorth``: typed
fields that ``run_tune``, the ledger summary and ``--json`` read, and that ``from_dict`` reads back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal, Self

from computewise.specs.codec import Jsonable, Layout, json_field, json_property
from computewise.specs.document import read_float, read_mapping, require_object
from computewise.train.config import ConfigFile, TrainConfig

__all__ = [
    "TRAIN_FLOPS_PER_FORWARD",
    "DescribedConfig",
    "Measured",
    "RunSaving",
    "TuneWorth",
    "TunedConfigFile",
    "break_even_hours",
    "mfu",
    "plan_saving",
    "speedup",
    "tune_worth",
]

# One training step = forward + backward ~ 3 x forward (PaLM, Chowdhery et al. 2022), as in computewise.track.
TRAIN_FLOPS_PER_FORWARD = 3.0


def speedup(tuned_step_s: float, other_step_s: float) -> float:
    """How many times faster the tuned step is than the other one."""
    return other_step_s / tuned_step_s


def mfu(forward_flops_per_sample: float, samples_per_s: float, peak_flops_per_s: float) -> float | None:
    """Model FLOPs utilization, or None without a positive peak."""
    if not peak_flops_per_s > 0:
        return None
    return TRAIN_FLOPS_PER_FORWARD * forward_flops_per_sample * samples_per_s / peak_flops_per_s


def break_even_hours(naive_step_s: float, tuned_step_s: float, tuning_s: float) -> float | None:
    """Naive run length (hours) from which the time saved exceeds the tuning's own time; None if nothing is saved."""
    saved_fraction = 1.0 - tuned_step_s / naive_step_s
    if saved_fraction <= 0:
        return None
    return tuning_s / 3600.0 / saved_fraction


@dataclass(frozen=True)
class RunSaving(Jsonable):
    """A planned run at the naive and at the tuned configuration, and what the difference is worth."""

    json_description: ClassVar[str] = "The planned run at naive and tuned speed (tune.savings.RunSaving)."
    json_layout: ClassVar[Layout] = (
        "basis",
        "naive_hours",
        "tuned_hours",
        "saved_hours",
        "hourly_usd",
        "naive_usd",
        "tuned_usd",
        "saved_usd",
        "tuning_cost_usd",
        "net_saved_usd",
    )

    basis: Literal["run-hours", "tokens"]
    naive_hours: float
    tuned_hours: float
    hourly_usd: float
    tuning_cost_usd: float

    @json_property()
    def saved_hours(self) -> float:
        return self.naive_hours - self.tuned_hours

    @json_property()
    def saved_usd(self) -> float:
        return self.saved_hours * self.hourly_usd

    @json_property()
    def net_saved_usd(self) -> float:
        """The saving after paying for the tuning itself."""
        return self.saved_usd - self.tuning_cost_usd

    @json_property()
    def naive_usd(self) -> float:
        return self.naive_hours * self.hourly_usd

    @json_property()
    def tuned_usd(self) -> float:
        return self.tuned_hours * self.hourly_usd


def plan_saving(
    naive_step_s: float,
    tuned_step_s: float,
    hourly_usd: float,
    tuning_cost_usd: float,
    *,
    run_hours: float | None = None,
    tokens: float | None = None,
    tokens_per_step: float | None = None,
) -> RunSaving | None:
    """The planned run: ``run_hours`` at naive speed, or ``tokens`` at ``tokens_per_step``; None without either."""
    basis: Literal["run-hours", "tokens"]
    if run_hours is not None:
        naive_hours, basis = run_hours, "run-hours"
    elif tokens is not None and tokens_per_step:
        naive_hours, basis = tokens / tokens_per_step * naive_step_s / 3600.0, "tokens"
    else:
        return None
    tuned_hours = naive_hours * tuned_step_s / naive_step_s
    return RunSaving(basis, naive_hours, tuned_hours, hourly_usd, tuning_cost_usd)


class DescribedConfig(Jsonable):
    """A row of the search that holds a configuration and writes it named in one line right after it, so the
    JSON's reader sees the name the report prints; the measured and the pruned configurations share it."""

    config: TrainConfig

    @json_property(after="config")
    def describe(self) -> str:
        """The configuration in one line, as the report names it."""
        return self.config.describe()


@dataclass(frozen=True)
class Measured(DescribedConfig):
    """One configuration as the search measured it (the winner or a reference), with its MFU."""

    json_description: ClassVar[str] = "A configuration as measured (tune.savings.Measured)."

    trial: int
    config: TrainConfig
    median_step_s: float | None
    samples_per_s: float | None
    tokens_per_s: float | None
    warmup_s: float | None
    peak_memory_bytes: int | None
    peak_memory_kind: str | None
    estimated_memory_bytes: float
    mfu: float | None


@dataclass(frozen=True)
class TuneWorth(Jsonable):
    """What the tuned configuration is worth against the references, computed once when the result is built.

    Its JSON is the worth's keys of ``tune --json``; the tuning's cost is written with the tuning's other
    figures (``tuning.cost_usd``), so it is read from there and not written here.
    """

    json_layout: ClassVar[Layout] = (
        "best",
        "baseline",
        "largest_batch",
        ("speedup", ("speedup_vs_baseline", "speedup_vs_largest_batch")),
        "plan",
        "break_even_hours",
        "tuning_cost_usd",
    )

    best: Measured
    baseline: Measured | None
    largest_batch: Measured | None
    speedup_vs_baseline: float | None = field(metadata=json_field(name="vs_baseline"))
    speedup_vs_largest_batch: float | None = field(metadata=json_field(name="vs_largest_batch"))
    tuning_cost_usd: float = field(metadata=json_field(written=False))
    plan: RunSaving | None
    break_even_hours: float | None

    @classmethod
    def from_dict(cls, data: object, source: str = "") -> Self:
        """Read back from ``tune --json``, the tuning's cost from its ``tuning`` section."""
        source = source or "the tuning"
        document = require_object(data, "`computewise tune ENTRY --json`", source)
        cost = read_float(read_mapping(document, "tuning", source), "cost_usd", source)
        return super().from_dict({**document, "tuning_cost_usd": cost}, source)


@dataclass(frozen=True, kw_only=True)
class TunedConfigFile(ConfigFile):
    """What ``tune --out`` writes: the winner's configuration file, with the winner as the search measured it."""

    measured: Measured | None = field(
        default=None, metadata=json_field(omit_empty=True, description="The winner as the search measured it.")
    )


def tune_worth(
    best: Measured,
    baseline: Measured | None,
    largest_batch: Measured | None,
    hourly_usd: float,
    tuning_s: float,
    *,
    run_hours: float | None = None,
    tokens: float | None = None,
    tokens_per_step: float | None = None,
) -> TuneWorth:
    """Speed-ups against the references, the tuning's cost (price x duration), the planned run, the break-even."""
    best_s = best.median_step_s
    naive_s = baseline.median_step_s if baseline is not None else None
    # The ledger's formula for a run's cost (account.totals.price_run): price x duration.
    tuning_cost_usd = hourly_usd * tuning_s / 3600.0

    def against(other: Measured | None) -> float | None:
        other_s = other.median_step_s if other is not None else None
        return speedup(best_s, other_s) if best_s and other_s else None

    saving = None
    if naive_s:
        saving = plan_saving(
            naive_s,
            best_s or 0.0,
            hourly_usd,
            tuning_cost_usd,
            run_hours=run_hours,
            tokens=tokens,
            tokens_per_step=tokens_per_step,
        )
    return TuneWorth(
        best=best,
        baseline=baseline,
        largest_batch=largest_batch,
        speedup_vs_baseline=against(baseline),
        speedup_vs_largest_batch=against(largest_batch),
        tuning_cost_usd=tuning_cost_usd,
        plan=saving,
        break_even_hours=break_even_hours(naive_s, best_s, tuning_s) if naive_s and best_s else None,
    )
