"""benchmarks/replay_lora.py: a LoRA step replayed on fake tensors allocates what real CPU tensors do.

The reference is independent of the replay's tracker: the CPU allocator's own record of a real step
(the profiler's memory events), and the LoRA paper's parameter count (r x (in + out) per adapted layer).
"""

from __future__ import annotations

from types import ModuleType

import pytest

from benchmark_script import load_benchmark

pytest.importorskip("torch")
pytest.importorskip("peft")
pytest.importorskip("transformers")

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def replay() -> ModuleType:
    return load_benchmark("replay_lora")


def test_the_fake_replay_allocates_what_real_tensors_do(replay: ModuleType) -> None:
    """A tiny Llama with attention adapters: profiler (real), tracker (real) and tracker (fake) agree."""
    check = replay.check(replay.Case("tiny", 2, 32, False, "attention", 4))
    assert check.tracker_fake_bytes > 0
    assert abs(check.tracker_real_bytes - check.tracker_fake_bytes) <= replay.CHECK_TOLERANCE_BYTES
    assert abs(check.profiler_bytes - check.tracker_real_bytes) <= replay.CHECK_TOLERANCE_BYTES


def test_a_row_carries_its_inputs_and_holds_at_least_weights_and_adapter_states(replay: ModuleType) -> None:
    """The tiny Llama (hidden 64, KV projections 64 -> 32), rank 8 on q, k, v, o, checkpointing."""
    row = replay.replay(replay.Case("tiny", 2, 64, True, "attention", 8))
    per_layer = 8 * ((64 + 64) + (64 + 32) + (64 + 32) + (64 + 64))  # q, k, v, o: r x (in + out)
    assert row.trainable_params == 2 * per_layer
    assert (row.micro_batch, row.seq_len, row.checkpointing, row.rank) == (2, 64, True, 8)
    assert row.model_config["num_key_value_heads"] == 2
    floor = 2 * (row.params - row.trainable_params) + 16 * row.trainable_params  # bf16 base; fp32 w, g, m, v
    assert floor < row.live_tensor_peak_bytes
    assert floor + row.blas_workspace_bytes < row.allocated_peak_bytes <= row.reserved_peak_bytes
