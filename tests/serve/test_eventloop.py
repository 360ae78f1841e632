"""``serve.eventloop.freeze_startup_heap``: what start-up leaves alive is out of the collector's reach."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from computewise.serve.eventloop import freeze_startup_heap


@pytest.fixture
def _unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()  # the rest of the test session collects as before


@pytest.mark.usefixtures("_unfrozen")
def test_objects_alive_at_the_freeze_are_not_walked_by_later_collections() -> None:
    startup = [{"layer": index, "weights": [index] * 3} for index in range(50_000)]  # a model's worth of containers
    frozen = freeze_startup_heap()
    assert frozen == gc.get_freeze_count() >= 100_000  # the dicts and their lists
    tracked = {id(obj) for obj in gc.get_objects()}
    assert id(startup) not in tracked and id(startup[0]) not in tracked  # a full collection no longer walks them
    later = [{"request": [1]}]  # (a dict of only atoms is never tracked; this one holds a list)
    assert id(later[0]) in {id(obj) for obj in gc.get_objects()}  # what is allocated afterwards still is


@pytest.mark.usefixtures("_unfrozen")
def test_garbage_made_before_the_freeze_is_collected_not_frozen() -> None:
    class Node:
        def __init__(self) -> None:
            self.other: Node | None = None

    first, second = Node(), Node()
    first.other, second.other = second, first  # a cycle: only the collector can free it
    alive = weakref.ref(first)
    del first, second
    freeze_startup_heap()
    assert alive() is None  # collected by the collection before the freeze, not kept for ever
