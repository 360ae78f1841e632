"""Printers and pages take the typed result they show, not a dict (issue 28): the count of untyped ones only goes down.

A public function in ``report/`` or ``dashboard/`` with a parameter annotated ``dict[str, Any]`` (or a
``Mapping[str, Any]``, or a sequence of either) reads its data by string keys that mypy cannot check. Each
one left is named in ``UNTYPED`` with why it is still there. A new one fails the first test; converting one
fails the second until its name leaves the list and ``MAX_UNTYPED`` goes down with it, so the number in this
file is always the number in the code.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "computewise"
PACKAGES = ("report", "dashboard")
_UNTYPED = re.compile(r"\b(dict|Mapping)\[str, Any\]")

# Issue 28 started at 74; on 2026-11-27 every printer and page takes its typed result. Never raise it: a
# printer that must take a dict (issue 28 allows five) is named in UNTYPED, by module, with why.
MAX_UNTYPED = 0
UNTYPED: dict[str, frozenset[str]] = {}


def _untyped() -> dict[str, set[str]]:
    """Module path (``report/html.py``) -> its public top-level functions with a parameter taking a str-keyed dict."""
    found: dict[str, set[str]] = {}
    for package in PACKAGES:
        for path in sorted((SRC / package).glob("*.py")):
            for node in ast.parse(path.read_text()).body:
                if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) or node.name.startswith("_"):
                    continue
                arguments = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
                if any(a.annotation is not None and _UNTYPED.search(ast.unparse(a.annotation)) for a in arguments):
                    found.setdefault(f"{package}/{path.name}", set()).add(node.name)
    return found


def _flat(by_module: dict[str, set[str]] | dict[str, frozenset[str]]) -> set[str]:
    return {f"{module}:{name}" for module, names in by_module.items() for name in names}


def test_no_new_printer_takes_an_untyped_dict() -> None:
    new = _flat(_untyped()) - _flat(UNTYPED)
    assert not new, f"take the typed result instead of a dict: {sorted(new)}"
    assert len(_flat(_untyped())) <= MAX_UNTYPED


def test_the_allow_list_names_only_what_is_still_untyped() -> None:
    converted = _flat(UNTYPED) - _flat(_untyped())
    assert not converted, f"converted: remove them from UNTYPED and lower MAX_UNTYPED: {sorted(converted)}"
    assert len(_flat(UNTYPED)) == MAX_UNTYPED, "MAX_UNTYPED is the length of UNTYPED"
