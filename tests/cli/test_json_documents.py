"""Every JSON document the CLI prints carries ``schema_version`` and matches its schema in docs/schemas/.

The documents come from the real console script in a child process; loadtest, tune and the
artifact manifest are checked where their real runs already happen (tests/cli/test_loadtest_cli.py,
tests/cli/test_tune_cli.py, tests/optimize/test_optimize_artifact.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import jsonschema
import pytest

from computewise.plan import Plan

CLI = [sys.executable, "-m", "computewise.cli.app"]
SCHEMAS = Path(__file__).resolve().parents[2] / "docs" / "schemas"
Check = Callable[[object, str], None]


def cli_json(*args: str, cwd: Path | None = None) -> dict[str, object]:
    result = subprocess.run([*CLI, *args, "--json"], capture_output=True, text=True, timeout=120, cwd=cwd)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert isinstance(data, dict)
    return data


@pytest.mark.parametrize(
    ("schema", "args"),
    [
        # --zero 3: a configuration that fits, so the document has every timed figure
        (
            "estimate-train",
            ("estimate", "train", "-m", "llama-3-8b", "-g", "h100", "-n", "8", "--zero", "3", "--tokens", "10B"),
        ),
        ("estimate-infer", ("estimate", "infer", "-m", "llama-2-7b", "-g", "a100", "--batch-size", "16")),
        ("estimate-comm", ("estimate", "comm", "-g", "h100", "-n", "16")),
        ("plan-infer", ("plan", "infer", "-m", "llama-2-7b", "--rps", "20", "--top", "3")),
    ],
)
def test_estimate_and_plan_documents_match_their_schemas(
    schema: str, args: tuple[str, ...], json_schema: Check
) -> None:
    data = cli_json(*args)
    json_schema(data, schema)
    assert data["schema_version"] == 1


@pytest.mark.parametrize("data_flags", [(), ("--data-region", "aws:us-east-1", "--dataset-size", "2TB")])
def test_a_training_plan_matches_its_schema_and_reads_back_whole(
    json_schema: Check, data_flags: tuple[str, ...]
) -> None:
    args = ("plan", "train", "-m", "gpt2-medium", "--tokens", "2B", "-g", "a10g", "-g", "l4", "--max-gpus", "8")
    data = cli_json(*args, *data_flags, "--top", "0")
    json_schema(data, "plan-train")
    plan = Plan.from_dict(data, "plan.json")
    assert plan.to_dict() == data  # its notes and warnings too
    assert Plan.from_dict(json.loads(json.dumps(plan.to_dict()))) == plan


def test_a_serving_plan_matches_its_schema(tmp_path: Path, json_schema: Check) -> None:
    (tmp_path / "day.csv").write_text("hour,rps\n0,10\n1,50\n2,0\n")
    data = cli_json("plan", "serve", "--capacity-rps", "50", "--traffic", "day.csv", "--hourly-usd", "1", cwd=tmp_path)
    json_schema(data, "plan-serve")
    assert data["schema_version"] == 1


@pytest.mark.parametrize("path", sorted(SCHEMAS.glob("*.schema.json")), ids=lambda p: p.name)
def test_every_schema_is_draft_2020_12_and_requires_its_version(path: Path) -> None:
    schema = json.loads(path.read_text(encoding="utf-8"))
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)
    # A document of a newer layout, or none at all, is not what the schema describes.
    assert not jsonschema.Draft202012Validator(schema).is_valid({"schema_version": 2})


def test_a_schema_catches_a_document_that_lost_a_key(json_schema: Check) -> None:
    data = cli_json("estimate", "infer", "-m", "llama-2-7b", "-g", "a100")
    del data["cost"]
    with pytest.raises(jsonschema.ValidationError, match="'cost' is a required property"):
        json_schema(data, "estimate-infer")
