"""HTML reports are well-formed, self-contained, carry the same numbers as the terminal, and land atomically."""

from __future__ import annotations

import os
import re
import stat
import sys
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path

import pytest

from computewise.errors import InputError
from computewise.estimate.single import InferEstimate, TrainEstimate
from computewise.plan.infer import InferPlan
from computewise.plan.result import Plan
from computewise.report.html import estimate_html, plan_html, write_html
from computewise.report.svg import ALERT
from computewise.units import format_bytes, format_duration, format_flops, format_usd

_VOID = {"meta", "link", "br", "hr", "img", "input", "col", "source", "wbr"}


class _Balance(HTMLParser):
    """Records every unclosed or mismatched tag; HTMLParser itself accepts anything."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.counts: dict[str, int] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.counts[tag] = self.counts.get(tag, 0) + 1
        if tag not in _VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.counts[tag] = self.counts.get(tag, 0) + 1

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1] if self.stack else 'nothing'}")
            return
        self.stack.pop()


def _check_well_formed(page: str) -> dict[str, int]:
    parser = _Balance()
    parser.feed(page)
    parser.close()
    assert parser.errors == []
    assert parser.stack == []
    assert page.startswith("<!DOCTYPE html>")
    return parser.counts


def _check_self_contained(page: str) -> None:
    # Nothing to fetch: no scripts, no linked resources, no CSS imports or url() loads.
    for pattern in (r"<script", r"\bsrc\s*=", r"\bhref\s*=", r"url\(", r"@import", r"https?://"):
        assert re.search(pattern, page, re.IGNORECASE) is None, pattern


def _text(page: str) -> str:
    """The page as a reader sees it: tags dropped, entities kept (the numbers contain none)."""
    return re.sub(r"<[^>]+>", "", page)


def test_estimate_page_is_well_formed_and_self_contained(train_estimate: TrainEstimate) -> None:
    page = estimate_html(train_estimate)
    counts = _check_well_formed(page)
    _check_self_contained(page)
    assert counts["svg"] == 1
    assert counts["rect"] >= 5  # five non-zero memory parts plus their legend swatches


def test_estimate_page_carries_the_terminal_numbers(train_estimate: TrainEstimate) -> None:
    text = _text(estimate_html(train_estimate))
    memory = train_estimate.device_memory
    for figure in (
        f"fits: {format_bytes(memory.total)} of {format_bytes(memory.capacity_bytes or 0)}",
        f"capacity {format_bytes(memory.capacity_bytes or 0)}",
        format_flops(train_estimate.flops),
        format_duration(train_estimate.seconds or 0),
        format_usd(train_estimate.usd or 0),
        "tokens/s",
        "Where a step goes",
        train_estimate.advice,
        train_estimate.notes[0],
    ):
        assert figure in text, figure


def test_memory_over_capacity_is_drawn_red(unsharded_estimate: TrainEstimate) -> None:
    page = estimate_html(unsharded_estimate)
    assert f'class="bad">does not fit: {format_bytes(unsharded_estimate.device_memory.total)} &gt; ' in page
    assert f'stroke="{ALERT}"' in page


def test_infer_estimate_page(infer_estimate: InferEstimate) -> None:
    page = estimate_html(infer_estimate)
    _check_well_formed(page)
    _check_self_contained(page)
    text = _text(page)
    assert "KV cache" in text
    assert f"{format_usd(infer_estimate.usd_per_1000_requests or 0)} per 1000 requests" in text


def test_text_from_the_result_is_escaped(train_estimate: TrainEstimate) -> None:
    model = replace(train_estimate.model, name='<script>alert("x")</script>')
    page = estimate_html(replace(train_estimate, model=model, notes=("a < b & c",)))
    _check_well_formed(page)
    assert "<script" not in page
    assert "&lt;script&gt;" in page
    assert "a &lt; b &amp; c" in page


def test_plan_page_has_frontier_scaling_and_tables(train_plan: Plan) -> None:
    page = plan_html(train_plan)
    counts = _check_well_formed(page)
    _check_self_contained(page)
    assert counts["svg"] == 4  # memory, cost vs time, time vs GPUs, efficiency vs GPUs
    text = _text(page)
    assert "considered 1234 candidate configurations, 15 feasible" in text
    assert "$1,747 spot at $39.30/h" in text
    assert format_usd(4401.6) in text  # scaling table, 128 GPUs
    assert "81%" in text
    assert "time vs GPUs" in text and "scaling efficiency vs GPUs" in text
    # 2.8 h to 45 d is more than 100x, so the time axis is logarithmic; $1,083 to $5,735 is not.
    assert "time to finish (log scale)" in text
    assert "cost (USD) (log scale)" not in text
    # Ticks on round human durations: the log time axis on the ladder, the linear one in whole hours.
    labels = re.findall(r"<text[^>]*>([^<]*)</text>", page)
    assert {"6 h", "1 d", "7 d", "30 d"} <= set(labels)
    assert {"10 h", "20 h", "30 h"} <= set(labels)
    # 15 candidates in grey, 7 frontier points, 1 recommendation; each with its table row as tooltip.
    assert counts["circle"] >= 15 + 7 + 1
    assert "polyline" in counts


def test_plan_page_lists_every_rejection_by_stage(train_plan: Plan) -> None:
    text = _text(plan_html(train_plan))
    assert "memory: 560 candidate configurations (14 rejections)" in text
    assert "(case 14)" in text  # the page has room for all of them
    assert "deadline: 13 candidate configurations (2 rejections)" in text


def test_plan_page_without_scaling(train_plan: Plan) -> None:
    page = plan_html(replace(train_plan, scaling=()))
    assert _check_well_formed(page)["svg"] == 2
    assert "time vs GPUs" not in page


def test_infer_plan_page(infer_plan: InferPlan) -> None:
    page = plan_html(infer_plan)
    _check_well_formed(page)
    _check_self_contained(page)
    text = _text(page)
    assert "Cost vs latency" in text
    assert "latency per request" in text
    assert "USD per 1000 requests" in text
    assert "$32,594 always on" in text
    assert "frontier" not in text.lower()  # its one-point frontier is the recommendation again


def test_write_html_writes_the_page(tmp_path: Path, train_estimate: TrainEstimate) -> None:
    page = estimate_html(train_estimate)
    target = tmp_path / "report.html"
    write_html(target, page)
    assert target.read_text(encoding="utf-8") == page
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]  # no temporary file left behind


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX permission bits")
def test_write_html_respects_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        write_html(tmp_path / "report.html", "<p>x</p>")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "report.html").stat().st_mode) == 0o644


def test_write_html_replaces_an_existing_file(tmp_path: Path) -> None:
    target = tmp_path / "report.html"
    target.write_text("old", encoding="utf-8")
    write_html(str(target), "new")
    assert target.read_text(encoding="utf-8") == "new"


def test_write_html_into_a_missing_directory_says_how_to_fix(tmp_path: Path) -> None:
    existing = tmp_path / "report.html"
    existing.write_text("old", encoding="utf-8")
    with pytest.raises(InputError) as error:
        write_html(tmp_path / "missing" / "report.html", "new")
    assert "does not exist" in error.value.message
    assert error.value.hint is not None and "mkdir -p" in error.value.hint
    assert existing.read_text(encoding="utf-8") == "old"
    assert not (tmp_path / "missing").exists()


def test_write_html_to_a_directory_fails(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="is a directory"):
        write_html(tmp_path, "new")


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "report.html"
    target.write_text("old", encoding="utf-8")

    def disk_full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(InputError, match="No space left on device") as error:
        write_html(target, "new")
    assert error.value.hint is not None and "free space" in error.value.hint
    assert target.read_text(encoding="utf-8") == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]


def test_an_interrupted_write_leaves_the_old_file_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "report.html"
    target.write_text("old", encoding="utf-8")

    def interrupted(fd: int) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_html(target, "new")
    assert target.read_text(encoding="utf-8") == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]


def test_write_html_into_a_read_only_directory_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Simulated: chmod does not stop root, and tests may run as root.
    def denied(*args: object, **kwargs: object) -> int:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "open", denied)
    with pytest.raises(InputError, match="Permission denied") as error:
        write_html(tmp_path / "report.html", "new")
    assert error.value.hint is not None and "writable" in error.value.hint
    assert list(tmp_path.iterdir()) == []
