"""Achievable compute: how long a device takes for a training step's arithmetic, from its shapes.

A flat "40 % of peak" is wrong in both directions: wide layers run their matmuls near the
tensor-core limit, while narrow layers, short sequences and unfused attention spend much of
their time moving activations through HBM. The model is a two-term roofline per device:

    time = hardware FLOPs / (peak * matmul_peak_fraction) + HBM bytes / memory bandwidth

HBM bytes are the activations the step writes and reads back (``activation_traffic_passes``
passes over the bytes a layer saves for backward, Korthikanti et al. 2022's per-layer terms),
plus the weights every micro-batch reads three times (forward, input gradient, weight gradient).
Both fractions are catalog assumptions fitted once, by ``benchmarks/accuracy.py --fit``, to
published end-to-end runs (Narayanan et al. 2021 Table 1, Korthikanti et al. 2022 Table 5,
Llama 3 Table 4); nothing is fitted per case. Because the second term is bytes over bandwidth,
the same fractions give a lower share of peak on chips whose FLOP/s grew faster than their
bandwidth (H100 vs A100) and a higher share at fp32, as measured.
"""

from __future__ import annotations

import numpy as np

from computewise.estimate.arrays import FloatArray, col
from computewise.estimate.memory import layer_terms
from computewise.specs import ModelSpec

__all__ = ["activation_traffic_bytes", "compute_time_s", "weight_traffic_bytes"]

_WEIGHT_READS_PER_MICROBATCH = 3.0  # forward, input-gradient and weight-gradient matmuls


def activation_traffic_bytes(
    model: ModelSpec,
    tokens_per_device: FloatArray,
    seq_len: FloatArray,
    layers_per_device: FloatArray,
    tp: FloatArray,
    sequence_parallel: FloatArray,
    flash_attention: FloatArray,
    act_bytes: FloatArray,
    passes: FloatArray,
) -> FloatArray:
    """HBM bytes of activations one device moves for ``tokens_per_device`` tokens of its layers.

    The per-token bytes a layer saves for backward (without recompute) stand for the
    elementwise work of the layer (norms, activations, dropout, softmax): each is written,
    read and rewritten a few times over forward and backward, ``passes`` in all.
    """
    if not model.is_transformer:
        return col(0.0) * col(tokens_per_device)
    replicated, split, scores_per_s = layer_terms(model, col(act_bytes))
    tp = col(tp)
    sp_divisor = np.where(col(sequence_parallel) > 0, tp, 1.0)
    flash = col(flash_attention) > 0
    scores = np.where(flash, 0.0, scores_per_s * col(seq_len))
    per_token_layer = replicated / sp_divisor + (split + scores) / tp
    return col(passes) * per_token_layer * col(layers_per_device) * col(tokens_per_device)


def weight_traffic_bytes(
    params_per_device: FloatArray, weight_bytes: FloatArray, microbatches: FloatArray
) -> FloatArray:
    """Weights read by every micro-batch's matmuls: they do not stay in cache between layers."""
    return _WEIGHT_READS_PER_MICROBATCH * col(params_per_device) * col(weight_bytes) * col(microbatches)


def compute_time_s(
    hardware_flops: FloatArray,
    traffic_bytes: FloatArray,
    peak_flops: FloatArray,
    memory_bandwidth_bytes_per_s: FloatArray,
    matmul_peak_fraction: float | FloatArray,
) -> FloatArray:
    """Seconds of arithmetic and HBM traffic for one device; an unknown bandwidth (0) adds nothing."""
    bandwidth = col(memory_bandwidth_bytes_per_s)
    with np.errstate(divide="ignore", invalid="ignore"):
        memory_s = np.where(bandwidth > 0, col(traffic_bytes) / bandwidth, 0.0)
    return col(hardware_flops) / (col(peak_flops) * col(matmul_peak_fraction)) + memory_s
