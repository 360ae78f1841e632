"""No block of six or more identical lines appears twice in ``src/`` (issue 28), outside the ledger's migrations.

A block written twice drifts: one copy gets the fix and the other keeps the bug (the optimize ranking rule,
written in the search and again in its report, had already drifted once). Lines are compared after their
leading and trailing white space is stripped; nothing else is normalised, so a block counts only when it is
the same to the letter, not merely of the same shape. Three kinds of lines are left out, since the formatter
and the linter, not the author, lay them out: import statements and ``__all__`` lists (sorted lists of names,
ruff's I001 and RUF022), and a run made only of blank lines and brackets. The migrations are frozen copies of
the schema at each revision and repeat it on purpose.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "computewise"
MIGRATIONS = "ledger/migrations/"
LINES = 6
_BRACKETS = re.compile(r"^[()\[\]{},:]*$")


def _counted(path: Path) -> list[tuple[int, str]]:
    """(line number, stripped text) of each line that counts: every line but those of import statements and of
    ``__all__`` lists."""
    text = path.read_text(encoding="utf-8")
    imports: set[int] = set()
    for node in ast.walk(ast.parse(text)):
        exports = isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "__all__" for target in node.targets
        )
        if isinstance(node, ast.Import | ast.ImportFrom) or exports:
            imports.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return [(number, line.strip()) for number, line in enumerate(text.splitlines(), 1) if number not in imports]


def repeated_blocks(root: Path = SRC) -> dict[tuple[str, str], list[str]]:
    """Each pair of files sharing a block of ``LINES`` identical consecutive lines -> where, as ``file:line``."""
    places: dict[tuple[str, ...], list[tuple[str, int]]] = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        module = path.relative_to(root).as_posix()
        if module.startswith(MIGRATIONS):
            continue
        lines = _counted(path)
        for start in range(len(lines) - LINES + 1):
            window = lines[start : start + LINES]
            if window[-1][0] - window[0][0] != LINES - 1:  # an import statement falls inside
                continue
            block = tuple(text for _, text in window)
            if all(_BRACKETS.match(text) for text in block):
                continue
            places[block].append((module, window[0][0]))
    pairs: dict[tuple[str, str], list[str]] = defaultdict(list)
    for found in places.values():
        for i, (first, first_line) in enumerate(found):
            for second, second_line in found[i + 1 :]:
                pairs[(first, second)].append(f"{first}:{first_line} ~ {second}:{second_line}")
    return dict(pairs)


def test_no_block_of_six_identical_lines_is_written_twice() -> None:
    found = {pair: where[0] for pair, where in repeated_blocks().items()}
    assert not found, f"blocks of {LINES}+ identical lines written twice; keep one and call it: {found}"


def test_the_check_finds_a_copied_block_and_not_imports_brackets_or_migrations(tmp_path: Path) -> None:
    """So the test above cannot pass by finding nothing: a copied six-line body is named, with both places;
    the same imports and ``__all__``, a run of brackets and a migration's copy are not."""
    imports = "from os import (\n" + "".join(f"    name{n},\n" for n in range(LINES)) + ")\n"
    imports += "__all__ = [\n" + "".join(f'    "name{n}",\n' for n in range(LINES)) + "]\n"
    brackets = "f(\n" + "    [\n" * 3 + "    ]\n" * 3 + ")\n"
    body = "".join(f"    total = total + {n}\n" for n in range(LINES))
    header = imports.count("\n") + brackets.count("\n") + 1  # and the def line
    for name in ("a", "b"):
        (tmp_path / f"{name}.py").write_text(f"{imports}{name} = {brackets}def {name}(total):\n{body}")
    (tmp_path / MIGRATIONS).mkdir(parents=True)
    (tmp_path / MIGRATIONS / "0001.py").write_text(f"def c(total):\n{body}")
    assert repeated_blocks(tmp_path) == {("a.py", "b.py"): [f"a.py:{header + 1} ~ b.py:{header + 1}"]}
