"""One configuration end to end: the estimate's parts add up and respond the way physics says."""

from __future__ import annotations

from dataclasses import replace

import pytest

from computewise.catalog import Catalog
from computewise.errors import InputError, ParallelismError
from computewise.estimate import Assumptions, estimate_infer, estimate_train
from computewise.models import preset
from computewise.specs import InferJob, Parallelism, TrainJob

JOB = TrainJob(tokens=1e10, seq_len=4096, micro_batch=1, global_batch=64)


def _train(catalog: Catalog, assumptions: Assumptions, **changes: object) -> dict[str, object]:
    layout = changes.pop("layout", Parallelism(dp=8))
    job = replace(JOB, **changes)  # type: ignore[arg-type]
    model = preset("llama-3-8b")
    result = estimate_train(model, catalog.accelerator("h100"), 8, job, layout, catalog, assumptions)  # type: ignore[arg-type]
    return result.to_dict()


def test_memory_parts_add_up_and_time_follows_flops(catalog: Catalog, assumptions: Assumptions) -> None:
    d = _train(catalog, assumptions)
    memory = d["memory"]["per_device_bytes"]  # type: ignore[index]
    assert memory["total"] == pytest.approx(sum(v for k, v in memory.items() if k != "total"))
    assert memory["kv_cache"] == 0
    peak = catalog.accelerator("h100").peak_flops["bf16"]
    compute = d["time"]["compute_seconds_per_step"] * d["time"]["steps"]  # type: ignore[index]
    assert compute == pytest.approx(d["compute"]["flops"] / (8 * peak * assumptions.achievable_mfu_train), rel=1e-6)  # type: ignore[index]
    assert d["cost"]["usd"] == pytest.approx(d["cost"]["usd_per_hour"] * d["time"]["seconds"] / 3600)  # type: ignore[index]


def test_zero_and_recompute_shrink_memory(catalog: Catalog, assumptions: Assumptions) -> None:
    base = _train(catalog, assumptions)["memory"]["per_device_bytes"]  # type: ignore[index]
    zero3 = _train(catalog, assumptions, layout=Parallelism(dp=8, zero=3))["memory"]["per_device_bytes"]  # type: ignore[index]
    full = _train(catalog, assumptions, recompute="full")["memory"]["per_device_bytes"]  # type: ignore[index]
    assert zero3["weights"] == pytest.approx(base["weights"] / 8)
    assert zero3["optimizer_states"] == pytest.approx(base["optimizer_states"] / 8)
    assert full["activations"] < base["activations"] / 3  # the logits stay; every layer keeps only its input


def test_full_recompute_costs_an_extra_forward(catalog: Catalog, assumptions: Assumptions) -> None:
    none = _train(catalog, assumptions)["compute"]  # type: ignore[index]
    full = _train(catalog, assumptions, recompute="full")["compute"]  # type: ignore[index]
    assert full["flops"] == none["flops"]  # model FLOPs (MFU) do not count recomputation
    assert full["hardware_flops"] == pytest.approx(none["hardware_flops"] * 4 / 3, rel=1e-6)


def test_spot_is_cheaper_but_slower(catalog: Catalog, assumptions: Assumptions) -> None:
    model = preset("llama-3-8b")
    h100 = catalog.accelerator("h100")
    on_demand = estimate_train(model, h100, 8, JOB, Parallelism(dp=8), catalog, assumptions, cloud="aws")
    spot = estimate_train(model, h100, 8, JOB, Parallelism(dp=8), catalog, assumptions, pricing="spot", cloud="aws")
    assert spot.to_dict()["time"]["seconds"] > on_demand.to_dict()["time"]["seconds"]
    assert spot.to_dict()["cost"]["usd"] < on_demand.to_dict()["cost"]["usd"]


@pytest.mark.parametrize(
    ("gpus", "layout", "message"),
    [
        (8, Parallelism(dp=2, tp=2), "!= 8 GPUs"),
        (8, Parallelism(dp=1, tp=8, pp=1), None),
        (6, Parallelism(dp=1, tp=3, pp=2), "not divisible by tp=3"),
    ],
)
def test_impossible_layouts_are_explained(
    catalog: Catalog, assumptions: Assumptions, gpus: int, layout: Parallelism, message: str | None
) -> None:
    model = preset("llama-3-8b")
    job = replace(JOB, global_batch=layout.dp)
    if message is None:
        estimate_train(model, catalog.accelerator("h100"), gpus, job, layout, catalog, assumptions)
        return
    with pytest.raises(ParallelismError, match=message):
        estimate_train(model, catalog.accelerator("h100"), gpus, job, layout, catalog, assumptions)


def test_precision_the_chip_lacks_is_refused(catalog: Catalog, assumptions: Assumptions) -> None:
    with pytest.raises(InputError, match="no bf16"):
        estimate_train(
            preset("gpt2"),
            catalog.accelerator("v100"),
            1,
            replace(JOB, global_batch=1),
            Parallelism(),
            catalog,
            assumptions,
        )


def test_inference_kv_cache_and_decode_bandwidth(catalog: Catalog, assumptions: Assumptions) -> None:
    model = preset("llama-2-7b")
    job = InferJob(batch=8, context_len=1024, output_len=256)
    d = estimate_infer(model, catalog.accelerator("a100-80gb"), job, catalog, assumptions).to_dict()
    # 0.5 MiB per token (Llama 2 7B) * 8 sequences * 1280 tokens
    assert d["memory"]["per_device_bytes"]["kv_cache"] == 524_288 * 8 * 1280
    # A decode step cannot beat streaming the weights once from HBM.
    a100 = catalog.accelerator("a100-80gb")
    floor_s = model.params * 2 / a100.memory_bandwidth_bytes_per_s
    assert d["time"]["seconds_per_output_token"] > floor_s
    assert d["cost"]["usd_per_1000_requests"] > 0
