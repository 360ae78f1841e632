"""``plan train`` over fine-tuning methods: the consumer-GPU question, what does not fit, and agreement
with ``estimate train`` on the layout it picks."""

from __future__ import annotations

import pytest

from computewise.catalog import Catalog
from computewise.errors import InfeasiblePlanError, InputError
from computewise.estimate import Assumptions, estimate_train
from computewise.models import preset
from computewise.plan import TrainConstraints, plan_train
from computewise.specs import FineTune, Parallelism, TrainJob

LORA, QLORA, FULL = FineTune(method="lora"), FineTune(method="qlora"), FineTune()
ON_A_4090 = TrainConstraints(
    tokens=5e7, seq_len=2048, global_batch=64, accelerators=("rtx-4090",), pricings=("on-prem",), max_gpus=1
)


def test_an_8b_model_fine_tunes_on_one_24_gb_card_with_adapters_only(
    catalog: Catalog, assumptions: Assumptions
) -> None:
    """Full fine-tuning of Llama 3 8B needs over 100 GB per device; LoRA and QLoRA fit a 4090. The full
    method's rejection says by how much it misses and what would make it fit."""
    constraints = TrainConstraints(**{**ON_A_4090.__dict__, "methods": (FULL, LORA, QLORA)})
    plan = plan_train(preset("llama-3-8b"), catalog, assumptions, constraints)
    assert plan.recommended.method in ("lora", "qlora")
    assert {o.method for o in plan.candidates} == {"lora", "qlora"}
    (full,) = [r for r in plan.rejected if r.stage == "memory"]
    assert "over" in full.reason and "--method lora,qlora" in full.reason


def test_a_plan_of_full_training_that_fits_nowhere_names_the_methods_that_would(
    catalog: Catalog, assumptions: Assumptions
) -> None:
    with pytest.raises(InfeasiblePlanError) as error:
        plan_train(preset("llama-3-8b"), catalog, assumptions, ON_A_4090)
    assert "--method lora,qlora" in str(error.value)


def test_qlora_is_not_planned_where_bitsandbytes_has_no_kernels(catalog: Catalog, assumptions: Assumptions) -> None:
    constraints = TrainConstraints(
        tokens=5e7, seq_len=2048, global_batch=64, accelerators=("tpu-v5e", "l4"), max_gpus=8, methods=(QLORA,)
    )
    plan = plan_train(preset("llama-3-8b"), catalog, assumptions, constraints)
    assert {o.accelerator for o in plan.candidates} == {"l4"}
    assert any(r.stage == "method" and r.accelerator == "tpu-v5e" for r in plan.rejected)


def test_the_planned_lora_run_is_what_estimate_train_says_for_its_layout(
    catalog: Catalog, assumptions: Assumptions
) -> None:
    """The planner and ``estimate train`` run one formula: the recommended LoRA option, re-estimated
    alone, takes the same time and memory."""
    constraints = TrainConstraints(**{**ON_A_4090.__dict__, "methods": (LORA,)})
    model = preset("llama-3-8b")
    best = plan_train(model, catalog, assumptions, constraints).recommended
    job = TrainJob(
        tokens=constraints.tokens,
        seq_len=constraints.seq_len,
        micro_batch=best.micro_batch,
        global_batch=constraints.global_batch,
        precision=best.precision,  # type: ignore[arg-type]
        recompute=best.recompute,  # type: ignore[arg-type]
        framework="transformers",
        finetune=LORA,
    )
    alone = estimate_train(
        model, catalog.accelerator("rtx-4090"), 1, job, Parallelism(), catalog, assumptions, pricing="on-prem"
    )
    assert float(alone.columns.time_s) == pytest.approx(best.time_s, rel=1e-9)
    assert alone.memory_per_device["total"] == pytest.approx(best.memory_bytes["total"], rel=1e-9)


def test_a_card_the_catalog_lists_only_as_owned_is_planned_with_on_prem_pricing(
    catalog: Catalog, assumptions: Assumptions
) -> None:
    rented_only = TrainConstraints(**{**ON_A_4090.__dict__, "pricings": ("on-demand", "spot"), "methods": (LORA,)})
    with pytest.raises(InputError) as error:
        plan_train(preset("llama-3-8b"), catalog, assumptions, rented_only)
    assert "add --pricing on-prem" in (error.value.hint or "")
