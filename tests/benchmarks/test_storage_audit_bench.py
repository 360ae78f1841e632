"""benchmarks/storage_audit.py: the folder it builds is the one it describes, and --quick times an audit of it."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from computewise.storage import find_duplicates, open_location, take_inventory

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "storage_audit.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("storage_audit_bench", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_built_folder_is_what_the_docstring_says(tmp_path: Path) -> None:
    counts = _load().build(tmp_path, 1000)
    location = open_location(str(tmp_path))
    inventory = take_inventory(location)
    kinds = {
        kind: sum(1 for e in inventory.entries if e.kind == kind) for kind in ("checkpoint", "dataset", "log", "cache")
    }
    assert len(inventory.entries) == 1000 and sum(kinds.values()) == 1000
    assert kinds == {kind: counts[kind] for kind in kinds}
    assert all(c.recognised for c in inventory.checkpoints) and len(inventory.checkpoints) == counts["checkpoint"] // 2
    assert counts["duplicate"] > 0 and len(find_duplicates(location, inventory.entries).groups) > 0


def test_quick_benchmark_times_an_audit_on_this_machine(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    results = json.loads(out.read_text())
    assert f", {os.cpu_count()} cores, Python " in results["hardware"] and results["hardware"] in done.stdout
    assert results["files"] == 2000 and results["target_s"] == 10.0
    assert results["baseline_walk_stat_s"] > 0
    assert 0 < results["audit_walk_s"] < results["audit_s"] and results["audit_cpu_s"] > 0
    assert 0 < results["hashed_files"] <= 2000
    assert "storage audit of 2,000 files" in done.stdout
