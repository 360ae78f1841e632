"""estimate.kernels: each kernel kind against a figure computed independently of the module."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from computewise.catalog import Catalog
from computewise.estimate import Assumptions
from computewise.estimate.arrays import col
from computewise.estimate.kernels import (
    HostCosts,
    KernelRates,
    MicrobatchShape,
    StepKernels,
    attention_peak_ratio,
    decode_kernels,
    distinct_training_kernels,
    experts_touched,
    gemm_s,
    local_experts_touched,
    prefill_kernels,
    serving_quantiser,
    training_kernels,
)
from computewise.models import preset
from computewise.specs import ATTENTION_KERNELS, EXECUTIONS, LOSSES, RECOMPUTES

H100 = KernelRates(
    gemm_flops=col(731e12),  # bench.json: bf16 at 4096-8192
    unquantised_gemm_flops=col(731e12),
    attention_flops=col(365e12),
    stream_bytes_per_s=col(2965e9),  # bench.json: triad
    kernel_floor_s=col(2.5e-6),
    attention_shares=(1.0, 1.0, 0.55, 0.44),  # unfused (unread), flash, triton, flash-v1
)


def test_a_large_gemm_runs_near_the_measured_peak() -> None:
    """8192^3 bf16: 1.1 TFLOP; bench measured 728 TFLOP/s, so about 1.51 ms."""
    seconds = float(gemm_s(col(8192.0), 8192.0, 8192.0, col(2.0), H100))
    assert 2 * 8192**3 / seconds == pytest.approx(728e12, rel=0.05)


def test_a_skinny_gemm_is_bound_by_reading_its_weight() -> None:
    """A decode step's (1 x 4096) @ (4096 x 4096) bf16 product reads 32 MiB: 11.3 us at 2965 GB/s."""
    seconds = float(gemm_s(col(1.0), 4096.0, 4096.0, col(2.0), H100))
    assert seconds == pytest.approx(4096 * 4096 * 2 / 2965e9 + 2.5e-6, rel=0.02)


def test_an_odd_vocabulary_is_slower_in_16_bit_only() -> None:
    aligned = gemm_s(col(8192.0), 50304.0, 768.0, col(2.0), H100)
    odd = gemm_s(col(8192.0), 50257.0, 768.0, col(2.0), H100)
    assert float(odd) > 2.0 * float(aligned)
    fp32 = H100
    assert float(gemm_s(col(8192.0), 50257.0, 768.0, col(4.0), fp32)) < 1.1 * float(
        gemm_s(col(8192.0), 50304.0, 768.0, col(4.0), fp32)
    )


def test_the_longer_of_host_and_device_bounds_the_wall_time() -> None:
    work = StepKernels(device_s=col([1e-3, 1e-3]), kernels=col([10.0, 1000.0]))
    host = (col(10e-6), col(0.0))
    assert np.allclose(work.wall_s(host), [1e-3, 10e-3])


def test_host_costs_follow_the_code_that_issues_the_kernels() -> None:
    costs = HostCosts(
        eager_s=15e-6,
        transformers_s=20e-6,
        recording_s=50e-6,
        autograd_s=0.0,
        compiled_s=5e-6,
        graphs_s=0.5e-6,
        convolution_s=36e-6,
    )
    framework = col([1.0, 2.0, 1.0, 1.0])  # pytorch, transformers, pytorch, pytorch
    execution = col([0.0, 0.0, 1.0, 2.0])  # eager, eager, compile, cuda-graphs
    forward, _ = costs.per_kernel_s(framework, execution, training=False)
    assert np.allclose(forward, [15e-6, 20e-6, 5e-6, 0.5e-6])
    training, _ = costs.per_kernel_s(framework, execution, training=True)
    assert np.allclose(training, [65e-6, 70e-6, 5e-6, 0.5e-6])
    # A cuDNN call plans on the host under eager and compiled code alike; a CUDA graph replays it.
    assert np.allclose(costs.per_convolution_s(execution), [36e-6, 36e-6, 36e-6, 0.0])


def test_the_planners_distinct_rows_give_what_every_row_gives() -> None:
    """``distinct_training_kernels`` times each distinct row once: the same numbers as ``training_kernels``
    on every one of 3,000 rows that repeat a few hundred shapes, codes and rates."""

    rng = np.random.default_rng(7)
    n = 3000

    def pick(*values: float) -> np.ndarray:
        return rng.choice(np.array(values, dtype=np.float64), n)

    columns = (
        pick(1024.0, 4096.0, 16384.0),  # tokens per micro-batch
        pick(2048.0, 4096.0),  # seq_len
        pick(32.0, 16.0, 8.0),  # layers per device
        pick(2.0, 4.0),  # activation bytes
        pick(1.0, 2.0, 8.0),  # tp
        pick(0.0, 1.0),  # sequence parallel
        pick(0.0, 1.0, 2.0, 3.0),  # attention kernel
        pick(0.0, 1.0, 2.0, 3.0),  # recompute
        pick(0.0, 1.0, 2.0),  # framework
        pick(0.0, 1.0, 2.0),  # execution
        pick(0.0, 1.0),  # has the head
        pick(1.0),  # expert parallelism (a dense model)
        pick(0.0, 1.0),  # loss
        pick(0.0, 1.0),  # GEMM inputs quantised to fp8
    )
    gemm = pick(731e12, 268e12)
    unquantised = gemm * pick(1.0, 0.5)  # fp8 rows: attention and the head at half the GEMMs' rate
    rates = KernelRates(
        gemm, unquantised, unquantised * 0.5, pick(2965e9, 1800e9), np.full(n, 2.5e-6), (1.0, 1.0, 0.55, 0.44)
    )
    model = preset("llama-3-8b")
    every = training_kernels(model, MicrobatchShape(*columns), rates)
    distinct = distinct_training_kernels(model, MicrobatchShape(*columns), rates)
    costs = HostCosts(1.57e-5, 1.94e-5, 5.5e-5, 0.0, 5e-6, 5e-7, 3.6e-5)
    host = costs.per_kernel_s(columns[8], columns[9], training=True)
    for mine, theirs in ((distinct.plain, every.plain), (distinct.recomputed, every.recomputed)):
        np.testing.assert_allclose(mine.device_s, theirs.device_s, rtol=1e-12)
        np.testing.assert_allclose(mine.wall_s(host), theirs.wall_s(host), rtol=1e-12)


def test_each_fused_attention_kernel_runs_at_its_share_of_flashattention_2() -> None:
    """The attention core of one layer takes 1/share as long as FlashAttention-2's: the Triton kernel
    (MPT) and the first FlashAttention (LLaMA's xformers kernel) are slower, and nothing else changes."""
    model = preset("llama-2-7b")
    cores: dict[str, float] = {}
    for code, kernel in enumerate(ATTENTION_KERNELS):
        shape = MicrobatchShape(
            tokens=col(4096.0),
            seq_len=col(4096.0),
            layers=col(32.0),
            act=col(2.0),
            tp=col(1.0),
            sp=col(0.0),
            attention=col(code),
            recompute=col(0.0),
            framework=col(0.0),
            execution=col(0.0),
            has_head=col(0.0),
        )
        microbatch = training_kernels(model, shape, H100)
        cores[kernel] = float(np.ravel(microbatch.plain.device_s)[0])
    attention_s = (cores["flash-v1"] - cores["flash"]) / (1 / 0.44 - 1)
    assert cores["triton"] - cores["flash"] == pytest.approx(attention_s * (1 / 0.55 - 1), rel=1e-9)
    assert cores["flash"] < cores["triton"] < cores["flash-v1"]
    assert cores["unfused"] > cores["flash"]


def test_the_experts_a_batch_touches_match_a_simulated_router() -> None:
    """E (1 - (1 - a/E)^tokens) against tokens routed at random, each to a distinct experts of E."""
    mixtral = preset("mixtral-8x7b")  # 8 experts, 2 per token
    rng = np.random.default_rng(3)
    for tokens in (1, 2, 4, 8, 64):
        hit = [len({int(e) for _ in range(tokens) for e in rng.choice(8, size=2, replace=False)}) for _ in range(4000)]
        assert float(experts_touched(mixtral, col(float(tokens)))) == pytest.approx(np.mean(hit), rel=0.02)
    assert float(experts_touched(preset("llama-2-7b"), col(4096.0))) == 1.0


def test_a_moe_decode_step_reads_the_weights_of_every_expert_its_batch_touches() -> None:
    """Mixtral 8x7B on one H100: batch 1 streams its 2 experts' MLPs, batch 64 all 8 (each 3 x 4096 x 14336
    bf16 matrices a layer, 32 layers): the step can be no faster than those bytes over the bandwidth."""
    mixtral = preset("mixtral-8x7b")
    expert_bytes = 3 * 4096 * 14336 * 2 * 32
    cuda_graphs, pytorch = col(2.0), col(1.0)
    for batch, touched in ((1.0, 2.0), (64.0, 8.0)):
        step = decode_kernels(
            mixtral, col(batch), col(1024.0), col(2.0), col(2.0), col(1.0), pytorch, cuda_graphs, H100
        )
        floor_s = touched * expert_bytes / 2965e9
        assert floor_s < float(step.device_s) < 1.3 * floor_s + 0.5 * expert_bytes / 2965e9


def test_eight_bit_recipes_keep_attention_and_the_lm_head_in_16_bits(
    catalog: Catalog, assumptions: Assumptions
) -> None:
    """Transformer Engine's fp8 training and vLLM's W8A8 quantise the linear layers only: on an H100 fp8 GEMMs
    run at twice bf16's rate, attention and the LM head at bf16's. A chip whose 8-bit peak is no higher than
    its 16-bit one (Gaudi 3) has nothing to split."""
    h100 = catalog.accelerator("h100-sxm")
    assert attention_peak_ratio(h100.peak_flops, "fp8") == pytest.approx(0.5)
    assert attention_peak_ratio(h100.peak_flops, "bf16") == 1.0
    assert attention_peak_ratio(catalog.accelerator("a100-80gb").peak_flops, "int8") == pytest.approx(0.5)
    assert attention_peak_ratio(catalog.accelerator("gaudi3").peak_flops, "fp8") == 1.0

    bf16 = KernelRates.of(col(h100.peak_flops["bf16"]), col(3.35e12), assumptions)
    fp8 = KernelRates.of(col(h100.peak_flops["fp8"]), col(3.35e12), assumptions, attention_peak_ratio=col(0.5))
    assert float(fp8.gemm_flops) == pytest.approx(2 * float(bf16.gemm_flops))
    assert float(fp8.attention_flops) == pytest.approx(float(bf16.attention_flops))
    assert float(fp8.unquantised_gemm_flops) == pytest.approx(float(bf16.gemm_flops))

    # Llama 3 8B at 8,192 tokens: attention and the 128K-token head are a fifth of the step, so fp8's step
    # lands between bf16's and the naive one with every matmul at fp8's rate.
    model = preset("llama-3-8b")
    shape = MicrobatchShape(*(col(v) for v in (8192.0, 8192.0, 32.0, 2.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0)))
    naive = replace(fp8, unquantised_gemm_flops=fp8.gemm_flops, attention_flops=2.0 * fp8.attention_flops)
    step = {
        name: float(training_kernels(model, shape, r).plain.device_s)
        for name, r in (("bf16", bf16), ("fp8", fp8), ("naive", naive))
    }
    assert step["naive"] < 0.9 * step["fp8"] < step["fp8"] < 0.75 * step["bf16"]


def test_expert_parallelism_gives_each_device_fewer_experts_and_more_tokens() -> None:
    """Under expert parallelism each device holds E/ep experts and runs them on the tokens every device of the
    group routes to them (Megatron's grouped MLP after the all-to-all): Mixtral's 8 experts over 8 devices of
    4,096 tokens each, top-2, is one expert per device on 4,096 x 2 x 8 / 8 = 8,192 tokens."""
    mixtral = preset("mixtral-8x7b")
    tokens = col(4096.0)
    assert float(local_experts_touched(mixtral, tokens, 1.0)) == pytest.approx(8.0)
    assert float(local_experts_touched(mixtral, tokens, 8.0)) == pytest.approx(1.0)
    assert float(local_experts_touched(mixtral, tokens, 2.0)) == pytest.approx(4.0)
    # One decoded token still reaches its two experts, wherever they are.
    assert float(local_experts_touched(mixtral, col(1.0), 1.0)) == pytest.approx(2.0)


def _quantisation_s(model_name: str, tokens: float, ep: float) -> tuple[float, float]:
    """(seconds, host launches) fp8 adds to one layer's forward and backward over the same step in bf16."""
    model = preset(model_name)
    runs = {}
    for quantised in (0.0, 1.0):
        shape = MicrobatchShape(
            *(col(v) for v in (tokens, 4096.0, 1.0, 2.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0)),
            ep=col(ep),
            quantised=col(quantised),
        )
        runs[quantised] = training_kernels(model, shape, H100).plain
    launches = float(
        np.ravel(runs[1.0].kernels + runs[1.0].backward_kernels - runs[0.0].kernels - runs[0.0].backward_kernels)[0]
    )
    return float(np.ravel(runs[1.0].device_s - runs[0.0].device_s)[0]), launches


def test_fp8_quantises_every_gemm_input_and_output_gradient() -> None:
    """Current scaling (Transformer Engine, torchao): each GEMM input is read for its amax, read again and written
    as fp8 row-wise and transposed, 2 + 2 + 1 + 1 = 6 bytes per 16-bit element, in three kernels.

    Llama 3 8B, 8,192 tokens: the forward quantises q/k/v's input (4,096), the output projection's (4,096),
    gate/up's (4,096) and down's (14,336); the backward the gradients of q/k/v's output (4,096 + 2 x 1,024),
    the output projection's (4,096), gate/up's (2 x 14,336) and down's (4,096)."""
    forward = 4096 + 4096 + 4096 + 14336
    backward = (4096 + 2 * 1024) + 4096 + 2 * 14336 + 4096
    expected = 8192 * (forward + backward) * 6 / 2965e9 + 2 * 4 * 3 * 2.5e-6
    seconds, launches = _quantisation_s("llama-3-8b", 8192.0, 1.0)
    assert seconds == pytest.approx(expected, rel=1e-9)
    assert launches == 0.0  # issued from Transformer Engine's C++ inside the linear layer's call


def test_fp8_quantises_each_routed_copy_of_a_token_for_its_expert() -> None:
    """Mixtral 8x7B over 8 devices (one expert each), top-2: the MLP's inputs and output gradients are quantised
    once per chosen expert, so twice per token; attention's once."""
    forward = 4096 + 4096 + 2 * (4096 + 14336)
    backward = (4096 + 2 * 1024) + 4096 + 2 * (2 * 14336 + 4096)
    expected = 4096 * (forward + backward) * 6 / 2965e9 + 2 * (2 + 2 * 1) * 3 * 2.5e-6
    seconds, _ = _quantisation_s("mixtral-8x7b", 4096.0, 8.0)
    assert seconds == pytest.approx(expected, rel=1e-6)


def test_each_recompute_policy_runs_again_what_it_did_not_keep() -> None:
    """Selective (Megatron) runs the attention core again, JAX's dots policy that and the elementwise kernels
    (every weight matmul's output was kept), full recompute the whole forward; the first pass is the same."""
    model = preset("llama-2-7b")
    steps = {}
    for policy in ("none", "selective", "dots", "full"):
        shape = MicrobatchShape(
            *(
                col(v)
                for v in (4096.0, 4096.0, 32.0, 2.0, 1.0, 0.0, 1.0, float(RECOMPUTES.index(policy)), 0.0, 0.0, 0.0)
            )
        )
        steps[policy] = training_kernels(model, shape, H100)
    plain = {float(np.ravel(k.plain.device_s)[0]) for k in steps.values()}
    assert len(plain) == 1
    again = {p: float(np.ravel(k.recomputed.device_s)[0]) for p, k in steps.items()}
    assert again["none"] < again["selective"] < again["dots"] < again["full"]


@pytest.mark.parametrize(
    ("quantiser", "bytes_per_element", "kernels_per_input"), [(1.0, 2 * 2 + 1, 2), (2.0, 2 + 1, 1)]
)
def test_w8a8_serving_quantises_each_linear_input_on_the_fly(
    quantiser: float, bytes_per_element: int, kernels_per_input: int
) -> None:
    """vLLM's W8A8: fp8 per tensor reads each 16-bit input twice (its max, then the cast) in two kernels, int8 per
    token once in one; both write it in 8 bits. Llama 3 8B's prefill of 2 x 1,024 tokens quantises q/k/v's input
    (4,096), the attention output (4,096), gate/up's (4,096) and down's (14,336) in each of 32 layers."""
    model = preset("llama-3-8b")

    def prefill_s(code: float) -> float:
        work = prefill_kernels(
            model, col(2.0), col(1024.0), col(2.0), col(1.0), col(0.0), col(0.0), col(0.0), H100, code
        )
        return float(np.ravel(work.device_s)[0])

    elements = 4096 + 4096 + 4096 + 14336
    per_layer = 2048 * elements * bytes_per_element / 2965e9 + 4 * kernels_per_input * 2.5e-6
    assert prefill_s(quantiser) - prefill_s(0.0) == pytest.approx(32 * per_layer, rel=1e-9)
    assert serving_quantiser("fp8") == 1.0 and serving_quantiser("int8") == 2.0 and serving_quantiser("bf16") == 0.0


def test_a_loss_outside_the_compiled_graph_moves_eager_bytes() -> None:
    """torch.compile fuses the cross entropy it compiles with the model (24 bytes a logit over forward and
    backward against eager's 36); one computed on the compiled model's logits outside its graph (``eager``,
    as examples/tiny_gpt.py's setup.loss) moves all 36, under any execution."""
    model = preset("llama-2-7b")
    tokens = 4096.0

    def device_s(execution: str, loss: str) -> float:
        values = (tokens, 4096.0, 32.0, 2.0, 1.0, 0.0, 1.0, 0.0, 1.0, float(EXECUTIONS.index(execution)), 1.0)
        shape = MicrobatchShape(*(col(v) for v in values), loss=col(float(LOSSES.index(loss))))
        return float(np.ravel(training_kernels(model, shape, H100).plain.device_s)[0])

    outside = device_s("compile", "eager") - device_s("compile", "standard")
    assert outside == pytest.approx(tokens * model.vocab_size * 12.0 / 2965e9, rel=1e-6)
    assert device_s("eager", "eager") == device_s("eager", "standard")
