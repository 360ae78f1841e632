"""The SVG primitives: scales, ticks, escaping and the edge cases a real plan produces (one point, zeros)."""

from __future__ import annotations

import re

import pytest

from computewise.report.svg import ALERT, Axis, Segment, Series, stacked_bar, use_log, xy_chart


def _plain(v: float) -> str:
    return f"{v:g}"


def _labels(svg: str) -> list[str]:
    return re.findall(r"<text[^>]*>([^<]*)</text>", svg)


def _circles(svg: str) -> list[tuple[float, float]]:
    return [(float(x), float(y)) for x, y in re.findall(r'<circle cx="([-\d.]+)" cy="([-\d.]+)" r="[\d.]+" fill', svg)]


@pytest.mark.parametrize(
    ("values", "expected"),
    [([1.0, 100.0], False), ([1.0, 101.0], True), ([0.0, 1e6], False), ([-1.0, 1e6], False), ([], False)],
)
def test_use_log_only_for_positive_data_spanning_more_than_100x(values: list[float], expected: bool) -> None:
    assert use_log(values) is expected


def test_linear_axis_has_nice_ticks_from_zero() -> None:
    svg = xy_chart("t", [Series("", ((0.0, 0.0), (10.0, 95.0)), "#000")], Axis("x", _plain), Axis("y", _plain))
    labels = _labels(svg)
    for tick in ("0", "2", "4", "6", "8", "10", "20", "40", "60", "80"):
        assert tick in labels
    assert "-2" not in labels  # non-negative data never get a negative axis


def test_log_axis_has_powers_of_ten_and_even_spacing() -> None:
    points = ((1.0, 1.0), (10.0, 2.0), (100.0, 3.0), (10_000.0, 4.0))
    svg = xy_chart("t", [Series("", points, "#000")], Axis("x", _plain, log=True), Axis("y", _plain))
    labels = _labels(svg)
    for tick in ("1", "10", "100", "1000", "10000"):
        assert tick in labels
    assert "x (log scale)" in labels
    xs = [x for x, _ in _circles(svg)]
    assert xs[1] - xs[0] == pytest.approx(xs[2] - xs[1], abs=0.2)


def test_log_axis_drops_points_it_cannot_place() -> None:
    points = ((0.0, 1.0), (1.0, 1.0), (1000.0, 2.0))
    svg = xy_chart("t", [Series("", points, "#000")], Axis("x", _plain, log=True), Axis("y", _plain))
    assert len(_circles(svg)) == 2


def test_a_single_point_is_drawn_inside_the_plot() -> None:
    for log in (False, True):
        svg = xy_chart("t", [Series("", ((5.0, 7.0),), "#000")], Axis("x", _plain, log=log), Axis("y", _plain))
        ((x, y),) = _circles(svg)
        assert 78 < x < 640 - 16
        assert 30 < y < 360 - 46


def test_no_points_draw_nothing() -> None:
    assert xy_chart("t", [Series("a", (), "#000")], Axis("x", _plain), Axis("y", _plain)) == ""


def test_fixed_ticks_and_domain_are_used() -> None:
    svg = xy_chart(
        "t",
        [Series("", ((8.0, 1.0), (16.0, 0.9), (64.0, 0.7)), "#000", line=True)],
        Axis("GPUs", _plain, ticks=(8.0, 16.0, 64.0)),
        Axis("eff", lambda v: f"{v:.0%}", domain=(0.0, 1.05)),
    )
    labels = _labels(svg)
    assert {"8", "16", "64"} <= set(labels)
    assert "32" not in labels
    assert {"0%", "20%", "100%"} <= set(labels)
    assert "<polyline" in svg


def test_text_and_tooltips_are_escaped() -> None:
    svg = xy_chart(
        "<b>&",
        [Series("a<b", ((1.0, 1.0),), "#000", tips=("x > y",))],
        Axis("x&y", _plain),
        Axis("y", _plain),
    )
    assert "<b>" not in svg
    assert "&lt;b&gt;&amp;" in svg
    assert "<title>x &gt; y</title>" in svg
    assert "a&lt;b" in svg


def test_stacked_bar_marks_capacity_and_turns_red_past_it() -> None:
    parts = [Segment("weights", 40.0, "#111"), Segment("activations", 30.0, "#222")]
    fits = stacked_bar("memory", parts, _plain, limit=80.0, limit_label="capacity 80")
    assert ALERT not in fits
    assert "capacity 80" in _labels(fits)
    assert "weights 40 (57.1%)" in _labels(fits)
    assert "total 70" in _labels(fits)
    over = stacked_bar("memory", [*parts, Segment("overhead", 20.0, "#333")], _plain, limit=80.0)
    assert f'stroke="{ALERT}"' in over


def test_stacked_bar_segments_are_proportional() -> None:
    svg = stacked_bar("m", [Segment("a", 1.0, "#111"), Segment("b", 3.0, "#222")], _plain)
    widths = [float(w) for w in re.findall(r'<rect x="[\d.]+" y="34.0" width="([\d.]+)"', svg)]
    assert widths[1] == pytest.approx(3 * widths[0], rel=0.01)


def test_stacked_bar_of_nothing_does_not_divide_by_zero() -> None:
    assert "<svg" in stacked_bar("m", [], _plain)


def test_a_coarse_format_never_writes_one_label_at_two_heights() -> None:
    """Ticks 0, 0.0002, ... 0.001 formatted to three decimals read 0.000, 0.000, 0.001...: each label once."""
    series = [Series("", ((0.0, 0.0), (1.0, 0.001)), "#000")]
    labels = _labels(xy_chart("t", series, Axis("x", _plain), Axis("y", lambda v: f"${v:.3f}")))
    dollars = [label for label in labels if label.startswith("$")]
    assert dollars and len(dollars) == len(set(dollars))
    assert "$0.000" in dollars and "$0.001" in dollars
