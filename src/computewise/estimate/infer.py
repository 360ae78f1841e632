"""One inference replica serving batches of requests: memory, latency, throughput, money per request.

Prefill is compute-bound (the prompt's tokens go through the weights together); each decode
step must stream every weight and the whole KV cache from memory for a handful of FLOPs, so it
is bandwidth-bound until the batch is large (the "roofline" view of Pope et al. 2022,
"Efficiently Scaling Transformer Inference", arXiv:2211.05102, section 2) and, for a small
model in eager PyTorch, bound by the host launching its kernels one by one: both come from the
kernel model (``estimate.kernels``), as a training step's do.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from computewise.estimate.arrays import FloatArray, col, transfer_s
from computewise.estimate.assumptions import Assumptions
from computewise.estimate.cost import co2_kg, energy_kwh
from computewise.estimate.flops import attention_flops_per_token, forward_flops_per_token, matmul_params
from computewise.estimate.kernels import HostCosts, KernelRates, decode_kernels, prefill_kernels
from computewise.estimate.memory import (
    MemoryBreakdown,
    kv_cache_bytes,
    prefill_memory,
    with_overhead,
)
from computewise.estimate.traced import TracedDevice, traced_inference_kernels
from computewise.specs import EXECUTIONS, FP32_VALUED, FRAMEWORKS, ModelSpec

__all__ = [
    "SERVING_EXECUTION",
    "SERVING_FRAMEWORK",
    "InferColumns",
    "InferRows",
    "evaluate_infer",
    "inference_act_bytes",
    "inference_weight_bytes",
]

# What a serving plan assumes runs the replica: a serving engine (vLLM, TensorRT-LLM, SGLang) keeps
# the last position's logits and replays its decode step from captured CUDA graphs, so the host
# never bounds a decode step the way it does in eager PyTorch.
SERVING_FRAMEWORK = float(FRAMEWORKS.index("pytorch"))
SERVING_EXECUTION = float(EXECUTIONS.index("cuda-graphs"))


def inference_weight_bytes(precision: str) -> float:
    """Serving keeps no master copy: fp8 and int8 weights are one byte, 16-bit two, fp32 (and tf32) four."""
    return {"fp32": 4.0, "tf32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0}[precision]


def inference_act_bytes(precision: str) -> float:
    """Activations between kernels: fp32 (and tf32) four bytes, 16 bits otherwise (fp8 and int8 kernels
    take 16-bit activations in and out)."""
    return 4.0 if precision in FP32_VALUED else 2.0


@dataclass(frozen=True)
class InferRows:
    tp: FloatArray  # devices per replica
    batch: FloatArray  # concurrent sequences
    context_len: FloatArray  # prompt tokens
    output_len: FloatArray  # generated tokens
    weight_bytes: FloatArray
    kv_bytes: FloatArray
    act_bytes: FloatArray
    tensor_cores: FloatArray  # 0/1: matmuls and convolutions on tensor cores (``traced.tensor_core_flag``)
    peak_flops: FloatArray
    memory_bandwidth_bytes_per_s: FloatArray
    tp_bus_bytes_per_s: FloatArray  # the TP group's all-reduce bus bandwidth (``collectives.bus_bytes_per_s``)
    tdp_w: FloatArray  # W per device at full load, its share of the host included (cost.server_w_per_device)
    rental_usd_per_h: FloatArray  # one replica
    g_co2_per_kwh: FloatArray
    pue: FloatArray
    framework: FloatArray  # index in FRAMEWORKS (the code that issues the kernels)
    execution: FloatArray  # index in EXECUTIONS
    all_logits: FloatArray  # 0/1: the prefill keeps every position's logits (a plain forward), not the last
    matmul_fraction: FloatArray | None = (
        None  # burst share of ``peak_flops`` (``kernels.profile_shares``); None: assumed
    )
    stream_fraction: FloatArray | None = None  # burst share of the bandwidth; None: assumed
    # Attention's and the LM head's peak over ``peak_flops`` (``kernels.attention_peak_ratio``); None: 1.
    attention_peak_ratio: FloatArray | None = None
    # What tensor-parallel devices sustain of a GEMM's burst (``kernels.sustained_share``); None: a GPU's.
    sustained_fraction: FloatArray | None = None
    # The linear layers' inputs quantised on the fly (``kernels.serving_quantiser``: 0 none, 1 fp8, 2 int8).
    quantiser: FloatArray | float = 0.0


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
    transient = prefill_memory(model, batch, rows.context_len, rows.act_bytes, tp, rows.all_logits)
    zero = col(0.0) * tp
    memory = with_overhead(
        weights, zero, zero, transient.workspace, kv_cache, transient.fragmentation, assumptions.runtime_overhead_bytes
    )

    per_token = 2.0 * matmul_params(model)
    # A CNN's traced FLOPs are per input, not per token: it has no tokens.
    tokens = rows.context_len if model.is_transformer else col(1.0)
    prefill_flops = batch * tokens * forward_flops_per_token(model, rows.context_len)
    mean_context = rows.context_len + rows.output_len / 2.0
    decode_flops_per_step = batch * (per_token + attention_flops_per_token(model, mean_context, False))
    rates = KernelRates.of(
        rows.peak_flops,
        rows.memory_bandwidth_bytes_per_s,
        assumptions,
        rows.matmul_fraction,
        rows.stream_fraction,
        tp,
        rows.attention_peak_ratio,
        rows.sustained_fraction,
    )
    costs = HostCosts.of(assumptions)
    host = costs.per_kernel_s(rows.framework, rows.execution, training=False)
    if model.is_transformer:
        prefill = prefill_kernels(
            model,
            batch,
            rows.context_len,
            rows.act_bytes,
            tp,
            rows.all_logits,
            rows.framework,
            rows.execution,
            rates,
            rows.quantiser,
        )
        decode = decode_kernels(
            model,
            batch,
            mean_context,
            rows.act_bytes,
            rows.kv_bytes,
            tp,
            rows.framework,
            rows.execution,
            rates,
            rows.quantiser,
        )
        prefill_s, decode_compute_s = prefill.wall_s(host), decode.wall_s(host)
    else:  # a traced network: the kernels its eager forward launches (``estimate.traced``); it decodes nothing
        convolution_s = costs.per_convolution_s(rows.execution)
        device = TracedDevice(rates, convolution_s, rows.tensor_cores)
        forward = traced_inference_kernels(model, batch / tp, rows.act_bytes, weights, device)
        prefill_s = forward.wall_s(host)
        decode_compute_s = np.maximum(
            decode_flops_per_step / (rates.gemm_flops * tp), weights / rates.stream_bytes_per_s
        )
    layers = max(model.total_layers, 1)
    tp_bytes = np.where(tp > 1, 2.0 * layers * 2.0 * (tp - 1) / tp * batch * model.hidden_size * rows.act_bytes, 0.0)
    tp_comm_s = transfer_s(tp_bytes, rows.tp_bus_bytes_per_s)
    decode_step_s = decode_compute_s + tp_comm_s

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
