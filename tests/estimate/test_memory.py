"""Training memory: the layouts, the timing of the peak, allocated vs reserved, and how
context, pipeline interleaving and expert parallelism move it. Pinned against the CPU replay of
``benchmarks/replay_memory.py`` (PyTorch's own allocations, not our formula)."""

from __future__ import annotations

import pytest

from computewise.catalog import Catalog
from computewise.errors import InputError
from computewise.estimate import Assumptions, estimate_train
from computewise.estimate.arrays import col
from computewise.estimate.memory import (
    activation_parts,
    bytes_per_value,
    expert_params,
    framework_state_bytes,
    model_state_bytes,
    optimizer_bytes_per_param,
    peak_activations,
)
from computewise.specs import FRAMEWORKS, PRECISIONS, Framework, ModelSpec, Parallelism, Precision, Recompute, TrainJob

# Two cuBLAS workspaces (the forward's thread and autograd's) of 32 MiB + 1 MiB each on Hopper,
# allocated through the caching allocator (PyTorch's aten/src/ATen/cuda/CublasHandlePool.cpp).
TRAINING_WORKSPACES = 2 * 33 * 2**20

GPT_125M = ModelSpec(  # benchmarks/validate_gpu.py's gpt-125m: GPT-3 Small with 2048 learned positions
    name="gpt-125m",
    params=125_226_240,
    layers=12,
    hidden_size=768,
    heads=12,
    kv_heads=12,
    ffn_size=3072,
    vocab_size=50257,
    tied_embeddings=True,
    max_seq_len=2048,
)
GPT_1_3B = ModelSpec(
    name="gpt-1.3b",
    params=1_315_723_264,
    layers=24,
    hidden_size=2048,
    heads=16,
    kv_heads=16,
    ffn_size=8192,
    vocab_size=50257,
    tied_embeddings=True,
    max_seq_len=2048,
)
LLAMA_400M = ModelSpec(
    name="llama-400m",
    params=348_701_696,
    layers=24,
    hidden_size=1024,
    heads=16,
    kv_heads=8,
    ffn_size=2816,
    vocab_size=32000,
    gated_ffn=True,
    max_seq_len=4096,
)
LLAMA_1_1B = ModelSpec(
    name="llama-1.1b",
    params=1_100_048_384,
    layers=22,
    hidden_size=2048,
    heads=32,
    kv_heads=4,
    ffn_size=5632,
    vocab_size=32000,
    gated_ffn=True,
    max_seq_len=4096,
)
# A layer of a long-sequence Llama without an LM head, so only transformer layers count.
BARE = ModelSpec(
    name="bare", params=10**9, layers=32, hidden_size=4096, heads=32, kv_heads=8, ffn_size=14336, gated_ffn=True
)


def _memory(
    catalog: Catalog,
    assumptions: Assumptions,
    model: ModelSpec,
    seq: int,
    batch: int,
    precision: Precision = "bf16",
    recompute: Recompute = "none",
    framework: Framework = "pytorch",
    global_batch: int | None = None,
) -> dict[str, float]:
    job = TrainJob(
        tokens=float(seq * batch),
        seq_len=seq,
        micro_batch=batch,
        global_batch=global_batch or batch,
        precision=precision,
        recompute=recompute,
        framework=framework,
    )
    estimate = estimate_train(model, catalog.accelerator("h100-sxm"), 1, job, Parallelism(), catalog, assumptions)
    values: dict[str, float] = estimate.to_dict()["memory"]["per_device_bytes"]
    return values


@pytest.mark.parametrize(
    ("model", "seq", "batch", "precision", "recompute", "replayed_bytes"),
    [
        # benchmarks/replay_memory.py, torch 2.13: peak allocated bytes over steps 2-3, cuBLAS's workspaces
        # included (docs/ACCURACY.md).
        (GPT_125M, 1024, 8, "bf16", "none", 9_678_901_248),
        (GPT_125M, 1024, 8, "fp32", "none", 11_558_349_312),
        (GPT_1_3B, 2048, 8, "bf16", "full", 30_171_315_712),  # peaks in the forward: autocast's weight copies
        (GPT_1_3B, 1024, 4, "fp32", "full", 21_944_372_736),  # peaks late in the backward: all gradients
        (LLAMA_400M, 1024, 8, "fp32", "none", 23_586_921_472),  # fp32: K and V repeated to every head
        (LLAMA_1_1B, 4096, 8, "bf16", "full", 32_292_467_712),
    ],
)
def test_allocated_peak_matches_the_cpu_replay(
    catalog: Catalog,
    assumptions: Assumptions,
    model: ModelSpec,
    seq: int,
    batch: int,
    precision: Precision,
    recompute: Recompute,
    replayed_bytes: int,
) -> None:
    memory = _memory(catalog, assumptions, model, seq, batch, precision, recompute)
    assert memory["allocated_peak"] == pytest.approx(replayed_bytes, rel=0.02)


def test_without_accumulation_gradients_and_activations_do_not_peak_together(
    catalog: Catalog, assumptions: Assumptions
) -> None:
    one = _memory(catalog, assumptions, LLAMA_1_1B, 2048, 4)
    parts = one["weights"] + one["gradients"] + one["optimizer_states"] + one["activations"]
    assert one["allocated_peak"] < parts - 0.9 * one["gradients"]  # no gradient exists at the loss backward
    # With 4 micro-batches the gradients of the first ones are live through the later ones.
    four = _memory(catalog, assumptions, LLAMA_1_1B, 2048, 4, global_batch=16)
    assert four["allocated_peak"] == pytest.approx(one["allocated_peak"] + one["gradients"], rel=1e-9)


def test_small_activations_peak_at_the_optimizer_step(catalog: Catalog, assumptions: Assumptions) -> None:
    memory = _memory(catalog, assumptions, LLAMA_1_1B, 128, 1)
    state = memory["weights"] - 2.0 * (LLAMA_1_1B.params - 32000 * 2048)  # weights less autocast's copies
    states = state + memory["gradients"] + memory["optimizer_states"]
    assert memory["allocated_peak"] == pytest.approx(states + TRAINING_WORKSPACES)


def test_reserved_adds_fragmentation_and_total_adds_the_cuda_context(
    catalog: Catalog, assumptions: Assumptions
) -> None:
    # The allocator holds min(L, S) beyond the live peak: L = one fp32 logits buffer, S = the optimizer's states.
    small_states = _memory(catalog, assumptions, GPT_125M, 1024, 8)  # L = 1.65 GB > S = 1.00 GB
    assert small_states["reserved_peak"] - small_states["allocated_peak"] == pytest.approx(
        small_states["optimizer_states"]
    )
    big_states = _memory(catalog, assumptions, LLAMA_1_1B, 256, 1)  # L = 33 MB < S = 8.8 GB
    assert big_states["reserved_peak"] - big_states["allocated_peak"] == pytest.approx(4 * 256 * 32000)
    context = assumptions.runtime_overhead_bytes
    assert small_states["total"] == pytest.approx(small_states["reserved_peak"] + context)
    assert small_states["overhead"] == pytest.approx(small_states["total"] - small_states["allocated_peak"])


def test_pytorch_amp_and_megatron_layouts(catalog: Catalog, assumptions: Assumptions) -> None:
    pytorch = _memory(catalog, assumptions, LLAMA_1_1B, 2048, 4, framework="pytorch")
    megatron = _memory(catalog, assumptions, LLAMA_1_1B, 2048, 4, framework="megatron")
    p = LLAMA_1_1B.params
    # AMP: fp32 weights + bf16 copies of the matmul weights (not the input embedding), fp32 grads, Adam 8 B.
    assert pytorch["weights"] == pytest.approx(4 * p + 2 * (p - 32000 * 2048))
    assert (pytorch["gradients"], pytorch["optimizer_states"]) == pytest.approx((4 * p, 8 * p))
    # Megatron-LM under bf16: gradients accumulate in fp32 (its default), the master copy sits in Adam's 12 B.
    assert (megatron["weights"], megatron["gradients"], megatron["optimizer_states"]) == pytest.approx(
        (2 * p, 4 * p, 12 * p)
    )
    # The residual stream is fp32 under autocast: both norms save 2 more bytes per hidden value.
    tokens = 2048 * 4
    norms = 22 * tokens * 2048 * (2 + 2) + tokens * 2048 * 2  # 22 layers' norms, and the final norm
    # silu(gate) * up keeps silu(gate), which Megatron's fused SwiGLU does not.
    swiglu = 22 * tokens * 5632 * 2
    # PyTorch's cross entropy peaks at 12 bytes a logit in its backward; Megatron's, in place, at its
    # fp32 gradient and that gradient's bf16 cast (6).
    loss = tokens * 32000 * (12 - 6)
    assert pytorch["activations"] - megatron["activations"] == pytest.approx(norms + swiglu + loss)


def test_a_16_bit_gradient_buffer_and_its_step_only_fp32_copies(catalog: Catalog, assumptions: Assumptions) -> None:
    """Megatron with a 16-bit gradient reduce keeps a 16-bit buffer (2 bytes a parameter, not 4); its
    optimizer copies it to fp32 gradients for the step and frees them in ``zero_grad``, so the breakdown's
    optimizer states count 16 bytes but the peak, reached in the second micro-batch's forward with the first's
    gradients accumulated, holds 12 of them and 2 bytes of gradient where fp32 accumulation holds 4."""
    p = LLAMA_1_1B.params
    auto = _memory(catalog, assumptions, LLAMA_1_1B, 2048, 4, framework="megatron", global_batch=8)
    job = TrainJob(
        tokens=2048.0 * 8, seq_len=2048, micro_batch=4, global_batch=8, framework="megatron", grad_reduce="16-bit"
    )
    estimate = estimate_train(LLAMA_1_1B, catalog.accelerator("h100-sxm"), 1, job, Parallelism(), catalog, assumptions)
    half: dict[str, float] = estimate.to_dict()["memory"]["per_device_bytes"]
    assert (half["gradients"], half["optimizer_states"]) == pytest.approx((2 * p, 16 * p))
    assert auto["allocated_peak"] - half["allocated_peak"] == pytest.approx(2 * p)
    with pytest.raises(InputError, match="16-bit training"):
        TrainJob(tokens=1e9, seq_len=2048, micro_batch=1, global_batch=1, precision="fp32", grad_reduce="16-bit")


def test_transformer_engine_fp8_saves_its_projections_fp8_inputs(catalog: Catalog, assumptions: Assumptions) -> None:
    """Under Megatron fp8, TE's LayerNormLinear and Linear save the fp8 casts they multiplied (1 byte): the
    QKV and up-projections' inputs and the down-projection's; the output projection saves an fp8 copy of
    attention's output, which attention keeps in bf16 for its own backward. Nothing else moves."""
    bf16 = _memory(catalog, assumptions, LLAMA_1_1B, 2048, 4, framework="megatron")
    fp8 = _memory(catalog, assumptions, LLAMA_1_1B, 2048, 4, precision="fp8", framework="megatron")
    h, ffn, d_attn = 2048, 5632, 32 * 64
    per_token_layer = 2 * (2 - 1) * h + (2 - 1) * ffn - 1 * d_attn
    assert bf16["activations"] - fp8["activations"] == pytest.approx(22 * 2048 * 4 * per_token_layer)
    assert (fp8["weights"], fp8["gradients"]) == (bf16["weights"], bf16["gradients"])
    # PyTorch's float8 training saves its 16-bit inputs and re-casts them: fp8 holds what bf16 does.
    torch_bf16 = _memory(catalog, assumptions, LLAMA_1_1B, 2048, 4, framework="pytorch")
    torch_fp8 = _memory(catalog, assumptions, LLAMA_1_1B, 2048, 4, precision="fp8", framework="pytorch")
    assert torch_fp8["activations"] == torch_bf16["activations"]


@pytest.mark.parametrize(
    ("precision", "replicated", "sharded"), [("bf16", 6.0, 12.0), ("fp16", 4.0, 16.0), ("fp32", 8.0, 8.0)]
)
def test_megatron_state_matches_its_distributed_optimizer_table(
    precision: Precision, replicated: float, sharded: float
) -> None:
    """Megatron-LM docs/source/distrib_optimizer.md, bytes per parameter with Adam over d data-parallel
    ranks: bf16 params and fp32 grads 6 + 12/d, fp16 params and grads 4 + 16/d, fp32 8 + 8/d; with d = 1
    (no distributed optimizer) 18, 20 and 16."""
    megatron = col(float(FRAMEWORKS.index("megatron")))
    code = col(float(PRECISIONS.index(precision)))
    per_param = framework_state_bytes(
        megatron, code, col(bytes_per_value(precision)), col(optimizer_bytes_per_param("adamw", precision))
    )
    for d in (1.0, 8.0, 64.0):
        states = model_state_bytes(
            1.0, per_param.weights, per_param.optimizer, col(1.0), col(1.0), col(d), col(1.0 if d > 1 else 0.0),
            grad_bytes=per_param.gradients,
        )  # fmt: skip
        assert float(sum(states)) == pytest.approx(replicated + sharded / d)


def test_fp32_layouts_agree() -> None:
    per_param = framework_state_bytes(col([0.0, 1.0]), col([0.0, 0.0]), col([4.0, 4.0]), col([8.0, 8.0]))
    assert list(per_param.weights) == [4.0, 4.0] and list(per_param.optimizer) == [8.0, 8.0]
    assert list(per_param.cast) == [0.0, 0.0]


def _parts_first(model: ModelSpec, **kwargs: float) -> float:
    defaults = {"seq_len": 32768.0, "micro_batch": 1.0, "tp": 1.0, "pp": 1.0, "microbatches": 1.0}
    values = {**defaults, **kwargs}
    parts = activation_parts(
        model,
        col(values["seq_len"]),
        col(values["micro_batch"]),
        col(values["tp"]),
        col(values["pp"]),
        col(0.0),
        col(0.0),
        col(1.0),
        col(2.0),
        col(values["microbatches"]),
        framework=col(values.get("framework", 0.0)),
        cp=col(values.get("cp", 1.0)),
        virtual_stages=col(values.get("virtual_stages", 1.0)),
    )
    return float(parts.kept_first)


def test_context_parallelism_halves_a_long_sequences_activations() -> None:
    assert _parts_first(BARE, cp=2.0) == pytest.approx(_parts_first(BARE) / 2, rel=1e-12)
    # Ring attention's K/V buffers are transient and small: under 1 % of the kept activations.
    args = [col(32768.0), col(1.0), col(1.0), col(1.0), col(0.0), col(0.0), col(1.0), col(2.0), col(1.0)]
    with_ring = float(peak_activations(activation_parts(BARE, *args, cp=col(2.0))))
    assert with_ring == pytest.approx(_parts_first(BARE, cp=2.0), rel=0.01)


@pytest.mark.parametrize(("p", "v"), [(4, 2), (8, 3), (16, 6)])
def test_interleaving_raises_stage_zero_activations_by_the_published_factor(p: int, v: int) -> None:
    # Korthikanti et al. 2022, section 4.2.3: the interleaved schedule's first stage holds
    # L (1 + (p - 1)/(p v)) layers' activations, against L for plain 1F1B (enough micro-batches).
    plain = _parts_first(BARE, pp=float(p), microbatches=64.0)
    interleaved = _parts_first(BARE, pp=float(p), microbatches=64.0, virtual_stages=float(v))
    assert interleaved / plain == pytest.approx(1 + (p - 1) / (p * v), rel=1e-12)


def test_pipeline_with_few_micro_batches_holds_only_those() -> None:
    # 1F1B with m < p: the first stage holds m micro-batches of its L/p layers.
    assert _parts_first(BARE, pp=8.0, microbatches=2.0) == pytest.approx(_parts_first(BARE) * 2 / 8, rel=1e-12)


def test_expert_parallelism_shards_expert_weights() -> None:
    # Mixtral 8x7B (Jiang et al. 2024): 46.7B parameters, 8 experts of 3 * 4096 * 14336 in each of 32 layers.
    mixtral = ModelSpec(
        name="mixtral",
        params=46_702_792_704,
        layers=32,
        hidden_size=4096,
        heads=32,
        kv_heads=8,
        ffn_size=14336,
        vocab_size=32000,
        gated_ffn=True,
        experts=8,
        active_experts=2,
    )
    experts = 8 * 3 * 4096 * 14336 * 32
    assert expert_params(mixtral) == experts
    one = col(1.0)
    dense_w, _, _ = model_state_bytes(mixtral.params, col(2.0), col(12.0), one, one, col(8.0), col(0.0))
    sharded_w, sharded_g, sharded_o = model_state_bytes(
        mixtral.params, col(2.0), col(12.0), one, one, col(8.0), col(0.0), experts=experts, ep=col(8.0)
    )
    non_expert = mixtral.params - experts
    assert float(dense_w) == 2 * mixtral.params
    assert float(sharded_w) == pytest.approx(2 * (non_expert + experts / 8))
    assert float(sharded_g) == pytest.approx(2 * (non_expert + experts / 8))
    assert float(sharded_o) == pytest.approx(12 * (non_expert + experts / 8))
    # ZeRO-1 with ep = dp = 8: each expert lives on one rank only, so its optimizer state is not split further.
    _, _, zero1 = model_state_bytes(
        mixtral.params, col(2.0), col(12.0), one, one, col(8.0), col(1.0), experts=experts, ep=col(8.0)
    )
    assert float(zero1) == pytest.approx(12 * (non_expert / 8 + experts / 8))
