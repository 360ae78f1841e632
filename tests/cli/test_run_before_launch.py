"""What ``computewise run`` must settle before it starts the job, and what it owes the job after it ends.

A taken ``--prometheus-port``, an ``--html`` path that cannot be written and an empty command are refused
with exit 2 while nothing has run or been recorded: found after the job, they cost its whole run and left
it unwatched or its exit code lost. A report that still cannot be written after the job (its directory
went away) leaves the summary and the job's exit code intact. Each test runs the CLI as its own process
with a real SQLite ledger in ``tmp_path``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from computewise.ledger import Ledger

CLI = [sys.executable, "-m", "computewise.cli.app"]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COMPUTEWISE_FAKE_GPU": ""}
    return subprocess.run([*CLI, *args], capture_output=True, text=True, env=env, timeout=120)


def _touch(path: Path) -> tuple[str, ...]:
    """A job whose only effect is to create ``path``: proof that it was started."""
    return (sys.executable, "-c", f"open({str(path)!r}, 'w').close()")


def _runs(ledger_file: Path) -> list[str]:
    """The commands recorded in the ledger (none if it was never created)."""
    if not ledger_file.exists():
        return []
    ledger = Ledger.open(f"sqlite:///{ledger_file}", create=False)
    try:
        return [run.command for run in ledger.runs()]
    finally:
        ledger.close()


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port on 127.0.0.1 that another listener holds for the whole test."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield int(holder.getsockname()[1])


def test_a_taken_prometheus_port_refuses_the_run_before_the_job_starts(tmp_path: Path, taken_port: int) -> None:
    ledger_file, marker = tmp_path / "ledger.sqlite", tmp_path / "started"
    result = _cli(
        "run", "--db", str(ledger_file), "--hourly-usd", "1", "--prometheus-port", str(taken_port),
        "--", *_touch(marker),
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert f"127.0.0.1:{taken_port}: the port is already in use" in result.stderr
    assert "To fix:" in result.stderr
    assert _runs(ledger_file) == [], "a refused run must not be recorded (it was, as failed, exit 1)"
    assert not marker.exists(), "the job was started although the run was refused"


def test_a_free_prometheus_port_still_serves_the_run(tmp_path: Path) -> None:
    """Binding the port before the run has an id must not lose the endpoint's announcement or the run."""
    ledger_file = tmp_path / "ledger.sqlite"
    result = _cli("run", "--db", str(ledger_file), "--json", "--prometheus-port", "0", "--", sys.executable, "-c", "")
    assert result.returncode == 0, result.stderr
    assert "Prometheus metrics at http://127.0.0.1:" in result.stderr
    assert json.loads(result.stdout)["run"]["status"] == "succeeded"
    assert len(_runs(ledger_file)) == 1


@pytest.mark.parametrize("as_json", [False, True], ids=["terminal", "json"])
def test_an_html_path_in_a_missing_directory_refuses_the_run_before_it_starts(tmp_path: Path, as_json: bool) -> None:
    ledger_file, marker, html = tmp_path / "ledger.sqlite", tmp_path / "started", tmp_path / "nodir" / "r.html"
    flags = ("--json",) if as_json else ()
    result = _cli("run", "--db", str(ledger_file), *flags, "--html", str(html), "--", *_touch(marker))
    assert result.returncode == 2, result.stderr
    assert f"directory {html.parent} does not exist" in result.stderr
    assert f"To fix: create it (mkdir -p {html.parent})" in result.stderr
    assert result.stdout == ""
    assert not marker.exists(), "the job ran although its report could not be written"
    assert _runs(ledger_file) == []


def test_an_html_path_that_is_a_directory_refuses_the_run(tmp_path: Path) -> None:
    ledger_file, marker = tmp_path / "ledger.sqlite", tmp_path / "started"
    result = _cli("run", "--db", str(ledger_file), "--html", str(tmp_path), "--", *_touch(marker))
    assert result.returncode == 2, result.stderr
    assert f"--html {tmp_path} is a directory" in result.stderr and "To fix:" in result.stderr
    assert not marker.exists()
    assert _runs(ledger_file) == []


def _removes_its_report_directory(directory: Path, exit_code: int) -> tuple[str, ...]:
    """A job that deletes the directory its ``--html`` report was to go to, then exits with ``exit_code``."""
    return (sys.executable, "-c", f"import os, sys; os.rmdir({str(directory)!r}); sys.exit({exit_code})")


def test_a_report_that_cannot_be_written_after_the_job_keeps_the_summary_and_exit_code(tmp_path: Path) -> None:
    ledger_file, reports = tmp_path / "ledger.sqlite", tmp_path / "reports"
    reports.mkdir()
    html = reports / "r.html"
    job = _removes_its_report_directory(reports, 3)
    result = _cli("run", "--db", str(ledger_file), "--hourly-usd", "1", "--html", str(html), "--", *job)
    assert result.returncode == 3, result.stderr
    assert "failed, exit 3" in result.stderr, "the summary must be printed although the report was not"
    assert f"error: the HTML report was not written: cannot write {html}" in result.stderr
    assert f"`computewise runs show 1 --html {html}`" in result.stderr
    assert f"wrote {html}" not in result.stderr
    assert not html.exists()


def test_a_report_that_cannot_be_written_after_the_job_keeps_the_json_document(tmp_path: Path) -> None:
    ledger_file, reports = tmp_path / "ledger.sqlite", tmp_path / "reports"
    reports.mkdir()
    job = _removes_its_report_directory(reports, 3)
    result = _cli("run", "--db", str(ledger_file), "--json", "--html", str(reports / "r.html"), "--", *job)
    assert result.returncode == 3, result.stderr
    document = json.loads(result.stdout)
    assert document["run"]["exit_code"] == 3 and document["run"]["status"] == "failed"
    assert "the HTML report was not written" in result.stderr


@pytest.mark.parametrize("command", ["", " "], ids=["empty", "blank"])
def test_an_empty_command_is_refused_as_empty(tmp_path: Path, command: str) -> None:
    """``run -- ''`` said "cannot execute : permission denied" (exit 126) and recorded a failed run."""
    ledger_file = tmp_path / "ledger.sqlite"
    result = _cli("run", "--db", str(ledger_file), "--", command)
    assert result.returncode == 2, result.stderr
    assert f"error: the command to run is empty ({command!r})" in result.stderr
    assert "To fix: put the program after --" in result.stderr
    assert "permission denied" not in result.stderr
    assert _runs(ledger_file) == []
