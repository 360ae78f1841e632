"""The terminal report shows the figures a user acts on, and only text, never markup, from the results."""

from __future__ import annotations

import re
from dataclasses import replace

from rich.console import Console

from computewise.catalog import Catalog
from computewise.estimate import Assumptions, estimate_train
from computewise.estimate.single import InferEstimate, TrainEstimate
from computewise.models import preset
from computewise.plan.infer import InferPlan
from computewise.plan.onprem import BreakEven
from computewise.plan.result import Plan
from computewise.report.terminal import print_break_even, print_estimate, print_plan
from computewise.specs import Parallelism, TrainJob
from computewise.units import format_bytes, format_duration, format_flops, format_usd


def _console(color: bool = False) -> Console:
    if color:
        return Console(record=True, width=120, force_terminal=True, color_system="standard")
    return Console(record=True, width=120, color_system=None)


def test_train_estimate_shows_memory_breakdown_and_summary(train_estimate: TrainEstimate) -> None:
    console = _console()
    print_estimate(train_estimate, console)
    text = console.export_text()
    assert "llama-3-8b (8.03B parameters) on 8 × h100-sxm, dp 8 · tp 1 · pp 1 · ZeRO-3" in text
    for part in ("weights", "gradients", "optimizer states", "activations", "overhead"):
        assert part in text
    assert "KV cache" not in text  # zero parts are left out
    memory = train_estimate.device_memory
    assert f"fits: {format_bytes(memory.total)} of {format_bytes(memory.capacity_bytes or 0)}" in text
    assert format_flops(train_estimate.flops) in text
    assert f"MFU {train_estimate.mfu:.0%}" in text
    assert format_duration(train_estimate.seconds or 0) in text
    assert f"steps of {format_duration(train_estimate.step_seconds)}" in text
    assert "tokens/s" in text
    assert (
        f"{format_usd(train_estimate.usd or 0)}  on-demand at {format_usd(train_estimate.usd_per_hour or 0)}/h" in text
    )
    assert "kWh" in text and "g/kWh" in text
    assert f"checkpoint {format_bytes(train_estimate.checkpoint_bytes)} every" in text
    assert "where a step goes" in text
    assert f"→ {train_estimate.advice}" in " ".join(text.split())  # Rich wraps it at a space


def test_memory_that_does_not_fit_is_red(unsharded_estimate: TrainEstimate) -> None:
    console = _console(color=True)
    print_estimate(unsharded_estimate, console)
    styled = console.export_text(styles=True, clear=False)
    line = next(line for line in styled.splitlines() if "does not fit" in line)
    assert "31m" in line  # ANSI red
    text = console.export_text()
    assert "not shown: does not fit" in text
    assert "where a step goes" not in text  # nothing is timed


def test_infer_estimate_shows_latency_throughput_and_price_per_request(infer_estimate: InferEstimate) -> None:
    console = _console()
    print_estimate(infer_estimate, console)
    text = console.export_text()
    assert "batch 8, context 2048, output 256" in text
    assert "KV cache" in text
    assert "gradients" not in text
    assert f"first token {format_duration(infer_estimate.time_to_first_token_seconds)}, " in text
    assert f"{format_duration(infer_estimate.seconds_per_output_token)} per output token" in text
    assert " requests/s" in text
    assert " output tokens/s" in text
    assert f"{format_usd(infer_estimate.usd_per_1000_requests or 0)} per 1000 requests" in text
    assert "where a step goes" not in text


def test_strings_from_the_result_are_not_markup(train_estimate: TrainEstimate) -> None:
    model = replace(train_estimate.model, name="[bold]org[/bold]/model")
    console = _console()
    print_estimate(replace(train_estimate, model=model, notes=("[red]not a style[/red]",)), console)
    text = console.export_text()
    assert "[bold]org[/bold]/model" in text
    assert "[red]not a style[/red]" in text


def test_plan_shows_recommendation_frontier_candidates_and_search_size(train_plan: Plan) -> None:
    console = _console()
    print_plan(replace(train_plan, top=10), console)
    text = console.export_text()
    assert "recommended" in text
    assert "8 × h100-sxm on aws p5.48xlarge us-east-1" in text
    assert "$1,747 spot at $39.30/h" in text
    assert format_duration(160_000.0) in text
    assert "cost-vs-time frontier" in text
    assert "top 10 of 15 feasible" in text
    assert "16 × aws p5.48xlarge us-east-1" in text  # 128 GPUs = 16 instances
    ranks = [line.split()[0] for line in text.splitlines() if line.strip()[:1].isdigit() and "×" in line]
    assert "10" in ranks and "11" not in ranks
    assert "considered 1234 candidate configurations, 15 feasible" in text


def test_plan_shows_scaling_when_present(train_plan: Plan) -> None:
    console = _console()
    print_plan(train_plan, console)
    text = console.export_text()
    assert "scaling of the recommended instance type" in text
    assert "81%" in text  # efficiency at 128 GPUs
    console = _console()
    print_plan(replace(train_plan, scaling=()), console)
    assert "scaling" not in console.export_text()


def test_rejections_are_grouped_by_stage_and_capped(train_plan: Plan) -> None:
    console = _console()
    print_plan(train_plan, console)
    text = console.export_text()
    assert "memory: 560 candidate configurations (14 rejections)" in text
    assert "deadline: 13 candidate configurations (2 rejections)" in text
    assert "... 9 more, see --json" in text  # 5 of 14 memory reasons shown
    assert "(case 5)" in text and "(case 6)" not in text
    assert "8 × a10g (1 x aws g5.48xlarge us-east-1 spot): fastest layout takes 41.3 d" in text
    assert sum("does not fit" in line for line in text.splitlines()) <= 10


def test_infer_plan_shows_replicas_and_monthly_cost(infer_plan: InferPlan) -> None:
    console = _console()
    print_plan(infer_plan, console)
    text = console.export_text()
    recommended = infer_plan.recommended
    assert f"{recommended.replicas} replicas of 1 × {recommended.accelerator}" in text
    assert format_usd(recommended.always_on_usd_per_month) + " always on" in text
    assert "$/1000 req" in text
    assert "frontier" not in text  # an inference plan's frontier is only its recommendation
    assert "latency: 27 candidate configurations (1 rejection)" in text
    assert "considered 324 candidate configurations, 3 feasible" in text


def test_break_even_says_when_owning_never_pays(break_even_rows: list[BreakEven]) -> None:
    console = _console()
    print_break_even(break_even_rows, console)
    text = console.export_text()
    assert "8 × h100-sxm" in text
    assert "$21.70/h" in text and "$98.32/h" in text
    assert "22%" in text
    assert "never (renting is cheaper)" in text
    assert "lambda gpu_8x_h100_sxm5 us-east-1" in text  # one line, not wrapped at 120 columns


def test_figures_that_are_not_known_read_not_available_never_zero(catalog: Catalog, assumptions: Assumptions) -> None:
    """No offering rents the card: cost None on the result, "not available" printed; a link of unknown speed:
    no time at all, so nothing that depends on it is printed."""
    job = TrainJob(tokens=1e9, seq_len=1024, micro_batch=1, global_batch=8)
    unpriced = estimate_train(
        preset("gpt2"), catalog.accelerator("rtx-6000-ada"), 1, job, Parallelism(), catalog, assumptions
    )
    assert unpriced.seconds is not None and unpriced.usd is None and unpriced.usd_per_hour is None
    console = _console()
    print_estimate(unpriced, console)
    assert re.search(r"cost +not available +see the notes", console.export_text())
    untimed = estimate_train(
        preset("gpt2"), catalog.accelerator("jetson-agx-orin-64gb"), 2, job, Parallelism(dp=2), catalog, assumptions
    )
    assert untimed.seconds is None and untimed.usd is None and untimed.kwh is None
    console = _console()
    print_estimate(untimed, console)
    text = console.export_text()
    assert re.search(r"time, cost, energy, CO2 +not available +see the notes", text)
    assert "\ncost " not in text and "where a step goes" not in text


def test_top_0_shows_every_feasible_candidate_in_the_table_too(train_plan: Plan) -> None:
    """--top 0 means every candidate (its range says so); the table used to stop at 10 where the JSON did not."""
    console = _console()
    print_plan(replace(train_plan, top=None), console)
    text = console.export_text()
    ranks = [line.split()[0] for line in text.splitlines() if line.strip()[:1].isdigit() and "×" in line]
    assert "15" in ranks and "candidates" in text and "top 10 of" not in text
