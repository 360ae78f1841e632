"""What a user expects of any CLI, through the real entry point: ``--version``, ``-h``, completion."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import computewise

CLI = [sys.executable, "-m", "computewise.cli.app"]

# One child renders the help of every command in turn, as `computewise PATH -h` would at that width.
_HELP_DRIVER = """
import contextlib, io, json, os, sys
import typer
from computewise.cli.app import main, whole_app

def paths(command, path):
    yield path
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        yield from paths(sub, [*path, name])

os.environ["COLUMNS"] = sys.argv[1]
results = []
for path in paths(typer.main.get_command(whole_app()), []):
    for flag in ("-h", "--help"):
        out = io.StringIO()
        sys.argv = ["computewise", *path, flag]
        with contextlib.redirect_stdout(out):
            try:
                main()
                code = 0
            except SystemExit as stop:
                code = stop.code or 0
        results.append({"path": path, "flag": flag, "code": code, "stdout": out.getvalue()})
json.dump(results, sys.__stdout__)
"""


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120, env=env, check=False)


def every_help(columns: int) -> list[dict[str, Any]]:
    """``-h`` and ``--help`` of the root, every verb and every subcommand, rendered at ``columns``."""
    done = subprocess.run(
        [sys.executable, "-c", _HELP_DRIVER, str(columns)], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    results: list[dict[str, Any]] = json.loads(done.stdout)
    return results


def test_version_prints_the_package_version() -> None:
    result = run("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"computewise {computewise.__version__}\n"


def test_h_is_help_on_every_command() -> None:
    results = every_help(100)
    assert len(results) > 40  # the root, each verb, each subcommand
    for path, pair in zip(results[::2], results[1::2], strict=True):
        assert path["code"] == pair["code"] == 0, path["path"]
        assert path["stdout"] == pair["stdout"], path["path"]
        assert f"Usage: {' '.join(['computewise', *path['path']])} " in path["stdout"], path["stdout"][:200]


# Typer detects the shell from the parent processes and ignores the one named on the command line
# unless shell detection is off; under `make test` the parent is sh, which it does not support.
NAMED_SHELL = {"_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"}


def test_shell_completion_completes_verbs_and_flags(tmp_path: Path) -> None:
    script = run("--show-completion", "bash", env={**os.environ, **NAMED_SHELL})
    assert script.returncode == 0, script.stderr
    assert "_COMPUTEWISE_COMPLETE=complete_bash" in script.stdout

    def complete(words: str) -> list[str]:
        env = {**os.environ, "_COMPUTEWISE_COMPLETE": "complete_bash", "COMP_WORDS": words}
        env["COMP_CWORD"] = str(len(words.split()) - 1)
        result = run(env=env)
        assert result.returncode == 0, result.stderr
        return result.stdout.split()

    assert complete("computewise estim") == ["estimate"]
    assert "--model" in complete("computewise estimate train --mo")

    installed = run("--install-completion", "bash", env={**os.environ, **NAMED_SHELL, "HOME": str(tmp_path)})
    assert installed.returncode == 0, installed.stderr
    assert "_COMPUTEWISE_COMPLETE" in (tmp_path / ".bash_completions" / "computewise.sh").read_text()
    assert "computewise.sh" in (tmp_path / ".bashrc").read_text()


def test_help_reads_like_every_other_cli_at_80_columns() -> None:
    """``--flag / --no-flag``, ``INTEGER``, ``PATH``, ``TEXT``, ``RUN_ID``: no Python types, no cut flag."""
    for result in every_help(80)[::2]:
        where, text = " ".join(result["path"]), result["stdout"]
        assert not re.findall(r"<[a-z][\w\[\]|, .]*>", text, re.IGNORECASE), where
        assert not re.findall(r"\{[a-z_]+\}", text), where
        assert not re.findall(r"--[\w-]*(?:…|\.\.\.)", text), where
        assert max(len(line) for line in text.splitlines()) <= 80, where
