"""Which LoRA rank to fine-tune with: the cheapest whose quality is within a tolerance of the best.

A larger rank trains more adapter parameters: more memory, often a slower step, sometimes a better
model. So speed alone would always pick the smallest rank, and quality alone the largest; neither
is what a user wants. ``tune --lora-ranks`` runs the usual search (batch growth, halving, references)
once per rank, all with the same number of steps of the same global batch, and measures each
rank's quality after its fastest trial (``trial``: the setup's ``evaluate``, else the last step's
training loss). Here the ranks are judged:

- the **reference** is the rank of the best quality (the lowest, or the highest where the setup's
  ``higher_is_better``);
- a rank **qualifies** when its quality is within ``tolerance`` (a fraction of the reference's
  magnitude: 0.01 is 1 %, the default) of the reference's;
- the **pick** is the cheapest qualifying rank: the highest throughput on this machine, so the
  fewest dollars per token at its hourly price. Each rank that is not picked says why (its quality
  or its speed), so a small rank is never chosen silently.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from computewise.errors import TuneError
from computewise.specs.codec import Jsonable, Layout, json_field

__all__ = ["DEFAULT_QUALITY_TOLERANCE", "RankOutcome", "RankSearch", "RankTrial", "judge_ranks"]

DEFAULT_QUALITY_TOLERANCE = 0.01  # 1 % of the best rank's quality: the noise of a short evaluation, not a real loss


@dataclass(frozen=True)
class RankTrial(Jsonable):
    """What the search of one rank measured with its fastest trial (None figures: every trial failed).

    Its JSON leaves out ``failure``: a rank's outcome says it in its verdict.
    """

    json_layout: ClassVar[Layout] = (
        "rank",
        "trial",
        "samples_per_s",
        "tokens_per_s",
        "peak_memory_bytes",
        "estimated_memory_bytes",
        "quality",
    )

    rank: int = field(metadata=json_field(minimum=1))
    trial: int | None
    samples_per_s: float | None
    tokens_per_s: float | None
    peak_memory_bytes: float | None
    estimated_memory_bytes: float | None
    quality: float | None
    failure: str | None = None


@dataclass(frozen=True)
class RankOutcome(Jsonable):
    """One rank judged: its measurement, its price per unit of work, whether it qualifies and why (not) picked."""

    measured: RankTrial = field(metadata=json_field(inline=True))
    usd_per_million_tokens: float | None
    usd_per_thousand_samples: float | None
    qualifies: bool
    verdict: str

    @property
    def rank(self) -> int:
        return self.measured.rank


@dataclass(frozen=True)
class RankSearch(Jsonable):
    """The ranks tried, how quality was measured and compared, and the rank picked."""

    json_description: ClassVar[str] = (
        "The LoRA rank search (--lora-ranks only; absent otherwise): each rank's fastest trial, price and quality, "
        "and the rank picked, the cheapest whose quality is within the tolerance of the best (tune.ranks.RankSearch)."
    )

    metric: str
    higher_is_better: bool
    tolerance: float = field(metadata=json_field(minimum=0, exclusive_maximum=1))
    reference: int = field(
        metadata=json_field(name="reference_rank", minimum=1, description="The rank of the best quality.")
    )
    picked: int = field(metadata=json_field(name="picked_rank", minimum=1))
    outcomes: tuple[RankOutcome, ...] = field(metadata=json_field(name="ranks"))

    def outcome(self, rank: int) -> RankOutcome:
        return next(outcome for outcome in self.outcomes if outcome.rank == rank)


def judge_ranks(
    trials: Sequence[RankTrial], metric: str, higher_is_better: bool, tolerance: float, hourly_usd: float
) -> RankSearch:
    """Judge each rank against the best quality and pick the cheapest within ``tolerance`` (module docstring)."""
    measured = [t for t in trials if t.quality is not None and t.samples_per_s is not None]
    if not measured:
        failures = "; ".join(f"rank {t.rank}: {t.failure}" for t in trials)
        raise TuneError(f"no LoRA rank was measured: {failures}", "run one rank with computewise.train to see why")

    def quality(trial: RankTrial) -> float:
        return trial.quality if trial.quality is not None else float("nan")

    def throughput(trial: RankTrial) -> float:
        return trial.samples_per_s or 0.0

    reference = (max if higher_is_better else min)(measured, key=quality)
    margin = tolerance * abs(quality(reference))
    sign = 1.0 if higher_is_better else -1.0

    def shortfall(trial: RankTrial) -> float:
        """How much worse than the reference, in the quality's own unit (0 for the reference)."""
        return sign * (quality(reference) - quality(trial))

    qualifying = [t for t in measured if shortfall(t) <= margin]
    picked = max(qualifying, key=lambda t: (throughput(t), -t.rank))  # a tie goes to the smaller adapters

    def verdict(trial: RankTrial) -> str:
        if trial.failure is not None or trial not in measured:
            return f"not measured: {trial.failure or 'no quality'}"
        if trial is picked:
            return "picked"
        if trial not in qualifying:
            worse = shortfall(trial) / abs(quality(reference)) if quality(reference) else float("inf")
            return f"quality {worse:.1%} worse than rank {reference.rank}'s, over the {tolerance:.1%} tolerance"
        return f"qualifies, but {throughput(picked) / throughput(trial):.2f}x slower than rank {picked.rank}"

    outcomes = tuple(
        RankOutcome(
            measured=trial,
            usd_per_million_tokens=_usd_per(hourly_usd, trial.tokens_per_s, 1e6),
            usd_per_thousand_samples=_usd_per(hourly_usd, trial.samples_per_s, 1e3),
            qualifies=trial in qualifying,
            verdict=verdict(trial),
        )
        for trial in trials
    )
    return RankSearch(metric, higher_is_better, tolerance, reference.rank, picked.rank, outcomes)


def _usd_per(hourly_usd: float, per_s: float | None, units: float) -> float | None:
    """Dollars for ``units`` of work at ``per_s`` a second on a machine of ``hourly_usd``."""
    if not per_s:
        return None
    return hourly_usd / 3600.0 / per_s * units
