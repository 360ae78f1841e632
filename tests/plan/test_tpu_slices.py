"""TPU slices: the chip counts a slice has (issue 27: render every plan), the slice as the node the model
times, and unknown energy is not zero.

Cloud TPU rents v5e in slices of 1, 4 or 8 chips on one host (more across hosts) and v4/v5p from 4
chips up; a 2-chip v5e plan cannot be submitted to any engine. A slice's chips talk over ICI, slices over
the data-center network (Multislice). The sizes are catalog data (``accelerators.csv`` ``slice_sizes``),
so the planner needs no TPU knowledge of its own.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from computewise.catalog import Catalog, load_catalog
from computewise.errors import CatalogError
from computewise.estimate import Assumptions
from computewise.estimate.arrays import col
from computewise.estimate.kernels import KernelRates, sustained_share
from computewise.estimate.quote import Ask, PriceRequest, quote
from computewise.estimate.single import estimate_train
from computewise.models import preset
from computewise.plan import TrainConstraints, plan_train
from computewise.specs import Parallelism, TrainJob

CLI = [sys.executable, "-m", "computewise.cli.app"]

HEADER = (
    "slug,name,vendor,kind,aliases,memory_bytes,memory_bandwidth_bytes_per_s,fp32_flops,tf32_flops,"
    "bf16_flops,fp16_flops,fp8_flops,int8_flops,tdp_w,interconnect_bytes_per_s,form_factor,slice_sizes,source,retrieved"
)


def test_the_bundled_tpus_name_their_slices(catalog: Catalog) -> None:
    assert catalog.accelerator("tpu-v5e").slice_sizes[:3] == (1, 4, 8)
    assert 2 not in catalog.accelerator("tpu-v5e").slice_sizes
    assert catalog.accelerator("tpu-v5p").slice_sizes[0] == 4
    assert not catalog.accelerator("h100-sxm").slice_sizes  # any count


@pytest.mark.parametrize(("gpu", "absent"), [("tpu-v5e", {2}), ("tpu-v5p", {1, 2})])
def test_the_planner_considers_only_slice_sizes(
    gpu: str, absent: set[int], catalog: Catalog, assumptions: Assumptions
) -> None:
    constraints = TrainConstraints(tokens=1e9, seq_len=1024, global_batch=256, accelerators=(gpu,), max_gpus=8)
    plan = plan_train(preset("gpt2"), catalog, assumptions, constraints)
    counts = {option.gpus for option in plan.candidates}
    assert counts and not counts & absent
    assert counts <= set(catalog.accelerator(gpu).slice_sizes)


@pytest.mark.parametrize("cell", ["4|2", "4|x", "0|4"])
def test_a_malformed_slice_list_names_the_cell(cell: str, tmp_path: Path) -> None:
    row = f"x1,Example X1,Acme,tpu,,8e10,2e12,0,0,4e14,0,0,0,200,1e11,chip,{cell},test sheet,2025-01-02"
    path = tmp_path / "accelerators-mine.csv"
    path.write_text(f"{HEADER}\n{row}\n", encoding="utf-8")
    with pytest.raises(CatalogError, match="slice_sizes"):
        load_catalog([path])


def test_a_tpu_without_a_published_power_figure_has_unknown_energy_not_zero(
    catalog: Catalog, assumptions: Assumptions
) -> None:
    """Issue 27: "unknown is never zero" (TPU v5e and v5p publish no TDP; v4 does)."""
    constraints = TrainConstraints(tokens=1e9, seq_len=1024, global_batch=256, accelerators=("tpu-v5e",), max_gpus=8)
    unknown = plan_train(preset("gpt2"), catalog, assumptions, constraints).recommended
    assert unknown.energy_kwh is None and unknown.co2_kg is None
    document = unknown.to_dict()
    assert document["energy"]["kwh"] is None and document["co2"]["kg"] is None
    known = plan_train(preset("gpt2"), catalog, assumptions, replace(constraints, accelerators=("tpu-v4",)))
    assert known.recommended.energy_kwh is not None and known.recommended.energy_kwh > 0


# -------------------------------------------------------------------------- slices are the nodes the model times


def test_a_job_runs_on_the_fewest_slices_that_hold_it(catalog: Catalog) -> None:
    """Cloud TPU docs: v5p's largest single slice is 6,144 chips (16x16x24) and Multislice joins slices of one
    shape over the data-center network; a v5e pod is 256 chips."""
    v5p, v5e = catalog.accelerator("tpu-v5p"), catalog.accelerator("tpu-v5e")
    assert v5p.slice_sizes[-1] == 6144
    assert [v5p.slice_chips(n) for n in (4, 64, 6144, 8192, 12288, 16384)] == [4, 64, 6144, 4096, 6144, 4096]
    assert v5p.slice_chips(6) == 0 and v5p.slice_chips(2) == 0  # no slice of 2 chips, none divides 6
    assert [v5e.slice_chips(n) for n in (1, 2, 256, 512, 8192)] == [1, 1, 256, 256, 256]
    assert catalog.accelerator("h100-sxm").slice_chips(24) == 24  # no slices: the count itself


def test_a_slice_is_one_node_on_its_chips_links(catalog: Catalog) -> None:
    """The chips of a slice share ICI, and its network is theirs together (50 Gb/s a v5p chip); a larger job
    is several slices, said in a note, because collectives between them cross the data-center network."""
    v5p = catalog.accelerator("tpu-v5p")
    one = quote(catalog, Ask(v5p, 64, estimate=True), PriceRequest())
    assert (one.devices_per_node, one.instances) == (64, 64)  # rented chip by chip, timed as one slice
    assert one.node_network_bytes_per_s == pytest.approx(64 * 6.25e9)
    assert not any("Multislice" in note for note in one.notes)
    two = quote(catalog, Ask(v5p, 8192, estimate=True), PriceRequest())
    assert two.devices_per_node == 4096
    assert any("2 slices of 4096" in note and "Multislice" in note for note in two.notes)


def test_tensor_parallelism_on_a_slice_crosses_ici_not_ethernet(catalog: Catalog, assumptions: Assumptions) -> None:
    """Before slices were nodes, each chip was a node of its own on 25 GB/s Ethernet and TP 4 took 69 % of a
    Llama 3 8B step on 64 v5p chips. Now the all-reduces run on ICI: 4 per layer and micro-batch (2 forward,
    2 backward), each moving 2(n-1)/n of a micro-batch's activations at the link's rate and efficiency, after
    a call's base latency and its ring's 2(n-1) hops (Simple protocol: 5.2x the LL hop)."""
    v5p, model = catalog.accelerator("tpu-v5p"), preset("llama-3-8b")
    job = TrainJob(tokens=1e9, seq_len=4096, micro_batch=1, global_batch=256)
    train = estimate_train(model, v5p, 64, job, Parallelism(dp=16, tp=4), catalog, assumptions)
    step = train.step_breakdown_s
    message = 4096 * model.hidden_size * 2.0  # one micro-batch's bf16 activations
    rate = v5p.interconnect_bytes_per_s * assumptions.intra_node_link_efficiency
    latency = catalog.assumption("collective_base_latency_s") + 2 * 3 * 5.2 * catalog.assumption(
        "intra_node_link_latency_s"
    )
    calls = 4 * model.layers * (256 // 16)
    by_hand = calls * (latency + 2 * 3 / 4 * message / rate)
    assert step["tensor_parallel"] == pytest.approx(by_hand, rel=0.05)
    assert step["tensor_parallel"] < 0.15 * sum(step.values())


def test_a_chip_count_no_slices_make_up_is_refused(tmp_path: Path) -> None:
    done = subprocess.run(
        [*CLI, "estimate", "train", "--model", "llama-3-8b", "--gpu", "tpu-v5p", "--gpus", "6", "--zero", "3"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "6 chips are neither one slice nor equal slices" in done.stderr
    assert "--gpus 4 or 8" in done.stderr


def test_the_planner_splits_over_slices_only_past_the_largest(catalog: Catalog, assumptions: Assumptions) -> None:
    """One slice up to a pod (v5e: 256 chips), then whole pods joined by the data-center network; chips are
    rented one by one, so an option's instances are its chips and its price theirs."""
    constraints = TrainConstraints(
        tokens=1e10, seq_len=2048, global_batch=1024, accelerators=("tpu-v5e",), max_gpus=1024, pricings=("on-demand",)
    )
    plan = plan_train(preset("llama-2-7b"), catalog, assumptions, constraints)
    counts = {option.gpus for option in plan.candidates}
    assert {512, 1024} & counts and 2 not in counts
    for option in plan.candidates:
        assert option.instances == option.gpus
        assert option.usd_per_h == pytest.approx(option.gpus * 1.2)


def test_a_fitted_profile_sustains_its_own_share(catalog: Catalog, assumptions: Assumptions) -> None:
    """A TPU's profile was fitted on whole multi-chip steps, so the GPU's sustained share (clocks at the power
    limit, the slowest of 8 GPUs) is not applied on top of it; a GPU profile still gets it."""
    v5e, h100 = catalog.kernel_profile("tpu-v5e"), catalog.kernel_profile("h100-sxm")
    assert v5e is not None and v5e.sustained_share == 1.0
    assert sustained_share(v5e, assumptions) == 1.0
    assert sustained_share(h100, assumptions) == pytest.approx(
        assumptions.sustained_matmul_share * assumptions.slowest_device_share
    )
    peak = col(197e12)
    several = KernelRates.of(peak, col(819e9), assumptions, col(v5e.matmul_share), None, col(256.0), None, col(1.0))
    assert float(several.gemm_flops[()]) == pytest.approx(197e12 * v5e.matmul_share)


def test_estimate_comm_times_a_slice_on_ici() -> None:
    """nccl-tests' view of 64 v5p chips: one node of 64 on ICI (600 GB/s a chip), not 64 nodes on Ethernet."""
    done = subprocess.run(
        [*CLI, "estimate", "comm", "--gpu", "tpu-v5p", "--gpus", "64", "--op", "all-reduce", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    document = json.loads(done.stdout)
    assert (document["nodes"], document["instance"]["devices_per_node"]) == (1, 64)
    assert document["peak_busbw_bytes_per_s"] == pytest.approx(600e9 * 0.8)


@pytest.mark.parametrize(("gpu", "said"), [("tpu-v5e", True), ("h100", False)])
def test_a_plan_on_a_tpu_says_what_code_runs_there(gpu: str, said: bool) -> None:
    """MaxText's runs check the TPU figures; CUDA code cannot run on a TPU, and the plan says so."""
    done = subprocess.run(
        [*CLI, "plan", "train", "--model", "gpt2", "--gpu", gpu, "--max-gpus", "8", "--tokens", "1B", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    notes = " ".join(json.loads(done.stdout)["notes"])
    assert ("XLA" in notes and "CUDA-only code cannot run there" in notes) == said


def _seconds_per_token(chips: int) -> float:
    flags = ["--model", "gpt2-large", "--gpu", "tpu-v5e", "--gpus", str(chips), "--batch-size", "64", "--json"]
    done = subprocess.run(
        [*CLI, "estimate", "infer", *flags],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return float(json.loads(done.stdout)["time"]["seconds_per_output_token"])


def test_inference_split_over_slices_crosses_the_data_center_network(catalog: Catalog) -> None:
    """Two v5e chips are two one-chip slices (there is no 2-chip v5e slice): each decode step's two all-reduces
    per layer cross the data-center network, 3.125 GB/s a chip at the Ethernet fabric's efficiency, where four
    chips of one slice stay on ICI. The step takes at least that exchange, so two chips decode slower than four."""
    model = preset("gpt2-large")
    moved = 2 * model.layers * 2 * (2 - 1) / 2 * 64 * model.hidden_size * 2.0  # bytes per rank per decode step
    rate = 3.125e9 * catalog.fabric("ethernet").network_efficiency
    two, four = _seconds_per_token(2), _seconds_per_token(4)
    assert two >= moved / rate
    assert two > 1.5 * four


def test_plan_infer_serves_a_model_too_big_for_one_chip_over_a_slice(
    catalog: Catalog, assumptions: Assumptions
) -> None:
    """Llama 3 8B's 16 GB of bf16 weights do not fit a 16 GiB v5e chip; a replica tensor-parallel over a v5e-4
    or v5e-8 slice (its chips on ICI) holds them. Each v5e offering is one chip, so before a replica could only
    span one and no TPU served the model. No replica spans 2 chips: v5e has no 2-chip slice."""
    from computewise.plan import InferConstraints, plan_infer

    traffic = InferConstraints(requests_per_s=20, input_len=512, output_len=128, accelerators=("tpu-v5e",))
    plan = plan_infer(preset("llama-3-8b"), catalog, assumptions, traffic)
    sizes = {option.gpus_per_replica for option in plan.candidates}
    assert sizes and sizes <= {4, 8}, sizes
    best = plan.recommended
    assert best.accelerator == "tpu-v5e" and best.gpus_per_replica in (4, 8)
    assert best.memory_bytes["total"] <= catalog.accelerator("tpu-v5e").memory_bytes
