"""``--precision tf32``: fp32 values whose matmuls and convolutions run on TF32 tensor cores.

Its memory is fp32's to the byte (the values are fp32; only the units that multiply them differ), its
GEMMs run at the tensor cores' measured share of the TF32 data sheet (an H100 reached 73 % of 494.5
TFLOP/s in bench.json of shared/measured/h100-2026-11-26, against 78 % of 67 for fp32 on its FP32
units), and a chip without TF32 refuses it with the precisions it has.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from computewise.catalog import Catalog
from computewise.errors import InputError
from computewise.estimate import Assumptions, estimate_infer, estimate_train
from computewise.estimate.arrays import col
from computewise.estimate.kernels import KernelRates, profile_shares
from computewise.estimate.traced import TracedDevice, tensor_core_flag, traced_inference_kernels
from computewise.models import preset
from computewise.specs import InferJob, Parallelism, TrainJob

JOB = TrainJob(tokens=1e9, seq_len=2048, micro_batch=1, global_batch=64, recompute="full")


def _train(catalog: Catalog, assumptions: Assumptions, model: str, gpu: str, precision: str) -> Any:
    job = replace(JOB, precision=precision)  # type: ignore[arg-type]
    layout = Parallelism(dp=8, zero=3)
    return estimate_train(preset(model), catalog.accelerator(gpu), 8, job, layout, catalog, assumptions)


def test_tf32_holds_fp32_memory_and_runs_between_fp32_and_bf16(catalog: Catalog, assumptions: Assumptions) -> None:
    fp32, tf32, bf16 = (_train(catalog, assumptions, "llama-3-8b", "h100", p) for p in ("fp32", "tf32", "bf16"))
    assert tf32.memory_per_device == fp32.memory_per_device
    assert bf16.step_seconds < tf32.step_seconds < fp32.step_seconds
    # A large transformer's step is mostly GEMMs: most of the data sheets' 7.4x between TF32 and FP32 shows.
    assert fp32.step_seconds / tf32.step_seconds > 4.0


def test_tf32_gemms_use_the_tensor_cores_share_not_the_fp32_units(catalog: Catalog, assumptions: Assumptions) -> None:
    profile = catalog.kernel_profile("h100-sxm")
    assert profile is not None and profile.fp32_matmul_share is not None
    assert profile_shares(profile, "tf32", assumptions)[0] == profile.matmul_share
    assert profile_shares(profile, "fp32", assumptions)[0] == profile.fp32_matmul_share


def test_a_chip_without_tf32_refuses_it_and_names_what_it_runs(catalog: Catalog, assumptions: Assumptions) -> None:
    with pytest.raises(InputError, match="no tf32") as error:
        _train(catalog, assumptions, "gpt2", "v100", "tf32")
    assert "fp32" in error.value.hint and "fp16" in error.value.hint


def test_a_cnn_on_tf32_pays_cudnns_layout_transposes_like_16_bits(catalog: Catalog, assumptions: Assumptions) -> None:
    """cuDNN's tensor-core convolutions take NHWC and transpose PyTorch's NCHW tensors: at TF32 each
    convolution's input and output move once more each way, which fp32 on the FP32 units does not pay."""
    model = preset("resnet-50")
    kernels = model.traced.kernels  # type: ignore[union-attr]
    assert kernels is not None
    rates = KernelRates.of(col(156e12), col(2.0e12), assumptions, col(0.8), col(0.9), col(1.0))
    batch, act = col(256.0), col(4.0)
    weights = col(float(model.params) * 4.0)
    forward = [
        traced_inference_kernels(
            model, batch, act, weights, TracedDevice(rates, col(0.0), col(tensor_core_flag(precision)))
        )
        for precision in ("fp32", "tf32")
    ]
    transposed_bytes = 2.0 * 256 * kernels.eval_gemm_bytes_per_sample  # traced at fp32: 4-byte values
    added_s = float(forward[1].device_s[()] - forward[0].device_s[()])
    assert added_s == pytest.approx(transposed_bytes / float(rates.stream_bytes_per_s[()]), rel=1e-9)


def test_estimates_of_a_cnn_order_fp32_tf32_bf16(catalog: Catalog, assumptions: Assumptions) -> None:
    a100 = catalog.accelerator("a100-80gb")

    def latency_s(precision: str) -> float:
        job = InferJob(batch=256, context_len=1, output_len=0, precision=precision)  # type: ignore[arg-type]
        estimate = estimate_infer(preset("resnet-50"), a100, job, catalog, assumptions)
        return float(estimate.to_dict()["time"]["seconds"])

    assert latency_s("bf16") < latency_s("tf32") < latency_s("fp32")
