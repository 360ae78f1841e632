"""catalog.track_record: the error bands every estimate prints, and the kind of run each estimate is."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from computewise.catalog.track_record import load_track_record, scope_for
from computewise.errors import CatalogError

CLI = [sys.executable, "-m", "computewise.cli.app"]


def _estimate(*args: str, verb: str = "train") -> subprocess.CompletedProcess[str]:
    command = [*CLI, "estimate", verb, "--model", "llama-3-8b", "--gpu", "h100", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


def test_the_scope_is_one_device_one_node_or_many() -> None:
    assert scope_for(1, 8) == "single-gpu"
    assert scope_for(8, 8) == "one-node"
    assert scope_for(16, 8) == "many-nodes"
    assert scope_for(1, 8, experts=8) == "mixture-of-experts"  # routing and token exchange: a kind of its own


def test_the_bundled_file_holds_measured_bands_only() -> None:
    records = load_track_record()
    assert ("single-gpu", "train", "time") in records
    assert ("one-node", "infer", "time") not in records  # nothing measured there: no guess
    for record in records.values():
        # A fraction of the measured figure; a miss can exceed 100 % (MoE dispatch), never 1,000 %.
        assert record.rows > 0 and 0 <= record.median_abs_error <= record.worst_abs_error < 10


def test_a_file_with_another_header_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "track_record.csv"
    bad.write_text("scope,kind\nsingle-gpu,train\n")
    with pytest.raises(CatalogError, match="header"):
        load_track_record(bad)


def test_estimate_prints_its_band_and_says_when_none_was_measured() -> None:
    one = _estimate("--json")
    assert one.returncode == 0, one.stderr
    accuracy = json.loads(one.stdout)["accuracy"]
    record = load_track_record()[("single-gpu", "train", "time")]
    assert accuracy["scope"] == "single-gpu"
    assert accuracy["time"]["median_abs_error"] == record.median_abs_error
    eight = _estimate("--gpus", "8")
    assert eight.returncode == 0, eight.stderr
    assert "accuracy on one-node training so far: time ±" in " ".join(eight.stdout.split())
    served = _estimate("--gpus", "2", verb="infer")
    assert served.returncode == 0, served.stderr
    assert "time not yet checked against a measured run of this kind" in " ".join(served.stdout.split())


def test_a_many_node_estimate_says_how_many_published_layouts_of_its_kind_fit() -> None:
    """No measured memory peak spans nodes yet, but every published multi-node run ran: the estimate says how
    many of those layouts its memory model lets fit (all of them: tests/estimate/test_accuracy.py)."""
    record = load_track_record()[("many-nodes", "train", "fits")]
    assert record.rows >= 40 and record.worst_abs_error == 0.0
    done = _estimate("--gpus", "64", "--tp", "4", "--pp", "4", "--json")
    assert done.returncode == 0, done.stderr
    accuracy = json.loads(done.stdout)["accuracy"]
    assert accuracy["memory"] is None
    assert accuracy["published_layouts_fit"]["published_layouts"] == record.rows
    assert accuracy["published_layouts_fit"]["fit"] == record.rows
    text = " ".join(_estimate("--gpus", "64", "--tp", "4", "--pp", "4").stdout.split())
    assert f"{record.rows} of {record.rows} published layouts of this kind fit, as they did when they ran" in text
