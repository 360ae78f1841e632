"""The ``optimize`` report renders a real search's result: every variant, the winner, the misses and the verdict.

The results come from real searches on the digits classifier (real torch, real ONNX Runtime), restricted
to a handful of variants so the module takes about 10 s on an idle 2-core machine. Cases a small CPU
search cannot produce (a failed build, text with length-sorted throughput, layers kept in FP32, a
hostile variant name) are copies of the real result with one field changed, so every other figure stays real.
"""

from __future__ import annotations

import ast
import dataclasses
import io
import re
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from rich.console import Console

from computewise.report import optimize as report
from computewise.report.optimize import optimize_grid, optimize_html, print_optimize
from computewise.units import format_count

if TYPE_CHECKING:
    from computewise.optimize.search import SearchResult, VariantResult

pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

pytestmark = pytest.mark.torch

ROOT = Path(__file__).resolve().parents[2]  # examples.digits lives here
ONLY = ("ort-int8-*", "ort-all", "pytorch-prune-structured-40", "pytorch-fp16", "ort-openvino")


def _search(directory: Path, max_drop: str, only: tuple[str, ...]) -> SearchResult:
    from computewise.optimize.quality import load_metric, parse_drop
    from computewise.optimize.search import SearchOptions, run_search
    from computewise.optimize.source import load_source

    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(ROOT))
        source = load_source("examples.digits:classifier", None, None)
        metric = load_metric("examples.digits:accuracy", source.task, parse_drop(max_drop))
        return run_search(source, metric, SearchOptions(only=only), directory=directory)


@pytest.fixture(scope="module")
def searched(tmp_path_factory: pytest.TempPathFactory) -> SearchResult:
    return _search(tmp_path_factory.mktemp("digits"), "1%", ONLY)


@pytest.fixture(autouse=True)
def bare_pipe(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pipe here has no COLUMNS (with it a pipe is sized like a terminal), whatever the shell exports."""
    monkeypatch.delenv("COLUMNS", raising=False)


@pytest.fixture
def digits(searched: SearchResult) -> SearchResult:
    """A fresh copy per test of what tests edit (variants, their speeds and builds, notes), so no edit leaks."""
    copies = {
        id(v): dataclasses.replace(v, speeds=list(v.speeds), built=v.built and dataclasses.replace(v.built))
        for v in searched.variants
    }
    return dataclasses.replace(
        searched,
        variants=[copies[id(v)] for v in searched.variants],
        chosen=searched.chosen and copies[id(searched.chosen)],
        notes=list(searched.notes),
    )


@pytest.fixture(scope="module")
def no_winner(tmp_path_factory: pytest.TempPathFactory) -> SearchResult:
    # Pruning 40 % of the channels costs accuracy, and a 0 % budget forgives none.
    return _search(tmp_path_factory.mktemp("strict"), "0%", ("pytorch-prune-structured-40",))


def _terminal(result: SearchResult, width: int = 200, terminal: bool = False) -> str:
    """What a pipe (or, with ``terminal``, a terminal of ``width`` columns) shows.

    Read from the file, not ``record=True``: on a pipe the table is reprinted on a fresh Console over the same
    file at its natural width (``at_natural_width``), which the original console's recording never sees.
    """
    out = io.StringIO()
    console = Console(file=out, width=width, force_terminal=terminal, color_system=None)
    print_optimize(result, console)
    return out.getvalue()


def _flat(text: str) -> str:
    """Whitespace folded, so a reason that wraps in the note column is found as one phrase."""
    return " ".join(text.split())


def _chosen(result: SearchResult) -> VariantResult:
    assert result.chosen is not None
    return result.chosen


def test_the_search_fixture_has_a_winner_and_the_cases_the_report_distinguishes(digits: SearchResult) -> None:
    statuses = {v.status for v in digits.variants}
    assert "ok" in statuses
    assert digits.chosen is not None
    assert any(not v.meets_budget for v in digits.variants if v.status == "ok")  # the pruned variant


def test_terminal_names_every_variant_marks_the_winner_and_gives_the_verdict(digits: SearchResult) -> None:
    text = _terminal(digits)
    flat = _flat(text)
    for v in digits.variants:
        assert v.name in text
        if v.status != "ok":
            assert _flat(str(v.reason)) in flat
    chosen = _chosen(digits)
    assert f"★ {chosen.name}" in text
    gains = digits.speedup(chosen)
    assert gains is not None
    throughput, latency = gains.throughput, gains.latency
    assert f"★ chosen: {chosen.name}: {throughput:.2f}x throughput at batch 32" in flat
    assert f"{latency:.2f}x lower p50 latency at batch 1" in flat
    # the header: what was measured, judged how, on what
    assert "examples.digits:accuracy: baseline 0.9796" in text
    assert "max drop 1% (down to 0.9698)" in text
    assert digits.hardware.cpu in text
    assert f"{digits.hardware.threads} threads" in text
    assert "export doctor" in text


def test_baseline_comes_first_and_the_pruned_variant_misses_the_budget(digits: SearchResult) -> None:
    grid = optimize_grid(digits)
    assert grid.rows[0][0] == "baseline"
    assert grid.rows[0][grid.headers.index("drop")] == "-"
    pruned = next(row for row in grid.rows if row[0] == "pytorch-prune-structured-40")
    assert pruned[grid.headers.index("in budget")] == "no"
    quality = digits.variant("pytorch-prune-structured-40").quality
    assert quality is not None
    drop = (digits.baseline_quality - quality.value) / digits.baseline_quality
    assert pruned[grid.headers.index("drop")] == f"{drop:.2%}"
    assert {"p50 @1", "items/s @1", "p50 @32", "items/s @32", "x throughput", "x latency"} <= set(grid.headers)


def test_measured_variants_are_ranked_by_the_searchs_own_speed(digits: SearchResult) -> None:
    """The report's order is the search's rule (``SearchResult.speed``), for either target: one rule, no drift."""
    for result in (digits, dataclasses.replace(digits, options=dataclasses.replace(digits.options, target="latency"))):
        names = [row[0].removeprefix(f"{report.CHOSEN_MARK} ") for row in optimize_grid(result).rows]
        measured = [result.variant(name) for name in names[1:] if result.variant(name).status == "ok"]
        speeds = [result.speed_key(v) for v in measured]
        assert speeds == sorted(speeds, reverse=True)


def test_a_failed_variant_shows_its_reason_instead_of_numbers(digits: SearchResult) -> None:
    """A variant that ran fails instead; never the winner, which the search picks by speed and which then
    carries the star in its row (once it was ort-all, and no row was named plain "ort-all")."""
    ran = [v.name for v in digits.variants if v.status == "ok"]
    name = next(n for n in ran if n not in (_chosen(digits).name, report.BASELINE))
    failed = digits.variant(name)
    failed.status, failed.reason = "failed", "run failed: RuntimeError: [ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION"
    failed.quality, failed.speeds, failed.size_bytes, failed.peak_memory_bytes = None, [], None, None
    grid = optimize_grid(digits)
    row = next(row for row in grid.rows if row[0] == name)
    assert row[1] == "failed"
    assert set(row[2:-1]) == {""}
    assert row[-1] == failed.reason
    assert grid.rows.index(row) > max(i for i, r in enumerate(grid.rows) if r[1] == "ok")  # misses go last
    assert _flat(failed.reason) in _flat(_terminal(digits))


def test_no_winner_names_the_best_quality_and_the_best_speed(no_winner: SearchResult) -> None:
    assert no_winner.chosen is None and no_winner.best_speed is not None
    flat = _flat(_terminal(no_winner))
    assert "No variant beats the FP32 baseline within the budget (max drop 0%)" in flat
    assert "best quality: pytorch-prune-structured-40: " in flat
    assert f"best speed: {no_winner.best_speed.name}: " in flat
    assert "★" not in flat
    html = optimize_html(no_winner)
    assert '<p class="bad">No variant beats the FP32 baseline within the budget' in html


def test_a_narrow_terminal_gets_quality_and_speed_as_two_whole_tables(digits: SearchResult) -> None:
    text = _terminal(digits, width=120, terminal=True)
    assert max(len(line) for line in text.splitlines()) <= 120
    assert "…" not in text  # nothing cut
    assert len(re.findall(r"^variant ", text, flags=re.MULTILINE)) == 2
    for v in digits.variants:
        assert text.count(v.name) >= (2 if v.status == "ok" else 1)
    wide = _terminal(digits, width=120)  # a pipe: one table at its natural width
    assert len(re.findall(r"^variant ", wide, flags=re.MULTILINE)) == 1


def test_length_sorted_batching_is_shown_where_it_was_measured(digits: SearchResult) -> None:
    # Digits are images: their batches need no padding, so the real result has no sorted figures to show.
    assert "length-sorted batching" not in _terminal(digits)
    for v in (digits.variant("baseline"), _chosen(digits)):
        v.speeds = [
            dataclasses.replace(s, sorted_items_per_s=2 * s.items_per_s) if s.batch_size == 32 else s for s in v.speeds
        ]
    flat = _flat(_terminal(digits))
    baseline_speed = digits.variant("baseline").speed_at(32)
    assert baseline_speed is not None and baseline_speed.sorted_items_per_s is not None
    assert "length-sorted batching at batch 32, baseline: " in flat
    assert f"length-sorted batching at batch 32, {_chosen(digits).name}: " in flat
    assert "sorted by length (2.00x; a serving choice, not counted in the speed-ups)" in flat
    assert f"(sorted {format_count(baseline_speed.sorted_items_per_s)}/s)" in flat


def test_layers_kept_in_fp32_are_listed(digits: SearchResult) -> None:
    built = _chosen(digits).built
    assert built is not None
    built.kept_fp32 = ["/layers.0/Gemm", "/layers.2/Gemm"]
    assert "kept in FP32: /layers.0/Gemm, /layers.2/Gemm" in _terminal(digits)
    assert "kept in FP32: /layers.0/Gemm, /layers.2/Gemm" in optimize_html(digits)


def test_html_has_the_frontier_chart_every_variant_and_the_verdict(digits: SearchResult) -> None:
    html = optimize_html(digits)
    assert html.startswith("<!DOCTYPE html>")
    assert "<svg" in html
    assert "speed vs quality frontier" in html
    assert "budget floor 0.9698" in html
    for v in digits.variants:
        assert v.name in html
    assert f'<p class="ok">★ chosen: {_chosen(digits).name}: ' in html
    assert "<h2>Export doctor</h2>" in html
    assert "<script" not in html and 'src="' not in html  # self-contained: nothing to fetch or run


def test_html_frontier_rows_trade_speed_for_quality(digits: SearchResult) -> None:
    html = optimize_html(digits)
    section = html.split("<h3>Frontier", 1)[1].split("</table>", 1)[0]
    rows = re.findall(r"<tr><td>(.*?)</td><td class=\"num\">.*?</td><td class=\"num\">(.*?)</td>", section)
    assert rows
    fastest = max(
        (v for v in digits.variants if v.status == "ok"),
        key=lambda v: next(s.best_items_per_s for s in v.speeds if s.batch_size == 32),
    )
    assert rows[0][0].removeprefix("★ ") == fastest.name
    qualities = [float(quality) for _, quality in rows]
    assert qualities == sorted(qualities) and len(set(qualities)) == len(qualities)  # each slower step buys quality


def test_latency_target_plots_calls_per_second_at_the_smallest_batch(digits: SearchResult) -> None:
    latency = dataclasses.replace(digits, options=dataclasses.replace(digits.options, target="latency"))
    html = optimize_html(latency)
    assert "calls/s at batch 1 (1000 / p50 ms)" in html
    assert "latency at batch 1" in _terminal(latency)


def test_names_are_escaped_in_html_and_never_markup_in_the_terminal(digits: SearchResult) -> None:
    hostile = "<script>alert(1)</script>[bold]int8[/bold]"
    _chosen(digits).name = hostile
    digits.notes = ["<b>not bold</b>"]
    html = optimize_html(digits)
    assert "<script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;[bold]int8[/bold]" in html
    assert "&lt;b&gt;not bold&lt;/b&gt;" in html
    text = _terminal(digits)
    assert f"★ {hostile}" in text
    assert "<b>not bold</b>" in text


def test_the_report_layer_imports_the_optimizer_for_its_types_only() -> None:
    """Loading the report must not load the optimizer (NumPy, ONNX Runtime): its names are for mypy alone."""
    tree = ast.parse(Path(report.__file__).read_text())
    typing_only = {
        id(node)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and ast.unparse(block.test) == "TYPE_CHECKING"
        for node in ast.walk(block)
    }
    runtime = [node for node in ast.walk(tree) if id(node) not in typing_only]
    imported = {node.module for node in runtime if isinstance(node, ast.ImportFrom) and node.module}
    imported |= {alias.name for node in runtime if isinstance(node, ast.Import) for alias in node.names}
    assert not {name for name in imported if name.startswith("computewise.optimize")}
