"""A traced network's step (a CNN, any module without a transformer formula) as the kernels it launches.

The trace (``models.trace``) counts every kernel an eager forward and backward launch and the bytes
each reads and writes (``TracedKernels``). Each kind is timed by its roofline, one after the other,
as they run on one stream:

- the kernels with FLOPs (convolutions, matmuls): their FLOPs at the large-GEMM rate, or their
  operands over the streaming bandwidth, whichever is longer;
- every other kernel (norms, activations, residual adds, pooling): its bytes over the bandwidth.
  In a CNN these move more bytes than the convolutions themselves: a batch norm, a ReLU and a
  residual add each read and write a whole activation tensor;
- on tensor cores (16 bits, fp8, tf32), cuDNN's convolutions take channels-last tensors ("NCHW-to-NHWC
  transformations to call the Tensor Core operations", cuDNN's API guide) and PyTorch's default layout
  is NCHW, so each convolution's input and output are transposed (read and written again);
- every kernel: the device's floor; on the host, the launch of the code that issues it
  (``HostCosts``) plus, per convolution, the cuDNN call's own planning (``host_s_per_convolution``).

Host and device overlap, so a small batch is launch-bound: ResNet-50 at batch 1 waits for its host.
Checked against NVIDIA's published ResNet-50 throughput and Hugging Face's eager timings
(docs/ACCURACY.md). A trace without kernel counts (``kernels`` None) is timed by its FLOPs alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from computewise.estimate.arrays import FloatArray, col
from computewise.estimate.kernels import KernelRates, StepKernels
from computewise.specs import ModelSpec

__all__ = ["TracedDevice", "tensor_core_flag", "traced_inference_kernels", "traced_training_kernels"]

# cuDNN's NCHW <-> NHWC transposes around a tensor-core convolution: its input and its output each read and
# written once more, i.e. the convolutions' activation bytes again, in each direction.
_NCHW_TRANSPOSES = 2.0
_BACKWARD_FLOPS = 2.0  # a convolution's or matmul's backward: the input's and the weight's gradients


def tensor_core_flag(precision: str) -> float:
    """1.0 where a precision's convolutions and matmuls run on tensor cores (all but fp32), else 0.0."""
    return 0.0 if precision == "fp32" else 1.0


@dataclass(frozen=True)
class TracedDevice:
    """How a device and its host run a traced network's kernels."""

    rates: KernelRates
    convolution_s: FloatArray  # what a cuDNN call costs the host beyond its launch (``HostCosts.per_convolution_s``)
    tensor_cores: FloatArray  # 0/1 (``tensor_core_flag``): cuDNN transposes around each convolution


def traced_inference_kernels(
    model: ModelSpec, batch: FloatArray, act_bytes: FloatArray, weight_bytes: FloatArray, device: TracedDevice
) -> StepKernels:
    """One eager inference forward of ``batch`` inputs at ``act_bytes`` per value; ``weight_bytes``: all weights."""
    flops = col(batch) * _forward_flops(model)
    traced = model.traced
    if traced is None or traced.kernels is None:
        return StepKernels(flops / device.rates.gemm_flops, 0.0 * flops)
    launched = traced.kernels
    scale = col(batch) * col(act_bytes) / traced.traced_dtype_bytes
    device_s = _device_s(
        flops,
        scale * launched.eval_gemm_bytes_per_sample,
        scale * launched.eval_other_bytes_per_sample,
        col(weight_bytes),
        launched.eval_kernels,
        device,
    )
    convolutions_s = launched.convolutions * col(device.convolution_s)
    return StepKernels(device_s, launched.eval_kernels + 0.0 * device_s, 0.0, convolutions_s)


def traced_training_kernels(
    model: ModelSpec, micro_batch: FloatArray, act_bytes: FloatArray, weight_bytes: FloatArray, device: TracedDevice
) -> StepKernels:
    """One micro-batch's eager forward and backward; ``weight_bytes``: the device's weights.

    The weights are read by the forward and the backward and their gradients written: three times
    their bytes. The backward's cuDNN calls are issued by autograd's C++ thread while the device still
    runs the forward's kernels, so only the forward's convolutions cost host time of their own.
    """
    flops = col(micro_batch) * _forward_flops(model) * (1.0 + _BACKWARD_FLOPS)
    traced = model.traced
    if traced is None or traced.kernels is None:
        return StepKernels(flops / device.rates.gemm_flops, 0.0 * flops)
    launched = traced.kernels
    scale = col(micro_batch) * col(act_bytes) / traced.traced_dtype_bytes
    device_s = _device_s(
        flops,
        scale * launched.train_gemm_bytes_per_sample,
        scale * launched.train_other_bytes_per_sample,
        3.0 * col(weight_bytes),
        launched.train_forward_kernels + launched.train_backward_kernels,
        device,
    )
    return StepKernels(
        device_s,
        launched.train_forward_kernels + 0.0 * device_s,
        float(launched.train_backward_kernels),
        launched.convolutions * col(device.convolution_s),
    )


def _device_s(
    flops: FloatArray,
    gemm_bytes: FloatArray,
    other_bytes: FloatArray,
    weight_traffic: FloatArray,
    kernels: int,
    device: TracedDevice,
) -> FloatArray:
    """The kernels one after another: those with FLOPs by their FLOPs or their bytes (weights included),
    the rest by their bytes and cuDNN's layout transposes, and every kernel's floor."""
    rates = device.rates
    bandwidth = rates.stream_bytes_per_s
    gemm_s = np.maximum(flops / rates.gemm_flops, (gemm_bytes + weight_traffic) / bandwidth)
    transposes = col(device.tensor_cores) * _NCHW_TRANSPOSES * gemm_bytes
    return gemm_s + (other_bytes + transposes) / bandwidth + kernels * rates.kernel_floor_s


def _forward_flops(model: ModelSpec) -> float:
    return 0.0 if model.traced is None else model.traced.forward_flops_per_sample
