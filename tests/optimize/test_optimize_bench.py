"""Timing that survives a busy machine: other processes' CPU use is seen, and the quiet passes are kept.

Real processes do the disturbing: two child Pythons spinning on every CPU this process may use,
started and stopped by the test itself.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import numpy as np
import pytest

from computewise.optimize.bench import CONTENDED_SHARE, measure_speed
from computewise.optimize.feeds import Batch, TensorFeed

SPIN = (
    'import time\nprint("spinning", flush=True)\n'
    "end = time.monotonic() + 120\nwhile time.monotonic() < end:\n    pass\n"
)


def _usable_cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


@pytest.fixture
def busy_cpus() -> Iterator[None]:
    """Two spinning children per usable CPU, for the length of the test, each spinning before the test starts:
    on a busy machine a Python child can take longer to start than the whole measurement."""
    children = [
        subprocess.Popen([sys.executable, "-c", SPIN], stdout=subprocess.PIPE, text=True)
        for _ in range(2 * _usable_cpus())
    ]
    try:
        for child in children:
            assert child.stdout is not None and child.stdout.readline().strip() == "spinning"
        yield
    finally:
        for child in children:
            child.kill()
            child.wait(timeout=10)


def _matmul(batch: Batch) -> np.ndarray:
    """A little real work per call, about a millisecond."""
    x = batch["x"]
    for _ in range(20):
        x = np.tanh(x @ np.eye(x.shape[1], dtype=np.float32))
    return x


def _feed(rows: int = 64) -> TensorFeed:
    return TensorFeed({"x": np.random.default_rng(0).standard_normal((rows, 128)).astype(np.float32)})


def test_spinning_neighbours_are_detected_and_reported(busy_cpus: None) -> None:
    threads = _usable_cpus()  # the measured code wants every CPU, as a search with default threads does
    # The kernel counts CPU time in 10 ms ticks, so a pass must span many of them for the neighbours' share to
    # show: 4,096 items make a pass of about 80 ms (a 64-item one, about 50 ms, read 0 % once in four on a
    # busy machine).
    speed = measure_speed(_matmul, _feed(4096), batch_size=8, max_items=4096, threads=threads)
    assert speed.others_cpu_share > CONTENDED_SHARE
    assert speed.contended
    assert speed.to_dict()["contended"] is True and speed.threads == threads


def test_the_deadline_cuts_the_passes_short_after_one() -> None:
    speed = measure_speed(_matmul, _feed(), batch_size=8, max_items=64, out_of_time=lambda: True)
    assert speed.passes == 1 and speed.items_per_s > 0
