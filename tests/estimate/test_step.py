"""Where a training step's time goes: each cause responds to the knob that should move it.

The published runs (test_accuracy.py) check the totals; these check the parts, each against a
property that a wrong model would break: the issue's 1,024-GPU job is no longer sync-bound, a
recompute never speeds a step up, interleaving divides the bubble, long sequences hide context
parallelism's K/V exchange and short ones do not, and the advice names the part that dominates.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from computewise.catalog import Catalog
from computewise.estimate import Assumptions, estimate_train
from computewise.models import preset
from computewise.specs import RECOMPUTES, Parallelism, TrainJob


def _estimate(
    catalog: Catalog,
    assumptions: Assumptions,
    model: str,
    gpu: str,
    layout: Parallelism,
    job: TrainJob,
    cloud: str | None = None,
) -> dict[str, object]:
    spec = preset(model)
    return estimate_train(
        spec, catalog.accelerator(gpu), layout.gpus, job, layout, catalog, assumptions, cloud=cloud
    ).to_dict()


LLAMA2_7B_JOB = TrainJob(tokens=2e12, seq_len=4096, micro_batch=1, global_batch=1024)


def test_the_issues_1024_gpu_job_is_compute_bound_on_efa(catalog: Catalog, assumptions: Assumptions) -> None:
    """Issue 14: 4.8 s of exposed gradient sync in a 6.2 s step (MFU 9 %) came from running the ring at one
    GPU's share of a p4de's 400 Gb/s. The node's whole network carries it: the sync hides under backward."""
    d = _estimate(catalog, assumptions, "llama-2-7b", "a100-80gb", Parallelism(dp=1024, zero=1), LLAMA2_7B_JOB, "aws")
    time = d["time"]  # type: ignore[index]
    assert time["breakdown_seconds_per_step"]["data_parallel"] < 0.15 * time["step_seconds"]
    assert d["compute"]["mfu"] > 0.4  # type: ignore[index]


def test_recomputing_never_makes_a_step_faster(catalog: Catalog, assumptions: Assumptions) -> None:
    """Sync-bound (DP over PCIe A10Gs) and compute-bound alike: the recomputed forward adds work it cannot hide.
    Both layouts fit, so the estimate times them (one that does not fit is not timed)."""
    a10g_job = TrainJob(tokens=1e9, seq_len=1024, micro_batch=1, global_batch=64)
    cases = (
        ("gpt2-xl", "a10g", Parallelism(dp=4, zero=1), a10g_job, "data_parallel"),
        ("llama-3-8b", "h100", Parallelism(dp=2, tp=4, sequence_parallel=True), LLAMA2_7B_JOB, "compute"),
    )
    for model, gpu, layout, job, bound in cases:
        times = [
            _estimate(catalog, assumptions, model, gpu, layout, replace(job, recompute=r))["time"]
            for r in RECOMPUTES[:3]  # none, selective, full
        ]
        steps = [time["step_seconds"] for time in times]  # type: ignore[index]
        parts = times[0]["breakdown_seconds_per_step"]  # type: ignore[index]
        assert max(parts, key=parts.get) == bound, (gpu, parts)
        assert steps[0] <= steps[1] * (1 + 1e-9) and steps[1] <= steps[2] * (1 + 1e-9), gpu


def test_interleaving_divides_the_bubble(catalog: Catalog, assumptions: Assumptions) -> None:
    job = TrainJob(tokens=1e11, seq_len=4096, micro_batch=1, global_batch=64, recompute="selective")
    plain = Parallelism(dp=2, tp=8, pp=8, sequence_parallel=True)
    one = _estimate(catalog, assumptions, "llama-2-70b", "h100", plain, job, "aws")["time"]  # type: ignore[index]
    two = _estimate(catalog, assumptions, "llama-2-70b", "h100", replace(plain, virtual_stages=2), job, "aws")["time"]  # type: ignore[index]
    assert one["pipeline_bubble_fraction"] == pytest.approx(7 / 32)  # (p - 1) / m
    assert two["pipeline_bubble_fraction"] == pytest.approx(7 / 64)  # (p - 1) / (v m)
    assert two["step_seconds"] < one["step_seconds"]
    # More chunks mean more stage boundaries to cross.
    assert (
        two["breakdown_seconds_per_step"]["pipeline_parallel"] > one["breakdown_seconds_per_step"]["pipeline_parallel"]
    )


def test_long_sequences_hide_context_parallel_traffic_and_short_ones_do_not(
    catalog: Catalog, assumptions: Assumptions
) -> None:
    layout = Parallelism(dp=2, tp=8, cp=8, sequence_parallel=True)
    parts = {}
    for seq_len in (1024, 131072):
        job = TrainJob(tokens=1e11, seq_len=seq_len, micro_batch=1, global_batch=2, recompute="selective")
        time = _estimate(catalog, assumptions, "llama-3-8b", "h100", layout, job, "aws")["time"]  # type: ignore[index]
        parts[seq_len] = time["breakdown_seconds_per_step"]["context_parallel"] / time["step_seconds"]
    assert parts[131072] < 0.02 < parts[1024]


def test_advice_names_the_part_that_dominates(catalog: Catalog, assumptions: Assumptions) -> None:
    pipelined = _estimate(
        catalog,
        assumptions,
        "llama-2-70b",
        "h100",
        Parallelism(dp=2, tp=8, pp=8, sequence_parallel=True),
        TrainJob(tokens=1e11, seq_len=4096, micro_batch=1, global_batch=16, recompute="selective"),
        "aws",
    )
    found = pipelined["time"]["bottleneck"]  # type: ignore[index]
    assert found["part"] == "pipeline_bubble" and "--virtual-stages" in found["advice"]
    one_each = replace(LLAMA2_7B_JOB, seq_len=1024, global_batch=4)  # one short sequence per A10G, synced over PCIe
    synced = _estimate(catalog, assumptions, "gpt2-medium", "a10g", Parallelism(dp=4), one_each)
    found = synced["time"]["bottleneck"]  # type: ignore[index]
    assert found["part"] == "data_parallel" and "global batch" in found["advice"]


def test_gradients_are_reduced_in_the_width_they_accumulate_in(catalog: Catalog, assumptions: Assumptions) -> None:
    """Megatron-LM reduces an fp32 gradient buffer under bf16 (accumulate_allreduce_grads_in_fp32) and a 16-bit
    one under fp16; PyTorch autocast reduces its fp32 weights' fp32 gradients under either. GPT-2 XL on four
    PCIe A10Gs with ZeRO-1 is sync-bound, so the exposed sync follows the bytes it moves: the gradients'
    reduce-scatter (4 or 2 bytes a parameter) and the 16-bit weights' all-gather (2)."""
    job = TrainJob(tokens=1e9, seq_len=1024, micro_batch=1, global_batch=64)

    def sync_s(framework: str, precision: str) -> float:
        layout_job = replace(job, framework=framework, precision=precision)  # type: ignore[arg-type]
        d = _estimate(catalog, assumptions, "gpt2-xl", "a10g", Parallelism(dp=4, zero=1), layout_job)
        return float(d["time"]["breakdown_seconds_per_step"]["data_parallel"])  # type: ignore[index]

    assert sync_s("megatron", "bf16") > 1.35 * sync_s("megatron", "fp16")  # 6 bytes a parameter to 4
    assert sync_s("pytorch", "bf16") == pytest.approx(sync_s("pytorch", "fp16"))
    assert sync_s("pytorch", "bf16") == pytest.approx(sync_s("megatron", "bf16"), rel=0.05)


def test_a_16_bit_gradient_reduce_moves_half_the_gradient_bytes(catalog: Catalog, assumptions: Assumptions) -> None:
    """--grad-reduce 16-bit: Megatron's bf16 buffer becomes 16-bit (NVIDIA's recipes), as fp16's is by default;
    FSDP's reduce_dtype=bfloat16 casts autocast's fp32 gradients for the reduce. Same model as above."""
    job = TrainJob(tokens=1e9, seq_len=1024, micro_batch=1, global_batch=64)

    def sync_s(framework: str, reduce: str) -> float:
        layout_job = replace(job, framework=framework, grad_reduce=reduce)  # type: ignore[arg-type]
        d = _estimate(catalog, assumptions, "gpt2-xl", "a10g", Parallelism(dp=4, zero=1), layout_job)
        return float(d["time"]["breakdown_seconds_per_step"]["data_parallel"])  # type: ignore[index]

    fp16 = replace(job, framework="megatron", precision="fp16")
    d = _estimate(catalog, assumptions, "gpt2-xl", "a10g", Parallelism(dp=4, zero=1), fp16)
    assert sync_s("megatron", "16-bit") == pytest.approx(d["time"]["breakdown_seconds_per_step"]["data_parallel"])  # type: ignore[index]
    assert sync_s("megatron", "fp32") == pytest.approx(sync_s("megatron", "auto"))
    assert sync_s("pytorch", "16-bit") < sync_s("pytorch", "auto") / 1.35
