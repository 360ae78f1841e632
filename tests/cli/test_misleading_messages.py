"""Refusals that pointed the wrong way: each says what is actually wrong, once, and the fix for that.

Found by a newcomer (issue 27): a latency said three times without the accelerators, an empty folder
called an "unknown model", ``chmod +x`` for a directory, ``report.html`` for a Grafana dashboard,
"give an .npz" for a file that does not exist, "missing field num_attention_heads" for a Mamba model.
Each runs the real entry point in this process and reads ``error:`` / ``To fix:`` as a user would.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from computewise.cli.app import main  # noqa: TID251 (the real entry point, in-process)

ROOT = Path(__file__).resolve().parents[2]


def computewise(
    argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, code: int = 2
) -> str:
    """stderr of ``computewise ARGV`` (whitespace collapsed: Rich wraps at 80 columns), which must exit ``code``."""
    monkeypatch.setattr(sys, "argv", ["computewise", *argv])
    with pytest.raises(SystemExit) as done:
        main()
    stderr = " ".join(capsys.readouterr().err.split())
    assert done.value.code == code, stderr
    return stderr


@pytest.fixture(autouse=True)
def _sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COMPUTEWISE_DB", str(tmp_path / "ledger.sqlite"))
    monkeypatch.setenv("COMPUTEWISE_FAKE_GPU", "")


def test_an_unreachable_latency_is_said_once_naming_the_accelerators(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = ["plan", "infer", "--model", "llama-3-8b", "--peak-rps", "10", "--max-latency", "1ms"]
    stderr = computewise([*plan, "--gpu", "h100", "--gpu", "l4"], capsys, monkeypatch)
    message = re.fullmatch(
        r"error: no accelerator meets the latency target of 1\.0 ms: the fastest request takes "
        r"(\S+ \S+) on h100-sxm, (\S+ \S+) on l4 To fix: raise --max-latency or use a smaller --output-len",
        stderr,
    )
    assert message is not None, stderr
    everything = computewise(plan, capsys, monkeypatch)
    assert everything.count("fastest request takes") == 1
    assert re.search(r"on [a-z0-9.-]+, \S+ \S+ on [a-z0-9.-]+, \S+ \S+ on [a-z0-9.-]+ \(and \d+ slower", everything)


def test_a_folder_without_config_json_is_not_an_unknown_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "my-model").mkdir()
    stderr = computewise(["estimate", "train", "--model", "my-model", "--gpu", "h100"], capsys, monkeypatch)
    assert stderr.startswith("error: my-model: the folder has no config.json To fix: give the folder of a Hugging")
    assert "unknown model" not in stderr


def test_a_model_without_attention_is_not_supported_yet(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    mamba = {"model_type": "mamba", "hidden_size": 768, "num_hidden_layers": 24, "vocab_size": 50280, "state_size": 16}
    (tmp_path / "mamba-130m").mkdir()
    (tmp_path / "mamba-130m" / "config.json").write_text(json.dumps(mamba))
    stderr = computewise(["estimate", "train", "--model", "mamba-130m", "--gpu", "h100"], capsys, monkeypatch)
    assert "model_type 'mamba' is not supported yet" in stderr
    assert "To fix: pass a parameter count instead (e.g. --model 130M" in stderr
    assert "trace the module: computewise.models.trace_module(model, example_inputs)" in stderr
    assert "missing field" not in stderr


def test_running_a_directory_says_it_is_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "somedir").mkdir()
    stderr = computewise(["run", "--", "./somedir"], capsys, monkeypatch, code=126)  # as a shell exits
    assert "error: cannot execute ./somedir: it is a directory" in stderr
    assert "To fix: name the program to run, e.g. ./somedir/train.sh or python ./somedir/train.py" in stderr
    assert "chmod" not in stderr


def test_a_dashboard_written_to_a_directory_suggests_a_json_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    stderr = computewise(["grafana-dashboard", "--out", str(tmp_path)], capsys, monkeypatch)
    fix = f"give a file name, e.g. {tmp_path}/dashboard.json"
    assert stderr == f"error: cannot write {tmp_path}: it is a directory To fix: {fix}"


def test_missing_inputs_are_said_missing_before_the_model_loads(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)  # examples.digits, as the README runs it
    stderr = computewise(["optimize", "examples.digits:classifier", "--inputs", "missing.txt"], capsys, monkeypatch)
    assert "error: --inputs missing.txt: no such file To fix: check the path: --inputs takes sentences" in stderr
    assert ".npz" in stderr and "numpy.savez" not in stderr


def test_plan_infer_names_the_accelerator_nobody_rents_instead_of_a_filter(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only --gpu was given, so "drop a filter" pointed nowhere; say that the catalog rents no such device."""
    err = computewise(
        ["plan", "infer", "-m", "gpt2", "--gpu", "jetson-xavier-nx", "--peak-rps", "10"], capsys, monkeypatch
    )
    assert "the catalog rents no jetson-xavier-nx" in err and "drop a filter" not in err
    assert "computewise catalog list offerings" in err
