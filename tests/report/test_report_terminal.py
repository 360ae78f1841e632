"""The terminal report shows the figures a user acts on, and only text, never markup, from the dicts."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from rich.console import Console

from computewise.plan.infer import InferPlan
from computewise.plan.onprem import BreakEven
from computewise.plan.result import Plan
from computewise.report.terminal import print_break_even, print_estimate, print_plan
from computewise.units import format_bytes, format_duration, format_flops, format_usd


def _console(color: bool = False) -> Console:
    if color:
        return Console(record=True, width=120, force_terminal=True, color_system="standard")
    return Console(record=True, width=120, color_system=None)


def test_train_estimate_shows_memory_breakdown_and_summary(train_estimate: dict[str, Any]) -> None:
    console = _console()
    print_estimate(train_estimate, console)
    text = console.export_text()
    assert "llama-3-8b (8.03B parameters) on 8 × h100-sxm, dp 8 · tp 1 · pp 1 · ZeRO-1" in text
    for part in ("weights", "gradients", "optimizer states", "activations", "overhead"):
        assert part in text
    assert "KV cache" not in text  # zero parts are left out
    assert "15.0 GiB" in text  # 16.06 GB of weights
    assert "28.6%" in text  # weights / 56.165 GB total
    assert "fits: 52.3 GiB of 74.5 GiB" in text
    assert format_flops(9.636e20) in text
    assert "MFU 42%" in text
    assert format_duration(267_840.0) in text  # 3.1 d
    assert "19.1K steps of 14.0 s" in text
    assert "74.7K tokens/s" in text
    assert "$7,315" in text
    assert "on-demand at $98.32/h" in text
    assert "1,873 kWh" in text
    assert "712 kg" in text
    assert "380 g/kWh" in text
    assert "checkpoint 104.3 GiB every 1.0 h" in text
    assert "· utilization 45% of peak bf16 FLOP/s assumed" in text


def test_memory_that_does_not_fit_is_red(train_estimate: dict[str, Any]) -> None:
    memory = train_estimate["memory"]
    memory["per_device_bytes"]["activations"] = 60e9
    memory["per_device_bytes"]["total"] = 106.165e9
    memory["fits"] = False
    console = _console(color=True)
    print_estimate(train_estimate, console)
    styled = console.export_text(styles=True, clear=False)
    line = next(line for line in styled.splitlines() if "does not fit" in line)
    assert "31m" in line  # ANSI red
    assert f"does not fit: {format_bytes(106.165e9)} > 74.5 GiB per device" in console.export_text()


def test_infer_estimate_shows_latency_throughput_and_price_per_request(infer_estimate: dict[str, Any]) -> None:
    console = _console()
    print_estimate(infer_estimate, console)
    text = console.export_text()
    assert "batch 8, context 2048, output 256" in text
    assert "KV cache" in text
    assert "gradients" not in text
    assert "first token 118.0 ms, 12.9 ms per output token" in text
    assert "2.34 requests/s" in text
    assert "599 output tokens/s" in text
    assert "$1.46 per 1000 requests" in text
    assert "0.00067 kWh" in text


def test_strings_from_the_dict_are_not_markup(train_estimate: dict[str, Any]) -> None:
    train_estimate["model"] = "[bold]org[/bold]/model"
    train_estimate["notes"] = ["[red]not a style[/red]"]
    console = _console()
    print_estimate(train_estimate, console)
    text = console.export_text()
    assert "[bold]org[/bold]/model" in text
    assert "[red]not a style[/red]" in text


def test_plan_shows_recommendation_frontier_candidates_and_search_size(train_plan: Plan) -> None:
    console = _console()
    print_plan(train_plan, console, top=10)
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
