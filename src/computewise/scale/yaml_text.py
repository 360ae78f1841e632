"""A tiny YAML emitter for manifests: mappings, lists and scalars, block style, deterministic.

computewise does not depend on PyYAML, and manifests are small trees of plain values. Strings
that YAML could read as something else (``yes``, ``075``, ``1e3``, ``null``, ``a: b``) are written
as JSON strings, which are valid double-quoted YAML scalars, so the text reads back exactly.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence

__all__ = ["YamlValue", "dump_yaml"]

YamlValue = str | int | float | bool | None | Mapping[str, "YamlValue"] | Sequence["YamlValue"]

_PLAIN = re.compile(r"[A-Za-z_/][A-Za-z0-9_./-]*")
_RESERVED = {"y", "n", "yes", "no", "on", "off", "true", "false", "null", "~"}


def _scalar(value: str | int | float | bool | None) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if _PLAIN.fullmatch(value) and value.lower() not in _RESERVED:
        return value
    return json.dumps(value)


def _lines(value: YamlValue, indent: int) -> list[str]:
    pad = " " * indent
    if isinstance(value, Mapping):
        if not value:
            return [pad + "{}"]
        out: list[str] = []
        for key, item in value.items():
            if isinstance(item, Mapping | list | tuple) and item:
                out.append(f"{pad}{_scalar(key)}:")
                out.extend(_lines(item, indent + 2))
            elif isinstance(item, str) and _is_block(item):
                # A script (SkyPilot's run:) reads best as a literal block; "|-" drops the final newline.
                chomp = "" if item.endswith("\n") else "-"
                out.append(f"{pad}{_scalar(key)}: |{chomp}")
                out.extend(f"{pad}  {line}" if line else "" for line in item.removesuffix("\n").split("\n"))
            else:
                out.append(f"{pad}{_scalar(key)}: {_inline(item)}")
        return out
    if isinstance(value, list | tuple):
        if not value:
            return [pad + "[]"]
        out = []
        for item in value:
            nested = _lines(item, indent + 2)
            if isinstance(item, Mapping | list | tuple) and item:
                out.append(f"{pad}- {nested[0].lstrip()}")
                out.extend(nested[1:])
            else:
                out.append(f"{pad}- {_inline(item)}")
        return out
    return [pad + _inline(value)]


def _is_block(text: str) -> bool:
    """Multi-line text that a literal block keeps exactly: no leading spaces, tabs or trailing blanks."""
    lines = text.removesuffix("\n").split("\n")
    return (
        len(lines) > 1
        and not text.endswith("\n\n")
        and not lines[0].startswith(" ")
        and all(line == line.rstrip() and "\t" not in line for line in lines)
    )


def _inline(value: YamlValue) -> str:
    if isinstance(value, Mapping):
        return "{}"
    if isinstance(value, list | tuple):
        return "[]"
    if isinstance(value, str | int | float | bool) or value is None:
        return _scalar(value)
    raise TypeError(f"cannot write {type(value).__name__} as YAML")


def dump_yaml(value: Mapping[str, YamlValue]) -> str:
    """Block-style YAML text of a mapping, keys in insertion order, ending with a newline."""
    return "\n".join(_lines(value, 0)) + "\n"
