"""resolve_model: path, then count, then preset; and the package stays light to import."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import computewise.models
from computewise.errors import InputError, MissingExtraError, ModelConfigError, UnknownNameError
from computewise.models import resolve_model

FIXTURES = Path(__file__).parent / "fixtures"


def test_public_api_is_sorted() -> None:
    assert computewise.models.__all__ == sorted(computewise.models.__all__)


def test_config_file_and_directory() -> None:
    assert resolve_model(str(FIXTURES / "gpt2" / "config.json")).params == 124_439_808
    assert resolve_model(str(FIXTURES / "mixtral-8x7b")).experts == 8


def test_an_existing_file_wins_over_a_preset_of_that_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = json.loads((FIXTURES / "gpt2" / "config.json").read_text())
    (tmp_path / "gpt2").mkdir()
    (tmp_path / "gpt2" / "config.json").write_text(json.dumps({**config, "n_layer": 2}))
    monkeypatch.chdir(tmp_path)
    assert resolve_model("gpt2").layers == 2
    assert resolve_model("gpt2-medium").layers == 24


def test_a_config_beyond_the_parameter_range_is_refused_as_a_count_would_be(tmp_path: Path) -> None:
    """A config.json is held to --model's range too: a 1e12-token vocabulary makes 8e15 parameters."""
    config = json.loads((FIXTURES / "gpt2" / "config.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**config, "vocab_size": 10**12}))
    with pytest.raises(ModelConfigError, match=r"describes 7\.\d+e\+14 parameters; a model must have between 1 and"):
        resolve_model(str(path))


@pytest.mark.parametrize(
    ("text", "params"),
    [("7.5B", 7_500_000_000), ("7.5e9", 7_500_000_000), ("125M", 125_000_000), ("1.3e9", 1_300_000_000)],
)
def test_parameter_counts(text: str, params: int) -> None:
    spec = resolve_model(text)
    assert spec.params == params
    assert spec.shape_inferred


def test_plain_integer_count() -> None:
    assert resolve_model("350000000").params == 350_000_000


def test_presets_by_loose_name() -> None:
    assert resolve_model("Llama_3 8B").name == "llama-3-8b"
    assert resolve_model(" mistral-7b ").sliding_window == 4096


def test_unknown_name_says_what_to_give() -> None:
    with pytest.raises(UnknownNameError) as caught:
        resolve_model("mixtrel-8x7b")
    assert "mixtral-8x7b" in caught.value.suggestions
    assert caught.value.hint is not None
    assert caught.value.hint.startswith(
        "give a preset name, a path to a Hugging Face config.json, or a parameter count such as 7.5B"
    )
    # Every preset is listed, so `--model x` is how a newcomer finds them (README).
    assert "presets: bert-base," in caught.value.hint and "mixtral-8x7b" in caught.value.hint


def test_bad_inputs() -> None:
    with pytest.raises(ModelConfigError, match="no such file"):
        resolve_model("missing/config.json")
    with pytest.raises(InputError, match=r"--model must be between 1 and 1e14 parameters"):
        resolve_model("0")
    with pytest.raises(InputError, match="unknown suffix"):
        resolve_model("7Q")
    with pytest.raises(InputError, match="no model given"):
        resolve_model("  ")


def test_tracing_without_torch_is_a_missing_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` fail
    with pytest.raises(MissingExtraError, match=r"tracing an nn\.Module needs torch"):
        computewise.models.trace_module(object(), ())


def test_import_is_light() -> None:
    # The contract is "no torch, no numpy at import"; start-up time is measured by benchmarks/speed.py.
    script = "import sys\nimport computewise.models\nprint('torch' in sys.modules, 'numpy' in sys.modules)\n"
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert run.stdout.split() == ["False", "False"]
