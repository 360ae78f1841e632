"""The README's examples run as written from a fresh clone.

It once told users to pass ``--model tiny_gpt/config.json``, a file no clone has, and its
``examples.*`` entry points failed with a bare "No module named 'examples'" anywhere but the
repository's root. Every file and entry point under ``examples`` it names is tracked here; the one
config.json example runs and prints the model the README shows; an entry point is found from
another directory through ``PYTHONPATH``, as the README says, and without it the error says where to stand.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
CLI = [sys.executable, "-m", "computewise.cli.app"]


def tracked() -> set[str]:
    done = subprocess.run(["git", "ls-files", "examples"], cwd=ROOT, capture_output=True, text=True, check=True)
    return set(done.stdout.split())


def test_every_example_file_the_readme_names_is_in_the_repository() -> None:
    named = set(re.findall(r"\bexamples/[\w.-]+\w", README))
    assert "examples/tiny_gpt.config.json" in named
    assert named <= tracked()


def test_every_examples_entry_point_the_readme_names_is_defined() -> None:
    named = set(re.findall(r"\bexamples\.(\w+):(\w+)", README))
    assert ("digits", "classifier") in named
    for module, attribute in named:
        assert f"examples/{module}.py" in tracked()
        tree = ast.parse((ROOT / "examples" / f"{module}.py").read_text())
        defined = {node.name for node in tree.body if isinstance(node, ast.FunctionDef | ast.ClassDef)}
        assert attribute in defined, (module, attribute)


def test_the_config_json_example_reads_the_shipped_file() -> None:
    (line,) = [line for line in README.splitlines() if "--model examples/tiny_gpt.config.json" in line]
    words = line.removeprefix("$ computewise ").rstrip(" \\").split()
    words[words.index("--gpu") + 1] = "h100"  # this-cpu is the row `bench --save` adds on the README's machine
    done = subprocess.run(
        [*CLI, *words, "--seq-len", "64", "--micro-batch", "32", "--global-batch", "32", "--tokens", "2048000"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("tiny_gpt (1.89M parameters)")
    assert "tiny_gpt (1.89M parameters) on 1 × cpu-vm" in README


def test_an_examples_entry_point_from_another_directory(tmp_path: Path) -> None:
    command = [*CLI, "scaletest", "examples.tiny_gpt:setup", "--nproc", "1"]
    alone = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert alone.returncode == 2
    assert f"working directory ({tmp_path})" in alone.stderr
    assert "run from the computewise repository's root, or add that folder to PYTHONPATH" in alone.stderr

    find = (
        "from computewise.errors import InputError\n"
        "from computewise.system.entrypoints import import_entry_point\n"
        "print(import_entry_point('examples.tiny_gpt:setup', 'entry point', InputError).__module__)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    found = subprocess.run(
        [sys.executable, "-c", find], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert found.returncode == 0, found.stderr
    assert found.stdout.strip() == "examples.tiny_gpt"
