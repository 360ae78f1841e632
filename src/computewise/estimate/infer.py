"""One inference replica serving batches of requests: memory, latency, throughput, money per request.

Prefill is compute-bound (the prompt's tokens go through the weights together); each decode
step must stream every weight and the whole KV cache from memory for a handful of FLOPs, so it
is bandwidth-bound until the batch is large (the "roofline" view of Pope et al. 2022,
"Efficiently Scaling Transformer Inference", arXiv:2211.05102, section 2).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from computewise.estimate.arrays import FloatArray, col, transfer_s
from computewise.estimate.assumptions import Assumptions
from computewise.estimate.cost import co2_kg, energy_kwh
from computewise.estimate.flops import attention_flops_per_token, matmul_params
from computewise.estimate.memory import (
    MemoryBreakdown,
    inference_workspace_bytes,
    kv_cache_bytes,
    with_overhead,
)
from computewise.specs import ModelSpec

__all__ = ["InferColumns", "InferRows", "evaluate_infer", "inference_weight_bytes"]


def inference_weight_bytes(precision: str) -> float:
    """Serving keeps no master copy: fp8 and int8 weights are one byte, 16-bit two, fp32 four."""
    return {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0}[precision]


@dataclass(frozen=True)
class InferRows:
    tp: FloatArray  # devices per replica
    batch: FloatArray  # concurrent sequences
    context_len: FloatArray  # prompt tokens
    output_len: FloatArray  # generated tokens
    weight_bytes: FloatArray
    kv_bytes: FloatArray
    act_bytes: FloatArray
    peak_flops: FloatArray
    memory_bandwidth_bytes_per_s: FloatArray
    intra_node_bytes_per_s: FloatArray
    tdp_w: FloatArray
    rental_usd_per_h: FloatArray  # one replica
    g_co2_per_kwh: FloatArray
    pue: FloatArray


@dataclass(frozen=True)
class InferColumns:
    memory: MemoryBreakdown
    flops: FloatArray  # one batch, prefill + decode
    prefill_s: FloatArray  # time to first token
    decode_step_s: FloatArray  # time per output token
    latency_s: FloatArray  # one batch, first prompt token to last output token
    requests_per_s: FloatArray  # one replica, back-to-back batches
    output_tokens_per_s: FloatArray
    cost_usd: FloatArray  # one batch
    usd_per_1000_requests: FloatArray
    energy_kwh: FloatArray  # one batch
    co2_kg: FloatArray


def evaluate_infer(model: ModelSpec, rows: InferRows, assumptions: Assumptions) -> InferColumns:
    tp, batch = rows.tp, rows.batch
    weights = model.params * rows.weight_bytes / tp
    final_tokens = rows.context_len + rows.output_len
    kv_cache = kv_cache_bytes(model, batch, final_tokens, rows.kv_bytes, tp)
    workspace = inference_workspace_bytes(model, batch, rows.context_len, rows.act_bytes, tp)
    zero = col(0.0) * tp
    memory = with_overhead(
        weights,
        zero,
        zero,
        workspace,
        kv_cache,
        assumptions.runtime_overhead_fraction,
        assumptions.runtime_overhead_bytes,
    )

    causal = model.architecture == "decoder"
    per_token = 2.0 * matmul_params(model)
    prefill_flops = batch * rows.context_len * (per_token + attention_flops_per_token(model, rows.context_len, causal))
    mean_context = rows.context_len + rows.output_len / 2.0
    decode_flops_per_step = batch * (per_token + attention_flops_per_token(model, mean_context, False))
    sustained_flops = rows.peak_flops * tp * assumptions.achievable_mfu_infer_prefill
    prefill_s = prefill_flops / sustained_flops

    # Each decode step streams the weights and the cache at the mean context once.
    mean_kv = kv_cache_bytes(model, batch, mean_context, rows.kv_bytes, tp)
    bandwidth = rows.memory_bandwidth_bytes_per_s * assumptions.achievable_bandwidth_fraction_decode
    memory_s = (weights + mean_kv) / bandwidth
    compute_s = decode_flops_per_step / sustained_flops
    layers = max(model.total_layers, 1)
    link = rows.intra_node_bytes_per_s * assumptions.intra_node_link_efficiency
    tp_bytes = np.where(tp > 1, 2.0 * layers * 2.0 * (tp - 1) / tp * batch * model.hidden_size * rows.act_bytes, 0.0)
    tp_comm_s = transfer_s(tp_bytes, link)
    decode_step_s = np.maximum(memory_s, compute_s) + tp_comm_s

    latency_s = prefill_s + rows.output_len * decode_step_s
    flops = prefill_flops + rows.output_len * decode_flops_per_step
    cost_usd = rows.rental_usd_per_h * latency_s / 3600.0
    kwh = energy_kwh(tp, rows.tdp_w, assumptions.gpu_power_fraction_of_tdp, latency_s, rows.pue)
    return InferColumns(
        memory=memory,
        flops=flops,
        prefill_s=prefill_s,
        decode_step_s=decode_step_s,
        latency_s=latency_s,
        requests_per_s=batch / latency_s,
        output_tokens_per_s=batch * rows.output_len / latency_s,
        cost_usd=cost_usd,
        usd_per_1000_requests=cost_usd / batch * 1000.0,
        energy_kwh=kwh,
        co2_kg=co2_kg(kwh, rows.g_co2_per_kwh),
    )
