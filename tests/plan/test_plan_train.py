"""The planner against brute force, its constraints, and its explanations when nothing fits."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest
from pareto_check import assert_is_the_pareto_front

from computewise.catalog import Catalog
from computewise.errors import InfeasiblePlanError, InputError
from computewise.estimate import Assumptions, estimate_train
from computewise.models import preset
from computewise.plan import TRAIN_PRECISIONS, TrainConstraints, plan_train
from computewise.specs import RECOMPUTES, Framework, ModelSpec, Parallelism, TrainJob

SMALL = TrainConstraints(tokens=2e9, seq_len=1024, global_batch=64, accelerators=("a10g", "l4"), max_gpus=8)


def _layout_rules(
    layers: int, gpus: int, tp: int, pp: int, v: int, global_batch: int, micro: int, zero: int, cp: int = 1
) -> Parallelism | None:
    """The search space ``plan train`` documents, written out on scalars: None when it excludes the layout.
    ``gpus`` are those of one context-parallel rank; ZeRO shards over dp x cp."""
    if gpus % (tp * pp) or global_batch % (gpus // (tp * pp) * micro):
        return None
    dp = gpus // (tp * pp)
    slots = layers if layers % pp == 0 else layers + 2  # embedding and head take a layer's slot each
    if slots % pp or (dp * cp == 1 and zero) or (zero >= 3 and pp > 1):  # ZeRO-3 gathers every layer: no pipeline
        return None
    microbatches = global_batch // (dp * micro)
    if v > 1 and (pp == 1 or slots % (pp * v) or microbatches % pp):
        return None
    return Parallelism(dp=dp, tp=tp, pp=pp, zero=zero, sequence_parallel=tp > 1, virtual_stages=v)


def test_recommendation_is_the_brute_force_minimum_of_its_instance(catalog: Catalog, assumptions: Assumptions) -> None:
    """Every layout of the recommended instance, priced one by one through `estimate`, costs no less."""
    model = preset("gpt2-medium")
    plan = plan_train(model, catalog, assumptions, SMALL)
    best = plan.recommended
    accelerator = catalog.accelerator(best.accelerator)
    per_node = best.gpus // best.instances
    costs = []
    for tp, pp, v, zero, precision, micro, recompute in itertools.product(
        (1, 2, 4, 8),
        (1, 2, 4, 8),
        (1, 2, 4),
        (0, 1, 2, 3),
        TRAIN_PRECISIONS,
        (1, 2, 4, 8, 16, 32),
        RECOMPUTES,
    ):
        layout = _layout_rules(model.total_layers, best.gpus, tp, pp, v, SMALL.global_batch, micro, zero)
        if layout is None or per_node % tp:  # tensor parallelism stays inside one instance
            continue
        framework: Framework = "megatron" if tp > 1 or pp > 1 else "pytorch"
        job = TrainJob(
            SMALL.tokens, SMALL.seq_len, micro, SMALL.global_batch, precision, "adamw", recompute, framework=framework
        )
        try:
            estimate = estimate_train(
                model,
                accelerator,
                best.gpus,
                job,
                layout,
                catalog,
                assumptions,
                pricing=best.pricing,
                cloud=best.cloud,
                region=best.region,
                instance_type=best.instance_type,
            )
        except InputError:  # an impossible layout or a precision the chip lacks: not a candidate
            continue
        if estimate.fits:
            costs.append(estimate.to_dict()["cost"]["usd"])
    assert costs
    assert min(costs) == pytest.approx(best.cost_usd, rel=1e-9)
    assert plan.considered >= len(costs)


def _brute_force_times(
    model: ModelSpec, catalog: Catalog, assumptions: Assumptions, c: TrainConstraints
) -> dict[tuple[object, ...], float]:
    """Least time of every (instance type, instances, spot) over every layout, nothing pruned.

    The layouts come from a plain product of the documented degrees (``_layout_rules``, cp and ZeRO
    written out here), timed with ``evaluate_train`` in one call per machine size.
    """
    from computewise.estimate.memory import bytes_per_value, optimizer_bytes_per_param
    from computewise.estimate.train import TrainLayout, evaluate_train
    from computewise.plan.train import (
        PLANNED_RECOMPUTES,
        _hardware,
        _train_hardware,
        fp16_stands_in_for_bf16,
        instance_counts,
    )
    from computewise.specs import FRAMEWORKS, PRECISIONS, RECOMPUTES

    cps = [
        1,
        *[cp for cp in (2, 4, 8, 16) if c.seq_len >= 8192 and c.seq_len // cp >= 4096],
    ]  # chunks of 4K tokens or more
    best: dict[tuple[object, ...], float] = {}
    for h in _hardware(catalog, c, assumptions):
        for n in instance_counts(h.devices_per_node, c.max_gpus):
            gpus = n * h.devices_per_node
            if (n > 1 and h.node_network_bytes_per_s <= 0) or (
                gpus > 1 and h.accelerator.interconnect_bytes_per_s <= 0
            ):
                break  # links of unknown speed cannot be timed
            rows: list[tuple[float, ...]] = []
            for tp, pp, cp, v, zero, precision, micro, recompute in itertools.product(
                (1, 2, 4, 8),
                (1, 2, 4, 8, 16),
                cps,
                (1, 2, 4, 8),
                (0, 1, 2, 3),
                c.precisions,
                (1, 2, 4, 8, 16, 32),
                PLANNED_RECOMPUTES,
            ):
                if gpus % cp or h.devices_per_node % tp or model.heads % tp:
                    continue
                layout = _layout_rules(model.total_layers, gpus // cp, tp, pp, v, c.global_batch, micro, zero, cp)
                if layout is None or h.accelerator.peak_flops.get(precision, 0.0) <= 0:
                    continue
                if precision == "fp16" and fp16_stands_in_for_bf16(h.accelerator, c.precisions):
                    continue
                rows.append(
                    (tp, pp, layout.dp, zero, micro, RECOMPUTES.index(recompute), bytes_per_value(precision),
                     optimizer_bytes_per_param(c.optimizer, precision), cp, v,
                     FRAMEWORKS.index("megatron" if tp * pp * cp > 1 else "pytorch"), PRECISIONS.index(precision))
                )  # fmt: skip
            if not rows:
                continue
            a = np.array(rows, dtype=np.float64).T
            ones = np.ones(a.shape[1])
            layouts = TrainLayout(
                tp=a[0], pp=a[1], dp=a[2], zero=a[3], micro_batch=a[4], global_batch=ones * c.global_batch,
                seq_len=ones * c.seq_len, recompute=a[5], sequence_parallel=(a[0] > 1) * 1.0, attention=ones,
                weight_bytes=a[6], optimizer_bytes=a[7], cp=a[8], ep=ones, virtual_stages=a[9], framework=a[10],
                execution=ones * 0.0, precision=a[11], loss=ones * 0.0, grad_reduce=ones * 0.0, zero_group=ones * 0.0,
                tp_overlap=ones * 0.0,
            )  # fmt: skip
            hw = _train_hardware([h], np.zeros(len(ones), dtype=np.int64), a[11].astype(np.int64), assumptions)
            columns = evaluate_train(model, c.tokens, layouts, hw, assumptions)
            fits = columns.memory.total <= h.accelerator.memory_bytes
            if not fits.any():
                continue
            for price in h.prices:
                off_spot_s = columns.steps * columns.step_s * columns.failure_slowdown
                time_s = columns.time_s if price.pricing == "spot" else off_spot_s
                key = (price.cloud, price.instance_type, price.region, price.pricing, n)
                best[key] = float(time_s[fits].min())
    return best


@pytest.mark.parametrize(
    ("name", "constraints"),
    [
        ("gpt2-medium", SMALL),
        (
            "llama-3-8b",
            TrainConstraints(tokens=1e11, seq_len=16384, global_batch=64, accelerators=("a100-40gb",), max_gpus=32),
        ),
    ],
)
def test_pruned_planner_matches_brute_force_on_every_machine(
    catalog: Catalog, assumptions: Assumptions, name: str, constraints: TrainConstraints
) -> None:
    """Pairing (tp in the node, memory, duplicate precisions) never loses a machine's fastest layout."""
    model = preset(name)
    plan = plan_train(model, catalog, assumptions, constraints)
    brute = _brute_force_times(model, catalog, assumptions, constraints)
    planned = {(o.cloud, o.instance_type, o.region, o.pricing, o.instances): o.time_s for o in plan.candidates}
    assert set(planned) == set(brute)
    for key, time_s in planned.items():
        assert time_s == pytest.approx(brute[key], rel=1e-12), key
    if constraints.seq_len >= 16384:  # the case is tight enough that pruning had choices to make
        assert {o.recompute for o in plan.candidates} >= {"none", "full"}
        assert any(o.virtual_stages > 1 for o in plan.candidates)


def test_pareto_frontier_is_the_brute_force_non_dominated_set_and_holds_the_recommendation(
    catalog: Catalog, assumptions: Assumptions
) -> None:
    plan = plan_train(preset("gpt2-medium"), catalog, assumptions, SMALL)
    assert len(plan.pareto) > 1
    assert_is_the_pareto_front(plan.candidates, plan.pareto, lambda o: o.time_s, lambda o: o.cost_usd)
    assert plan.recommended in plan.pareto  # the cheapest plan is on the frontier, at its slow end
    assert plan.recommended.cost_usd == min(o.cost_usd for o in plan.candidates) == plan.pareto[-1].cost_usd


def test_deadline_and_budget_filter_and_rank(catalog: Catalog, assumptions: Assumptions) -> None:
    model = preset("llama-3-8b")
    base = TrainConstraints(tokens=2e10, seq_len=4096, global_batch=256, max_gpus=128)
    unconstrained = plan_train(model, catalog, assumptions, base)
    deadline = unconstrained.recommended.time_s / 3
    plan = plan_train(model, catalog, assumptions, replace(base, deadline_s=deadline))
    assert all(o.time_s <= deadline for o in plan.candidates)
    assert plan.recommended.cost_usd >= unconstrained.recommended.cost_usd
    assert any(r.stage == "deadline" for r in plan.rejected)
    assert plan.considered >= 100_000


def test_memory_rejections_name_the_need(catalog: Catalog, assumptions: Assumptions) -> None:
    plan = plan_train(
        preset("llama-2-70b"),
        catalog,
        assumptions,
        TrainConstraints(tokens=1e10, seq_len=4096, global_batch=512, max_gpus=64),
    )
    t4 = [r for r in plan.rejected if r.accelerator == "t4" and r.stage == "memory"]
    assert t4 and "does not fit" in t4[0].reason and "> 15.0 GiB on Tesla T4" in t4[0].reason  # nvidia-smi: 15360 MiB


def test_impossible_deadline_says_which_constraint_and_how_to_relax(catalog: Catalog, assumptions: Assumptions) -> None:
    constraints = TrainConstraints(tokens=2e12, seq_len=4096, global_batch=1024, max_gpus=64, deadline_s=3600)
    with pytest.raises(InfeasiblePlanError, match="deadline removed the last candidates") as error:
        plan_train(preset("llama-3-8b"), catalog, assumptions, constraints)
    assert error.value.hint and "--deadline" in error.value.hint


def test_impossible_budget_names_the_cheapest(catalog: Catalog, assumptions: Assumptions) -> None:
    constraints = TrainConstraints(tokens=2e11, seq_len=4096, global_batch=1024, max_gpus=64, budget_usd=10)
    with pytest.raises(InfeasiblePlanError, match="budget removed the last candidates"):
        plan_train(preset("llama-3-8b"), catalog, assumptions, constraints)


def test_nothing_fits_is_an_error_with_a_fix(catalog: Catalog, assumptions: Assumptions) -> None:
    constraints = TrainConstraints(tokens=1e10, seq_len=4096, global_batch=8, accelerators=("t4",), max_gpus=8)
    with pytest.raises(InfeasiblePlanError, match="does not fit") as error:
        plan_train(preset("llama-2-70b"), catalog, assumptions, constraints)
    assert error.value.hint and "--max-gpus" in error.value.hint


def test_a_job_that_fits_nowhere_is_measured_against_the_largest_accelerator(
    catalog: Catalog, assumptions: Assumptions
) -> None:
    """The nearest miss speaks for the rest: at one GPU, 70B against the largest GPU sold singly, not the first
    40 GB card of the catalog (nor a CPU socket's host RAM)."""
    constraints = TrainConstraints(tokens=1e10, seq_len=4096, global_batch=8, max_gpus=1)
    with pytest.raises(InfeasiblePlanError) as error:
        plan_train(preset("llama-2-70b"), catalog, assumptions, constraints)
    singles = {
        o.accelerator
        for o in catalog.offerings
        if o.accelerator_count == 1 and catalog.accelerator(o.accelerator).kind == "gpu"
    }
    largest = max((catalog.accelerator(slug) for slug in singles), key=lambda a: a.memory_bytes)
    assert f"on {largest.name} even with the leanest layout" in error.value.message


def test_a_precision_no_accelerator_runs_is_named_as_the_reason(catalog: Catalog, assumptions: Assumptions) -> None:
    constraints = TrainConstraints(
        tokens=1e10, seq_len=4096, global_batch=256, accelerators=("a100-80gb",), precisions=("fp8",)
    )
    with pytest.raises(InfeasiblePlanError, match="no accelerator runs the precision asked: A100 SXM4 80GB runs none"):
        plan_train(preset("llama-2-7b"), catalog, assumptions, constraints)


def test_owned_servers_are_planned_at_their_amortised_hourly_cost(catalog: Catalog, assumptions: Assumptions) -> None:
    constraints = TrainConstraints(tokens=2e10, seq_len=4096, global_batch=256, pricings=("on-prem",), max_gpus=64)
    plan = plan_train(preset("llama-3-8b"), catalog, assumptions, constraints)
    best = plan.recommended
    assert best.pricing == "on-prem" and best.cloud == "on-prem"
    assert best.cost_usd == pytest.approx(best.usd_per_h * best.time_s / 3600)
    server = next(s for s in catalog.onprem if s.accelerator == best.accelerator)
    hourly = server.usd_per_h(
        catalog.assumption("onprem_power_usd_per_kwh"),
        catalog.assumption("onprem_pue"),
        catalog.assumption("onprem_utilization"),
    )
    assert best.usd_per_h == pytest.approx(best.instances * hourly)


FRONTIER = TrainConstraints(
    tokens=15.6e12,
    seq_len=8192,
    global_batch=2048,  # 16M tokens, Llama 3 405B's final batch
    accelerators=("h100-sxm",),
    max_gpus=16384,
    deadline_s=120 * 86400,
)


def test_frontier_plan_for_405b_reads_like_published_runs(catalog: Catalog, assumptions: Assumptions) -> None:
    """Llama 3 405B, 15.6T tokens on H100s within 120 days.

    Meta ran 16,384 H100s at TP 8, PP 16, CP 1, DP 128, interleaved, 16M-token batches (Dubey et al.
    2024, arXiv:2407.21783, section 3.3 and table 4); NVIDIA's recipe for the same model at 8K tokens
    runs TP 8, PP 8, CP 2, VP 8 (NVIDIA/dgxc-benchmarking, llama3.1). Both are Megatron-style 4D
    layouts: TP x CP inside the 8-GPU node, an interleaved pipeline across nodes, data parallel over it.
    """
    plan = plan_train(preset("llama-3.1-405b"), catalog, assumptions, FRONTIER)
    best = plan.recommended
    assert best.time_s <= 120 * 86400
    assert 8192 <= best.gpus <= 16384
    assert best.gpus == best.tp * best.pp * best.cp * best.dp
    assert best.framework == "megatron" and best.precision == "bf16"
    assert best.tp * best.cp >= 8  # each pipeline stage's tensor/context group fills at least a node
    assert best.pp >= 8 and best.virtual_stages > 1  # an interleaved pipeline across nodes
    assert FRONTIER.global_batch % (best.dp * best.micro_batch) == 0


def test_405b_fastest_plan_reads_like_a_published_recipe(catalog: Catalog, assumptions: Assumptions) -> None:
    """The fastest plan has the shape of the published Llama 3.1 405B layouts on all 16,384 GPUs, Meta's
    TP 8, PP 16 (Dubey et al. 2024) and NVIDIA's TP 8, PP 8, CP 2, VP 8 (NVIDIA/dgxc-benchmarking): a
    tensor x context group filling the node, an interleaved pipeline of 8 or 16 stages, well inside the
    deadline, at Llama 3's MFU (Table 4: 41 % at this scale). Which split of the node's 8 GPUs wins is
    the time model's call: TP 4 x CP 2 fits in 80 GB beside ZeRO-2 and moves less tensor-parallel
    traffic than TP 8."""
    fastest = plan_train(preset("llama-3.1-405b"), catalog, assumptions, replace(FRONTIER, objective="time"))
    best = fastest.recommended
    assert (best.gpus, best.tp * best.cp) == (16384, 8) and best.pp in (8, 16)
    assert best.cp <= 2 and best.virtual_stages >= 2 and best.framework == "megatron"
    assert best.time_s < 90 * 86400
    assert 0.35 < best.mfu < 0.55


def test_llama_3_layout_is_in_the_frontier_search(catalog: Catalog, assumptions: Assumptions) -> None:
    """16,384 GPUs at TP 8, PP 16 (126 layers + embedding + head = 128 slots), CP 1, DP 128 is enumerated,
    interleaved, and fits an H100 with ZeRO and recomputation to choose from."""
    from computewise.estimate.train import train_memory
    from computewise.plan.train import _layouts

    model = preset("llama-3.1-405b")
    layouts = _layouts(model, [16384], 8, FRONTIER)
    rows = layouts.rows
    llama3 = (rows.tp == 8) & (rows.pp == 16) & (rows.cp == 1) & (rows.dp == 128) & (rows.micro_batch == 1)
    assert set(rows.virtual_stages[llama3].tolist()) == {1.0, 2.0, 4.0, 8.0}
    assert set(rows.framework[llama3].tolist()) == {0.0}  # megatron
    fits = train_memory(model, rows, assumptions).total <= catalog.accelerator("h100-sxm").memory_bytes
    assert (llama3 & fits).any()
    assert set(rows.cp.tolist()) == {1.0, 2.0}  # 8K tokens: chunks of at least 4K


def test_shape_rules_for_pipeline_context_and_experts(catalog: Catalog, assumptions: Assumptions) -> None:
    from computewise.plan.train import _layouts

    short = TrainConstraints(tokens=1e10, seq_len=4096, global_batch=512)
    dense = _layouts(preset("llama-3-8b"), [64], 8, short).rows
    assert set(dense.cp.tolist()) == {1.0} and set(dense.ep.tolist()) == {1.0}  # no cp for short sequences
    assert set(dense.tp.tolist()) <= {1.0, 2.0, 4.0, 8.0}
    interleaved = dense.virtual_stages > 1
    assert np.all(dense.pp[interleaved] > 1)
    assert np.all((dense.global_batch / (dense.dp * dense.micro_batch))[interleaved] % dense.pp[interleaved] == 0)
    assert np.all(dense.gpus == 64)
    moe = _layouts(preset("mixtral-8x7b"), [64], 8, short).rows
    assert set(moe.ep.tolist()) == {1.0, 2.0, 4.0, 8.0}
    assert np.all((moe.dp * moe.cp) % moe.ep == 0)
    assert np.all(moe.framework[moe.ep > 1] == 0)  # expert parallelism is Megatron's


def test_a_batch_too_small_for_the_cluster_is_named(catalog: Catalog, assumptions: Assumptions) -> None:
    constraints = TrainConstraints(tokens=1e11, seq_len=4096, global_batch=4, accelerators=("h100-sxm",), max_gpus=4096)
    plan = plan_train(preset("llama-3-8b"), catalog, assumptions, constraints)
    batch = [r for r in plan.rejected if r.stage == "batch"]
    assert batch and "raise --global-batch" in batch[0].reason
    assert max(o.gpus for o in plan.candidates) < 4096


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "computewise.cli.app", *args], capture_output=True, text=True, timeout=120
    )


def test_cli_plans_the_405b_frontier_run_and_bounds_max_gpus() -> None:
    from computewise.limits import limit_for
    from computewise.plan.train import DEFAULT_MAX_GPUS

    frontier = _cli(
        "plan", "train", "--model", "llama-3.1-405b", "--tokens", "15.6T", "--gpu", "h100", "--deadline", "120d",
        "--seq-len", "8192", "--global-batch", "2048", "--max-gpus", "16384", "--json",
    )  # fmt: skip
    assert frontier.returncode == 0, frontier.stderr
    layout = json.loads(frontier.stdout)["recommended"]["layout"]
    assert {"dp", "tp", "pp", "cp", "ep", "virtual_stages", "zero"} <= set(layout)
    max_gpus_limit = limit_for("--max-gpus")
    assert max_gpus_limit is not None and max_gpus_limit.high == 1_000_000
    too_many = _cli("plan", "train", "--model", "gpt2", "--max-gpus", "1000001")
    assert too_many.returncode == 2 and "--max-gpus" in too_many.stderr and "1e6" in too_many.stderr
    assert f"[default: {DEFAULT_MAX_GPUS}]" in " ".join(_cli("plan", "train", "--help").stdout.split())


def test_every_planned_layout_is_one_estimate_accepts_and_energy_counts_the_server(
    catalog: Catalog, assumptions: Assumptions
) -> None:
    """The planner enumerates no layout ``estimate train`` refuses (ZeRO-3 under a pipeline), and an
    option's energy is the whole server's, as ``estimate`` and the on-premises rows count it."""
    from computewise.estimate.cost import server_w_per_device
    from computewise.plan.train import _layouts

    model = preset("llama-3-8b")
    rows = _layouts(model, [64], 8, replace(SMALL, max_gpus=64)).rows
    assert not np.any((rows.zero >= 3) & (rows.pp > 1))
    plan = plan_train(model, catalog, assumptions, SMALL)
    best = plan.recommended
    server_w = server_w_per_device(catalog.accelerator(best.accelerator), assumptions.server_host_power_fraction_of_tdp)
    # Watts per device at the meter: the server's full load times the average draw, times a PUE of 1-1.6.
    watts = best.energy_kwh * 1000 * 3600 / best.time_s / best.gpus / assumptions.gpu_power_fraction_of_tdp
    assert server_w <= watts <= server_w * 1.6


def test_tp_overlap_plans_what_estimate_train_times_with_it(catalog: Catalog, assumptions: Assumptions) -> None:
    """``plan train --tp-overlap``: every tensor-parallel layout is timed with its collectives behind the GEMMs,
    and the recommended one takes the step ``estimate train --tp-overlap`` gives the same layout on the same
    instance (one model, two callers); without the flag, that layout's TP collectives are exposed again."""

    model = preset("llama-3-70b")
    constraints = TrainConstraints(
        tokens=1e12, seq_len=4096, global_batch=256, max_gpus=64, accelerators=("h100-sxm",), tp_overlap=True
    )
    plan = plan_train(model, catalog, assumptions, constraints)
    assert all(o.tp_overlap == (o.tp > 1) for o in plan.candidates)
    best = next(o for o in plan.candidates if o.tp > 1)
    job = TrainJob(
        tokens=1e12,
        seq_len=4096,
        micro_batch=best.micro_batch,
        global_batch=256,
        recompute=best.recompute,
        precision=best.precision,
        framework=best.framework,
    )
    layout = Parallelism(
        dp=best.dp, tp=best.tp, pp=best.pp, cp=best.cp, ep=best.ep, zero=best.zero, sequence_parallel=True,
        virtual_stages=best.virtual_stages,
    )  # fmt: skip

    def step_s(overlap: bool) -> float:
        estimate = estimate_train(
            model, catalog.accelerator("h100-sxm"), best.gpus, job, replace(layout, tp_overlap=overlap), catalog,
            assumptions, best.pricing, best.cloud, best.region, best.instance_type,
        )  # fmt: skip
        return estimate.step_seconds

    assert best.step_s == pytest.approx(step_s(True), rel=1e-6)
    assert step_s(False) > best.step_s
