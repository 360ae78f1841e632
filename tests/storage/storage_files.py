"""Real folders of checkpoints, datasets and logs with chosen ages, and the CLI as a child process."""
# Imported by the tests of this folder (pytest puts it on sys.path: tests/ has no packages).

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from computewise.train.checkpoint import CHECKPOINT_FORMAT

DAY_S = 86_400.0
CLI = [sys.executable, "-m", "computewise.cli.app"]


def write_file(path: Path, size_bytes: int, age_days: float, fill: bytes | None = None) -> Path:
    """A file of ``size_bytes`` last modified ``age_days`` ago (random bytes unless ``fill`` is given)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(fill if fill is not None else os.urandom(size_bytes))
    moment = time.time() - age_days * DAY_S
    os.utime(path, (moment, moment))
    return path


def write_checkpoint(
    folder: Path, step: int, metric: float | None, age_days: float, size_bytes: int = 4096, run_id: int | None = None
) -> tuple[Path, Path]:
    """A checkpoint as ``computewise.train.CheckpointStore`` lays it out: state file and manifest (the format it
    reads), both ``age_days`` old. With ``run_id`` the manifest names the ledger run that wrote it; without,
    it has no ``run_id`` key at all, as manifests written before the key existed."""
    name = f"step-{step:08d}"
    state = write_file(folder / f"{name}.pt", size_bytes, age_days)
    record = {
        "format": CHECKPOINT_FORMAT, "step": step, "file": state.name, "sha256": "0" * 64, "size_bytes": size_bytes,
        "metric": metric, "higher_is_better": False, "saved_at_s": time.time() - age_days * DAY_S,
    }  # fmt: skip
    if run_id is not None:
        record["run_id"] = run_id
    manifest = write_file(folder / f"{name}.json", 0, age_days, json.dumps(record).encode())
    return state, manifest


def snapshot(root: Path) -> dict[str, tuple[int, float]]:
    """Every file under ``root``: size and modification time, to compare before and after."""
    return {
        str(path.relative_to(root)): (path.stat().st_size, path.stat().st_mtime)
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def cli(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, **(env or {})},
        cwd=cwd,
        check=False,
    )
