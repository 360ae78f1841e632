"""The JSON documents the CLI prints and reads: their version, and typed reading of their fields.

Every document (a plan, an estimate, a loadtest result, a tuning, a tuned configuration, an
artifact manifest) carries ``schema_version``; its layout is described by a JSON Schema in
``docs/schemas/``. A reader refuses a version newer than it knows, by name, instead of misreading
a layout it has never seen; a document without the field was written before versions existed and
reads as version 1. The ``read_*`` helpers turn a decoded JSON object into typed values for the
``from_dict`` methods, so a malformed file is an ``InputError`` naming the file and the field, not
a ``KeyError`` far from where it was read.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from computewise.errors import InputError

__all__ = [
    "SCHEMA_VERSION",
    "check_schema_version",
    "read_bool",
    "read_float",
    "read_int",
    "read_list",
    "read_mapping",
    "read_optional_float",
    "read_optional_int",
    "read_optional_str",
    "read_str",
    "require_object",
    "wrong_value",
]

SCHEMA_VERSION = 1
"""The layout version of every document this computewise writes; bumped when a key changes meaning."""


def require_object(data: object, document: str, source: str) -> Mapping[str, Any]:
    """``data`` as a JSON object of a known ``schema_version``; ``document`` names what was expected."""
    if not isinstance(data, Mapping):
        raise InputError(
            f"{source}: expected a JSON object ({document}), got {type(data).__name__}",
            f"pass the JSON that {document} writes",
        )
    check_schema_version(data, document, source)
    return data


def check_schema_version(data: Mapping[str, Any], document: str, source: str) -> None:
    """Refuse a ``schema_version`` this computewise does not know (a newer release wrote it)."""
    version = data.get("schema_version", 1)
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise InputError(
            f"{source}: schema_version must be a whole number >= 1, got {version!r}",
            f"pass the JSON that {document} writes, unedited",
        )
    if version > SCHEMA_VERSION:
        raise InputError(
            f"{source}: {document} has schema_version {version}, this computewise reads up to {SCHEMA_VERSION}",
            "upgrade computewise (pip install -U computewise), or write the file again with this version",
        )


def read_mapping(data: Mapping[str, Any], key: str, source: str) -> Mapping[str, Any]:
    value = data.get(key)
    if not isinstance(value, Mapping):
        raise wrong_value(source, key, "a JSON object", value)
    return value


def read_list(data: Mapping[str, Any], key: str, source: str) -> Sequence[Any]:
    value = data.get(key)
    if not isinstance(value, list):
        raise wrong_value(source, key, "a JSON list", value)
    return value


def read_str(data: Mapping[str, Any], key: str, source: str) -> str:
    value = data.get(key)
    if not isinstance(value, str):
        raise wrong_value(source, key, "a string", value)
    return value


def read_bool(data: Mapping[str, Any], key: str, source: str) -> bool:
    value = data.get(key)
    if not isinstance(value, bool):
        raise wrong_value(source, key, "true or false", value)
    return value


def read_int(data: Mapping[str, Any], key: str, source: str) -> int:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise wrong_value(source, key, "a whole number", value)
    return value


def read_float(data: Mapping[str, Any], key: str, source: str) -> float:
    value = read_optional_float(data, key, source)
    if value is None:
        raise wrong_value(source, key, "a number", None)
    return value


def read_optional_float(data: Mapping[str, Any], key: str, source: str) -> float | None:
    """A JSON number (an int reads as a float) or null; NaN and infinities are refused like strings."""
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise wrong_value(source, key, "a number", value)
    return float(value)


def read_optional_int(data: Mapping[str, Any], key: str, source: str) -> int | None:
    return None if data.get(key) is None else read_int(data, key, source)


def read_optional_str(data: Mapping[str, Any], key: str, source: str) -> str | None:
    return None if data.get(key) is None else read_str(data, key, source)


def wrong_value(source: str, key: str, expected: str, value: object) -> InputError:
    """The error for a field of a file computewise wrote that holds something else than ``expected``:
    what it holds, and that the fix is the file as written (every reader of documents says the same)."""
    shown = (
        "nothing" if value is None else repr(value) if isinstance(value, str | int | float) else type(value).__name__
    )
    return InputError(
        f"{source}: {key} must be {expected}, got {shown}",
        f"the field {key!r} is written by computewise itself: pass the file it wrote, unedited",
    )
