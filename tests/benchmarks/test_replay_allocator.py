"""benchmarks/replay_allocator.py: the caching allocator's placement rules, and one measured row replayed.

The rules are those of c10/cuda/CUDACachingAllocator.cpp (default configuration); the measured row
is a real H100 run (benchmarks/data/measured/h100-2026-11-26/hf-llama/truth.jsonl), independent
of the code under test.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from benchmark_script import load_benchmark

pytest.importorskip("torch")

pytestmark = pytest.mark.torch

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "replay_allocator.py"
MIB = 2**20


@pytest.fixture(scope="module")
def replay() -> ModuleType:
    return load_benchmark("replay_allocator")


def test_segments_by_request_size(replay: ModuleType) -> None:
    allocator = replay.CachingAllocator()
    allocator.malloc(100)  # small pool: a 2 MiB segment, a 512-byte block
    assert (allocator.reserved, allocator.allocated) == (2 * MIB, 512)
    allocator.malloc(3 * MIB)  # 1-10 MiB: a 20 MiB segment, split
    assert (allocator.reserved, allocator.allocated) == (22 * MIB, 512 + 3 * MIB)
    allocator.malloc(4 * MIB)  # carved from the same 20 MiB segment
    assert allocator.segments == 2
    allocator.malloc(13 * MIB + 1)  # larger than the 13 MiB left: its own segment, rounded up to 2 MiB
    assert allocator.reserved == 22 * MIB + 14 * MIB


def test_a_remainder_of_at_most_1_mib_is_handed_out_with_the_block(replay: ModuleType) -> None:
    allocator = replay.CachingAllocator()
    block = allocator.malloc(12 * MIB)
    allocator.free(block)
    allocator.malloc(11 * MIB)  # 1 MiB left over: not split, the whole block counts as allocated
    assert allocator.allocated == 12 * MIB
    assert allocator.segments == 1


def test_best_fit_and_coalescing(replay: ModuleType) -> None:
    allocator = replay.CachingAllocator()
    big, small = allocator.malloc(40 * MIB), allocator.malloc(12 * MIB)
    allocator.free(big)
    allocator.free(small)
    allocator.malloc(12 * MIB)  # the smallest free block that fits: the 12 MiB one, not the 40
    allocator.malloc(40 * MIB)
    assert allocator.segments == 2
    merged = replay.CachingAllocator()
    merged.free(merged.malloc(20 * MIB))
    piece = merged.malloc(8 * MIB)  # carved from the freed 20 MiB, 12 MiB left free beside it
    merged.free(piece)  # merges back with that remainder
    merged.malloc(20 * MIB)
    assert merged.segments == 1


def test_a_measured_hf_step_replays_to_its_reserved_peak(replay: ModuleType) -> None:
    """Llama 160M, 4 x 1024 tokens with checkpointing: max_memory_reserved 3,701 MiB on the H100."""
    pytest.importorskip("transformers")
    case = next(c for c in replay.cases() if c.name == "hf llama-160m s1024 b4 full")
    row = replay.replay(case)
    assert row.error("replay", "allocated") == pytest.approx(0.0, abs=0.005)
    assert row.error("replay", "reserved") == pytest.approx(0.0, abs=0.01)
    assert row.error("estimated", "reserved") == pytest.approx(0.0, abs=0.03)
