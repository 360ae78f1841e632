"""The paths that running runs of the ledger use, which no retention policy may touch.

A run in the ledger records its working directory and its command line, not the files it opens, so
"uses" is read generously: its working directory (everything below it), and every argument that
names a path (absolute, or relative with a '/', resolved against that directory; ``--flag=value``
split first), and every ``s3://``-style URL among its arguments (that prefix and below). A file
under any of them is protected while the run's status is ``running``; the CLI marks runs whose
process died as crashed first, so a long-dead run does not shield a folder for ever. The running
runs' ids are kept too: a checkpoint whose manifest names one (``computewise.train`` records the
ledger run that wrote it) is protected wherever it lies, even outside every path above.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

from computewise.ledger import Ledger, RunRow

__all__ = ["InUse", "paths_in_use"]


@dataclass(frozen=True)
class InUse:
    """Protected prefixes, each with the run that holds it, and the ids of the running runs."""

    local: tuple[tuple[str, int], ...]
    urls: tuple[tuple[str, int], ...]
    running: frozenset[int] = frozenset()

    def is_running(self, run_id: int | None) -> bool:
        """Whether ``run_id`` (a checkpoint manifest's ledger run; None: not recorded) is still running."""
        return run_id is not None and run_id in self.running

    def holder(self, path: str) -> int | None:
        """The id of a running run that uses ``path`` (a local path or a URL), or None."""
        prefixes = self.urls if "://" in path else self.local
        for prefix, run_id in prefixes:
            if path == prefix or path.startswith(prefix.rstrip("/") + "/"):
                return run_id
        return None


def paths_in_use(ledger: Ledger) -> InUse:
    return in_use_by(ledger.runs(status="running", limit=None))


def in_use_by(runs: Iterable[RunRow]) -> InUse:
    local: list[tuple[str, int]] = []
    urls: list[tuple[str, int]] = []
    running: set[int] = set()
    for run in runs:
        running.add(run.id)
        if run.cwd:
            local.append((os.path.realpath(run.cwd), run.id))
        for argument in run.argv[1:]:
            for token in (argument, argument.partition("=")[2]):
                if "://" in token:
                    urls.append((token.rstrip("/"), run.id))
                elif token.startswith("/") or (os.sep in token and not token.startswith("-")):
                    local.append((os.path.realpath(os.path.join(run.cwd, token)), run.id))
    return InUse(tuple(dict.fromkeys(local)), tuple(dict.fromkeys(urls)), frozenset(running))
