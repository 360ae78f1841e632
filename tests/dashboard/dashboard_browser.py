"""What the dashboard's browser fixtures hand to the tests: the CLI, a filled ledger, a running server."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

CLI = [sys.executable, "-m", "computewise.cli.app"]


@dataclass(frozen=True)
class FilledLedger:
    """A ledger URL and the ids of the runs the fixture recorded, by what each run did."""

    url: str
    busy_ok: int  # team=a, project=llm: three busy seconds, succeeded
    failed: int  # team=b: exit 1
    sleep_ok: int  # team=b, project=vision: sleeps, succeeded
    tracked: int  # computewise.track(), team=a: twelve steps
    quick_ok: int  # team=a, sampled every 200 ms
    plans_dir: Path
    plan_files: tuple[str, ...]


@dataclass(frozen=True)
class Dashboard:
    """A running ``computewise dashboard``: its base URL and process."""

    base: str
    proc: subprocess.Popen[bytes]

    def url(self, path: str) -> str:
        return self.base + path
