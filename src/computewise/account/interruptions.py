"""What the interruptions of a resubmitted run cost: the time an uninterrupted run would not have spent.

A logical run (``computewise run --engine``) is submitted once per attempt; when an attempt is
preempted or killed, the next one resumes from the last checkpoint. Its steps go into the one
ledger run, numbered from where each attempt resumed (``track(first_step=...)``), and
``computewise.train`` writes them out at every checkpoint. So, with R the first step number of the
attempt that follows an interrupted one:

    lost_s     = end of the interrupted attempt - end of its step R - 1 (the last one its checkpoint
                 kept: what came after it, saving and shutting down included, is done or paid again);
                 the whole attempt when it did not reach a checkpoint of its own
    restart_s  = start of the first step of each attempt after the first - start of that attempt
                 (a new process, the model built again, the checkpoint loaded)
    added_s    = lost_s + restart_s;   added_usd = added_s x hourly_usd / 3600

The first attempt's start-up is paid by an uninterrupted run too, so it is not counted; neither is
the time between attempts (waiting for a node), which is not billed. A job that records no steps
leaves the added cost unknown (None): its attempts and billed time still show.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from computewise.ledger import AttemptRow, StepRow
from computewise.specs.codec import Jsonable, json_field

__all__ = ["InterruptionCost", "billed_s", "interruption_cost"]

_S_PER_H = 3600.0


@dataclass(frozen=True)
class InterruptionCost(Jsonable):
    """The attempts of one logical run, their billed time, and what the interruptions among them added; its JSON
    is its fields, in order (the formulas: the module docstring; None: the job recorded no steps)."""

    json_description: ClassVar[str] = (
        "What the interruptions of a resubmitted run added (account.interruptions); null figures: no steps recorded."
    )

    attempts: int = field(metadata=json_field(minimum=0))
    interruptions: int = field(metadata=json_field(minimum=0))
    billed_s: float = field(metadata=json_field(description="The attempts' summed wall time: what was paid for."))
    lost_s: float | None
    restart_s: float | None
    added_s: float | None
    added_usd: float | None
    redone_steps: int | None


def billed_s(attempts: Sequence[AttemptRow], now_s: float) -> float:
    """Seconds the attempts ran (an open attempt until ``now_s``): what a resubmitted run is billed for."""
    return sum(_end_s(a, now_s) - a.started_at_s for a in attempts if _end_s(a, now_s) > a.started_at_s)


def interruption_cost(
    attempts: Sequence[AttemptRow], steps: Sequence[StepRow], hourly_usd: float, now_s: float
) -> InterruptionCost:
    """Apply the module's formulas; each step belongs to the attempt whose time span holds its end."""
    ordered = sorted(attempts, key=lambda a: a.number)
    interruptions = sum(1 for a in ordered[:-1] if a.outcome in ("preempted", "failed"))
    total_s = billed_s(ordered, now_s)
    if not steps:
        return InterruptionCost(len(ordered), interruptions, total_s, None, None, None, None, None)
    own = [_steps_within(attempt, steps, now_s) for attempt in ordered]
    lost_s = restart_s = 0.0
    for index, attempt in enumerate(ordered):
        if index > 0 and own[index]:
            restart_s += max(0.0, _step_start_s(own[index][0]) - attempt.started_at_s)
        if index < len(ordered) - 1:
            resumed_at = next((later[0].step for later in own[index + 1 :] if later), None)
            kept = [step for step in own[index] if resumed_at is not None and step.step == resumed_at - 1]
            kept_until_s = kept[-1].t_s if kept else attempt.started_at_s
            lost_s += max(0.0, _end_s(attempt, now_s) - kept_until_s)
    added_s = lost_s + restart_s
    return InterruptionCost(
        attempts=len(ordered),
        interruptions=interruptions,
        billed_s=total_s,
        lost_s=lost_s,
        restart_s=restart_s,
        added_s=added_s,
        added_usd=added_s * hourly_usd / _S_PER_H,
        redone_steps=_redone_steps(own),
    )


def _redone_steps(own: Sequence[Sequence[StepRow]]) -> int:
    """Steps an attempt recorded that an earlier attempt had recorded too (a lower bound after a hard kill:
    the steps the killed process had not written yet are not in the ledger)."""
    reached, redone = -1, 0
    for steps in own:
        redone += sum(1 for step in steps if step.step <= reached)
        reached = max([reached, *(step.step for step in steps)])
    return redone


def _end_s(attempt: AttemptRow, now_s: float) -> float:
    return attempt.ended_at_s if attempt.ended_at_s is not None else now_s


def _steps_within(attempt: AttemptRow, steps: Sequence[StepRow], now_s: float) -> list[StepRow]:
    end_s = _end_s(attempt, now_s)
    return sorted((s for s in steps if attempt.started_at_s <= s.t_s <= end_s), key=lambda s: s.t_s)


def _step_start_s(step: StepRow) -> float:
    """``t_s`` is when a step ended; it began its data wait and compute before that."""
    return step.t_s - step.compute_s - step.data_wait_s
