"""Communication volume and time: data-parallel gradient sync, tensor- and pipeline-parallel traffic.

Ring collectives move 2(n-1)/n of the buffer per device for an all-reduce and (n-1)/n for an
all-gather or reduce-scatter (Patarasuk & Yuan 2009; the NCCL performance notes use the same
"bus bandwidth" factors). ZeRO-3 / FSDP gathers the weights in forward and again in backward and
reduce-scatters the gradients: 3 (n-1)/n instead of 2 (ZeRO paper section 7.2.2 says 1.5x DDP).
"""

from __future__ import annotations

import numpy as np

from computewise.estimate.arrays import FloatArray, col

__all__ = ["dp_sync_bytes", "pp_transfer_bytes", "tp_allreduce_bytes"]


def dp_sync_bytes(
    params: float,
    weight_bytes: FloatArray,
    tp: FloatArray,
    pp: FloatArray,
    dp: FloatArray,
    zero: FloatArray,
    microbatches: FloatArray,
) -> FloatArray:
    """Bytes each device sends per optimizer step to keep data-parallel replicas in sync.

    Gradients are synced once per step (accumulation runs without sync); ZeRO-3 re-gathers the
    weights for every micro-batch, forward and backward.
    """
    dp = col(dp)
    shard_bytes = params / (col(tp) * col(pp)) * col(weight_bytes)
    ring = (dp - 1.0) / dp
    zero3 = (2.0 * col(microbatches) + 1.0) * ring * shard_bytes
    return np.where(col(zero) >= 3, zero3, 2.0 * ring * shard_bytes)


def tp_allreduce_bytes(
    tokens_per_microbatch: FloatArray,
    hidden_size: int,
    layers_per_stage: FloatArray,
    act_bytes: FloatArray,
    tp: FloatArray,
    microbatches: FloatArray,
    recompute: FloatArray,
) -> FloatArray:
    """Megatron TP: two all-reduces of the layer output forward and two backward per layer
    (Shoeybi et al. 2019, section 3), two more when a full recompute repeats the forward.
    Sequence parallelism swaps each for a reduce-scatter + all-gather of the same volume."""
    tp = col(tp)
    per_allreduce = 2.0 * (tp - 1.0) / tp * col(tokens_per_microbatch) * hidden_size * col(act_bytes)
    allreduces = 4.0 + np.where(col(recompute) >= 2, 2.0, 0.0)
    return per_allreduce * allreduces * col(layers_per_stage) * col(microbatches)


def pp_transfer_bytes(
    tokens_per_microbatch: FloatArray,
    hidden_size: int,
    act_bytes: FloatArray,
    pp: FloatArray,
    microbatches: FloatArray,
) -> FloatArray:
    """Activations forward and their gradients backward across each stage boundary, per micro-batch."""
    boundary = np.where(col(pp) > 1, 1.0, 0.0)
    return boundary * 2.0 * col(tokens_per_microbatch) * hidden_size * col(act_bytes) * col(microbatches)
