"""Hand-built estimate, plan and break-even dicts with the key structure of the real ``to_dict()`` output.

Built by hand on purpose: the report layer reads only these dicts, so its tests must not depend on
the catalog or the estimators. Figures are realistic (Llama-3-8B on H100s) so that format edge
cases (GiB vs GB, days vs hours, log axes) are the ones users see.
"""

from __future__ import annotations

from typing import Any

import pytest

GB = 1e9
H100_BYTES = 80e9  # 74.5 GiB as the CUDA allocator reports it


def _memory(weights: float, gradients: float, optimizer: float, activations: float, kv: float, overhead: float) -> Any:
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
def train_estimate() -> dict[str, Any]:
    # Llama-3-8B, 20B tokens, 8 x H100 SXM, ZeRO-1 over 8 data-parallel ranks, bf16 + Adam.
    per_device = _memory(16.06 * GB, 16.06 * GB, 12.045 * GB, 10.0 * GB, 0.0, 2.0 * GB)
    return {
        "model": "llama-3-8b",
        "params": 8.03e9,
        "accelerator": "h100-sxm",
        "gpus": 8,
        "layout": {"dp": 8, "tp": 1, "pp": 1, "zero": 1, "sequence_parallel": False},
        "job": {
            "tokens": 20e9,
            "seq_len": 8192,
            "micro_batch": 2,
            "global_batch": 128,
            "precision": "bf16",
            "optimizer": "adamw",
            "recompute": "selective",
            "flash_attention": True,
        },
        "memory": {"per_device_bytes": per_device, "capacity_bytes": H100_BYTES, "fits": True},
        "compute": {"flops": 9.636e20, "hardware_flops": 1.02e21, "mfu": 0.42, "utilization_assumed": 0.45},
        "time": {
            "seconds": 267_840.0,
            "step_seconds": 14.0,
            "steps": 19_073.0,
            "compute_seconds_per_step": 13.1,
            "comm_exposed_seconds_per_step": 0.9,
            "pipeline_bubble_fraction": 0.0,
            "spot_slowdown": 1.0,
            "tokens_per_second": 74_672.0,
        },
        "cost": {
            "usd": 7315.12,
            "pricing": "on-demand",
            "usd_per_hour": 98.32,
            "hardware": "1 x aws p5.48xlarge us-east-1 on-demand",
        },
        "energy": {"kwh": 1873.4, "pue": 1.1},
        "co2": {"kg": 712.3, "g_per_kwh": 380.0},
        "storage": {
            "read_bytes_per_second": 305e6,
            "checkpoint_bytes": 112e9,
            "checkpoint_interval_seconds": 3600.0,
        },
        "notes": ["1 x aws p5.48xlarge us-east-1 on-demand", "utilization 45% of peak bf16 FLOP/s assumed"],
    }


@pytest.fixture
def infer_estimate() -> dict[str, Any]:
    per_device = _memory(16.06 * GB, 0.0, 0.0, 0.31 * GB, 2.15 * GB, 1.0 * GB)
    return {
        "model": "llama-3-8b",
        "params": 8.03e9,
        "accelerator": "h100-sxm",
        "gpus": 1,
        "job": {"batch": 8, "context_len": 2048, "output_len": 256, "precision": "bf16"},
        "memory": {"per_device_bytes": per_device, "capacity_bytes": H100_BYTES, "fits": True},
        "compute": {"flops": 4.2e13},
        "time": {
            "seconds": 3.42,
            "time_to_first_token_seconds": 0.118,
            "seconds_per_output_token": 0.0129,
            "requests_per_second": 2.34,
            "output_tokens_per_second": 599.0,
        },
        "cost": {
            "usd": 0.0117,
            "usd_per_1000_requests": 1.46,
            "pricing": "on-demand",
            "usd_per_hour": 12.29,
            "hardware": "1/8 of aws p5.48xlarge us-east-1 on-demand",
        },
        "energy": {"kwh": 0.00067, "pue": 1.1},
        "co2": {"kg": 0.00025, "g_per_kwh": 380.0},
        "notes": ["1/8 of aws p5.48xlarge us-east-1 on-demand"],
    }


def _train_option(gpus: int, time_s: float, usd_per_h: float, pricing: str = "on-demand") -> dict[str, Any]:
    instances = max(1, gpus // 8)
    per_device = _memory(16.06 * GB / min(gpus, 8), 0.0, 12.045 * GB, 10.0 * GB, 0.0, 2.0 * GB)
    return {
        "accelerator": "h100-sxm",
        "gpus": gpus,
        "hardware": {"cloud": "aws", "instance_type": "p5.48xlarge", "instances": instances, "region": "us-east-1"},
        "layout": {"dp": gpus, "tp": 1, "pp": 1, "zero": 1},
        "job": {"precision": "bf16", "micro_batch": 2, "recompute": "selective"},
        "memory": {"per_device_bytes": per_device, "capacity_bytes": H100_BYTES},
        "compute": {"flops": 9.636e20, "mfu": 0.42},
        "time": {"seconds": time_s},
        "cost": {"usd": usd_per_h * time_s / 3600.0, "pricing": pricing, "usd_per_hour": usd_per_h},
        "energy": {"kwh": 1873.4},
        "co2": {"kg": 712.3},
    }


def _rejections() -> list[dict[str, Any]]:
    memory = [
        {
            "accelerator": "l4",
            "gpus": n,
            "stage": "memory",
            "reason": f"does not fit: {90 + n:.1f} GiB > 22.0 GiB on L4 (case {n})",
            "candidates": 40,
            "option": "",
        }
        for n in range(1, 15)
    ]
    deadline = [
        {
            "accelerator": "a10g",
            "gpus": 8,
            "stage": "deadline",
            "reason": "fastest layout takes 41.3 d > deadline 7.0 d",
            "candidates": 12,
            "option": "1 x aws g5.48xlarge us-east-1 spot",
        },
        {
            "accelerator": "a100-40gb",
            "gpus": 8,
            "stage": "deadline",
            "reason": "fastest layout takes 9.2 d > deadline 7.0 d",
            "candidates": 1,
            "option": "1 x gcp a2-highgpu-8g us-central1 on-demand",
        },
    ]
    return memory + deadline


@pytest.fixture
def train_plan() -> dict[str, Any]:
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
    pareto = [candidates[i] for i in (0, 1, 2, 3, 4, 5, 7)]
    return {
        "recommended": candidates[5],
        "pareto": pareto,
        "candidates": candidates,
        "rejected": _rejections(),
        "considered": 1234,
        "feasible": len(candidates),
        "scaling": [
            {"gpus": 8, "time_s": 130_000.0, "cost_usd": 3550.4, "efficiency": 1.0},
            {"gpus": 16, "time_s": 66_000.0, "cost_usd": 3604.3, "efficiency": 0.985},
            {"gpus": 32, "time_s": 34_000.0, "cost_usd": 3714.5, "efficiency": 0.956},
            {"gpus": 64, "time_s": 18_000.0, "cost_usd": 3933.0, "efficiency": 0.903},
            {"gpus": 128, "time_s": 10_080.0, "cost_usd": 4401.6, "efficiency": 0.806},
        ],
    }


def _infer_option(accelerator: str, latency_s: float, replicas: int, usd_per_h: float) -> dict[str, Any]:
    return {
        "accelerator": accelerator,
        "hardware": {"cloud": "aws", "instance_type": "p5.48xlarge", "region": "us-east-1"},
        "gpus": 1,
        "replicas": replicas,
        "job": {"precision": "fp8", "batch": 32},
        "memory": {"per_device_bytes": _memory(8.03 * GB, 0.0, 0.0, 0.4 * GB, 8.6 * GB, 1.0 * GB)},
        "time": {"seconds": latency_s, "requests_per_second_per_replica": 21.5},
        "cost": {
            "usd_per_1000_requests": replicas * usd_per_h / (200 * 3600.0) * 1000.0,
            "usd_per_hour_per_replica": usd_per_h,
            "always_on_usd_per_month": replicas * usd_per_h * 730.0,
            "scale_to_zero_usd_per_month": 0.4 * replicas * usd_per_h * 730.0,
        },
    }


@pytest.fixture
def infer_plan() -> dict[str, Any]:
    candidates = [
        _infer_option("h100-sxm", 1.9, 10, 12.29),
        _infer_option("a100-80gb", 2.6, 14, 5.12),
        _infer_option("l40s", 3.1, 19, 2.35),
    ]
    candidates.sort(key=lambda o: o["cost"]["always_on_usd_per_month"])
    return {
        "recommended": candidates[0],
        "pareto": [candidates[0]],
        "candidates": candidates,
        "rejected": [
            {
                "accelerator": "l4",
                "gpus": 1,
                "stage": "latency",
                "reason": "fastest request takes 6.1 s > target 4.0 s",
                "candidates": 27,
                "option": "g6.xlarge",
            }
        ],
        "considered": 324,
        "feasible": 3,
    }


@pytest.fixture
def break_even_rows() -> list[dict[str, Any]]:
    return [
        {
            "accelerator": "h100-sxm",
            "accelerator_count": 8,
            "owned_usd_per_hour_at_full_use": 21.7,
            "pricing": "on-demand",
            "rented_usd_per_hour": 98.32,
            "rented_from": "aws p5.48xlarge us-east-1",
            "break_even_utilization": 0.2207,
        },
        {
            "accelerator": "h100-sxm",
            "accelerator_count": 8,
            "owned_usd_per_hour_at_full_use": 21.7,
            "pricing": "reserved-3y",
            "rented_usd_per_hour": 17.9,
            "rented_from": "lambda gpu_8x_h100_sxm5 us-east-1",
            "break_even_utilization": 1.21,
        },
    ]
