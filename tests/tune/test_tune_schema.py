"""The tune JSON Schemas name every stage a trial can have and every compile mode a configuration can carry.

``tune --json`` and ``tune --out`` are checked against docs/schemas by the CLI tests, but only for the
stages and modes those runs reach (no batch growth with a fixed ``micro=``, no CUDA graphs on a CPU);
this holds the schemas to the code's own lists, so a new stage or mode cannot leave them behind.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import get_args

from computewise.train.config import CompileMode
from computewise.tune.search import Stage

SCHEMAS = Path(__file__).resolve().parents[2] / "docs" / "schemas"


def _config_definition(schema: dict[str, object]) -> dict[str, object]:
    """The configuration's definition: ``train_config`` (``train.config.TrainConfig``) in both generated schemas."""
    definitions = schema["$defs"]
    assert isinstance(definitions, dict)
    config: dict[str, object] = definitions["train_config"]
    return config


def test_every_trial_stage_is_in_the_tune_schema() -> None:
    schema = json.loads((SCHEMAS / "tune.schema.json").read_text())
    stages = schema["properties"]["trials"]["items"]["properties"]["stage"]["enum"]
    assert set(stages) == set(get_args(Stage))


def test_every_compile_mode_is_in_both_config_schemas() -> None:
    for name in ("tune.schema.json", "tune-config.schema.json"):
        config = _config_definition(json.loads((SCHEMAS / name).read_text()))
        properties = config["properties"]
        assert isinstance(properties, dict)
        assert set(properties["compile_mode"]["enum"]) == set(get_args(CompileMode)), name
