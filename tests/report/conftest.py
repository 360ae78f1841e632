"""Estimates as the estimators make them, and hand-built plans and break-evens.

The plans are built by hand so that their figures are fixed; the estimates are the real ones (Llama-3-8B on
H100s), so that the printers read the same typed results the CLI hands them.
"""

from __future__ import annotations

import pytest

from computewise.catalog import Catalog
from computewise.estimate import Assumptions, estimate_infer, estimate_train
from computewise.estimate.single import InferEstimate, TrainEstimate
from computewise.models import preset
from computewise.plan.infer import InferOption, InferPlan
from computewise.plan.onprem import BreakEven
from computewise.plan.result import Option, Plan, Rejection, ScalingPoint
from computewise.specs import InferJob, Parallelism, Pricing, TrainJob

GB = 1e9
H100_BYTES = 80e9  # 74.5 GiB as the CUDA allocator reports it


def _memory(
    weights: float, gradients: float, optimizer: float, activations: float, kv: float, overhead: float
) -> dict[str, float]:
    parts = {
        "weights": weights,
        "gradients": gradients,
        "optimizer_states": optimizer,
        "activations": activations,
        "kv_cache": kv,
        "overhead": overhead,
    }
    return {**parts, "total": sum(parts.values())}


@pytest.fixture
def train_estimate(catalog: Catalog, assumptions: Assumptions) -> TrainEstimate:
    """Llama-3-8B, 20B tokens, 8 x H100 SXM, ZeRO-3 over 8 data-parallel ranks, bf16 + AdamW, as estimated."""
    job = TrainJob(tokens=20e9, seq_len=2048, micro_batch=1, global_batch=256, recompute="full")
    layout = Parallelism(dp=8, zero=3)
    return estimate_train(preset("llama-3-8b"), catalog.accelerator("h100-sxm"), 8, job, layout, catalog, assumptions)


@pytest.fixture
def unsharded_estimate(train_estimate: TrainEstimate, catalog: Catalog, assumptions: Assumptions) -> TrainEstimate:
    """The same job with only the optimizer states sharded (ZeRO-1): 87 GiB a device, which does not fit."""
    e = train_estimate
    return estimate_train(e.model, e.accelerator, 8, e.job, Parallelism(dp=8, zero=1), catalog, assumptions)


@pytest.fixture
def infer_estimate(catalog: Catalog, assumptions: Assumptions) -> InferEstimate:
    """Llama-3-8B answering batches of 8 prompts of 2048 tokens with 256 tokens each on one H100 SXM."""
    job = InferJob(batch=8, context_len=2048, output_len=256, precision="bf16")
    return estimate_infer(preset("llama-3-8b"), catalog.accelerator("h100-sxm"), job, catalog, assumptions)


def _train_option(gpus: int, time_s: float, usd_per_h: float, pricing: Pricing = "on-demand") -> Option:
    return Option(
        accelerator="h100-sxm",
        gpus=gpus,
        instances=max(1, gpus // 8),
        cloud="aws",
        instance_type="p5.48xlarge",
        region="us-east-1",
        pricing=pricing,
        usd_per_h=usd_per_h,
        tp=1,
        pp=1,
        dp=gpus,
        zero=1,
        precision="bf16",
        micro_batch=2,
        recompute="selective",
        memory_bytes=_memory(16.06 * GB / min(gpus, 8), 0.0, 12.045 * GB, 10.0 * GB, 0.0, 2.0 * GB),
        capacity_bytes=H100_BYTES,
        flops=9.636e20,
        time_s=time_s,
        cost_usd=usd_per_h * time_s / 3600.0,
        energy_kwh=1873.4,
        co2_kg=712.3,
        mfu=0.42,
    )


def _rejections() -> list[Rejection]:
    memory = [
        Rejection("l4", n, "memory", f"does not fit: {90 + n:.1f} GiB > 22.0 GiB on L4 (case {n})", 40)
        for n in range(1, 15)
    ]
    deadline = [
        Rejection(
            "a10g",
            8,
            "deadline",
            "fastest layout takes 41.3 d > deadline 7.0 d",
            12,
            "1 x aws g5.48xlarge us-east-1 spot",
        ),
        Rejection(
            "a100-40gb",
            8,
            "deadline",
            "fastest layout takes 9.2 d > deadline 7.0 d",
            1,
            "1 x gcp a2-highgpu-8g us-central1 on-demand",
        ),
    ]
    return memory + deadline


@pytest.fixture
def train_plan() -> Plan:
    # Times from 2.8 h (128 GPUs) to 45 d (8 GPUs on spot with slowdowns): the frontier spans > 100x.
    candidates = [
        _train_option(128, 10_080.0, 1572.0),
        _train_option(64, 18_000.0, 786.6),
        _train_option(32, 34_000.0, 393.3),
        _train_option(16, 66_000.0, 196.6),
        _train_option(8, 130_000.0, 98.32),
        _train_option(8, 160_000.0, 39.3, pricing="spot"),
        _train_option(16, 90_000.0, 150.0, pricing="reserved-1y"),
        _train_option(8, 3_900_000.0, 1.0, pricing="spot"),
    ]
    candidates += [_train_option(8, 200_000.0 + 10_000.0 * i, 98.32) for i in range(7)]
    return Plan(
        recommended=candidates[5],
        pareto=tuple(candidates[i] for i in (0, 1, 2, 3, 4, 5, 7)),
        candidates=tuple(candidates),
        rejected=tuple(_rejections()),
        considered=1234,
        scaling=(
            ScalingPoint(8, 130_000.0, 3550.4, 1.0),
            ScalingPoint(16, 66_000.0, 3604.3, 0.985),
            ScalingPoint(32, 34_000.0, 3714.5, 0.956),
            ScalingPoint(64, 18_000.0, 3933.0, 0.903),
            ScalingPoint(128, 10_080.0, 4401.6, 0.806),
        ),
    )


def _infer_option(accelerator: str, latency_s: float, replicas: int, usd_per_h: float) -> InferOption:
    return InferOption(
        accelerator=accelerator,
        cloud="aws",
        instance_type="p5.48xlarge",
        region="us-east-1",
        gpus_per_replica=1,
        precision="fp8",
        batch=32,
        replicas=replicas,
        latency_s=latency_s,
        requests_per_s_per_replica=21.5,
        memory_bytes=_memory(8.03 * GB, 0.0, 0.0, 0.4 * GB, 8.6 * GB, 1.0 * GB),
        usd_per_h_per_replica=usd_per_h,
        usd_per_1000_requests=replicas * usd_per_h / (200 * 3600.0) * 1000.0,
        always_on_usd_per_month=replicas * usd_per_h * 730.0,
        scale_to_zero_usd_per_month=0.4 * replicas * usd_per_h * 730.0,
    )


@pytest.fixture
def infer_plan() -> InferPlan:
    # The cheapest is also the fastest here, so the frontier is the recommendation alone.
    candidates = [
        _infer_option("h100-sxm", 3.1, 10, 12.29),
        _infer_option("a100-80gb", 2.6, 14, 5.12),
        _infer_option("l40s", 1.9, 19, 2.35),
    ]
    candidates.sort(key=lambda o: o.always_on_usd_per_month)
    return InferPlan(
        recommended=candidates[0],
        candidates=tuple(candidates),
        rejected=(Rejection("l4", 1, "latency", "fastest request takes 6.1 s > target 4.0 s", 27, "g6.xlarge"),),
        considered=324,
    )


@pytest.fixture
def break_even_rows() -> list[BreakEven]:
    return [
        BreakEven("h100-sxm", 8, 21.7, "on-demand", 98.32, "aws p5.48xlarge us-east-1", 0.2207),
        BreakEven("h100-sxm", 8, 21.7, "reserved-3y", 17.9, "lambda gpu_8x_h100_sxm5 us-east-1", 1.21),
    ]
