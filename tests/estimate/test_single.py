"""One configuration end to end: the estimate's parts add up and respond the way physics says."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from computewise.catalog import Catalog
from computewise.errors import InputError, ParallelismError
from computewise.estimate import Assumptions, estimate_infer, estimate_train
from computewise.models import preset
from computewise.specs import InferJob, Parallelism, TrainJob

JOB = TrainJob(tokens=1e10, seq_len=4096, micro_batch=1, global_batch=64)
# Llama 3 8B fits 8 H100s only sharded (47 GiB a device; 165 GiB unsharded): only what fits is timed.
FITS = Parallelism(dp=8, zero=3)


def _train(catalog: Catalog, assumptions: Assumptions, **changes: object) -> dict[str, object]:
    layout = changes.pop("layout", Parallelism(dp=8))
    utilization = changes.pop("utilization", None)
    job = replace(JOB, **changes)  # type: ignore[arg-type]
    model = preset("llama-3-8b")
    result = estimate_train(
        model,
        catalog.accelerator("h100"),
        8,
        job,
        layout,  # type: ignore[arg-type]
        catalog,
        assumptions,
        utilization=utilization,  # type: ignore[arg-type]
    )
    return result.to_dict()


def test_memory_parts_add_up_and_time_follows_flops(catalog: Catalog, assumptions: Assumptions) -> None:
    d = _train(catalog, assumptions, layout=FITS)
    memory = d["memory"]["per_device_bytes"]  # type: ignore[index]
    # The parts need not coexist (tests/estimate/test_memory.py): the peak is at most their sum.
    assert memory["total"] == pytest.approx(memory["allocated_peak"] + memory["overhead"])
    parts = ("weights", "gradients", "optimizer_states", "activations", "kv_cache")
    assert memory["allocated_peak"] <= sum(memory[k] for k in parts)
    assert memory["kv_cache"] == 0
    peak = catalog.accelerator("h100").peak_flops["bf16"]
    given = _train(catalog, assumptions, layout=FITS, utilization=0.5)
    compute = given["time"]["compute_seconds_per_step"] * given["time"]["steps"]  # type: ignore[index]
    assert compute == pytest.approx(given["compute"]["flops"] / (8 * peak * 0.5), rel=1e-6)  # type: ignore[index]
    # The kernel model: matmuls at the H100's measured burst share, sustained over 8 GPUs, plus HBM traffic.
    profile = catalog.kernel_profile("h100-sxm")
    assert profile is not None
    fraction = profile.matmul_share * assumptions.sustained_matmul_share * assumptions.slowest_device_share
    compute = d["time"]["compute_seconds_per_step"] * d["time"]["steps"]  # type: ignore[index]
    matmul_only = d["compute"]["flops"] / (8 * peak * fraction)  # type: ignore[index]
    assert matmul_only < compute < 1.5 * matmul_only
    assert d["compute"]["compute_fraction_of_peak"] < fraction  # type: ignore[index]
    breakdown = d["time"]["breakdown_seconds_per_step"]  # type: ignore[index]
    assert sum(breakdown.values()) == pytest.approx(d["time"]["step_seconds"])  # type: ignore[index]
    assert d["cost"]["usd"] == pytest.approx(d["cost"]["usd_per_hour"] * d["time"]["seconds"] / 3600)  # type: ignore[index]


def test_zero_and_recompute_shrink_memory(catalog: Catalog, assumptions: Assumptions) -> None:
    base = _train(catalog, assumptions)["memory"]["per_device_bytes"]  # type: ignore[index]
    zero3 = _train(catalog, assumptions, layout=Parallelism(dp=8, zero=3))["memory"]["per_device_bytes"]  # type: ignore[index]
    full = _train(catalog, assumptions, recompute="full")["memory"]["per_device_bytes"]  # type: ignore[index]
    # fp32 weights sharded 8 ways; autocast's bf16 copies only for the layer FSDP gathered and the one it
    # prefetched (Llama 3 8B: 32 layers; its untied input embedding is never cast).
    model = preset("llama-3-8b")
    embedding = model.vocab_size * model.hidden_size
    gathered = 2 * (model.params - embedding) / 32 * 2
    assert zero3["weights"] == pytest.approx(model.params * 4 / 8 + gathered)
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
    on_demand = estimate_train(model, h100, 8, JOB, FITS, catalog, assumptions, cloud="aws")
    spot = estimate_train(model, h100, 8, JOB, FITS, catalog, assumptions, pricing="spot", cloud="aws")
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


# -- which rental: the cheapest that can be timed; memory whatever the network ------------------------

_ACCELERATOR_CSV = (
    "slug,name,vendor,kind,aliases,memory_bytes,memory_bandwidth_bytes_per_s,fp32_flops,tf32_flops,bf16_flops,"
    "fp16_flops,fp8_flops,int8_flops,tdp_w,interconnect_bytes_per_s,form_factor,source,retrieved\n"
    "x1,Example X1,Acme,gpu,xone,8e10,2e12,5e13,0,4e14,4e14,0,0,500,1e11,SXM,test sheet,2025-01-02\n"
)
_OFFERING_CSV = (
    "cloud,instance_type,accelerator,accelerator_count,vcpus,ram_bytes,network_bytes_per_s,region,"
    "on_demand_usd_per_h,spot_usd_per_h,reserved_1y_usd_per_h,reserved_3y_usd_per_h,source,retrieved\n"
    "mycloud,box.8x,x1,8,64,5e11,0,home-1,20,8,15,10,test price list,2025-01-02\n"
)


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COMPUTEWISE_CATALOG_DIR": str(tmp_path / "no-user-catalog")}
    return subprocess.run(
        [sys.executable, "-m", "computewise.cli.app", *args], capture_output=True, text=True, timeout=120, env=env
    )


def test_cheapest_offering_without_network_is_skipped_and_named(catalog: Catalog, assumptions: Assumptions) -> None:
    """16 H100s span two instances: Lambda's is cheapest but publishes no network bandwidth."""
    lambda_8x = next(o for o in catalog.offerings if o.instance_type == "gpu_8x_h100_sxm5")
    assert lambda_8x.network_bytes_per_s == 0  # the premise: the catalog's cheapest 8x H100 has no network figure
    job = replace(JOB, global_batch=64)
    d = estimate_train(
        preset("llama-3-8b"), catalog.accelerator("h100"), 16, job, Parallelism(dp=16, zero=3), catalog, assumptions
    ).to_dict()
    assert d["time"]["seconds"] > 0 and d["cost"]["usd"] > 0
    assert "gpu_8x_h100_sxm5" not in d["cost"]["hardware"]
    skipped = [n for n in d["notes"] if "lambda gpu_8x_h100_sxm5 is cheaper" in n]
    assert skipped and "no network bandwidth, so 2 instances cannot be timed" in skipped[0]
    priced = [
        2 * hourly
        for o in catalog.offerings_for("h100-sxm")
        if o.network_bytes_per_s > 0 and (hourly := o.usd_per_h("on-demand")) is not None
    ]
    assert d["cost"]["usd_per_hour"] == pytest.approx(min(priced))
    one_node = estimate_train(preset("llama-3-8b"), catalog.accelerator("h100"), 8, job, FITS, catalog, assumptions)
    assert one_node.quote.offering == lambda_8x  # one instance needs no network: the cheapest stays
    assert not any("cannot be timed" in n for n in one_node.notes)


def test_the_issue_command_gives_memory_time_and_the_skipped_offering(tmp_path: Path) -> None:
    result = _cli(
        tmp_path, "estimate", "train", "--model", "llama-3-8b", "--gpu", "h100", "--gpus", "16", "--zero", "3",
        "--tokens", "10B", "--json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    d = json.loads(result.stdout)
    assert d["memory"]["per_device_bytes"]["total"] > 0
    assert d["time"]["seconds"] > 0
    assert any("lambda gpu_8x_h100_sxm5 is cheaper but publishes no network bandwidth" in n for n in d["notes"])


def test_no_network_anywhere_still_gives_memory_and_says_why(tmp_path: Path) -> None:
    directory = tmp_path / "catalog"
    directory.mkdir()
    (directory / "accelerators-x.csv").write_text(_ACCELERATOR_CSV)
    (directory / "offerings-x.csv").write_text(_OFFERING_CSV)
    common = ("estimate", "train", "--model", "gpt2", "--gpu", "x1", "--gpus", "16", "--tokens", "1B")
    for extra in ((), ("--instance", "box.8x")):  # the cheapest, or the instance asked for: memory either way
        result = _cli(tmp_path, *common, *extra, "--catalog", str(directory), "--json")
        assert result.returncode == 0, result.stderr
        d = json.loads(result.stdout)
        assert d["memory"]["fits"] and d["memory"]["per_device_bytes"]["total"] > 0
        assert d["compute"]["flops"] > 0
        assert d["time"]["seconds"] is None and d["cost"]["usd"] is None and d["energy"]["kwh"] is None
        assert "no network bandwidth for mycloud box.8x, so 2 instances cannot be timed" in d["time"]["unavailable"]
        note = next(n for n in d["notes"] if n.startswith("memory and FLOPs only"))
        assert "To fix: add network_bytes_per_s" in note
    text = _cli(tmp_path, *common, "--catalog", str(directory))
    assert text.returncode == 0, text.stderr
    assert "not available" in text.stdout and "fits" in text.stdout
    one = _cli(tmp_path, *common[:-4], "--gpus", "8", "--tokens", "1B", "--catalog", str(directory), "--json")
    assert one.returncode == 0 and json.loads(one.stdout)["time"]["seconds"] > 0  # one instance: no network needed


# -- what does not fit is neither timed nor priced ----------------------------------------------------


def test_an_estimate_that_does_not_fit_says_so_first_and_prices_nothing(
    tmp_path: Path, json_schema: Callable[[object, str], None]
) -> None:
    """A 10M-token sequence printed a time and a price under "does not fit": nothing that cannot run is priced."""
    args = ("estimate", "train", "--model", "gpt2", "--gpu", "h100", "--seq-len", "10000000")
    document = _cli(tmp_path, *args, "--json")
    assert document.returncode == 0, document.stderr
    d = json.loads(document.stdout)
    json_schema(d, "estimate-train")
    assert d["memory"]["fits"] is False
    assert d["time"]["seconds"] is None and d["time"]["unavailable"].startswith("does not fit: 8.7 TiB > ")
    assert (d["cost"]["usd"], d["energy"]["kwh"], d["co2"]["kg"], d["compute"]["mfu"]) == (None, None, None, None)
    assert d["notes"][0].startswith("memory and FLOPs only, no time, cost or energy: does not fit")
    assert "To fix: more devices with --zero 3" in d["notes"][0]
    table = _cli(tmp_path, *args)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    header_end = next(i for i, line in enumerate(lines) if line.endswith("pytorch layout"))
    assert lines[header_end + 1].startswith("does not fit: 8.7 TiB > 79.6 GiB per device"), table.stdout
    text = " ".join(table.stdout.split())
    assert "time, cost, energy, CO2 not shown: does not fit" in text
    assert "kWh" not in text and "$" not in text.split("·", 1)[0]  # nothing priced before the notes


def test_an_inference_that_does_not_fit_prices_nothing(catalog: Catalog, assumptions: Assumptions) -> None:
    job = InferJob(batch=64, context_len=32768, output_len=256, precision="fp16")
    d = estimate_infer(preset("llama-2-7b"), catalog.accelerator("t4"), job, catalog, assumptions).to_dict()
    assert d["memory"]["fits"] is False
    assert d["time"]["seconds"] is None and d["time"]["unavailable"].startswith("does not fit: ")
    assert (d["cost"]["usd"], d["cost"]["usd_per_1000_requests"], d["energy"]["kwh"]) == (None, None, None)
    assert d["cost"]["usd_per_hour"] > 0  # the rental price is still a fact; nothing is charged against it


# -- unknown is never zero -------------------------------------------------------------------------------

_NO_TDP_CSV = (
    "slug,name,vendor,kind,aliases,memory_bytes,memory_bandwidth_bytes_per_s,fp32_flops,tf32_flops,bf16_flops,"
    "fp16_flops,fp8_flops,int8_flops,tdp_w,interconnect_bytes_per_s,form_factor,source,retrieved\n"
    "box-cpu,Box CPU (measured),Acme,cpu,this-box,8e9,1e10,1e11,0,0,0,0,0,0,0,this machine,test sheet,2025-01-02\n"
)


def test_a_device_without_a_tdp_has_no_energy_rather_than_zero(
    tmp_path: Path, json_schema: Callable[[object, str], None]
) -> None:
    """A CPU measured by bench (``--gpu this-cpu``) has no TDP: its energy read "0 kWh, CO2 0 kg"."""
    directory = tmp_path / "catalog"
    directory.mkdir()
    (directory / "accelerators-box.csv").write_text(_NO_TDP_CSV)
    args = ("estimate", "train", "--model", "gpt2", "--gpu", "this-box", "--precision", "fp32", "--seq-len", "128")
    args += ("--tokens", "1M", "--catalog", str(directory))
    document = _cli(tmp_path, *args, "--json")
    assert document.returncode == 0, document.stderr
    d = json.loads(document.stdout)
    json_schema(d, "estimate-train")
    assert d["time"]["seconds"] > 0  # it is timed; only what needs the power draw is unknown
    assert d["energy"]["kwh"] is None and d["co2"]["kg"] is None
    assert any(
        n.startswith("energy and CO2 not available: Box CPU (measured) has no published TDP") and "tdp_w" in n
        for n in d["notes"]
    )
    table = _cli(tmp_path, *args)
    assert table.returncode == 0, table.stderr
    text = " ".join(table.stdout.split())
    assert "energy, CO2 not available see the notes" in text
    assert "kWh" not in text and " kg " not in text


# -- image and encoder models: inputs per second, latency per batch -----------------------------------------


def test_image_models_are_timed_per_batch_of_images_not_per_token(
    tmp_path: Path, json_schema: Callable[[object, str], None]
) -> None:
    """ResNet-50 and ViT-B/16 printed a context of 1024, 256 output tokens and a first-token latency."""
    for name in ("resnet-50", "vit-b-16"):
        args = ("estimate", "infer", "--model", name, "--gpu", "t4", "--batch-size", "64")
        document = _cli(tmp_path, *args, "--json")
        assert document.returncode == 0, document.stderr
        d = json.loads(document.stdout)
        json_schema(d, "estimate-infer")
        assert d["job"]["input"] == "images" and d["job"]["image_size"] == 224
        assert "context_len" not in d["job"] and "output_len" not in d["job"]
        assert set(d["time"]) == {"seconds", "requests_per_second"}
        assert d["time"]["requests_per_second"] == pytest.approx(64 / d["time"]["seconds"])
        text = " ".join(_cli(tmp_path, *args).stdout.split())
        assert "batch 64, 224×224 images" in text and "per batch of 64 images" in text and " images/s" in text
        assert not any(token in text for token in ("context", "first token", "output tokens", "requests"))
    # torchvision: 4.09 G multiply-adds per 224x224 image, each two FLOPs; a CNN has no tokens to multiply them by.
    resnet = json.loads(
        _cli(tmp_path, "estimate", "infer", "-m", "resnet-50", "-g", "t4", "--batch-size", "64", "--json").stdout
    )
    assert resnet["compute"]["flops"] == pytest.approx(64 * 2 * 4.09e9, rel=0.01)


def test_an_encoder_reads_sequences_of_its_input_length(tmp_path: Path) -> None:
    result = _cli(
        tmp_path,
        "estimate",
        "infer",
        "-m",
        "bert-base",
        "-g",
        "t4",
        "--batch-size",
        "64",
        "--input-len",
        "128",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    d = json.loads(result.stdout)
    assert (d["job"]["input"], d["job"]["seq_len"]) == ("sequences", 128)
    assert d["memory"]["per_device_bytes"]["kv_cache"] == 0 and "output_tokens_per_second" not in d["time"]
    default = json.loads(_cli(tmp_path, "estimate", "infer", "-m", "bert-base", "-g", "t4", "--json").stdout)
    assert default["job"]["seq_len"] == 512  # BERT's max_position_embeddings


@pytest.mark.parametrize(
    ("model", "flags", "named"),
    [
        ("resnet-50", ("--context-len", "1024"), "--input-len/--context-len does not apply"),
        ("vit-b-16", ("--output-len", "16", "--kv-precision", "fp8"), "--output-len and --kv-precision do not apply"),
        ("bert-base", ("--output-len", "16"), "--output-len does not apply"),
    ],
)
def test_token_flags_are_refused_for_models_that_generate_nothing(
    tmp_path: Path, model: str, flags: tuple[str, ...], named: str
) -> None:
    result = _cli(tmp_path, "estimate", "infer", "--model", model, "--gpu", "t4", *flags)
    assert result.returncode == 2 and not result.stdout
    error = " ".join(result.stderr.split())
    assert error.startswith(f"error: {model} is a") and "generates no tokens" in error and named in error, error
    assert "To fix: leave out" in error and "Traceback" not in error


def test_the_library_refuses_an_output_for_a_model_that_generates_nothing(
    catalog: Catalog, assumptions: Assumptions
) -> None:
    job = InferJob(batch=8, context_len=1, output_len=256, precision="fp16")
    with pytest.raises(InputError, match="generates no tokens, so output_len must be 0"):
        estimate_infer(preset("resnet-50"), catalog.accelerator("t4"), job, catalog, assumptions)
