"""The search on all-MiniLM-L6-v2: export doctor, transformer fusion, dynamic INT8 and selective precision.

One restricted search (about a minute on 2 cores) is shared by the module: 100 of the example
sentences (every fourth, so lengths stay mixed), the fused graph, three dynamic INT8 settings and
whatever selective-precision variant the misses call for. Everything runs on one thread, PyTorch and
ONNX Runtime alike: the comparison stays fair, and on a busy 2-core machine two OpenMP threads
spinning against each other make PyTorch at batch 1 twenty times slower than it is.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator

import pytest

from computewise.optimize.onnx_variants import quantizable_nodes
from computewise.optimize.quality import INVARIANCE_COSINE, load_metric, parse_drop
from computewise.optimize.search import SearchOptions, SearchResult, VariantResult, choose, run_search
from computewise.optimize.source import ModelSource

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

# one xdist worker runs the whole module, so its 100-second search is made once, not once per worker
pytestmark = [pytest.mark.torch, pytest.mark.xdist_group("minilm-search")]

QUANTIZED = ("ort-int8-u8-channel", "ort-int8-s8-tensor", "ort-int8-default")


@pytest.fixture(scope="module")
def minilm_search(minilm_source: ModelSource, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SearchResult]:
    source = dataclasses.replace(minilm_source, feed=minilm_source.feed.subset(range(0, 400, 4)))
    metric = load_metric(None, source.task, parse_drop("1%"))
    options = SearchOptions(
        only=("ort-fused", *QUANTIZED, "*-selective"), batch_sizes=(1, 8), bench_items=16, threads=1
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield run_search(source, metric, options, directory=tmp_path_factory.mktemp("minilm-search"))
    finally:
        torch.set_num_threads(threads)


def _missed(result: SearchResult) -> list[VariantResult]:
    return [result.variant(name) for name in QUANTIZED if not result.variant(name).meets_budget]


def test_every_variant_ran(minilm_search: SearchResult) -> None:
    for variant in minilm_search.variants:
        assert variant.status == "ok", f"{variant.name}: {variant.reason}"
    assert minilm_search.variants[0].name == "baseline"
    assert minilm_search.metric.item_floor == pytest.approx(0.97)
    assert (minilm_search.eval_examples, minilm_search.calibration_examples) == (75, 25)


def test_doctor_reports_fused_attention_and_the_exporter(minilm_search: SearchResult) -> None:
    doctor = minilm_search.doctor
    assert doctor.attention_fused is True
    assert doctor.fused_operators["Attention"] == 6  # one per encoder layer
    assert doctor.fused_operators["SkipLayerNormalization"] == 12
    assert doctor.exporter in ("dynamo", "torchscript (eager attention)")
    if doctor.exporter != "dynamo":
        assert any("re-exported with the TorchScript exporter" in note for note in doctor.notes), doctor.notes
    fused = minilm_search.variant("ort-fused")
    assert fused.recipe[0] == f"ONNX export ({doctor.exporter} exporter)"
    assert fused.recipe[1].startswith("transformer fusion (6 Attention")
    report = minilm_search.to_dict()["doctor"]
    assert report["attention_fused"] is True and report["exporter"] == doctor.exporter


def test_fp32_variants_reproduce_the_baseline(minilm_search: SearchResult) -> None:
    for name in ("baseline", "ort-fused"):
        quality = minilm_search.variant(name).quality
        assert quality is not None and quality.worst is not None
        assert quality.value == pytest.approx(1.0, abs=1e-5)
        assert quality.worst > 0.9999


def test_dynamic_int8_is_not_batch_invariant_and_fused_fp32_is(minilm_search: SearchResult) -> None:
    fused = minilm_search.variant("ort-fused")
    assert fused.invariance is not None and fused.invariance >= INVARIANCE_COSINE
    assert fused.batch_invariant is True
    for name in QUANTIZED:
        variant = minilm_search.variant(name)
        # activations are quantized with one scale per batch: the neighbours move each sentence
        assert variant.invariance is not None and variant.invariance < INVARIANCE_COSINE, name
        assert variant.batch_invariant is False
        assert variant.built is not None and variant.built.quantized_from is not None


def test_int8_of_the_fused_graph_starts_from_it_and_the_default_from_the_plain_export(
    minilm_search: SearchResult,
) -> None:
    tuned = minilm_search.variant("ort-int8-u8-channel").built
    default = minilm_search.variant("ort-int8-default").built
    assert tuned is not None and tuned.quantized_from is not None
    assert default is not None and default.quantized_from is not None
    assert tuned.quantized_from[0] == minilm_search.workspace.fused()
    assert default.quantized_from[0] == minilm_search.workspace.exported()
    assert "transformer fusion" in minilm_search.variant("ort-int8-u8-channel").recipe
    assert "transformer fusion" not in minilm_search.variant("ort-int8-default").recipe


def test_a_selective_variant_follows_the_fastest_miss(minilm_search: SearchResult) -> None:
    missed = _missed(minilm_search)
    selective = [v for v in minilm_search.variants if v.name.endswith("-selective")]
    # ONNX Runtime's default INT8 loses MiniLM about 4 % cosine (0.964 measured): it always misses 1 %
    assert missed, "expected ort-int8-default to miss a 1 % budget on MiniLM"
    base = max(missed, key=lambda v: speed.best_items_per_s if (speed := v.speed_at(8)) else 0.0)
    assert [v.name for v in selective] == [f"{base.name}-selective"]
    variant = selective[0]
    assert variant.status == "ok", variant.reason
    assert variant.meets_budget
    assert variant.built is not None and variant.built.kept_fp32
    assert base.built is not None and base.built.quantized_from is not None
    base_graph = base.built.quantized_from[0]
    layers = quantizable_nodes(base_graph)
    assert set(variant.built.kept_fp32) <= set(layers)
    assert len(variant.built.kept_fp32) < len(layers)
    assert variant.built.quantized_from is not None and variant.built.quantized_from[0] == base_graph
    assert f"except the {len(variant.built.kept_fp32)} most sensitive of {len(layers)} layers" in variant.recipe[-1]
    assert variant.summary(None).kept_fp32 == tuple(variant.built.kept_fp32)


def test_the_chosen_variant_keeps_every_sentence_close(minilm_search: SearchResult) -> None:
    chosen = minilm_search.chosen
    assert chosen is not None
    assert chosen.meets_budget
    assert chosen.quality is not None and chosen.quality.worst is not None
    assert chosen.quality.value >= 0.99
    assert chosen.quality.worst >= 0.97
    assert minilm_search.speed_key(chosen) > minilm_search.speed_key(minilm_search.variant("baseline"))
    for variant in minilm_search.variants:  # nothing that missed the budget was chosen over it
        if variant.quality is not None and variant.quality.value < 0.99:
            assert not variant.meets_budget


def test_length_sorted_batches_are_timed_for_text(minilm_search: SearchResult) -> None:
    for variant in minilm_search.variants:
        single, batched = variant.speed_at(1), variant.speed_at(8)
        assert single is not None and batched is not None
        assert single.sorted_items_per_s is None  # nothing to sort in a batch of one
        assert batched.sorted_items_per_s is not None and batched.sorted_items_per_s > 0


def test_speedups_compare_the_same_batching_and_sorting_is_its_own_figure(minilm_search: SearchResult) -> None:
    """A variant in length-sorted batches against the baseline in arrival order counted sorting as a model gain."""
    from computewise.report.optimize import optimize_grid

    base = minilm_search.variant("baseline").speed_at(8)
    assert base is not None and base.sorted_items_per_s is not None
    for variant in minilm_search.variants:
        mine, gains = variant.speed_at(8), minilm_search.speedup(variant)
        assert mine is not None and mine.sorted_items_per_s is not None
        assert gains.throughput == pytest.approx(mine.items_per_s / base.items_per_s)
        assert gains.sorted_throughput == pytest.approx(mine.sorted_items_per_s / base.sorted_items_per_s)
        assert gains.sorting == pytest.approx(mine.sorted_items_per_s / mine.items_per_s)
    baseline = minilm_search.speedup(minilm_search.variant("baseline"))
    assert baseline is not None
    assert baseline.throughput == pytest.approx(1.0) and baseline.sorted_throughput == pytest.approx(1.0)
    grid = optimize_grid(minilm_search)
    chosen = minilm_search.chosen
    assert chosen is not None
    row = next(row for row in grid.rows if row[0].endswith(chosen.name))
    gains = minilm_search.speedup(chosen)
    assert row[grid.headers.index("x throughput")].startswith(f"{gains.throughput:.2f}x")
    assert row[grid.headers.index("x sorted")].startswith(f"{gains.sorted_throughput:.2f}x")


def test_requiring_batch_invariance_never_chooses_a_variant_that_is_not(minilm_search: SearchResult) -> None:
    strict = dataclasses.replace(
        minilm_search, options=dataclasses.replace(minilm_search.options, batch_invariant=True)
    )
    chosen = choose(strict)
    assert chosen is None or chosen.batch_invariant is True
    fused, baseline = minilm_search.variant("ort-fused"), minilm_search.variant("baseline")
    if strict.speed_key(fused) > strict.speed_key(baseline):
        assert chosen is fused
    assert strict.to_dict()["batch_invariant_required"] is True


def test_to_dict_is_json_with_quality_and_invariance(minilm_search: SearchResult) -> None:
    report = json.loads(json.dumps(minilm_search.to_dict()))
    assert report["model"]["task"] == "embedding" and report["model"]["kind"] == "hf"
    assert report["metric"]["name"] == "mean cosine vs FP32"
    assert report["metric"]["item_floor"] == pytest.approx(0.97)
    assert report["notes"] == ["embedding = mean pooling + L2 normalize"]
    by_name = {variant["name"]: variant for variant in report["variants"]}
    assert set(by_name) == {v.name for v in minilm_search.variants}
    for name in QUANTIZED:
        assert by_name[name]["batch_invariant"] is False
        assert by_name[name]["quality_worst"] <= by_name[name]["quality"]
    assert by_name["ort-fused"]["batch_invariant"] is True
    assert by_name["ort-fused"]["format"] == "onnx" and by_name["ort-fused"]["providers"] == ["CPUExecutionProvider"]
    assert minilm_search.chosen is not None and report["chosen"] == minilm_search.chosen.name
