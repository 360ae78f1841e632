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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["TRAIN_FLOPS_PER_FORWARD", "RunSaving", "break_even_hours", "mfu", "plan_saving", "speedup"]

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
class RunSaving:
    """A planned run at the naive and at the tuned configuration, and what the difference is worth."""

    basis: Literal["run-hours", "tokens"]
    naive_hours: float
    tuned_hours: float
    hourly_usd: float
    tuning_cost_usd: float

    @property
    def saved_hours(self) -> float:
        return self.naive_hours - self.tuned_hours

    @property
    def saved_usd(self) -> float:
        return self.saved_hours * self.hourly_usd

    @property
    def net_saved_usd(self) -> float:
        """The saving after paying for the tuning itself."""
        return self.saved_usd - self.tuning_cost_usd

    def to_dict(self) -> dict[str, float | str]:
        return {
            "basis": self.basis,
            "naive_hours": self.naive_hours,
            "tuned_hours": self.tuned_hours,
            "saved_hours": self.saved_hours,
            "hourly_usd": self.hourly_usd,
            "naive_usd": self.naive_hours * self.hourly_usd,
            "tuned_usd": self.tuned_hours * self.hourly_usd,
            "saved_usd": self.saved_usd,
            "tuning_cost_usd": self.tuning_cost_usd,
            "net_saved_usd": self.net_saved_usd,
        }


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
