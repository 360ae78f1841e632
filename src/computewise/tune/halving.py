"""Successive halving: measure every candidate briefly, then the best third longer, and so on.

Jamieson and Talwalkar 2016 (arXiv:1502.07943); the rung schedule is Hyperband's bracket with the
most rungs (Li et al. 2018, arXiv:1603.06560). A short measurement ranks configurations whose
speeds differ by 20 % as well as a long one does; it only blurs the near-ties, and those are
exactly the ones promoted to the longer rungs. Each rung runs ``ceil(n / eta)`` of the previous
rung's candidates for ``eta`` times as many steps, so every rung costs about the same and the
whole search about ``rungs / eta ** (rungs - 1)`` of measuring every candidate at the top rung.

The search is generic: candidates are indices, ``evaluate(index, rung)`` returns a score (lower
is better, here the median step time) or None when the candidate failed, and failed candidates
are never promoted.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from computewise.specs.codec import Jsonable

__all__ = ["HalvingOutcome", "Rung", "plan_rungs", "successive_halving"]


@dataclass(frozen=True)
class Rung(Jsonable):
    """One rung: its position, the measured steps each candidate gets, and at most how many candidates run."""

    index: int
    steps: int
    candidates: int


@dataclass
class HalvingOutcome:
    """``ranking``: the candidates of the last rung reached, best first; ``scores``: each candidate's per rung."""

    ranking: list[int] = field(default_factory=list)
    scores: dict[int, dict[int, float | None]] = field(default_factory=dict)

    def rung_reached(self, candidate: int) -> int | None:
        rungs = self.scores.get(candidate)
        return max(rungs) if rungs else None


def plan_rungs(candidates: int, top_steps: int, eta: int, min_steps: int) -> tuple[Rung, ...]:
    """The rungs for ``candidates``: as many as keep ``min_steps`` at the bottom and one candidate at the top.

    A rung is added only while the bottom rung still gets ``min_steps`` and the top rung keeps at
    least one candidate; with one candidate (or ``top_steps <= min_steps``) there is one rung.
    """
    if candidates < 1 or top_steps < 1 or min_steps < 1 or eta < 2:
        raise ValueError(f"bad halving plan: {candidates=} {top_steps=} {min_steps=} {eta=}")
    extra = 0
    while min_steps * eta ** (extra + 1) <= top_steps and eta ** (extra + 1) <= candidates:
        extra += 1
    rungs = []
    count = candidates
    for index in range(extra + 1):
        steps = max(min_steps, round(top_steps / eta ** (extra - index)))
        rungs.append(Rung(index, steps, count))
        count = math.ceil(count / eta)
    return tuple(rungs)


def successive_halving(
    candidates: int,
    rungs: tuple[Rung, ...],
    evaluate: Callable[[int, Rung], float | None],
) -> HalvingOutcome:
    """Run the rungs over candidates ``0 .. candidates - 1``; ties keep the earlier candidate first."""
    outcome = HalvingOutcome()
    alive = list(range(candidates))
    for position, rung in enumerate(rungs):
        measured: list[tuple[float, int]] = []
        for candidate in alive:
            score = evaluate(candidate, rung)
            outcome.scores.setdefault(candidate, {})[rung.index] = score
            if score is not None and math.isfinite(score):
                measured.append((score, candidate))
        measured.sort()
        outcome.ranking = [candidate for _, candidate in measured]
        if position + 1 < len(rungs):
            alive = outcome.ranking[: rungs[position + 1].candidates]
        if not alive:
            break
    return outcome
