"""Small SVG charts drawn by our own code, so an HTML report is one self-contained file.

A plotting library would bring JavaScript or a network fetch, and a report must still open on an
air-gapped laptop years later. All text goes through ``html.escape``. Axes and labels use
``currentColor`` so a chart follows the page's light or dark theme; data colours come from
:data:`PALETTE`, which reads on both. Every mark carries a ``<title>``, the browser's own tooltip.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

__all__ = [
    "ALERT",
    "MUTED",
    "PALETTE",
    "Axis",
    "Column",
    "Segment",
    "Series",
    "stacked_bar",
    "stacked_columns",
    "use_log",
    "xy_chart",
]

PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#9c755f")
MUTED = "#9aa0a6"
ALERT = "#d62728"

_FONT = 'font-family="system-ui, sans-serif" font-size="11"'
_MAX_TICKS = 8


@dataclass(frozen=True)
class Axis:
    """How one axis reads: its title, tick format, scale, and optionally a fixed range or fixed ticks."""

    label: str
    format: Callable[[float], str]
    log: bool = False
    domain: tuple[float, float] | None = None
    ticks: tuple[float, ...] = ()  # fixed tick positions, e.g. the GPU counts actually planned
    unit: float = 1.0  # linear ticks fall on round multiples of this: 3600 gives 5 h, 10 h, not 16.7 h


@dataclass(frozen=True)
class Series:
    """Points in data units; ``line`` joins them in the given order, ``radius`` 0 draws no markers."""

    name: str
    points: tuple[tuple[float, float], ...]
    color: str
    line: bool = False
    radius: float = 3.5
    tips: tuple[str, ...] = ()  # one tooltip per point; the series name where missing


@dataclass(frozen=True)
class Column:
    """One stacked series of :func:`stacked_columns`: a value per category (``None`` or 0 draws nothing)."""

    name: str
    values: tuple[float, ...]
    color: str


@dataclass(frozen=True)
class Segment:
    label: str
    value: float
    color: str


def use_log(values: Sequence[float], ratio: float = 100.0) -> bool:
    """Log scale once positive data span more than ``ratio``: on a linear axis the small values collapse onto zero."""
    return bool(values) and min(values) > 0 and max(values) / min(values) > ratio


def _n(value: float) -> str:
    return f"{value:.1f}"


def _text(x: float, y: float, text: str, anchor: str = "start", extra: str = "") -> str:
    return f'<text x="{_n(x)}" y="{_n(y)}" text-anchor="{anchor}" fill="currentColor"{extra}>{escape(text)}</text>'


def _chart_head(width: int, height: int, title: str, left: float) -> list[str]:
    """A chart's opening ``<svg>`` tag (its size, the title read aloud, the font) and its bold title at ``left``."""
    return [
        f'<svg class="chart" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        f'role="img" aria-label="{escape(title)}" {_FONT}>',
        _text(left, 16, title, extra=' font-weight="bold" font-size="13"'),
    ]


def _nice_step(span: float) -> float:
    """1, 2 or 5 times a power of ten, nearest (geometrically) to a fifth of the span: steps one adds in one's head."""
    raw = span / 5
    magnitude = 10.0 ** math.floor(math.log10(raw))
    error = raw / magnitude
    # Thresholds at the geometric midpoints between 1, 2, 5 and 10, as d3's tickIncrement does.
    factor = 10 if error >= math.sqrt(50) else 5 if error >= math.sqrt(10) else 2 if error >= math.sqrt(2) else 1
    return factor * magnitude


def _linear_ticks(lo: float, hi: float) -> list[float]:
    step = _nice_step(hi - lo)
    first = math.ceil(lo / step - 1e-9) * step
    count = math.floor((hi - first) / step + 1e-9) + 1
    return [first + i * step for i in range(count)]


def _log_ticks(lo: float, hi: float) -> list[float]:
    """Powers of ten; 2x and 5x in between when the range spans under two decades."""
    low, high = math.log10(lo), math.log10(hi)
    ticks = [10.0**e for e in range(math.ceil(low - 1e-9), math.floor(high + 1e-9) + 1)]
    if len(ticks) < 3:
        ticks = [
            m * 10.0**e
            for e in range(math.floor(low), math.floor(high) + 1)
            for m in (1, 2, 5)
            if lo <= m * 10.0**e <= hi
        ]
    return ticks if len(ticks) >= 2 else _linear_ticks(lo, hi)


def _thin(ticks: Sequence[float]) -> list[float]:
    stride = math.ceil(len(ticks) / _MAX_TICKS)
    return list(ticks[::stride])


def _distinct(ticks: Sequence[float], label: Callable[[float], str]) -> list[float]:
    """Ticks whose labels differ from the one before: a format rounding 0.0001 and 0.0002 both to "$0.0002"
    would otherwise write one value at two heights."""
    kept: list[float] = []
    for tick in ticks:
        if not kept or label(tick) != label(kept[-1]):
            kept.append(tick)
    return kept


@dataclass(frozen=True)
class _Scale:
    lo: float
    hi: float
    start: float  # pixel of lo
    end: float  # pixel of hi
    log: bool

    def __call__(self, value: float) -> float:
        if self.log:
            t = (math.log10(value) - math.log10(self.lo)) / (math.log10(self.hi) - math.log10(self.lo))
        else:
            t = (value - self.lo) / (self.hi - self.lo)
        return self.start + t * (self.end - self.start)

    def ticks(self, axis: Axis) -> list[float]:
        chosen = [t for t in axis.ticks if self.lo <= t <= self.hi]
        if len(chosen) < 2:
            if self.log:
                chosen = _log_ticks(self.lo, self.hi)
            else:
                chosen = [t * axis.unit for t in _linear_ticks(self.lo / axis.unit, self.hi / axis.unit)]
        return _distinct(_thin(chosen), axis.format)


def _scale(values: Sequence[float], axis: Axis, start: float, end: float) -> _Scale:
    """Data range plus 5 % padding (on a log axis, 5 % of the decades); never below zero for non-negative data.

    ``values`` are non-empty and, on a log axis, positive: :func:`xy_chart` drops the others first.
    """
    if axis.domain is not None:
        return _Scale(axis.domain[0], axis.domain[1], start, end, axis.log)
    lo, hi = min(values), max(values)
    if axis.log:
        pad = (hi / lo) ** 0.05 if hi > lo else 2.0
        return _Scale(lo / pad, hi * pad, start, end, True)
    if hi == lo:
        half = abs(lo) / 2 or 0.5
        lo, hi = lo - half, hi + half
    pad = (hi - lo) * 0.05
    low = lo - pad
    if min(values) >= 0:
        low = max(0.0, low)
    return _Scale(low, hi + pad, start, end, False)


def xy_chart(title: str, series: Sequence[Series], x: Axis, y: Axis, width: int = 640, height: int = 360) -> str:
    """Scatter and line plot in one: markers, optional joining lines, gridlines, ticks and axis titles.

    Returns "" when there is no point to draw; a log axis silently drops points it cannot place (<= 0).
    """
    drawn = [
        (
            s,
            [
                (px, py, s.tips[i] if i < len(s.tips) else s.name)
                for i, (px, py) in enumerate(s.points)
                if (px > 0 or not x.log) and (py > 0 or not y.log)
            ],
        )
        for s in series
    ]
    xs = [px for _, points in drawn for px, _, _ in points]
    ys = [py for _, points in drawn for _, py, _ in points]
    if not xs:
        return ""
    named = [s for s in series if s.name]
    left, right, top, bottom = 78.0, 16.0, 44.0 if named else 30.0, 46.0
    sx = _scale(xs, x, left, width - right)
    sy = _scale(ys, y, height - bottom, top)
    out = _chart_head(width, height, title, left)
    legend_x = left
    for s in named:
        out.append(f'<circle cx="{_n(legend_x + 5)}" cy="30" r="4" fill="{s.color}"/>')
        out.append(_text(legend_x + 13, 34, s.name))
        legend_x += 24 + 6.5 * len(s.name)
    base_y, base_x = height - bottom, left
    for tick in sy.ticks(y):
        py = sy(tick)
        out.append(
            f'<line x1="{_n(base_x)}" y1="{_n(py)}" x2="{_n(width - right)}" y2="{_n(py)}" '
            'stroke="currentColor" stroke-opacity="0.15"/>'
        )
        out.append(_text(base_x - 6, py + 4, y.format(tick), "end"))
    for tick in sx.ticks(x):
        px = sx(tick)
        out.append(f'<line x1="{_n(px)}" y1="{_n(base_y)}" x2="{_n(px)}" y2="{_n(base_y + 5)}" stroke="currentColor"/>')
        out.append(_text(px, base_y + 17, x.format(tick), "middle"))
    out.append(
        f'<path d="M{_n(base_x)},{_n(top)} V{_n(base_y)} H{_n(width - right)}" fill="none" stroke="currentColor"/>'
    )
    out.append(_text((left + width - right) / 2, height - 8, f"{x.label}{' (log scale)' if sx.log else ''}", "middle"))
    mid_y = (top + base_y) / 2
    out.append(
        _text(
            14,
            mid_y,
            f"{y.label}{' (log scale)' if sy.log else ''}",
            "middle",
            f' transform="rotate(-90 14 {_n(mid_y)})"',
        )
    )
    for s, points in drawn:
        pixels = [(sx(px), sy(py), tip) for px, py, tip in points]
        if s.line and len(pixels) > 1:
            path = " ".join(f"{_n(px)},{_n(py)}" for px, py, _ in pixels)
            out.append(f'<polyline points="{path}" fill="none" stroke="{s.color}" stroke-width="2"/>')
        if s.radius > 0:
            out.extend(
                f'<circle cx="{_n(px)}" cy="{_n(py)}" r="{s.radius}" fill="{s.color}" fill-opacity="0.85">'
                f"<title>{escape(tip)}</title></circle>"
                for px, py, tip in pixels
            )
    out.append("</svg>")
    return "\n".join(out)


def stacked_bar(
    title: str,
    segments: Sequence[Segment],
    format: Callable[[float], str],
    limit: float | None = None,
    limit_label: str = "",
    width: int = 640,
) -> str:
    """One horizontal bar split into parts, with a vertical line at ``limit`` (e.g. device memory) and a legend.

    The line turns red when the parts add up past it: the picture answers "does it fit?" at a glance.
    """
    total = sum(s.value for s in segments)
    pad, bar_y, bar_h = 10.0, 34.0, 26.0
    scale_hi = max(total, limit or 0.0) * 1.04 or 1.0
    columns = 2
    legend_top = bar_y + bar_h + 56  # below the total and the limit labels, which sit on rows of their own
    rows = math.ceil(len(segments) / columns)
    height = int(legend_top + rows * 18 + 6)

    def px(value: float) -> float:
        return pad + value / scale_hi * (width - 2 * pad)

    out = _chart_head(width, height, title, pad)
    start = 0.0
    for s in segments:
        x0, x1 = px(start), px(start + s.value)
        share = f" ({s.value / total:.1%})" if total else ""
        out.append(
            f'<rect x="{_n(x0)}" y="{_n(bar_y)}" width="{_n(max(x1 - x0, 0.5))}" height="{_n(bar_h)}" '
            f'fill="{s.color}"><title>{escape(f"{s.label}: {format(s.value)}{share}")}</title></rect>'
        )
        start += s.value
    out.append(
        _text(px(total), bar_y + bar_h + 14, f"total {format(total)}", "end" if px(total) > width / 2 else "start")
    )
    if limit is not None:
        lx = px(limit)
        color = ALERT if total > limit else "currentColor"
        out.append(
            f'<line x1="{_n(lx)}" y1="{_n(bar_y - 8)}" x2="{_n(lx)}" y2="{_n(bar_y + bar_h + 20)}" '
            f'stroke="{color}" stroke-width="2" stroke-dasharray="4 3"/>'
        )
        out.append(_text(lx, bar_y + bar_h + 30, limit_label, "end" if lx > width / 2 else "start"))
    column_w = (width - 2 * pad) / columns
    for i, s in enumerate(segments):
        lx = pad + (i % columns) * column_w
        ly = legend_top + (i // columns) * 18
        share = f" ({s.value / total:.1%})" if total else ""
        out.append(f'<rect x="{_n(lx)}" y="{_n(ly - 9)}" width="10" height="10" fill="{s.color}"/>')
        out.append(_text(lx + 15, ly, f"{s.label} {format(s.value)}{share}"))
    out.append("</svg>")
    return "\n".join(out)


def stacked_columns(
    title: str, categories: Sequence[str], columns: Sequence[Column], y: Axis, width: int = 640, height: int = 360
) -> str:
    """Vertical bars, one per category (a day, a week), each split into the ``columns`` stacked bottom-up.

    Spend per day stacked by team reads at a glance as "how much, and whose". Every rectangle carries
    a tooltip with its series, category and value. The value axis is linear from zero (``y.log`` is
    ignored: a stack has no meaning on a log scale). Returns "" when there is nothing to draw.
    """
    if not categories or not columns:
        return ""
    totals = [sum(max(0.0, c.values[i]) for c in columns if i < len(c.values)) for i in range(len(categories))]
    named = [c for c in columns if c.name]
    left, right, top, bottom = 78.0, 16.0, 44.0 if named else 30.0, 46.0
    sy = _scale([0.0, max(totals) or 1.0], Axis(y.label, y.format, domain=y.domain, unit=y.unit), height - bottom, top)
    slot = (width - right - left) / len(categories)
    bar_w = max(1.0, slot * 0.8)
    out = _chart_head(width, height, title, left)
    legend_x = left
    for c in named:
        out.append(f'<rect x="{_n(legend_x)}" y="25" width="10" height="10" fill="{c.color}"/>')
        out.append(_text(legend_x + 13, 34, c.name))
        legend_x += 24 + 6.5 * len(c.name)
    base_y = height - bottom
    for tick in sy.ticks(y):
        py = sy(tick)
        out.append(
            f'<line x1="{_n(left)}" y1="{_n(py)}" x2="{_n(width - right)}" y2="{_n(py)}" '
            'stroke="currentColor" stroke-opacity="0.15"/>'
        )
        out.append(_text(left - 6, py + 4, y.format(tick), "end"))
    stride = math.ceil(len(categories) / _MAX_TICKS)
    for i, category in enumerate(categories):
        x0 = left + i * slot + (slot - bar_w) / 2
        if i % stride == 0:
            out.append(_text(x0 + bar_w / 2, base_y + 17, category, "middle"))
        stacked = 0.0
        for c in columns:
            value = c.values[i] if i < len(c.values) else 0.0
            if value <= 0:
                continue
            y0, y1 = sy(stacked), sy(stacked + value)
            stacked += value
            tip = f"{c.name + ', ' if c.name else ''}{category}: {y.format(value)}"
            out.append(
                f'<rect x="{_n(x0)}" y="{_n(y1)}" width="{_n(bar_w)}" height="{_n(max(y0 - y1, 0.5))}" '
                f'fill="{c.color}"><title>{escape(tip)}</title></rect>'
            )
    axes = f"M{_n(left)},{_n(top)} V{_n(base_y)} H{_n(width - right)}"
    out.append(f'<path d="{axes}" fill="none" stroke="currentColor"/>')
    mid_y = (top + base_y) / 2
    out.append(_text(14, mid_y, y.label, "middle", f' transform="rotate(-90 14 {_n(mid_y)})"'))
    out.append("</svg>")
    return "\n".join(out)
