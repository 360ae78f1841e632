"""Reading a JSON document: its version checked first, each field typed, every refusal naming file and field."""

from __future__ import annotations

import pytest

from computewise.errors import InputError
from computewise.specs.document import (
    SCHEMA_VERSION,
    read_float,
    read_int,
    read_optional_float,
    require_object,
)


def test_the_current_version_and_a_document_without_one_are_read() -> None:
    assert require_object({"schema_version": SCHEMA_VERSION, "a": 1}, "a plan", "p.json")["a"] == 1
    assert require_object({"a": 1}, "a plan", "p.json")["a"] == 1  # written before versions: version 1


@pytest.mark.parametrize(
    ("version", "fragment"),
    [
        (SCHEMA_VERSION + 1, f"has schema_version {SCHEMA_VERSION + 1}, this computewise reads up to"),
        (0, "schema_version must be a whole number >= 1, got 0"),
        ("1", "schema_version must be a whole number >= 1, got '1'"),
        (True, "schema_version must be a whole number >= 1, got True"),
    ],
)
def test_a_version_this_computewise_does_not_know_is_refused(version: object, fragment: str) -> None:
    with pytest.raises(InputError, match=fragment) as refused:
        require_object({"schema_version": version}, "a plan", "p.json")
    assert str(refused.value).startswith("p.json: ") and refused.value.hint


def test_fields_are_typed_or_refused_by_name() -> None:
    data = {"n": 3, "x": 2, "flag": True, "inf": float("inf"), "none": None}
    assert read_int(data, "n", "f.json") == 3 and read_float(data, "x", "f.json") == 2.0
    assert read_optional_float(data, "none", "f.json") is None
    for reader, key, fragment in (
        (read_int, "flag", "f.json: flag must be a whole number, got True"),
        (read_float, "inf", "f.json: inf must be a number, got inf"),
        (read_float, "missing", "f.json: missing must be a number, got nothing"),
    ):
        with pytest.raises(InputError, match=fragment):
            reader(data, key, "f.json")
    with pytest.raises(InputError, match="expected a JSON object"):
        require_object([1], "a plan", "p.json")
