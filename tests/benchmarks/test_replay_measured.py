"""benchmarks/replay_measured.py: the estimator against every row measured on a real H100, on the CPU.

The measured rows (benchmarks/data/measured/h100-2026-11-26) are independent of the code under test:
wall clocks and allocator peaks of real runs. The fitted host costs were fitted on the declared
``FIT_ROWS`` only; the targets are checked on the others (issue 26).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from benchmark_script import load_benchmark

pytest.importorskip("torch")  # the ladder's shapes come from benchmarks/validate_gpu.py, which imports torch

pytestmark = pytest.mark.torch

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "replay_measured.py"


@pytest.fixture(scope="module")
def replay() -> ModuleType:
    return load_benchmark("replay_measured")


@pytest.fixture(scope="module")
def rows(replay: ModuleType) -> list[object]:
    from computewise.catalog import load_catalog
    from computewise.estimate import Assumptions

    assumptions = Assumptions.from_catalog(load_catalog())
    return [replay.replay(case, assumptions) for case in replay.cases()]


def _time_errors(rows: list[object], replay: ModuleType, kind: str) -> list[float]:
    held = [r for r in rows if r.case.name not in replay.FIT_ROWS]  # type: ignore[attr-defined]
    picked = [r for r in held if (r.case.kind == "train") == (kind == "train")]  # type: ignore[attr-defined]
    return [abs(e) for r in picked if (e := r.error("time")) is not None]  # type: ignore[attr-defined]


def test_every_measured_file_is_replayed(rows: list[object]) -> None:
    names = [r.case.name for r in rows]  # type: ignore[attr-defined]
    assert sum(n.startswith("hf ") for n in names) == 18  # 12 training steps, 6 prefills
    assert sum(n.startswith("gpt2-124m") for n in names) == 4  # naive and compiled
    assert sum(n.startswith("h200 ") for n in names) == 13  # 2 ladder steps, a prefill, a decode, 9 GPT-2 trials
    assert len(names) == 61


def test_a_second_gpu_never_fitted_on(rows: list[object]) -> None:
    """The H200's training rows (benchmarks/gpu_suite.py, 2026-11-28), held out of every fit: median
    <= 10 %, worst <= 12 %. With Bekman's mamf-finder burst for its GEMM share (0.837, not the 0.729
    computewise bench measured) the compiled GPT-2 steps were 18-22 % too fast."""
    errors = [
        abs(r.error("time"))  # type: ignore[attr-defined]
        for r in rows
        if r.case.name.startswith("h200 ") and r.case.kind == "train"  # type: ignore[attr-defined]
    ]
    assert len(errors) == 11
    assert statistics.median(errors) <= 0.10
    assert max(errors) <= 0.12


def test_compiled_gpt2_steps_on_both_gpus(rows: list[object]) -> None:
    """Every compiled GPT-2 124M step (torch.compile, with and without CUDA graphs) on the H100 and the
    H200 within 15 %. Counted as compiled with the model, the loss outside the graph left them 6-19 %
    too fast on the H100 and 11-15 % on the H200."""
    compiled = [r for r in rows if "gpt2-124m c" in r.case.name]  # type: ignore[attr-defined]
    assert len(compiled) == 7
    assert all(abs(r.error("time")) <= 0.15 for r in compiled), [  # type: ignore[attr-defined]
        (r.case.name, r.error("time"))  # type: ignore[attr-defined]
        for r in compiled
    ]


def test_training_step_time_on_held_out_rows(rows: list[object], replay: ModuleType) -> None:
    """Median <= 15 %, worst <= 30 % (issue 26); before the kernel model: median 33 %, worst 150 % (ladder)."""
    errors = _time_errors(rows, replay, "train")
    assert len(errors) >= 30
    assert statistics.median(errors) <= 0.15
    assert max(errors) <= 0.30


def test_prefill_and_decode_time_on_held_out_rows(rows: list[object], replay: ModuleType) -> None:
    """Median <= 25 % (issue 26); before: 3x to 11x too fast on decode."""
    errors = _time_errors(rows, replay, "infer")
    assert len(errors) >= 9
    assert statistics.median(errors) <= 0.25


def test_fit_rows_are_matched_by_the_catalog_constants(rows: list[object], replay: ModuleType) -> None:
    """The catalog holds what ``--fit`` printed: each fit row within 2 %."""
    for r in rows:
        if r.case.name in replay.FIT_ROWS:  # type: ignore[attr-defined]
            assert abs(r.error("time")) <= 0.02, r.case.name  # type: ignore[attr-defined]


def test_the_script_prints_the_table() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=120, check=False)
    assert "train_s: median" in done.stdout, done.stdout + done.stderr
    assert "hf llama-1b-gqa s2048 b8 none" in done.stdout


def test_the_bundled_track_record_is_what_the_estimators_score_today(rows: list[object], replay: ModuleType) -> None:
    """Every estimate prints these bands: a change of the estimators that moves them must regenerate the file."""
    bundled = Path(replay.__file__).resolve().parents[1] / "src" / "computewise" / "catalog" / "data"
    assert (bundled / "track_record.csv").read_text() == replay.track_record_csv(rows)
