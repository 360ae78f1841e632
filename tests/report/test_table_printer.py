"""The one table printer: which columns give way, where text folds, and how wide a pipe is."""

from __future__ import annotations

import io
from dataclasses import replace
from typing import Any

import pytest
from rich.cells import cell_len
from rich.console import Console

from computewise.plan.infer import InferPlan
from computewise.report.rows import Grid, plural, recommendation
from computewise.report.scaletest import scaletest_grid
from computewise.report.table import available_width, fit_widths, print_table
from computewise.report.tune import tune_grid
from computewise.train.config import TrainConfig
from computewise.tune.prune import MemoryEstimate
from computewise.tune.scaletest import ScaleTestResult, WorldSizeResult
from computewise.tune.search import TrialRecord
from computewise.tune.trial import TrialResult, TrialStatus

RUNS = Grid(
    headers=("id", "started", "status", "duration", "cost", "tags", "command"),
    rows=(
        (
            "1207",
            "2026-11-23 05:38:02",
            "succeeded",
            "10.0 h",
            "$16,223",
            "project=llama-finetune team=nlp-research",
            "torchrun --nproc-per-node 8 finetune.py --config configs/llama-70b-lora.yaml",
        ),
        ("1208", "2026-11-23 07:01:44", "crashed", "45.0 h", "$4,424", "team=vision", "python eval.py"),
    ),
    numeric=frozenset({0, 3, 4}),
    whole=frozenset({1, 2}),
    drop_order=(5, 1, 3),
)


def _render(grid: Grid, width: int, monkeypatch: pytest.MonkeyPatch) -> str:
    """What a pipe with COLUMNS=width shows."""
    monkeypatch.setenv("COLUMNS", str(width))
    out = io.StringIO()
    print_table(grid, Console(file=out, color_system=None))
    return out.getvalue()


def _whole_cells(grid: Grid, text: str, hidden: frozenset[str] | set[str] = frozenset()) -> None:
    lines = text.splitlines()
    for i, header in enumerate(grid.headers):
        if header in hidden or (i not in grid.numeric and i not in grid.whole):
            continue
        for row in grid.rows:
            assert not row[i] or any(row[i] in line for line in lines), f"{header}={row[i]!r} cut:\n{text}"


def test_low_priority_columns_go_first_and_the_footnote_names_them(monkeypatch: pytest.MonkeyPatch) -> None:
    text = _render(RUNS, 80, monkeypatch)
    assert max(cell_len(line) for line in text.splitlines()) <= 80
    assert "1 column hidden to fit 80 columns (tags)" in " ".join(text.split())
    assert "project=llama-finetune" not in text
    _whole_cells(RUNS, text)
    # The command folds between words, never inside one.
    for word in RUNS.rows[0][6].split():
        assert any(word in line for line in text.splitlines()), word


def test_at_100_columns_every_column_shows(monkeypatch: pytest.MonkeyPatch) -> None:
    text = _render(RUNS, 130, monkeypatch)
    assert "hidden" not in text and "team=nlp-research" in text
    _whole_cells(RUNS, text)


def test_narrower_than_the_numbers_prints_one_line_per_cell(monkeypatch: pytest.MonkeyPatch) -> None:
    text = _render(RUNS, 30, monkeypatch)
    assert "cost: $16,223" in text and "status: crashed" in text
    assert max(cell_len(line) for line in text.splitlines()) <= 30


def test_a_pipe_without_columns_has_no_edge(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    out = io.StringIO()
    console = Console(file=out, color_system=None)
    assert available_width(console) is None
    print_table(RUNS, console)
    assert RUNS.rows[0][6] in out.getvalue() and "hidden" not in out.getvalue()
    monkeypatch.setenv("COLUMNS", "80")
    assert available_width(Console(file=io.StringIO())) == 80


def test_long_words_fold_only_when_nothing_is_left_to_drop() -> None:
    row = ("onprem_power_usd_per_kwh", "0.081", "see https://www.eia.gov/electricity/monthly/epm_table_5_06_a")
    grid = Grid(("key", "value", "source"), (row,), frozenset({1}), whole=frozenset({0}))
    shown, widths = fit_widths(grid, 50)
    assert shown == [0, 1, 2]  # no column may be dropped, so the URL folds inside itself
    assert widths == {0: len(row[0]), 1: len("value"), 2: 50 - len(row[0]) - len("value") - 2}
    droppable = Grid(grid.headers, grid.rows, grid.numeric, grid.whole, drop_order=(2,))
    assert fit_widths(droppable, 50)[0] == [0, 1]  # a column that may go goes before a word is split


def _scaletest() -> ScaleTestResult:
    def row(nproc: int, step_s: float, efficiency: float | None, predicted: float) -> WorldSizeResult:
        return WorldSizeResult(
            nproc=nproc,
            status="ok",
            message="",
            global_batch_size=32 * nproc,
            rank_median_step_s=(step_s,) * nproc,
            step_s=step_s,
            warmup_s=None,
            samples_per_s=32 * nproc / step_s,
            tokens_per_s=32 * nproc * 1024 / step_s,
            speedup=None if efficiency is None else efficiency * nproc,
            efficiency=efficiency,
            predicted_allreduce_s=0.0123 * nproc,
            predicted_step_s=None,
            predicted_efficiency=predicted,
            wall_s=1.0,
        )

    return ScaleTestResult(
        entry="examples.tiny_gpt:setup",
        device="cpu",
        device_name="cpu",
        cores=4,
        threads_per_process=1,
        batch_per_rank=32,
        micro_batch_size=32,
        steps=10,
        warmup_steps=3,
        params=1_000_000,
        gradient_bytes=4_000_000,
        train_config="defaults",
        link=None,
        rows=(row(1, 0.8123, 1.0, 1.0), row(2, 0.9312, 0.87, 0.9), row(4, 1.7, 0.48, 0.8)),
        stops_paying_at=4,
        predicted_stops_paying_at=None,
        efficiency_floor=0.7,
        warnings=(),
    )


def _tune() -> list[TrialRecord]:
    def trial(number: int, micro: int, step_s: float | None, status: TrialStatus = "ok") -> TrialRecord:
        result = TrialResult(
            status,
            message="CUDA out of memory" if status != "ok" else None,
            step_times_s=() if step_s is None else (step_s,),
            peak_memory_bytes=None if step_s is None else 21_474_836_480 * micro // 16,
            global_batch_size=256,
        )
        config = TrainConfig(precision="bf16", micro_batch_size=micro, compile=True, loader_workers=1)
        estimate = MemoryEstimate(20_000_000_000 * micro / 16, 0.0, 0.0, 0.0, 0.0)
        return TrialRecord(number, "halving", 1, 40, config, estimate, result)

    return [trial(3, 16, 0.412), trial(5, 32, 0.398), trial(7, 64, None, "oom")]


@pytest.mark.parametrize("width", [80, 100])
@pytest.mark.parametrize("build", [lambda: scaletest_grid(_scaletest()), lambda: tune_grid(_tune())])
def test_scaletest_and_tune_tables_keep_their_numbers(width: int, build: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    grid = build()
    text = _render(grid, width, monkeypatch)
    assert max(cell_len(line) for line in text.splitlines()) <= width
    assert "…" not in text
    flat = " ".join(text.split())
    hidden: set[str] = set()
    if "hidden to fit" in flat:
        hidden = set(flat.split("columns (", 1)[1].split(")", 1)[0].split(", "))
        assert all(grid.headers.index(h) in grid.drop_order for h in hidden)
    _whole_cells(grid, text, hidden)


def test_counts_are_singular_at_one(infer_plan: InferPlan) -> None:
    one = replace(infer_plan.recommended, replicas=1)
    hardware = dict(recommendation(one))["hardware"]
    assert hardware.startswith("1 replica of ") and "replicas" not in hardware
    assert plural(1, "process", "processes") == "1 process" and plural(2, "process", "processes") == "2 processes"
    assert plural(0, "replica") == "0 replicas"


def test_a_path_wider_than_its_column_folds_after_a_separator(monkeypatch: pytest.MonkeyPatch) -> None:
    """storage audit's run folders and checkpoints: `direc|tory` and `safetenso|rs` were cut mid-word."""
    grid = Grid(
        ("run (folder)", "checkpoints", "newest"),
        (("runs/b/ckpt_very_long_directory_name_for_testing", "1", "model-step-000100-copy.safetensors"),),
        frozenset({1}),
    )
    text = _render(grid, 40, monkeypatch)
    pieces = [piece for line in text.splitlines()[2:] for piece in line.split()]
    assert all(cell_len(line) <= 40 for line in text.splitlines())
    assert "directory_" in pieces and "safetensors" in pieces  # whole between separators
    assert all(piece[-1] in "/_-." or piece in ("1", "testing", "safetensors") for piece in pieces), pieces


def test_prose_folds_at_spaces_and_keeps_every_path_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """A note with two paths: at 80 columns every line fits except a path wider than the terminal, which
    gets a line of its own; no word is cut. A bare pipe keeps the sentence on one line."""
    from computewise.report.prose import print_prose

    long_path = "/data/runs/b/" + "ckpt_" * 16 + "step-100.safetensors"
    note = f"duplicates: 1 group of identical files waste 2.9 MiB; largest: /data/runs/a/ckpt/step-100.pt, {long_path}"
    monkeypatch.setenv("COLUMNS", "80")
    out = io.StringIO()
    print_prose(Console(file=out, color_system=None), note, markup=False)
    lines = out.getvalue().splitlines()
    assert len(lines) == 3 and lines[-1] == long_path
    assert all(cell_len(line) <= 80 for line in lines[:-1])
    assert " ".join(lines) == note
    monkeypatch.delenv("COLUMNS")
    piped = io.StringIO()
    print_prose(Console(file=piped, color_system=None, force_terminal=False), note, markup=False)
    assert piped.getvalue() == note + "\n"


def test_an_energy_column_reads_in_one_unit() -> None:
    """cost report: a 2-second run's joules beside a week's kWh were J, Wh and kWh in one column."""
    from computewise.account.report import CostReport, CostRow
    from computewise.report.accounts import cost_grid

    def row(group: str, kwh: float, kg: float) -> CostRow:
        return CostRow(
            group=(("group", group),), runs=1, running=0, cost_usd=1.0, gpu_hours=1.0, energy_kwh=kwh,
            energy_all_measured=True, co2_kg=kg, gpu_util_pct_mean=None, cpu_percent_mean=None, idle_s=0.0,
            idle_cost_usd=0.0, assumed_price_runs=0, training_runs=0, usd_per_training_run=None, serving_runs=0,
            inferences=0, usd_per_1k_inferences=None,
        )  # fmt: skip

    rows = (row("a", 120.0, 50.0), row("b", 2e-6, 1e-6), row("c", 3e-4, 2e-4))
    total = row("(total)", 120.0003, 50.0002)
    grid = cost_grid(CostReport(by=(), since_s=None, until_s=1.0, now_s=1.0, rows=rows, total=total))
    energy, co2 = grid.headers.index("energy"), grid.headers.index("CO2")
    assert all(r[energy].endswith(" kWh") for r in grid.rows), [r[energy] for r in grid.rows]
    assert all(r[co2].endswith(" kg") for r in grid.rows), [r[co2] for r in grid.rows]
