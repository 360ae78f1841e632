"""The CLI stays thin (issue 28): every verb function reads in a screen, and no CLI module imports another.

A verb function is what the real command tree (``computewise.cli.app.whole_app``) calls for a verb or a
subcommand, found by walking Typer's registrations, so a new verb is counted without being listed here.
Its length runs from ``def`` to its last line (decorators left out). A verb parses its flags into the
library's typed groups, calls one library function and prints through ``cli.common``; anything longer
belongs in a helper or in the library.

A CLI module may import only ``computewise.cli.common`` (the shared options and output) from the CLI:
a verb that needs another verb's code is a sign that the code belongs in ``common`` or in the library.

The allow-lists name what is still over, with why, so the work left is visible; an entry that is no
longer needed fails too, so the lists only shrink.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import typer

from computewise.cli.app import whole_app  # noqa: TID251 (the real command tree is what is measured)

CLI = Path(__file__).resolve().parents[2] / "src" / "computewise" / "cli"
MOST_LINES = 60

# Verb functions still longer than MOST_LINES, and why they are not thinned yet (their lines on 2026-11-27).
LONG_VERBS: dict[str, str] = {}

# CLI modules that still import another CLI module (other than common), and what they import.
CROSS_IMPORTS: dict[str, set[str]] = {}


def _commands(app: typer.Typer, prefix: str) -> Iterator[tuple[str, Callable[..., Any]]]:
    if app.registered_callback is not None and app.registered_callback.callback is not None and prefix:
        yield prefix, app.registered_callback.callback
    for command in app.registered_commands:
        if command.callback is not None:
            yield f"{prefix} {command.name or command.callback.__name__}".strip(), command.callback
    for group in app.registered_groups:
        if group.typer_instance is not None:
            yield from _commands(group.typer_instance, f"{prefix} {group.name}".strip())


def verb_lengths() -> dict[str, int]:
    """Each verb (``plan serve``) and the lines of its function, ``def`` to the end."""
    lengths: dict[str, int] = {}
    for verb, function in _commands(whole_app(), ""):
        lines, _ = inspect.getsourcelines(function)
        lengths[verb] = len([line for line in lines if not line.lstrip().startswith("@")])
    return lengths


def cli_imports() -> dict[str, set[str]]:
    """Each CLI module and the CLI modules other than common it imports (at the top or inside a function)."""
    found: dict[str, set[str]] = {}
    for path in sorted(CLI.glob("*.py")):
        imported: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names += [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            imported |= {name.removeprefix("computewise.cli.") for name in names if name.startswith("computewise.cli.")}
        imported.discard("common")
        if imported:
            found[path.stem] = imported
    return found


def test_every_verb_function_reads_in_a_screen() -> None:
    lengths = verb_lengths()
    assert "plan serve" in lengths and "runs show" in lengths, sorted(lengths)  # the walk reaches subcommands
    too_long = {verb: n for verb, n in lengths.items() if n > MOST_LINES and verb not in LONG_VERBS}
    assert not too_long, f"verb functions over {MOST_LINES} lines: {too_long}; move the work to a helper or the library"
    stale = {verb: lengths.get(verb) for verb in LONG_VERBS if lengths.get(verb, 0) <= MOST_LINES}
    assert not stale, f"these are {MOST_LINES} lines or fewer now (or gone): remove them from LONG_VERBS: {stale}"


def test_no_cli_module_imports_another_but_common() -> None:
    imports = cli_imports()
    unexpected = {module: names - CROSS_IMPORTS.get(module, set()) for module, names in imports.items()}
    assert not {m: n for m, n in unexpected.items() if n}, f"CLI modules importing other CLI modules: {unexpected}"
    stale = {module: names - imports.get(module, set()) for module, names in CROSS_IMPORTS.items()}
    assert not {m: n for m, n in stale.items() if n}, f"no longer imported, remove from CROSS_IMPORTS: {stale}"
