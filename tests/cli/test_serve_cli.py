"""``computewise serve`` as a user runs it: flags, exit codes, messages, and the run it leaves in the ledger.

Every test runs the CLI as its own process. Refusals (exposed host, taken port, bad flags) must
exit 2 with an ``error:`` and a ``To fix:`` line before anything listens; the one full run serves
the echo model on 127.0.0.1, stops on SIGTERM with 0, and is then found in the ledger and in
``cost report`` (dollars per 1000 inferences).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from computewise.ledger import Ledger

CLI = [sys.executable, "-m", "computewise.cli.app"]


def cli(*args: str, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COMPUTEWISE_FAKE_GPU": ""}
    env.pop("COMPUTEWISE_SERVE_TOKEN", None)
    return subprocess.run([*CLI, *args], capture_output=True, text=True, env=env, timeout=timeout_s, check=False)


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'ledger.sqlite'}"


def test_help_shows_the_serving_flags() -> None:
    result = cli("serve", "--help")
    assert result.returncode == 0, result.stderr
    for flag in ("--max-batch-size", "--max-queue-delay-ms", "--batching", "--slo-p99-ms", "--queue-limit",
                 "--timeout-s", "--token", "--insecure", "--max-body-bytes", "--db", "--tag", "--ready-file",
                 "COMPUTEWISE_SERVE_TOKEN"):  # fmt: skip
        assert flag in result.stdout, flag


def test_serve_runs_here_and_deploy_runs_on_ray_each_with_its_own_flags(db: str) -> None:
    """``serve`` has no Ray flags and ``deploy`` no ledger or SLO flags; each refuses the other's (exit 2)."""
    serve_help, deploy_help = cli("serve", "--help"), cli("deploy", "--help")
    assert serve_help.returncode == 0 and deploy_help.returncode == 0, serve_help.stderr + deploy_help.stderr
    ray_only = ("--address", "--ray-config", "--replica-cpus", "--route-prefix", "--delete", "--json")
    local_only = ("--slo-p99-ms", "--db", "--tag", "--ready-file", "--hourly-usd")
    for flag in ray_only:
        assert flag not in serve_help.stdout and flag in deploy_help.stdout, flag
    for flag in local_only:
        assert flag in serve_help.stdout and flag not in deploy_help.stdout, flag
    assert "--backend" not in serve_help.stdout + deploy_help.stdout
    for verb, args in (
        ("serve", ["--db", db, "--backend", "ray"]),
        ("serve", ["--db", db, "--ray-config", "ray.json"]),
        ("deploy", ["--address", "127.0.0.1:6379", "--slo-p99-ms", "50"]),
    ):
        result = cli(verb, "echo", *args)
        assert result.returncode == 2 and "No such option" in result.stderr, (verb, args, result.stderr)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--host", "0.0.0.0"], "refusing to listen on 0.0.0.0"),
        (["--host", "10.1.2.3", "--token", ""], "--token is empty"),
        (["--batching", "eager"], "--batching must be one of none, greedy, cost"),
        (["--timeout-s", "0"], "--timeout-s must be between 0.001 and 3600 seconds"),
        (["--tag", "team"], "cannot read tag 'team'"),
    ],
)
def test_refusals_exit_2_with_a_fix(db: str, args: list[str], said: str) -> None:
    result = cli("serve", "echo", "--db", db, *args)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert said in result.stderr and "To fix:" in result.stderr
    assert "Traceback" not in result.stderr


def test_exposed_host_message_names_both_ways_out(db: str) -> None:
    result = cli("serve", "echo", "--host", "0.0.0.0", "--db", db)
    assert result.returncode == 2
    assert "--token" in result.stderr and "--insecure" in result.stderr


def test_taken_port_and_unknown_model_exit_2(db: str) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        result = cli("serve", "echo", "--port", str(taken.getsockname()[1]), "--db", db)
    assert result.returncode == 2 and "cannot listen on 127.0.0.1" in result.stderr
    unknown = cli("serve", "no-such-model", "--port", "0", "--db", db)
    assert unknown.returncode == 2 and "cannot serve 'no-such-model'" in unknown.stderr


def test_serving_run_is_recorded_with_its_inferences_and_priced(tmp_path: Path, db: str) -> None:
    ready_file = tmp_path / "ready.json"
    env = {**os.environ, "COMPUTEWISE_FAKE_GPU": "", "COMPUTEWISE_SERVE_TOKEN": "from-the-env"}
    command = [
        *CLI, "serve", "echo", "--port", "0", "--db", db, "--tag", "team=nlp", "--tag", "project=search",
        "--batching", "greedy", "--max-batch-size", "8", "--hourly-usd", "3.6", "--ready-file", str(ready_file),
    ]  # fmt: skip
    log = tmp_path / "serve.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=env)
    try:
        deadline_s = time.monotonic() + 60
        while not ready_file.exists():
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline_s, log.read_text()
            time.sleep(0.05)
        url = json.loads(ready_file.read_text())["url"]
        auth = {"Authorization": "Bearer from-the-env"}
        assert httpx.post(f"{url}/v1/models/echo/infer", json={"input": 1}, timeout=5).status_code == 401
        for n in range(5):
            response = httpx.post(f"{url}/v1/models/echo/infer", json={"inputs": [n, n]}, headers=auth, timeout=5)
            assert response.status_code == 200 and response.json()["outputs"] == [n, n]
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0, log.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
    output = log.read_text()
    assert f"serving 'echo' at {url}" in output and "10 inferences served" in output
    assert not ready_file.exists()
    with Ledger.open(db) as ledger:
        (run,) = ledger.runs()
    assert (run.kind, run.status, run.exit_code, run.inferences) == ("serve", "succeeded", 0, 10)
    assert run.tags == {"team": "nlp", "project": "search"} and run.price.hourly_usd == 3.6
    assert run.summary is not None
    assert run.summary["batching"] == {
        "mode": "greedy",
        "max_batch_size": 8,
        "max_queue_delay_ms": 10.0,
        "slo_p99_ms": None,
    }
    assert "from-the-env" not in " ".join(run.argv)  # the token came from the environment, not the command line
    report = cli("cost", "report", "--db", db, "--since", "all", "--json")
    assert report.returncode == 0, report.stderr
    total = json.loads(report.stdout)["total"]
    assert total["inferences"] == 10 and total["usd_per_1k_inferences"] > 0


def test_sigint_also_drains_and_is_an_interrupt_like_on_every_run(tmp_path: Path, db: str) -> None:
    """Ctrl-C drains as SIGTERM does, but the run ends as Ctrl-C ends every run: interrupted, exit 130."""
    ready_file = tmp_path / "ready.json"
    process = subprocess.Popen(
        [*CLI, "serve", "echo", "--port", "0", "--db", db, "--ready-file", str(ready_file)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "COMPUTEWISE_FAKE_GPU": ""},
    )
    try:
        deadline_s = time.monotonic() + 60
        while not ready_file.exists():
            assert process.poll() is None and time.monotonic() < deadline_s
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)
        _out, err = process.communicate(timeout=20)
    finally:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
    assert process.returncode == 128 + signal.SIGINT, err.decode()
    assert b"SIGINT: draining" in err
    [run] = Ledger.open(db).runs()
    assert (run.kind, run.status, run.exit_code) == ("serve", "interrupted", 128 + signal.SIGINT)


BROKEN_MODELS = """
NOT_A_FUNCTION = 3


def boom():
    raise RuntimeError("setup exploded")
"""


@pytest.mark.parametrize(
    ("entry", "said"),
    [
        ("brokenmod:boom", "the model entry point brokenmod:boom raised RuntimeError: setup exploded"),
        ("brokenmod:NOT_A_FUNCTION", "the model entry point brokenmod:NOT_A_FUNCTION is not callable"),
    ],
)
def test_an_entry_point_that_raises_or_is_not_callable_exits_2_with_a_fix(
    tmp_path: Path, db: str, entry: str, said: str
) -> None:
    """The user's setup failing is an answer about their model, not a computewise crash: no traceback."""
    (tmp_path / "brokenmod.py").write_text(BROKEN_MODELS)
    env = {**os.environ, "COMPUTEWISE_FAKE_GPU": "", "PYTHONPATH": str(tmp_path)}
    result = subprocess.run(
        [*CLI, "serve", entry, "--port", "0", "--db", db],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert said in result.stderr and "To fix:" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("where", "said"),
    [
        ("a directory", "is a directory"),
        ("missing/dir/ready.json", "does not exist"),
    ],
)
def test_a_ready_file_that_cannot_be_written_is_refused_before_anything_loads(
    tmp_path: Path, where: str, said: str
) -> None:
    """The ready file is written only after warm-up: a path that cannot take it is refused first, exit 2,
    with no run recorded (the ledger is not even created)."""
    ledger = tmp_path / "ledger.sqlite"
    ready_file = tmp_path if where == "a directory" else tmp_path / where
    result = cli("serve", "echo", "--port", "0", "--db", f"sqlite:///{ledger}", "--ready-file", str(ready_file))
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert f"--ready-file {ready_file}" in result.stderr and said in result.stderr and "To fix:" in result.stderr
    assert "Traceback" not in result.stderr and "serving" not in result.stderr
    assert not ledger.exists()
