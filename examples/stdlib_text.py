"""English sentences from the docstrings of Python's standard library, for distillation demos and tests.

Unlabelled text that ships with every Python, read with ``ast`` from the library's source files (no
module is imported, so nothing runs). Usage from the repository root::

    python -m examples.stdlib_text 4000 > stdlib.txt
"""

from __future__ import annotations

import ast
import re
import sys
import sysconfig
from pathlib import Path

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_WORDS = re.compile(r"[A-Za-z]{2,}")


def sentences(limit: int, *, min_words: int = 6, max_words: int = 40) -> list[str]:
    """Up to ``limit`` distinct prose sentences, in a fixed order (sorted files), so every run gets the same text."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    found: dict[str, None] = {}
    for path in sorted(stdlib.glob("*.py")) + sorted(stdlib.glob("*/*.py")):
        if "test" in path.parts or "site-packages" in path.parts:
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, OSError):
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            doc = ast.get_docstring(node)
            for sentence in _SENTENCE_END.split(" ".join((doc or "").split())):
                words = sentence.split()
                prose = len(_WORDS.findall(sentence)) >= 0.8 * len(words)
                if min_words <= len(words) <= max_words and prose and sentence[0].isupper():
                    found.setdefault(sentence)
                    if len(found) >= limit:
                        return list(found)
    return list(found)


if __name__ == "__main__":
    sys.stdout.write("\n".join(sentences(int(sys.argv[1]) if len(sys.argv) > 1 else 4000)) + "\n")
