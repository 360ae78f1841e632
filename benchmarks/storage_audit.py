"""How fast `computewise storage audit` lists, types, hashes and prices a big folder: target < 10 s for 100,000 files.

Creates ``--files`` small files in a temporary folder, laid out like a training project:

- ``runs/run-NNN/checkpoints/``: ``computewise.train`` checkpoints (state file + manifest pairs, a metric each);
- ``data/shard-NNN/``: dataset files (``.parquet``, ``.jsonl``, ``.npy``);
- ``logs/``: ``.log`` files; ``.cache/``: cache files;
- every 10th file a copy of an earlier one (duplicates to find); sizes 1 B to 8 KiB, so many sizes
  collide and the duplicate search hashes a large share of the files.

It then times, as the median of ``--repeat`` runs:

- the whole command in a child process, ``computewise storage audit DIR --json`` (start-up, walk,
  manifest reading, hashing of every file whose size collides, pricing, JSON), checked for the
  right number of files: its wall time, and its CPU time (user + system from the child's rusage),
  which busy neighbours on a shared machine move far less than the wall time;
- the baseline: ``os.walk`` plus one ``lstat`` per file in this process, the least any audit must pay
  to see every file's size and age, so the ratio shows our overhead and a slow disk shows up as a
  slow baseline rather than a false regression.

The files were just written, so both run with a warm page cache (as a second audit of a folder does).

Usage: python benchmarks/storage_audit.py [--files 100000] [--repeat 3] [--quick] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from computewise.system.cpu import cpu_model_name
from computewise.train.checkpoint import CHECKPOINT_FORMAT

TARGET_S = 10.0
FILES_PER_FOLDER = 200


def build(root: Path, n_files: int, seed: int = 0) -> dict[str, int]:
    """Write ``n_files`` files under ``root``; returns how many of each kind were written."""
    rng = random.Random(seed)
    counts = {"checkpoint": 0, "dataset": 0, "log": 0, "cache": 0, "duplicate": 0}
    written: list[bytes] = []
    made = 0
    folder_index = 0
    while made < n_files:
        share = folder_index % 10
        if share < 3:
            kind, folder = "checkpoint", root / "runs" / f"run-{folder_index:04d}" / "checkpoints"
        elif share < 8:
            kind, folder = "dataset", root / "data" / f"shard-{folder_index:04d}"
        elif share < 9:
            kind, folder = "log", root / "logs" / f"job-{folder_index:04d}"
        else:
            kind, folder = "cache", root / ".cache" / f"c-{folder_index:04d}"
        folder.mkdir(parents=True)
        for i in range(min(FILES_PER_FOLDER, n_files - made)):
            if written and made % 10 == 9:
                payload = written[rng.randrange(len(written))]
                counts["duplicate"] += 1
            else:
                payload = rng.randbytes(rng.randint(1, 8192))
                written.append(payload)
            if kind == "checkpoint" and i % 2 == 1:
                step = i // 2
                manifest = {
                    "format": CHECKPOINT_FORMAT, "step": step, "file": f"step-{step:08d}.pt", "sha256": "-",
                    "size_bytes": 0, "metric": rng.random(), "higher_is_better": False, "saved_at_s": 0.0,
                }  # fmt: skip
                (folder / f"step-{step:08d}.json").write_text(json.dumps(manifest))
            elif kind == "checkpoint":
                (folder / f"step-{i // 2:08d}.pt").write_bytes(payload)
            else:
                suffix = {"dataset": (".parquet", ".jsonl", ".npy")[i % 3], "log": ".log", "cache": ".bin"}[kind]
                (folder / f"f-{i:05d}{suffix}").write_bytes(payload)
            counts[kind] += 1
            made += 1
        folder_index += 1
    return counts


def baseline_s(root: Path) -> tuple[float, int]:
    started = time.perf_counter()
    files = 0
    for folder, _, names in os.walk(root):
        for name in names:
            os.lstat(os.path.join(folder, name))
            files += 1
    return time.perf_counter() - started, files


def audit_s(root: Path) -> tuple[float, float, dict[str, Any]]:
    """Wall time and CPU time (user + system, from the child's rusage) of one audit, and its document."""
    command = [sys.executable, "-m", "computewise.cli.app", "storage", "audit", str(root), "--json"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"storage audit failed:\n{done.stderr}")
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed, cpu_s, json.loads(done.stdout)


def hardware() -> str:
    return f"{cpu_model_name()}, {os.cpu_count()} cores, Python {platform.python_version()}, {platform.system()}"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="2,000 files, one repeat: a check of the script")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON to this file")
    args = parser.parse_args(argv)
    n_files, repeat = (2000, 1) if args.quick else (args.files, args.repeat)

    root = Path(tempfile.mkdtemp(prefix="computewise-storage-bench-"))
    try:
        started = time.perf_counter()
        counts = build(root / "project", n_files)
        build_s = time.perf_counter() - started
        baselines = [baseline_s(root / "project") for _ in range(repeat)]
        audits = [audit_s(root / "project") for _ in range(repeat)]
    finally:
        shutil.rmtree(root, ignore_errors=True)
    audit_doc = audits[-1][2]
    if audit_doc["files"] != n_files or any(files != n_files for _, files in baselines):
        raise SystemExit(f"expected {n_files} files, the audit saw {audit_doc['files']}")
    results: dict[str, Any] = {
        "hardware": hardware(),
        "files": n_files,
        "written": counts,
        "build_s": build_s,
        "baseline_walk_stat_s": statistics.median(s for s, _ in baselines),
        "audit_s": statistics.median(s for s, _, _ in audits),
        "audit_cpu_s": statistics.median(cpu for _, cpu, _ in audits),
        "audit_walk_s": audit_doc["walk_s"],
        "audit_hash_s": audit_doc["hash_s"],
        "hashed_files": audit_doc["duplicates"]["hashed_files"],
        "duplicate_groups": audit_doc["duplicates"]["groups"],
        "target_s": TARGET_S,
    }
    results["ratio_to_baseline"] = results["audit_s"] / results["baseline_walk_stat_s"]
    print(f"hardware: {results['hardware']}")
    verdict = "met" if results["audit_s"] < TARGET_S else "MISSED"
    print(
        f"storage audit of {n_files:,} files: {results['audit_s']:.2f} s end to end, "
        f"{results['audit_cpu_s']:.2f} s of CPU "
        f"(walk {results['audit_walk_s']:.2f} s, hashing {results['hashed_files']:,} files whose sizes collide "
        f"{results['audit_hash_s']:.2f} s), target < {TARGET_S:g} s: {verdict}"
    )
    print(
        f"baseline os.walk + lstat: {results['baseline_walk_stat_s']:.2f} s; audit / baseline = "
        f"{results['ratio_to_baseline']:.1f}x; {results['duplicate_groups']:,} duplicate groups found"
    )
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    main()
