"""A small real search on tiny_gpt: halving, references, the written config, the ledger run; and its refusals."""

from __future__ import annotations

import json
import textwrap
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

from computewise.errors import InputError, NothingFitsError, TuneError
from computewise.ledger import Ledger
from computewise.train.config import TrainConfig, load_config
from computewise.tune.search import TuneOptions, TuneProgress, TuneResult, run_tune

pytestmark = pytest.mark.torch

ROOT = Path(__file__).resolve().parents[2]
GPT = "examples.tiny_gpt:setup"
TINY_GPT = {"preset": "smoke"}  # examples/tiny_gpt.py: the smallest model that still trains


@pytest.fixture(scope="module")
def searched(tmp_path_factory: pytest.TempPathFactory) -> tuple[TuneResult, list[TuneProgress], Path]:
    """One search for the module: 2 precisions x 3 micro-batches x fused on/off, checkpointing pruned away."""
    work = tmp_path_factory.mktemp("tune")
    updates: list[TuneProgress] = []
    options = TuneOptions(
        setup_config=TINY_GPT,
        space="precision=fp32,bf16;micro=2,4,8;checkpointing=off,on;compile=off;workers=0;fused=off,on",
        steps=6,
        min_steps=2,
        threads=1,
        run_hours=100.0,
        out=work / "best.json",
        db=f"sqlite:///{work / 'ledger.db'}",
        tags={"team": "tests"},
    )
    return run_tune(GPT, options, updates.append), updates, work


def test_the_halving_measures_every_candidate_briefly_and_the_best_third_longer(
    searched: tuple[TuneResult, list[TuneProgress], Path],
) -> None:
    result, _, _ = searched
    assert [(rung.steps, rung.candidates) for rung in result.rungs] == [(2, 12), (6, 4)]
    halving = [t for t in result.trials if t.stage == "halving"]
    assert len([t for t in halving if t.rung == 0]) == 12 and len([t for t in halving if t.rung == 1]) == 4
    assert all(t.result.status == "ok" for t in result.trials)
    assert not any(t.config.activation_checkpointing for t in result.trials)  # it fits without: pruned
    assert len(result.pruning.dropped) == 12
    assert result.best.steps == 6 and result.best.result.median_step_s is not None
    fastest_top = min((t for t in result.trials if t.steps == 6), key=lambda t: t.result.median_step_s or float("inf"))
    assert result.best.result.median_step_s == fastest_top.result.median_step_s


def test_the_references_are_measured_like_the_winner(searched: tuple[TuneResult, list[TuneProgress], Path]) -> None:
    result, _, _ = searched
    assert result.baseline is not None and result.largest_batch is not None
    assert result.baseline.config == TrainConfig(precision="fp32", micro_batch_size=8)
    assert result.baseline.steps == 6 and result.largest_batch.steps == 6
    assert result.largest_batch.config.micro_batch_size == 8
    data = result.to_dict()
    speedups = data["speedup"]
    assert speedups["vs_baseline"] == pytest.approx(
        result.baseline.result.median_step_s / result.best.result.median_step_s
    )
    assert speedups["vs_baseline"] >= 1.0 or result.best.config == result.baseline.config
    plan = data["plan"]
    assert plan["basis"] == "run-hours" and plan["naive_hours"] == 100.0
    assert plan["tuned_hours"] == pytest.approx(100.0 / speedups["vs_baseline"])
    assert data["tuning"]["cost_usd"] == pytest.approx(result.price.hourly_usd * result.wall_s / 3600)
    assert data["mfu"]["peak"] is None and "--gpu" in data["mfu"]["note"]
    json.dumps(data)  # JSON-ready all the way down


def test_the_best_configuration_is_written_for_computewise_train(
    searched: tuple[TuneResult, list[TuneProgress], Path],
) -> None:
    result, _, work = searched
    assert load_config(work / "best.json") == result.best.config
    written = json.loads((work / "best.json").read_text())
    assert written["entry"] == GPT and written["measured"]["samples_per_s"] == result.best.result.samples_per_s


def test_the_report_reads_the_typed_result(searched: tuple[TuneResult, list[TuneProgress], Path]) -> None:
    """``print_tune`` takes the ``TuneResult`` itself (issue 28): no dict between the search and the printer."""
    from rich.console import Console

    from computewise.report.tune import print_tune

    result, _, work = searched
    console = Console(record=True, width=120)
    print_tune(result, console)
    text = console.export_text()
    for expected in (f"computewise tune: {GPT}", "best", "vs naive", "planned run", "tokens a sample", "break-even"):
        assert expected in text
    assert f"wrote the best configuration to {work / 'best.json'}" in " ".join(text.split())
    assert "LoRA rank" not in text and "lora" not in result.to_dict()  # a plain search's JSON is as before


def test_the_tuning_is_a_ledger_run_with_its_price(searched: tuple[TuneResult, list[TuneProgress], Path]) -> None:
    result, _, work = searched
    assert result.ledger_run_id is not None
    with Ledger.open(f"sqlite:///{work / 'ledger.db'}") as ledger:
        run = ledger.run(result.ledger_run_id)
    assert run.status == "succeeded" and run.kind == "tune"
    assert run.tags == {"team": "tests"}
    assert run.command == f"computewise tune {GPT}"
    assert run.price.hourly_usd == result.price.hourly_usd
    assert run.summary is not None and run.summary["tune"]["best"] == result.best.config.to_dict()


def test_progress_reports_every_trial_and_the_best_so_far(
    searched: tuple[TuneResult, list[TuneProgress], Path],
) -> None:
    result, updates, _ = searched
    assert updates[-1].done == len(result.trials)
    assert all(u.done <= u.total for u in updates)
    assert any(u.best is not None and "samples/s" in u.best for u in updates)
    assert updates[0].stage.startswith("rung 1/2")


def _short_search(space: str, **options: Any) -> TuneOptions:
    """Three-step trials on one thread, one compiled finalist, no ledger run: the search tests' common ground."""
    return TuneOptions(
        setup_config=TINY_GPT, space=space, steps=3, min_steps=2, threads=1, compile_finalists=1, record=False,
        **options,
    )  # fmt: skip


def test_compilation_is_tried_on_the_finalists_only(tmp_path: Path) -> None:
    options = _short_search("precision=fp32;micro=4,8;checkpointing=off;compile=off,on;workers=0;fused=off")
    result = run_tune(GPT, options)
    stages = [(t.stage, t.config.compile, t.config.compile_loss) for t in result.trials]
    assert stages.count(("halving", False, False)) == 2
    # The finalist compiled, then the same configuration with its loss compiled inside the graph.
    assert [stage for stage in stages if stage[0] == "compile"] == [("compile", True, False), ("compile", True, True)]
    compiled = [t for t in result.trials if t.stage == "compile"]
    assert compiled[1].config == replace(compiled[0].config, compile_loss=True)
    for trial in compiled:
        assert trial.result.status == "ok", trial.result.message
        assert trial.result.first_step_s is not None and trial.result.warmup_s is not None


def test_a_compilation_the_planned_run_cannot_repay_neither_wins_nor_tries_slower_modes() -> None:
    # Two steps of 8 x 16 tokens: compiling (seconds on a CPU) can never be repaid by a faster step.
    options = _short_search(
        "precision=fp32;micro=8;checkpointing=off;compile=off,on,max-autotune-no-cudagraphs;workers=0;fused=off",
        tokens=256.0,
    )
    result = run_tune(GPT, options)
    assert [t.stage for t in result.trials].count("compile") == 1  # the default mode only
    assert any(
        note.startswith("compile_mode=max-autotune-no-cudagraphs not tried: even saving all of the planned run's")
        for note in result.notes
    )
    assert not result.best.config.compile  # its warm-up is counted against the two steps it would save on


def test_a_spent_time_budget_stops_the_search_after_its_first_trial() -> None:
    """A budget spent before the first trial ends (a millisecond) still leaves that trial's configuration
    to recommend; growth stops there, no halving or compilation trial starts, and the references run."""
    space = "precision=fp32;checkpointing=off;compile=off,on;workers=0;fused=off,on"
    options = _short_search(space, time_budget_s=0.001)
    result = run_tune(GPT, options)
    assert result.growth is not None and result.growth.stopped == "time budget"
    assert [t.stage for t in result.trials] == ["batch-growth", "baseline", "largest-batch"]
    # The growth trial's configuration, measured again at the top rung's length as the largest-batch reference.
    assert result.best.config.micro_batch_size == result.growth.best and result.baseline is not None
    assert any(note.startswith("the time budget (") and "did not run" in note for note in result.notes)


def test_refusals_come_before_any_trial(tmp_path: Path) -> None:
    with pytest.raises(NothingFitsError, match="runs out of memory"):
        run_tune(GPT, TuneOptions(setup_config=TINY_GPT, memory_bytes=1e5, record=False))
    with pytest.raises(InputError, match="tokens_per_sample"):
        run_tune("examples.digits_cnn:setup", TuneOptions(tokens=1e9, record=False))
    with pytest.raises(InputError, match="not both"):
        TuneOptions(run_hours=1.0, tokens=1e9)


def test_when_every_trial_fails_the_tuning_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "broken_loss.py").write_text(
        textwrap.dedent(
            """
            import torch
            from computewise.train.setup import TrainingSetup

            def setup(config):
                def loss(model, batch):
                    if not torch.is_grad_enabled() or model.weight.device.type != "meta":
                        raise RuntimeError("the loss only works while traced")
                    inputs, targets = batch
                    return torch.nn.functional.mse_loss(model(inputs), targets)
                data = torch.utils.data.TensorDataset(torch.randn(8, 4), torch.randn(8, 1))
                return TrainingSetup(torch.nn.Linear(4, 1), loss, data, 4, lambda p, fused: torch.optim.SGD(p, lr=0.1))
            """
        )
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}:{ROOT}")
    logs = tmp_path / "logs"
    options = TuneOptions(
        space="micro=2,4;fused=off;workers=0;compile=off", steps=2, min_steps=1, record=False, log_dir=logs
    )
    with pytest.raises(TuneError, match=r"every trial failed.*the loss only works while traced") as caught:
        run_tune("broken_loss:setup", options)
    assert str(logs) in (caught.value.hint or "")
    assert "RuntimeError: the loss only works while traced" in (logs / "trial-001.log").read_text()
