"""``computewise.bench.collectives`` for real: gloo between 2 and 3 local processes on 127.0.0.1.

The figures come from a shared, loaded 2-core VM, so no test asserts a speed. They check what holds
whatever the load: the ops, sizes and world size asked for are the ones measured; busbw relates to
algbw by nccl-tests' factors (typed here from its doc/PERFORMANCE.md, not imported from the code);
the bus bandwidth is plausible against the memory bandwidth a NumPy STREAM triad measures in the
same test; and a failing or hung rank is stopped and killed by PID.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

pytest.importorskip("torch")

from computewise.bench import collectives
from computewise.bench.collectives import CollectiveFigure, measure_collectives
from computewise.errors import ComputewiseError, InputError

pytestmark = pytest.mark.torch

# nccl-tests, doc/PERFORMANCE.md: busbw = algbw * 2(n-1)/n for AllReduce, * (n-1)/n for AllGather
# and ReduceScatter.
BUS_FACTOR_TWO_RANKS = {"all-reduce": 1.0, "all-gather": 0.5, "reduce-scatter": 0.5}
BUS_FACTOR_THREE_RANKS = {"all-reduce": 4 / 3, "all-gather": 2 / 3, "reduce-scatter": 2 / 3}
ASKED_BYTES = (4096, 256 * 1024, 16 * 1024 * 1024)  # each a whole number of float32 per rank for 2 ranks


@pytest.fixture(scope="module")
def two_ranks() -> tuple[tuple[CollectiveFigure, ...], list[str]]:
    messages: list[str] = []
    figures = measure_collectives(2, ASKED_BYTES, quick=True, progress=messages.append)
    return figures, messages


def test_measures_every_op_at_every_size_asked(two_ranks: tuple[tuple[CollectiveFigure, ...], list[str]]) -> None:
    figures, messages = two_ranks
    assert [(f.op, f.message_bytes) for f in figures] == [
        (op, size) for op in ("all-reduce", "all-gather", "reduce-scatter") for size in ASKED_BYTES
    ]
    for figure in figures:
        assert (figure.backend, figure.world_size, figure.time_s.repeats) == ("gloo", 2, 10)
        assert 0 < figure.time_s.low <= figure.time_s.median <= figure.time_s.high
    assert any("all-reduce 16.0 MiB" in message for message in messages), messages


def test_busbw_over_algbw_is_the_nccl_tests_factor(two_ranks: tuple[tuple[CollectiveFigure, ...], list[str]]) -> None:
    for figure in two_ranks[0]:
        assert figure.algbw_gb_per_s == pytest.approx(figure.message_bytes / figure.time_s.median / 1e9)
        assert figure.busbw_gb_per_s / figure.algbw_gb_per_s == pytest.approx(BUS_FACTOR_TWO_RANKS[figure.op])


def test_three_ranks_round_the_message_and_scale_busbw() -> None:
    figures = measure_collectives(3, [1000], quick=True)
    # 1000 B is 83.3 float32 per rank: rounded down to 83 each, 3 x 83 x 4 = 996 B.
    assert [(f.op, f.world_size, f.message_bytes) for f in figures] == [
        ("all-reduce", 3, 996),
        ("all-gather", 3, 996),
        ("reduce-scatter", 3, 996),
    ]
    for figure in figures:
        assert figure.busbw_gb_per_s / figure.algbw_gb_per_s == pytest.approx(BUS_FACTOR_THREE_RANKS[figure.op])


def _triad_gb_per_s() -> float:
    """STREAM triad a = b + 3c with NumPy over 64 MB arrays: the median of 7, in decimal GB/s.

    NumPy does it in two passes (a = 3c, then a += b): 5 arrays of traffic, 40 bytes per element,
    counted as made, so the figure is the memory system's, not STREAM's 24-byte convention.
    """
    n = 8_000_000
    a, b, c = np.empty(n), np.ones(n), np.ones(n)
    times_s = []
    for _ in range(7):
        started = time.perf_counter()
        np.multiply(c, 3.0, out=a)
        np.add(a, b, out=a)
        times_s.append(time.perf_counter() - started)
    return 40 * n / float(np.median(times_s)) / 1e9


def test_busbw_is_plausible_against_memory_bandwidth(two_ranks: tuple[tuple[CollectiveFigure, ...], list[str]]) -> None:
    """Between processes gloo moves every byte through loopback TCP: at least two copies through the
    kernel plus the reduction, all in memory, so no busbw can reach twice the triad's bandwidth (a
    time taken from a call not waited for, or bytes counted twice, would). The floor, 1/300 of the
    triad, is some 10x below what this VM gives under load (3 to 5 % of triad at 16 MiB) and catches a
    slip of units (ms as s) or a rank left waiting on another each call."""
    triad_gb_per_s = _triad_gb_per_s()
    figures = two_ranks[0]
    assert all(f.busbw_gb_per_s < 2 * triad_gb_per_s for f in figures), (triad_gb_per_s, figures)
    largest = next(f for f in figures if f.op == "all-reduce" and f.message_bytes == 16 * 2**20)
    assert largest.busbw_gb_per_s > triad_gb_per_s / 300, (triad_gb_per_s, largest)


def test_round_trips_through_its_dict(two_ranks: tuple[tuple[CollectiveFigure, ...], list[str]]) -> None:
    for figure in two_ranks[0]:
        assert CollectiveFigure.from_dict(figure.to_dict()) == figure
    wrong = {**two_ranks[0][0].to_dict(), "op": "broadcast"}
    with pytest.raises(InputError, match="op must be one of"):
        CollectiveFigure.from_dict(wrong)


@pytest.mark.parametrize(
    ("world_size", "sizes", "message"),
    [
        (1, [4096], "need 2 to 64 processes, got 1"),
        (65, [4096], "need 2 to 64 processes, got 65"),
        (2, [4], "message sizes must be 8 B"),
        (2, [2**31], "message sizes must be"),
        (2, [], "got none"),
    ],
)
def test_refuses_what_cannot_be_measured(world_size: int, sizes: list[int], message: str) -> None:
    with pytest.raises(InputError, match=message):
        measure_collectives(world_size, sizes, quick=True)


def test_cuda_without_two_gpus_is_refused() -> None:
    import torch

    if torch.cuda.device_count() >= 2:
        pytest.skip("this machine has two GPUs: NCCL can run")
    with pytest.raises(InputError, match="need at least 2 GPUs"):
        measure_collectives(2, [4096], quick=True, device="cuda")


def _fake_ranks(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, rank_code: dict[int, str]) -> None:
    """Ranks that run ``rank_code[rank]`` instead of the worker, each writing its PID first."""

    def command(request_path: Path, rank: int, work: Path) -> list[str]:
        record = f"open({str(tmp_path / f'pid-{rank}')!r}, 'w').write(str(__import__('os').getpid()))\n"
        return [sys.executable, "-c", record + rank_code[rank]]

    monkeypatch.setattr(collectives, "_worker_command", command)


def _pids(tmp_path: Path) -> list[int]:
    return [int(path.read_text()) for path in sorted(tmp_path.glob("pid-*"))]


def test_a_failing_rank_stops_the_others(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    hang = "import time\ntime.sleep(600)"
    fail = "import sys, time\ntime.sleep(0.5)\nprint('rank 0 broke: no route')\nsys.exit(3)"
    _fake_ranks(monkeypatch, tmp_path, {0: fail, 1: hang})
    started = time.monotonic()
    with pytest.raises(ComputewiseError, match=r"rank 0 exited with code 3: rank 0 broke: no route") as raised:
        measure_collectives(2, [4096], quick=True)
    assert time.monotonic() - started < 30
    assert "127.0.0.1" in str(raised.value)  # the hint
    pids = _pids(tmp_path)
    assert len(pids) == 2
    assert not any(psutil.pid_exists(pid) for pid in pids)


def test_ranks_past_the_deadline_are_killed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    hang = "import time\ntime.sleep(600)"
    _fake_ranks(monkeypatch, tmp_path, {0: hang, 1: hang})
    monkeypatch.setattr(collectives, "_START_BUDGET_S", 3.0)  # time for both to write their PIDs
    started = time.monotonic()
    with pytest.raises(ComputewiseError, match=r"ranks \[0, 1\] did not finish within 3 s and were stopped"):
        measure_collectives(2, [4096], quick=True)
    assert time.monotonic() - started < 30
    pids = _pids(tmp_path)
    assert len(pids) == 2
    assert not any(psutil.pid_exists(pid) for pid in pids)


@pytest.mark.gpu
def test_nccl_between_two_gpus() -> None:
    import torch

    if torch.cuda.device_count() < 2:
        pytest.skip("NCCL runs one process per GPU: needs two GPUs")
    figures = measure_collectives(2, [2**20], quick=True, device="cuda")
    assert [(f.op, f.backend, f.world_size, f.message_bytes) for f in figures] == [
        (op, "nccl", 2, 2**20) for op in ("all-reduce", "all-gather", "reduce-scatter")
    ]
    for figure in figures:
        assert figure.busbw_gb_per_s / figure.algbw_gb_per_s == pytest.approx(BUS_FACTOR_TWO_RANKS[figure.op])
