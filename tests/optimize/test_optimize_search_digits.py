"""The search end to end on the digits MLP: real PyTorch and ONNX Runtime variants, graded by the
example's own accuracy metric and timed on this machine.

One search is shared by the module (about 10 s); the time-budget, bad-metric and failed-export cases
run their own small searches. Which variant wins depends on this CPU, so the tests check the rules
of the choice rather than a name.
"""

from __future__ import annotations

import dataclasses
import io
import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from computewise.errors import EvaluationError, InputError
from computewise.optimize.quality import load_metric, parse_drop
from computewise.optimize.search import (
    SUSPECT_RATIO,
    SearchOptions,
    SearchResult,
    VariantResult,
    choose,
    loading,
    run_search,
)
from computewise.optimize.source import ModelSource, load_source
from computewise.optimize.summary import OptimizeSummary

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

pytestmark = pytest.mark.torch

MakeModule = Callable[[str, str], str]
# cheap and likely winners first, one of each family, and two that need a GPU (skipped on a CPU)
VARIANTS = (
    "ort-int8-u8-channel",
    "ort-int8-s8-tensor",
    "ort-int8-default",
    "ort-fused",
    "ort-all",
    "ort-static-int8-minmax",
    "pytorch-int8-dynamic",
    "pytorch-fp16",
    "pytorch-prune-structured-20",
    "ort-cuda",
)


@pytest.fixture(scope="module")
def digits_search(digits_source: ModelSource, tmp_path_factory: pytest.TempPathFactory) -> SearchResult:
    metric = load_metric("examples.digits:accuracy", digits_source.task, parse_drop("1%"))
    options = SearchOptions(only=VARIANTS, batch_sizes=(1, 32), bench_items=96)
    return run_search(digits_source, metric, options, directory=tmp_path_factory.mktemp("digits-search"))


def test_baseline_is_measured_first(digits_search: SearchResult) -> None:
    baseline = digits_search.variants[0]
    assert (baseline.name, baseline.family, baseline.status, baseline.reason) == ("baseline", "pytorch", "ok", None)
    assert baseline.meets_budget
    assert baseline.quality is not None
    assert baseline.quality.value == digits_search.baseline_quality
    assert baseline.quality.value > 0.9  # the example MLP's held-out accuracy
    assert [speed.batch_size for speed in baseline.speeds] == [1, 32]
    assert baseline.recipe == ["PyTorch eager, FP32"]
    assert baseline.batch_invariant  # an MLP's rows do not see each other


def test_every_wanted_variant_is_recorded_once(digits_search: SearchResult) -> None:
    names = [variant.name for variant in digits_search.variants]
    assert names[0] == "baseline"
    assert sorted(names[1:]) == sorted(VARIANTS)  # `only` also filters the derived variants
    for variant in digits_search.variants:
        assert variant.status in ("ok", "failed", "skipped")
        assert (variant.reason is None) == (variant.status == "ok")


def test_variants_that_cannot_run_here_are_skipped_with_a_reason(digits_search: SearchResult) -> None:
    fused = digits_search.variant("ort-fused")
    assert fused.status == "skipped"
    assert fused.reason == "no transformer fusions are known for this architecture"
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the GPU variants run")
    fp16, cuda = digits_search.variant("pytorch-fp16"), digits_search.variant("ort-cuda")
    assert (fp16.status, fp16.reason) == ("skipped", "FP16 needs a CUDA GPU; CPUs emulate it")
    assert cuda.status == "skipped"
    assert cuda.reason is not None and cuda.reason.startswith("CUDAExecutionProvider is not available")
    assert not fp16.speeds and fp16.quality is None and not fp16.meets_budget


def test_cpu_variants_are_graded_and_timed(digits_search: SearchResult) -> None:
    names = ["ort-int8-u8-channel", "ort-int8-default", "ort-all", "ort-static-int8-minmax"]
    if not torch.cuda.is_available():  # PyTorch dynamic INT8 is CPU-only
        names.append("pytorch-int8-dynamic")
    for name in names:
        variant = digits_search.variant(name)
        assert variant.status == "ok", variant.reason
        assert variant.quality is not None
        assert [speed.batch_size for speed in variant.speeds] == [1, 32]
        assert all(speed.items_per_s > 0 and speed.p50_ms > 0 for speed in variant.speeds)
        assert variant.build_time_s is not None and variant.load_time_s is not None
        assert variant.built is not None and variant.built.recipe == variant.recipe
    int8 = digits_search.variant("ort-int8-default")
    assert int8.built is not None and int8.built.format == "onnx" and int8.built.quantized_from is not None
    assert int8.recipe[-1] == "ONNX Runtime dynamic INT8 (default settings)"
    # INT8 weights are about a quarter of the FP32 ones
    fp32_bytes = digits_search.variant("ort-all").size_bytes
    assert int8.size_bytes is not None and fp32_bytes is not None and int8.size_bytes < 0.4 * fp32_bytes


def test_pytorch_dynamic_int8_reports_its_size(digits_search: SearchResult) -> None:
    if torch.cuda.is_available():
        pytest.skip("PyTorch dynamic INT8 is CPU-only and skipped where CUDA is")
    variant = digits_search.variant("pytorch-int8-dynamic")
    assert variant.status == "ok"
    assert variant.size_bytes


def test_meets_budget_follows_the_metric(digits_search: SearchResult) -> None:
    baseline = digits_search.baseline_quality
    allowed = digits_search.metric.budget.allowed(baseline)
    assert allowed == pytest.approx(0.01 * baseline)
    for variant in digits_search.variants:
        if variant.status == "ok":
            assert variant.quality is not None
            assert variant.meets_budget == (baseline - variant.quality.value <= allowed + 1e-12)


def test_the_chosen_variant_fits_the_budget_and_beats_the_baseline(digits_search: SearchResult) -> None:
    chosen = digits_search.chosen
    assert chosen is not None
    assert chosen.name != "baseline"
    assert chosen.status == "ok" and chosen.meets_budget
    baseline = digits_search.variant("baseline")
    key = digits_search.speed_key
    assert key(chosen) > key(baseline)
    fitting = [v for v in digits_search.variants if v.status == "ok" and v.meets_budget and v.name != "baseline"]
    assert key(chosen) == max(key(v) for v in fitting)
    speedup = digits_search.speedup(chosen)
    assert speedup is not None and speedup.throughput is not None and speedup.throughput > 0


def test_a_batch_invariance_requirement_is_respected(digits_search: SearchResult) -> None:
    strict = dataclasses.replace(
        digits_search, options=dataclasses.replace(digits_search.options, batch_invariant=True)
    )
    chosen = choose(strict)
    assert chosen is None or chosen.batch_invariant


def test_to_dict_is_plain_json_with_every_variant(
    digits_search: SearchResult, json_schema: Callable[[object, str], None]
) -> None:
    report = json.loads(json.dumps(digits_search.to_dict()))
    json_schema(report, "optimize")
    assert OptimizeSummary.from_dict(report) == digits_search.summary()  # the document reads back whole
    assert [v["name"] for v in report["variants"]] == [v.name for v in digits_search.variants]
    assert digits_search.chosen is not None
    assert report["chosen"] == digits_search.chosen.name
    assert report["model"] == {"source": "examples.digits:classifier", "kind": "entry-point", "task": "classifier"}
    assert report["metric"]["name"] == "examples.digits:accuracy"
    assert report["metric"]["max_drop"] == "1%"
    assert report["metric"]["item_floor"] is None
    assert report["metric"]["eval_examples"] + report["metric"]["calibration_examples"] == 540
    assert report["batch_sizes"] == [1, 32]
    assert report["target"] == "throughput"
    assert report["batch_invariant_required"] is False
    assert report["hardware"]["threads"] >= 1
    baseline = report["variants"][0]
    # the baseline against itself at the same batching; images have no length to sort by
    assert baseline["speedup"]["throughput"] == pytest.approx(1.0)
    assert baseline["speedup"]["sorted_throughput"] is None and baseline["speedup"]["sorting"] is None
    skipped = next(v for v in report["variants"] if v["status"] == "skipped")
    assert skipped["speedup"] is None and skipped["speeds"] == [] and skipped["quality"] is None


def test_a_speedup_above_50x_is_flagged_as_suspect(digits_search: SearchResult) -> None:
    """The 1241x of a baseline timed under contention: the same real result with the baseline 100x slower."""
    from rich.console import Console

    from computewise.report.optimize import print_optimize

    baseline, chosen = digits_search.variant("baseline"), digits_search.chosen
    assert chosen is not None
    slowed = [dataclasses.replace(s, p50_ms=s.p50_ms * 100, items_per_s=s.items_per_s / 100) for s in baseline.speeds]
    variants = [dataclasses.replace(v, speeds=slowed) if v is baseline else v for v in digits_search.variants]
    replayed = dataclasses.replace(digits_search, variants=variants)
    gains = replayed.speedup(chosen)
    assert gains.throughput is not None and gains.throughput > SUSPECT_RATIO
    assert gains.suspect is True
    assert any(w.startswith(f"{chosen.name}: a speed-up above 50x") for w in replayed.warnings)
    out = io.StringIO()
    print_optimize(replayed, Console(file=out, width=400, color_system=None))
    text = out.getvalue()
    assert f"{gains.throughput:.2f}x (suspect)" in text and "warnings" in text
    honest = digits_search.speedup(chosen)
    assert honest is not None
    assert honest.suspect == any(r > SUSPECT_RATIO for r in (honest.throughput, honest.latency) if r is not None)


def test_the_latency_target_ranks_by_p50_at_the_smallest_batch(digits_search: SearchResult) -> None:
    """The fastest exportable variant inside the budget by p50 at batch 1, if it beats the baseline's; else none."""
    latency = dataclasses.replace(digits_search, options=dataclasses.replace(digits_search.options, target="latency"))

    def p50_at_1_ms(variant: VariantResult) -> float:
        speed = variant.speed_at(1)
        return speed.p50_ms if speed is not None else float("inf")

    fitting = [
        v
        for v in latency.variants
        if v.status == "ok" and v.meets_budget and v.exportable and v.speeds and v.name != "baseline"
    ]
    assert len(fitting) > 1, "too few variants inside the budget to rank"
    fastest = min(fitting, key=p50_at_1_ms)
    expected = fastest if p50_at_1_ms(fastest) < p50_at_1_ms(latency.variant("baseline")) else None
    assert choose(latency) is expected


def test_search_options_reject_nonsense() -> None:
    with pytest.raises(InputError, match="unknown target"):
        SearchOptions(target="cost")
    with pytest.raises(InputError, match="batch sizes"):
        SearchOptions(batch_sizes=(0, 8))
    with pytest.raises(InputError, match="time budget"):
        SearchOptions(time_budget_s=0)


# -- the time budget ---------------------------------------------------------------------------


def test_variants_after_the_time_budget_are_skipped(digits_source: ModelSource, tmp_path: Path) -> None:
    """The budget is checked before each variant; a slow terminal (the progress callback) uses it up."""
    metric = load_metric(None, digits_source.task, parse_drop("1%"))
    seen: list[str] = []

    def slow_progress(name: str, done: int, total: int) -> None:
        seen.append(name)
        if name != "baseline" and len(seen) == 2:
            time.sleep(0.6)

    options = SearchOptions(time_budget_s=0.5, only=("ort-int8-*", "ort-all"), bench_items=32)
    result = run_search(digits_source, metric, options, directory=tmp_path, progress=slow_progress)
    assert result.variants[0].status == "ok"
    rest = result.variants[1:]
    assert {"ort-int8-u8-channel", "ort-int8-default", "ort-all"} <= {v.name for v in rest}
    assert all(v.status == "skipped" and v.reason == "time budget (0.5 s) reached" for v in rest)
    assert result.chosen is None
    assert seen[-1] == "done"


def test_the_model_loads_on_the_thread_count_of_the_search() -> None:
    """An entry point that trains its model does so on --threads, not on PyTorch's one thread per core."""
    before = torch.get_num_threads()
    with loading(SearchOptions(threads=before + 1), "the model"):
        assert torch.get_num_threads() == before + 1
    assert torch.get_num_threads() == before


def test_the_baseline_runs_whatever_the_time_budget(digits_source: ModelSource, tmp_path: Path) -> None:
    metric = load_metric(None, digits_source.task, parse_drop("1%"))
    options = SearchOptions(time_budget_s=1e-9, only=("ort-all",), bench_items=32)
    result = run_search(digits_source, metric, options, directory=tmp_path)
    assert result.variants[0].status == "ok"
    assert result.variant("ort-all").status == "skipped"


# -- a metric that cannot grade ----------------------------------------------------------------


def test_an_eval_function_returning_nan_stops_the_search_at_the_baseline(
    digits_source: ModelSource, make_module: MakeModule, tmp_path: Path
) -> None:
    name = make_module(
        "optimize_search_eval_nan",
        """
        CALLS = []

        def score(predict):
            CALLS.append(1)
            return float("nan")
        """,
    )
    metric = load_metric(f"{name}:score", digits_source.task, parse_drop("1%"))
    seen: list[str] = []
    with pytest.raises(EvaluationError, match=f"{name}:score returned nan"):
        run_search(
            digits_source,
            metric,
            SearchOptions(only=("ort-int8-*",), bench_items=32),
            directory=tmp_path,
            progress=lambda variant, done, total: seen.append(variant),
        )
    assert seen == ["baseline"]
    assert metric.user_function is not None and len(metric.user_function.__globals__["CALLS"]) == 1


# -- a model the ONNX exporter cannot handle ---------------------------------------------------

UNEXPORTABLE = """
import torch


class Bessel(torch.nn.Module):
    # torch.special.bessel_j0 runs in PyTorch but has no ONNX symbolic: every export fails
    def __init__(self):
        super().__init__()
        self.hidden = torch.nn.Linear(6, 16)
        self.head = torch.nn.Linear(16, 3)

    def forward(self, x):
        return self.head(torch.special.bessel_j0(self.hidden(x)))


def model():
    torch.manual_seed(0)
    return Bessel().eval(), torch.randn(48, 6)
"""


def test_variants_that_fail_to_build_are_recorded_and_the_search_goes_on(
    make_module: MakeModule, tmp_path: Path
) -> None:
    name = make_module("optimize_search_unexportable", UNEXPORTABLE)
    source = load_source(f"{name}:model", None, "classifier")
    metric = load_metric(None, source.task, parse_drop("1%"))
    options = SearchOptions(
        only=("ort-fused", "ort-int8-u8-channel", "ort-int8-default", "ort-all", "pytorch-prune-magnitude-30"),
        batch_sizes=(1, 8),
        bench_items=16,
    )
    result = run_search(source, metric, options, directory=tmp_path / "search")
    statuses = {v.name: v.status for v in result.variants}
    assert statuses == {
        "baseline": "ok",
        "ort-fused": "failed",
        "ort-int8-u8-channel": "failed",
        "ort-int8-default": "failed",
        "ort-all": "failed",
        "pytorch-prune-magnitude-30": "ok",
    }
    for variant in result.variants:
        if variant.name.startswith("ort-"):
            assert variant.reason is not None
            assert variant.reason.startswith("build failed: UnsupportedOperatorError"), variant.reason
            assert "bessel_j0" in variant.reason
            assert variant.quality is None and not variant.speeds
    assert result.variant("pytorch-prune-magnitude-30").quality is not None
    json.dumps(result.to_dict())
