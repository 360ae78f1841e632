"""The tuned configuration file: what ``tune --out`` writes, ``load_config`` reads back, and a newer layout refused."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import jsonschema
import pytest

from computewise.errors import ConfigError, InputError
from computewise.train.config import ConfigFile, TrainConfig, load_config, write_config


def test_a_written_configuration_reads_back_and_says_its_version(
    tmp_path: Path, json_schema: Callable[[object, str], None]
) -> None:
    config = TrainConfig(precision="bf16", micro_batch_size=4, loader_workers=2, pin_memory=True)
    write_config(config, tmp_path / "best.json", entry="examples.tiny_gpt:setup")
    written = json.loads((tmp_path / "best.json").read_text())
    assert written["schema_version"] == 1 and written["entry"] == "examples.tiny_gpt:setup"
    assert load_config(tmp_path / "best.json") == config
    json_schema(written, "tune-config")
    assert ConfigFile.from_dict(written) == ConfigFile(config=config, entry="examples.tiny_gpt:setup")
    write_config(TrainConfig(), tmp_path / "bare.json")
    assert "entry" not in json.loads((tmp_path / "bare.json").read_text())


def test_the_schema_refuses_settings_the_configuration_refuses(json_schema: Callable[[object, str], None]) -> None:
    """The generated tune-config schema holds the same bounds as TrainConfig's own checks."""
    file = ConfigFile(config=TrainConfig(loader_workers=2, prefetch_factor=2)).to_dict()
    json_schema(file, "tune-config")
    for setting in ({"micro_batch_size": 0}, {"prefetch_factor": 0}, {"grad_clip_norm": 0.0}, {"speed": "max"}):
        with pytest.raises(jsonschema.ValidationError):
            json_schema(file | {"config": file["config"] | setting}, "tune-config")


def test_a_file_from_before_versions_still_reads(tmp_path: Path) -> None:
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"format": "computewise.train-config/1", "config": {"precision": "fp16"}}))
    assert load_config(path) == TrainConfig(precision="fp16")


def test_a_file_from_a_newer_computewise_is_refused_by_its_version(tmp_path: Path) -> None:
    path = tmp_path / "new.json"
    write_config(TrainConfig(), path)
    path.write_text(json.dumps(json.loads(path.read_text()) | {"schema_version": 2, "format": "other/2"}))
    with pytest.raises(InputError, match="schema_version 2, this computewise reads up to 1") as refused:
        load_config(path)
    assert refused.value.hint is not None and "upgrade computewise" in refused.value.hint


def test_a_compile_mode_reads_back_and_is_left_out_of_files_that_do_not_use_one(tmp_path: Path) -> None:
    graphs = TrainConfig(precision="bf16", compile=True, compile_mode="reduce-overhead")
    write_config(graphs, tmp_path / "graphs.json")
    assert load_config(tmp_path / "graphs.json") == graphs and graphs.cuda_graphs
    assert "compile_mode" not in TrainConfig(compile=True).to_dict()  # readable by versions without the key
    assert not TrainConfig(compile=True, compile_mode="max-autotune-no-cudagraphs").cuda_graphs


def test_a_compile_mode_without_compile_is_refused_naming_both() -> None:
    with pytest.raises(ConfigError, match="compile_mode=max-autotune contradicts compile=False") as refused:
        TrainConfig(compile_mode="max-autotune")
    assert refused.value.hint == "set compile=True or drop compile_mode"


def test_a_setting_that_is_no_setting_or_of_the_wrong_type_is_refused_naming_it_and_the_file(tmp_path: Path) -> None:
    path = tmp_path / "typo.json"
    write_config(TrainConfig(), path)
    written = json.loads(path.read_text())
    path.write_text(json.dumps(written | {"config": written["config"] | {"precison": "bf16"}}))
    with pytest.raises(ConfigError, match="unknown training setting\\(s\\): precison") as refused:
        load_config(path)
    assert refused.value.hint is not None and "precision" in refused.value.hint
    path.write_text(json.dumps(written | {"config": written["config"] | {"micro_batch_size": "8"}}))
    with pytest.raises(InputError, match=re.escape(f"{path}: micro_batch_size must be a whole number, got '8'")):
        load_config(path)
