"""Published figures the estimators must reproduce; each test names its source."""

from __future__ import annotations

import numpy as np
import pytest

from benchmark_script import load_benchmark
from computewise.estimate.arrays import col
from computewise.estimate.flops import training_flops_per_token
from computewise.estimate.memory import activation_parts, kv_cache_bytes, model_state_bytes, peak_activations
from computewise.specs import RECOMPUTES, ModelSpec

GB = 1e9


@pytest.mark.parametrize(
    ("stage", "expected_gb"),
    [(0, 120.0), (1, 31.4), (2, 16.6), (3, 1.88)],
)
def test_zero_paper_model_state_memory_per_device(stage: int, expected_gb: float) -> None:
    # Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models",
    # Figure 1: Psi = 7.5B parameters, N_d = 64 data-parallel devices, K = 12 (mixed-precision Adam).
    weights, grads, optimizer = model_state_bytes(
        7.5e9, col(2.0), col(12.0), tp=col(1.0), pp=col(1.0), dp=col(64.0), zero=col(float(stage))
    )
    total_gb = float(weights + grads + optimizer) / GB
    assert total_gb == pytest.approx(expected_gb, rel=0.01)


def test_zero_paper_figure_1_under_fsdp_in_the_pytorch_layout() -> None:
    """Rajbhandari et al. 2020, Figure 1, P_os+g+p: 1.88 GB of model states per device at Psi = 7.5B,
    N_d = 64, in the layout FSDP users run (fp32 weights and gradients, 8 bytes of Adam state, autocast).
    FSDP gathers and casts one layer at a time and prefetches the next: two layers' bf16 copies are
    live beside the states, never the whole model's (18 bytes per parameter overall)."""
    from computewise.catalog import load_catalog
    from computewise.estimate import Assumptions
    from computewise.estimate.train import TrainLayout, train_memory
    from computewise.specs import Parallelism, TrainJob

    # Narayanan et al. 2021 Table 1's 7.5B shape: 36 layers of d_model 4096 (12 d^2 each), untied vocab 0.
    model = ModelSpec(
        name="gpt-7.5b", params=7_500_000_000, architecture="decoder", layers=36, hidden_size=4096, heads=32,
        kv_heads=32, ffn_size=4 * 4096, vocab_size=0, tied_embeddings=False, gated_ffn=False, max_seq_len=2048,
        source="Narayanan et al. 2021 Table 1",
    )  # fmt: skip
    job = TrainJob(tokens=1e9, seq_len=2048, micro_batch=1, global_batch=64, framework="pytorch")
    layout = TrainLayout.for_job(Parallelism(dp=64, zero=3), job)
    memory = train_memory(model, layout, Assumptions.from_catalog(load_catalog()))
    two_layers_bf16 = 2 * 7.5e9 / 36 * 2  # a layer's share of Psi (no embeddings in this spec), in bf16
    states = float(memory.weights + memory.gradients + memory.optimizer_states) - two_layers_bf16
    assert states / GB == pytest.approx(1.88, rel=0.01)


def test_torchtitan_llama_3_8b_memory_under_fsdp_and_op_level_selective_checkpointing() -> None:
    """torchtitan docs/performance.md, Table 1: Llama 3.1 8B, FSDP on 8 H100s, local batch 2 (seq 8192),
    selective (op) activation checkpointing, eager: 82.4 GiB, torchtitan's reading of
    ``max_memory_reserved``. Before op-level selective recompute existed here, the nearest policy
    (Megatron's selective) put the same job far above any 80 GB card."""
    from computewise.catalog import load_catalog
    from computewise.estimate import Assumptions, estimate_train
    from computewise.models.presets import preset
    from computewise.specs import Parallelism, TrainJob

    catalog = load_catalog()
    job = TrainJob(
        tokens=1e9, seq_len=8192, micro_batch=2, global_batch=16, recompute="op-selective", framework="pytorch"
    )
    result = estimate_train(
        preset("llama-3-8b"), catalog.accelerator("h100-sxm"), 8, job, Parallelism(dp=8, zero=3), catalog,
        Assumptions.from_catalog(catalog),
    )  # fmt: skip
    assert result.memory_per_device["reserved_peak"] / 2**30 == pytest.approx(82.4, rel=0.05)


def _gpt3_175b(vocab_size: int = 0) -> ModelSpec:
    # Brown et al. 2020, Table 2.1: 96 layers, d_model 12288, 96 heads, context 2048.
    return ModelSpec(
        name="gpt3-175b",
        params=175_000_000_000,
        architecture="decoder",
        layers=96,
        hidden_size=12288,
        heads=96,
        kv_heads=96,
        ffn_size=4 * 12288,
        vocab_size=vocab_size,
        tied_embeddings=True,
        max_seq_len=2048,
    )


def _activations(model: ModelSpec, *, tp: int, sequence_parallel: bool, recompute: int, flash: bool = False) -> float:
    return float(
        peak_activations(
            activation_parts(
                model,
                col(2048.0),
                col(1.0),
                tp=col(float(tp)),
                pp=col(1.0),
                sequence_parallel=col(float(sequence_parallel)),
                recompute=col(float(recompute)),
                flash_attention=col(float(flash)),
                act_bytes=col(2.0),
                microbatches_per_step=col(1.0),
            )
        )
    )


@pytest.mark.parametrize(
    ("tp", "sequence_parallel", "recompute"), [(1, False, 0), (8, False, 0), (8, True, 0), (8, True, 1)]
)
def test_activation_memory_matches_korthikanti_formulas(tp: int, sequence_parallel: bool, recompute: int) -> None:
    # Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
    # section 4: per layer sbh(34 + 5as/h) unsplit; sbh(10 + 24/t + 5as/(ht)) with tensor parallelism;
    # sbh/t (34 + 5as/h) with sequence parallelism too; 34 sbh/t with selective recompute.
    # Section 4.3 adds the input embedding's dropout mask, sbh (/t with sequence parallelism).
    model = _gpt3_175b()
    s, b, h, a, layers = 2048, 1, 12288, 96, 96
    scores = 5 * a * s / h
    if not sequence_parallel:
        per_layer = s * b * h * (10 + 24 / tp + scores / tp)
    elif recompute == 0:
        per_layer = s * b * h / tp * (34 + scores)
    else:
        per_layer = s * b * h / tp * 34
    # Selective recompute in Megatron drops the attention core entirely; we keep flash-style softmax stats.
    stats = s * b * a * 4 / tp if recompute == 1 else 0.0
    embedding = s * b * h / (tp if sequence_parallel else 1)
    expected = layers * (per_layer + stats) + embedding
    assert _activations(model, tp=tp, sequence_parallel=sequence_parallel, recompute=recompute) == pytest.approx(
        expected, rel=1e-9
    )


def test_full_recompute_keeps_layer_inputs() -> None:
    # Korthikanti et al. 2022, section 4.2.2: full recomputation stores 2sbhL (plus, here, one layer rebuilt).
    model = _gpt3_175b()
    s, b, h, a = 2048, 1, 12288, 96
    one_layer = s * b * h * (34 + 5 * a * s / h)
    expected = 2 * s * b * h * 96 + one_layer + s * b * h
    assert _activations(model, tp=1, sequence_parallel=False, recompute=2) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize(("tp", "sequence_parallel"), [(1, False), (8, True)])
def test_dots_policy_keeps_layer_inputs_and_every_weight_matmuls_output(tp: int, sequence_parallel: bool) -> None:
    # JAX's checkpoint_dots_with_no_batch_dims (MaxText's remat_policy minimal): each layer keeps its input
    # (2sbh) and the outputs of q, k, v, o, up and down (3h + h + 4h + h = 9h, in 16 bits: 18sbh), all split
    # over tp when the residual stream is (sequence parallelism, MaxText's activation_embed on tensor), with
    # attention's softmax statistics (4 bytes per head and token); one layer is rebuilt during the backward.
    model = _gpt3_175b()
    s, b, h, a, layers = 2048, 1, 12288, 96, 96
    kept = (20 * s * b * h + 4 * s * b * a) / tp
    rebuilt = (
        s * b * h / tp * (34 + 5 * a * s / h)
        if sequence_parallel
        else s * b * h * (10 + 24 / tp + 5 * a * s / (h * tp))
    )
    embedding = s * b * h / (tp if sequence_parallel else 1)
    expected = layers * kept + rebuilt + embedding
    dots = float(RECOMPUTES.index("dots"))
    assert _activations(model, tp=tp, sequence_parallel=sequence_parallel, recompute=int(dots)) == pytest.approx(
        expected, rel=1e-9
    )
    # It recomputes what selective recompute does (the attention core), no matmul with weights.
    selective = float(RECOMPUTES.index("selective"))
    assert np.allclose(
        training_flops_per_token(model, col(2048.0), col(dots)),
        training_flops_per_token(model, col(2048.0), col(selective)),
    )


def test_gpt3_training_compute() -> None:
    # Brown et al. 2020, Table D.1: GPT-3 175B trained on 300B tokens used 3.14e23 FLOPs.
    model = _gpt3_175b(vocab_size=50257)
    per_token, _ = training_flops_per_token(model, col(2048.0), col(0.0))
    assert float(per_token) * 300e9 == pytest.approx(3.14e23, rel=0.03)


def test_chinchilla_training_compute() -> None:
    # Hoffmann et al. 2022, Table 3: Chinchilla, 70B parameters on 1.4T tokens, 5.76e23 FLOPs.
    # 6ND alone gives 5.88e23 for the rounded 70B; the paper counts from the exact shape, so 5 %.
    # Shape from Table 4: 80 layers, d_model 8192, 64 heads, context 2048, 32k vocabulary.
    model = ModelSpec(
        name="chinchilla",
        params=70_000_000_000,
        layers=80,
        hidden_size=8192,
        heads=64,
        kv_heads=64,
        ffn_size=4 * 8192,
        vocab_size=32000,
        max_seq_len=2048,
    )
    per_token, _ = training_flops_per_token(model, col(2048.0), col(0.0))
    assert float(per_token) * 1.4e12 == pytest.approx(5.76e23, rel=0.05)


@pytest.mark.parametrize(
    ("layers", "kv_heads", "expected_bytes_per_token"),
    [
        # Llama 2 7B: 32 layers, 32 KV heads of 128 (Touvron et al. 2023): 2*32*32*128*2 B = 0.5 MiB/token.
        (32, 32, 524_288),
        # Llama 3 8B: 32 layers, 8 KV heads (GQA) of 128 (Meta model card): 128 KiB/token.
        (32, 8, 131_072),
    ],
)
def test_kv_cache_bytes_per_token(layers: int, kv_heads: int, expected_bytes_per_token: int) -> None:
    model = ModelSpec(
        name="llama",
        params=7_000_000_000,
        layers=layers,
        hidden_size=4096,
        heads=32,
        kv_heads=kv_heads,
        ffn_size=11008,
        vocab_size=32000,
        gated_ffn=True,
    )
    per_token = kv_cache_bytes(model, col(1.0), col(1.0), kv_bytes=col(2.0), tp=col(1.0))
    assert float(per_token) == expected_bytes_per_token


def test_every_published_resnet_50_figure_is_met_or_its_miss_is_explained() -> None:
    """``benchmarks/replay_cnn.py`` over ``benchmarks/data/published_cnn_runs.csv``: NVIDIA DeepLearningExamples'
    ResNet-50 inference (T4, V100; fp32 and mixed precision; batch 1-256) and training (V100, A100), and Hugging
    Face's eager batch-1/4/16 latencies (A100, V100, T4), 51 figures. Each is within 25 % or names what the
    estimate does not model (a slower host, TF32, a T4's clock); a stated cause must still be a miss. Before the
    traced kernels were timed, training was 4.1x optimistic and inference 5.5x on a T4."""
    rows = load_benchmark("replay_cnn").replay()
    assert len(rows) == 51
    disagreeing = [(row.name, f"{row.error:+.0%}", row.known_miss) for row in rows if not row.consistent]
    assert not disagreeing
    explained = sum(1 for row in rows if row.known_miss)
    assert explained <= 21  # batch 1-8 on NVIDIA's 2021 host, AMP's host floor, TF32, the T4's clock
