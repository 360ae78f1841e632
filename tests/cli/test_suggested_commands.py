"""Every command computewise suggests parses against the real command tree.

Hints (``To fix:``), dashboard pages, help texts and the README tell users what to type. The dashboard's
overview once said ``computewise budget set team=nlp 5000``, which the CLI refuses; nothing noticed
because no test read the suggestion. Here every ``computewise VERB ...`` the tool or its README shows is
collected and parsed by click (``make_context``, nothing executed): the subcommand must exist, every flag
too, each flag must get its value and every required argument must be given. Placeholders (``FILE``,
``<DIR>``, an f-string's ``{value}``) stand for a value a user would type. A bare ``computewise VERB`` is
a name, not a command, and only has to exist; ``...`` says "more arguments", so nothing is required.
"""

from __future__ import annotations

import ast
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer
from typer._click.exceptions import ClickException, MissingParameter  # typer 0.29 ships its own click
from typer.core import TyperGroup

from computewise.cli.app import VERBS, conventional_help, whole_app  # noqa: TID251
from computewise.cli.common import RENAMED_FLAGS  # noqa: TID251
from computewise.errors import ComputewiseError

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "src" / "computewise"
HOLE = "{}"  # what an f-string's replacement field reads as

# A command marked as code in a string: `...` (also ``...``), <code>...</code>, <pre>...</pre>.
_MARKED = re.compile(r"`(computewise [^`]+)`|<code>(computewise .*?)</code>|<pre>(computewise .*?)</pre>")
# An unmarked command in prose runs to the end of its clause.
_VERBS = "|".join(re.escape(verb) for verb in VERBS)
_PROSE = re.compile(
    rf"\bcomputewise (?:{_VERBS})\b.*?(?=[,;](?:\s|$)|\)|:\s|\s\(|<|$|"
    r" (?:and|or|then|to|on|at|needs|runs|wrote|without)\b)"
)
_SHELL_END = {">", "|", "&&", ";", "#", "2>", "2>&1"}
_PLACEHOLDER = re.compile(r"^(?:[A-Z][A-Z0-9_]*(?::[A-Z0-9_]+)?|<[^>]+>|.*\{\}.*)$")
# A placeholder becomes the first of these that the flag's type takes: a number, else a name.
_VALUES = ("1", "name")


@dataclass(frozen=True)
class Suggestion:
    where: str  # file:line, or the command whose help says it
    text: str  # as shown, "computewise ..."


def marked(text: str) -> Iterator[str]:
    """The commands marked as code in ``text``."""
    for match in _MARKED.finditer(text):
        yield next(group for group in match.groups() if group)


def commands_in(text: str) -> Iterator[str]:
    """The ``computewise VERB ...`` commands in a string: marked as code, else up to the end of the clause."""
    yield from marked(text)
    yield from (match.group(0) for match in _PROSE.finditer(_MARKED.sub("", text)))


def _string(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(str(part.value) if isinstance(part, ast.Constant) else HOLE for part in node.values)
    return None


def from_source() -> Iterator[Suggestion]:
    """Every string literal under src/ but docstrings (they describe code; the help walk reads commands')."""
    for path in sorted(SOURCE.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        docstrings = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}
        inner = {id(part) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for part in node.values}
        for node in ast.walk(tree):
            text = _string(node)
            if text is None or id(node) in docstrings or id(node) in inner:
                continue
            for command in commands_in(text):
                yield Suggestion(f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}", command)


def from_help() -> Iterator[Suggestion]:
    """The help of every command, as ``computewise ... --help`` prints it (flags' help is a literal in src/)."""

    def walk(command: Any, path: str) -> Iterator[Suggestion]:
        for text in filter(None, (command.help, command.epilog)):
            yield from (Suggestion(f"{path} --help", found) for found in commands_in(text))
        for name, subcommand in getattr(command, "commands", {}).items():
            yield from walk(subcommand, f"{path} {name}")

    yield from walk(typer.main.get_command(whole_app()), "computewise")


def from_readme() -> Iterator[Suggestion]:
    """Commands in the README's code blocks (``$ `` lines, and every line of a bash block) and inline code."""
    lines = (ROOT / "README.md").read_text().splitlines()
    fence: str | None = None
    pending = ""
    for number, line in enumerate(lines, start=1):
        stripped = line.strip()
        if stripped.startswith("```"):
            fence = None if fence is not None else stripped[3:] or "text"
            continue
        if fence is None:
            if not stripped.startswith("#"):  # a heading names commands, e.g. `catalog list | show`
                yield from (Suggestion(f"README.md:{number}", found) for found in marked(line))
            continue
        command = pending + (stripped[2:] if stripped.startswith("$ ") and not pending else stripped)
        prompt = stripped.startswith("$ computewise ") or (fence == "bash" and stripped.startswith("computewise "))
        if pending or prompt:
            if command.endswith("\\"):
                pending = command[:-1]
                continue
            pending = ""
            yield Suggestion(f"README.md:{number}", command)


def suggestions() -> list[Suggestion]:
    return [*from_source(), *from_help(), *from_readme()]


@pytest.fixture(scope="module")
def root() -> TyperGroup:
    command = typer.main.get_command(whole_app())
    conventional_help(command)
    assert isinstance(command, TyperGroup)
    return command


def words(text: str) -> list[str]:
    """The command's words after ``computewise``, up to a redirect, pipe or comment."""
    try:
        tokens = shlex.split(text, comments=False)
    except ValueError:
        tokens = text.split()
    kept: list[str] = []
    for token in tokens[1:]:
        if token in _SHELL_END or token.startswith(">"):
            break
        kept.append(token)
    return kept


def problem(root: TyperGroup, text: str) -> str | None:
    """Why ``text`` does not parse as a computewise command, or None when it does."""
    tokens = words(text)
    command: Any = root
    path = ["computewise"]
    while isinstance(command, TyperGroup) and tokens and tokens[0] in command.commands:
        path.append(tokens[0])
        command = command.commands[tokens.pop(0)]
    if not tokens:
        return None  # a command's name: it exists
    if HOLE in tokens[0]:
        return None  # a template over commands, e.g. f"computewise {verb} --help"
    if isinstance(command, TyperGroup):
        # A group's own options are eager (--version, --install-completion): check the names, run nothing.
        known = {"-h", "--help", *(name for param in command.params for name in param.opts)}
        unknown = [token for token in tokens if token not in known]
        return f"{' '.join(path)} has no subcommand or option {unknown[0]!r}" if unknown else None
    renamed = [token for token in tokens if token.split("=")[0] in RENAMED_FLAGS]
    if renamed:
        return f"uses the old flag {renamed[0]} (now {RENAMED_FLAGS[renamed[0].split('=')[0]]})"
    more = "..." in tokens
    tokens = [token.split("|")[0] for token in tokens if token != "..."]  # of "kubernetes|slurm", the first
    failures: list[str] = []
    for value in _VALUES:
        argv = [value if _PLACEHOLDER.match(token) and token != "--" else token for token in tokens]
        try:
            command.make_context(" ".join(path), argv, resilient_parsing=False)
            return None
        except typer.Exit:  # --help or --version, eager: what follows is not parsed
            return None
        except MissingParameter as error:
            if more:
                return None
            failures.append(error.format_message())
        except ClickException as error:
            failures.append(error.format_message())
        except ComputewiseError as error:
            failures.append(str(error))
    return failures[0]


def test_the_collector_finds_suggestions_everywhere() -> None:
    found = suggestions()
    places = {suggestion.where.split(":")[0].split(" ")[0] for suggestion in found}
    assert {"README.md", "computewise"} <= places
    assert any(place.startswith("src/computewise/dashboard/") for place in places)
    texts = {suggestion.text for suggestion in found}
    assert "computewise budget set --scope team=nlp --monthly-usd 5000" in texts


def test_the_parser_refuses_what_the_cli_refuses(root: TyperGroup) -> None:
    assert problem(root, "computewise budget set team=nlp 5000") is not None
    assert problem(root, "computewise plan --json") is not None
    assert problem(root, "computewise tune --out") is not None
    assert problem(root, "computewise estimate train --rps 3") is not None
    assert problem(root, "computewise estimate train --no-such-flag") is not None
    assert problem(root, "computewise runs show ID") is None
    assert problem(root, "computewise plan train ... --json > plan.json") is None
    assert problem(root, "computewise run -- python train.py") is None
    assert problem(root, "computewise --version") is None


def test_every_suggested_command_parses(root: TyperGroup) -> None:
    broken = [
        f"{suggestion.where}: {suggestion.text}\n    {why}"
        for suggestion in suggestions()
        if (why := problem(root, suggestion.text)) is not None
    ]
    assert not broken, "\n".join(broken)
