"""LoRA and QLoRA estimates: what trains, what is stored, what it costs, and what is refused.

Independent checks: the trainable-parameter counts PEFT prints for Llama 3 8B (41,943,040 at rank 16
on all linear layers, 3,407,872 at rank 8 on q and v); the QLoRA paper's headline (Dettmers et al.
2023, arXiv:2305.14314, section 1 and Figure 6): a 65B LLaMA fine-tunes on one 48 GB GPU with NF4,
double quantization and paged AdamW, where a full 16-bit fine-tuning needs more than 780 GB; and
the 4-bit bytes bitsandbytes stores (``estimate.quantized``, tested against bitsandbytes itself).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from computewise.catalog import Catalog
from computewise.estimate import Assumptions, estimate_train
from computewise.estimate.adapters import Adapters
from computewise.estimate.arrays import col
from computewise.estimate.quantized import four_bit_weight_bytes
from computewise.models.hf_config import from_hf_config
from computewise.models.resolve import resolve_model
from computewise.specs import FINETUNE_METHODS, FineTune, ModelSpec, Parallelism, TrainJob

CLI = [sys.executable, "-m", "computewise.cli.app"]

# huggyllama/llama-65b's config.json: the model the QLoRA paper fine-tuned on one 48 GB GPU.
LLAMA_65B: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 8192,
    "intermediate_size": 22016,
    "num_attention_heads": 64,
    "num_hidden_layers": 80,
    "num_key_value_heads": 64,
    "vocab_size": 32000,
    "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-05,
    "tie_word_embeddings": False,
    "hidden_act": "silu",
}
GB = 1e9


def _job(finetune: FineTune, *, optimizer: str = "adamw", recompute: str = "none", seq: int = 2048) -> TrainJob:
    return TrainJob(
        tokens=1e7,
        seq_len=seq,
        micro_batch=1,
        global_batch=16,
        optimizer=optimizer,  # type: ignore[arg-type]
        recompute=recompute,  # type: ignore[arg-type]
        framework="transformers",
        finetune=finetune,
    )


def _estimate(catalog: Catalog, assumptions: Assumptions, model: ModelSpec, job: TrainJob, gpu: str = "h100-sxm"):  # type: ignore[no-untyped-def]
    return estimate_train(model, catalog.accelerator(gpu), 1, job, Parallelism(), catalog, assumptions)


def test_trainable_parameters_are_the_counts_peft_prints_for_llama_3_8b() -> None:
    model = resolve_model("llama-3-8b")
    all_linear = Adapters.of(model, FineTune(method="lora", rank=16))
    q_and_v = Adapters.of(model, FineTune(method="lora", rank=8, targets=("q_proj", "v_proj")))
    assert all_linear is not None and q_and_v is not None
    assert all_linear.trainable_params == 41_943_040
    assert q_and_v.trainable_params == 3_407_872


def test_lora_state_is_a_frozen_16_bit_base_and_fp32_adapters_with_adam(
    catalog: Catalog, assumptions: Assumptions
) -> None:
    """Weights: the base at 2 bytes and the adapters at 4 (plus autocast's 2-byte copy of each adapter);
    gradients 4 bytes and AdamW's two fp32 moments (8 bytes) for the adapters alone."""
    model = resolve_model("llama-3-8b")
    adapters = 41_943_040
    memory = _estimate(catalog, assumptions, model, _job(FineTune(method="lora"))).memory_per_device
    assert memory["weights"] == pytest.approx(model.params * 2 + adapters * (4 + 2), rel=1e-9)
    assert memory["gradients"] == pytest.approx(adapters * 4, rel=1e-9)
    assert memory["optimizer_states"] == pytest.approx(adapters * 8, rel=1e-9)


def test_qlora_reproduces_the_papers_65b_on_one_48_gb_gpu(catalog: Catalog, assumptions: Assumptions) -> None:
    """The paper's setup: NF4 with double quantization, rank 64 on every linear layer, bf16 adapters,
    paged AdamW, gradient checkpointing, one sequence per step."""
    model = from_hf_config(LLAMA_65B)
    qlora = FineTune(method="qlora", rank=64, alpha=16, adapter_bytes=2)
    estimate = _estimate(
        catalog, assumptions, model, _job(qlora, optimizer="paged-adamw", recompute="full", seq=512), "l40s"
    )
    total = estimate.memory_per_device["total"]
    assert estimate.fits and 33 * GB < total <= 48 * GB
    full = _estimate(catalog, assumptions, model, _job(FineTune(), recompute="full", seq=512), "l40s")
    assert full.memory_per_device["total"] > 780 * GB and not full.fits


def test_a_qlora_base_weighs_what_bitsandbytes_stores(catalog: Catalog, assumptions: Assumptions) -> None:
    """Every linear layer of the blocks in NF4 (exact bytes of each matrix); embeddings, norms and the
    head upcast to fp32 by ``prepare_model_for_kbit_training``."""
    model = resolve_model("llama-3-8b")
    adapters = Adapters.of(model, FineTune(method="qlora"))
    assert adapters is not None
    four_bit = sum(
        four_bit_weight_bytes(layer.in_features * layer.out_features) * layer.per_block
        for layer in adapters.base_linears
    )
    expected = four_bit * model.layers + (model.params - adapters.quantizable_params) * 4
    assert float(adapters.frozen_bytes(model, col(2.0))) == pytest.approx(expected, rel=1e-12)
    assert expected / model.params < 1.0  # about a byte a parameter: 4-bit blocks plus the fp32 rest


def test_lora_on_gpt3_175b_trains_faster_than_full_as_the_lora_paper_measured(
    catalog: Catalog, assumptions: Assumptions
) -> None:
    """LoRA paper, section 4.2: rank 4 on the attention projections trained GPT-3 175B 25 % faster than full
    fine-tuning (a step 0.8 of the full one; the frozen weights skip their weight gradients, 4N of 6N
    FLOPs). QLoRA pays for dequantizing every base matrix twice a step on top."""
    model = resolve_model("gpt3-175b")
    steps = {
        method: float(
            _estimate(
                catalog,
                assumptions,
                model,
                _job(FineTune(method=method, rank=4, targets=("attention",))),
            ).columns.step_s
        )
        for method in FINETUNE_METHODS
    }
    assert 0.5 < steps["lora"] / steps["full"] < 0.85, steps
    assert steps["qlora"] > steps["lora"]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120, check=False)


def test_estimate_train_json_says_what_trains() -> None:
    done = _cli(
        *("estimate", "train", "--model", "llama-3-8b", "--gpu", "rtx-4090", "--method", "qlora"),
        *("--lora-rank", "8", "--lora-targets", "q_proj,v_proj", "--tokens", "50M", "--json"),
    )
    assert done.returncode == 0, done.stderr
    finetune = json.loads(done.stdout)["job"]["finetune"]
    assert finetune["method"] == "qlora" and finetune["trainable_params"] == 3_407_872
    assert finetune["four_bit"] == "nf4" and finetune["double_quant"] is True


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--model", "gpt2", "--method", "lora", "--lora-rank", "1000"), "rank"),
        (("--model", "llama-3-8b", "--method", "lora", "--lora-targets", "q_porj"), "q_proj"),
        (("--model", "llama-3-8b", "--gpu", "tpu-v5e", "--method", "qlora"), "QLoRA"),
        (("--model", "gpt2", "--lora-rank", "8"), "--method"),
        (("--model", "gpt2", "--method", "lora", "--quant-type", "fp4"), "--method qlora"),
        (("--model", "gpt2", "--method", "lora", "--framework", "megatron"), "framework"),
        (("--model", "gpt2", "--method", "lora", "--trained-modules", "lm_head"), "head"),
        (("--model", "gpt2", "--method", "dora"), "--method"),
    ],
)
def test_impossible_fine_tuning_is_refused_with_the_fix(args: tuple[str, ...], says: str) -> None:
    command = ("estimate", "train", *(() if "--gpu" in args else ("--gpu", "h100")), *args)
    done = _cli(*command)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "error:" in done.stderr and "To fix:" in done.stderr and says in done.stderr
    assert "Traceback" not in done.stderr


def test_a_missing_config_module_is_named_with_the_models_modules(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(LLAMA_65B))
    done = _cli(
        "estimate", "train", "--model", str(config), "--gpu", "h100", "--method", "lora", "--lora-targets", "c_attn"
    )
    assert done.returncode == 2
    assert "gate_proj" in done.stderr  # the model's own module names, to pick from


def test_adapters_in_fp8_are_refused_by_the_estimate_and_the_plan() -> None:
    """PEFT's LoRA layers (and bitsandbytes' QLoRA compute dtype) run in 16 or 32 bits; fp8 needs Transformer
    Engine's layers, which PEFT does not wrap: both verbs refuse rather than time a run that cannot happen."""
    estimate = _cli(*("estimate", "train", "-m", "llama-3-8b", "-g", "h100", "--method", "qlora", "--precision", "fp8"))
    assert estimate.returncode == 2 and "fp8 training needs Transformer Engine" in estimate.stderr
    planned = _cli(*("plan", "train", "-m", "llama-3-8b", "--method", "lora", "--precision", "fp8", "--tokens", "1e8"))
    assert planned.returncode == 2 and "--precision fp8 leaves none" in planned.stderr
    mixed = _cli(
        *("plan", "train", "-m", "llama-3-8b", "--method", "lora", "--precision", "fp8", "--precision", "bf16"),
        *("--tokens", "1e8", "--json"),
    )
    assert mixed.returncode == 0, mixed.stderr
    assert {option["job"]["precision"] for option in json.loads(mixed.stdout)["candidates"]} == {"bf16"}
