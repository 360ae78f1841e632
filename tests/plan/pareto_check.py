"""One check of a Pareto frontier against brute force, shared by the training and serving plan tests.

The frontier a planner returns must be exactly the non-dominated points of its candidates, found
here by comparing every candidate with every other (O(n^2), independent of the planner's sort-and-sweep):
each member is dominated by no candidate, each candidate off it is dominated (strictly worse on one
axis, no better on the other) or ties a member's point, and it runs fastest first.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

Option = TypeVar("Option")


def assert_is_the_pareto_front(
    candidates: Sequence[Option],
    front: Sequence[Option],
    time_of: Callable[[Option], float],
    cost_of: Callable[[Option], float],
) -> None:
    """``front`` is the non-dominated set of ``candidates`` on (time, cost), one member per point, fastest first."""

    def point(option: Option) -> tuple[float, float]:
        return time_of(option), cost_of(option)

    def dominates(a: tuple[float, float], b: tuple[float, float]) -> bool:
        return a[0] <= b[0] and a[1] <= b[1] and a != b

    points = [point(o) for o in candidates]
    assert all(any(member is o for o in candidates) for member in front), "a frontier member is not a candidate"
    for member in front:
        beaten_by = [p for p in points if dominates(p, point(member))]
        assert not beaten_by, f"frontier member {point(member)} is dominated by {beaten_by[0]}"
    front_points = {point(member) for member in front}
    for option in candidates:
        here = point(option)
        assert here in front_points or any(dominates(p, here) for p in points), (
            f"candidate {here} is off the frontier but nothing dominates it"
        )
    assert [point(member) for member in front] == sorted(front_points), "not one member per point, fastest first"
