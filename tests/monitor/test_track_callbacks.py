"""The Lightning and Hugging Face callbacks on real, tiny trainers on the CPU (nothing downloaded).

Each test skips cleanly when its library is not installed; the last one checks that the module
imports, and says what to install, without either.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from computewise.ledger import Ledger


def _only_run(db: str) -> tuple[Any, list[Any]]:
    with Ledger.open(db) as ledger:
        (run,) = ledger.runs()
        return run, ledger.steps(run.id)


# -- Hugging Face ---------------------------------------------------------------------------------


def _hf_trainer(tmp_path: Path, callback: Any, max_steps: int) -> Any:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")  # the Trainer needs it on PyTorch
    config = transformers.BertConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=32,
        num_labels=2,
    )
    torch.manual_seed(0)
    model = transformers.BertForSequenceClassification(config)

    class Sentences(torch.utils.data.Dataset):  # type: ignore[misc]
        def __len__(self) -> int:
            return 64

        def __getitem__(self, index: int) -> dict[str, Any]:
            return {"input_ids": torch.randint(0, 100, (16,)), "labels": torch.tensor(index % 2)}

    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "hf"),
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        max_steps=max_steps,
        logging_strategy="steps",
        logging_steps=2,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        dataloader_num_workers=0,
        include_num_input_tokens_seen=True,
    )
    return transformers.Trainer(model=model, args=args, train_dataset=Sentences(), callbacks=[callback])


@pytest.mark.torch
def test_hf_trainer_run_is_recorded_step_by_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    pytest.importorskip("transformers")
    from computewise.monitor.callbacks import ComputewiseHFCallback

    db = str(tmp_path / "ledger.sqlite")
    callback = ComputewiseHFCallback(db=db, tags={"framework": "hf"}, flops_per_step=1e9)
    _hf_trainer(tmp_path, callback, max_steps=5).train()

    run, steps = _only_run(db)
    assert run.kind == "track"
    assert run.status == "succeeded"
    assert run.tags == {"framework": "hf"}
    assert [s.step for s in steps] == list(range(5))
    assert {s.samples for s in steps} == {8}  # 4 per device x 2 accumulation steps
    assert {s.tokens for s in steps} == {8 * 16}  # from the trainer's own token counter
    assert all(s.compute_s > 0 and s.data_wait_s >= 0 for s in steps)
    summary = callback.summary()
    assert summary is not None
    assert run.summary == summary
    assert summary["steps"] == 5
    assert summary["flops"] == pytest.approx(5e9)


# -- Lightning --------------------------------------------------------------------------------------


def _lightning_fit(tmp_path: Path, callback: Any, max_steps: int, fail_at: int | None = None) -> None:
    torch = pytest.importorskip("torch")
    lightning = pytest.importorskip("lightning")

    class Regressor(lightning.pytorch.LightningModule):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(16, 1)

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            if batch_idx == fail_at:
                raise RuntimeError("loss exploded")
            inputs, targets = batch
            return torch.nn.functional.mse_loss(self.layer(inputs), targets)

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(96, 16), torch.randn(96, 1))
    trainer = lightning.pytorch.Trainer(
        max_steps=max_steps,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=str(tmp_path / "pl"),
        callbacks=[callback],
    )
    trainer.fit(Regressor(), torch.utils.data.DataLoader(data, batch_size=12))


@pytest.mark.torch
def test_lightning_fit_is_recorded_batch_by_batch(tmp_path: Path) -> None:
    pytest.importorskip("lightning")
    from computewise.monitor.callbacks import ComputewiseLightningCallback

    db = str(tmp_path / "ledger.sqlite")
    callback = ComputewiseLightningCallback(db=db, tags={"framework": "lightning"}, accelerator="xeon-8480plus")
    _lightning_fit(tmp_path, callback, max_steps=10)  # 8 batches per epoch: crosses an epoch boundary

    run, steps = _only_run(db)
    assert run.status == "succeeded"
    assert run.accelerator == "xeon-8480plus"
    assert [s.step for s in steps] == list(range(10))
    assert {s.samples for s in steps} == {12}  # leading dimension of the (inputs, targets) batch
    summary = callback.summary()
    assert summary is not None and summary["steps"] == 10
    assert summary["samples"] == 120


@pytest.mark.torch
def test_lightning_failure_fails_the_run_and_the_error_reaches_the_caller(tmp_path: Path) -> None:
    pytest.importorskip("lightning")
    from computewise.monitor.callbacks import ComputewiseLightningCallback

    db = str(tmp_path / "ledger.sqlite")
    with pytest.raises(RuntimeError, match="loss exploded"):
        _lightning_fit(tmp_path, ComputewiseLightningCallback(db=db), max_steps=10, fail_at=3)
    run, steps = _only_run(db)
    assert run.status == "failed"
    assert run.error == "RuntimeError: loss exploded"
    assert len(steps) == 4  # three done, and the one that raised


def test_callback_options_are_checked_when_the_callback_is_made() -> None:
    from computewise.errors import InputError
    from computewise.monitor.callbacks import HFHooks, LightningHooks

    for hooks in (HFHooks, LightningHooks):
        with pytest.raises(InputError, match="unknown precision"):
            hooks(precision="fp12")


# -- without the libraries ------------------------------------------------------------------------


def test_callbacks_module_needs_neither_library_until_a_callback_is_asked_for() -> None:
    script = textwrap.dedent(
        """
        import sys
        for name in ("lightning", "lightning.pytorch", "pytorch_lightning", "transformers"):
            sys.modules[name] = None  # as if not installed: importing them raises ImportError
        import computewise.monitor.callbacks as callbacks
        from computewise.errors import MissingExtraError
        for name, package in (("ComputewiseLightningCallback", "lightning"), ("ComputewiseHFCallback", "transformers")):
            try:
                getattr(callbacks, name)
            except MissingExtraError as error:
                assert package in error.message, error.message
            else:
                raise SystemExit(f"{name} was built without {package}")
        print("ok")
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
