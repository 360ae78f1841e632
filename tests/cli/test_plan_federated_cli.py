"""``plan federated`` through the real console script: JSON against its schema, bad input exits 2 with a fix."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable

import pytest

from computewise.cli.app import main  # noqa: TID251
from computewise.errors import InputError
from computewise.plan.federated_request import PlannedFederation

CLI = [sys.executable, "-m", "computewise.cli.app"]
BASE = (
    "plan", "federated", "-m", "gpt2", "--client-device", "apple-a17-pro", "--uplink", "20Mbps",
    "--local-steps", "5", "--seq-len", "128", "--local-batch", "8",
)  # fmt: skip


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120)


def test_json_matches_its_schema_and_reads_back(json_schema: Callable[[object, str], None]) -> None:
    result = _run(*BASE, "--clients", "1000", "--rounds", "100", "--participation", "0.1", "--compression", "int8",
                  "--downlink", "100Mbps", "--json")  # fmt: skip
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    json_schema(data, "plan-federated")
    planned = PlannedFederation.from_dict(data)
    assert planned.to_dict() == data  # the whole document reads back, what was assumed too
    with pytest.raises(InputError, match="schema_version 2, this computewise reads up to 1"):
        PlannedFederation.from_dict({**data, "schema_version": 2})
    plan = planned.plan
    assert plan.chosen.participants == 100 and plan.chosen.compression == "int8"
    # GPT-2 small: 124,439,808 parameters; 4 bytes each down at 100 Mbit/s = 39.8 s, 1 byte each up at 20 Mbit/s
    assert plan.chosen.download_s == pytest.approx(124_439_808 * 4 * 8 / 100e6)
    assert plan.chosen.upload_s == pytest.approx(124_439_808 * 8 / 20e6)
    human = _run(*BASE, "--clients", "1000", "--rounds", "100")
    assert human.returncode == 0 and "compression (upload)" in human.stdout and "participation" in human.stdout


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("--clients", "0", "--rounds", "10"), "--clients must be"),
        (("--clients", "10", "--rounds", "10", "--participation", "1.5"), "--participation must be"),
        (("--clients", "10", "--rounds", "10", "--uplink", "0"), "--uplink must be"),
        (("--clients", "10", "--rounds", "10", "--compression", "zip"), "--compression must be one of"),
        (("--clients", "10", "--rounds", "10", "--client-device", "nokia-3310"), "nokia-3310"),
    ],
)
def test_bad_input_exits_2_with_a_fix(
    args: tuple[str, ...], fragment: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """In process, through the CLI's own entry point (the exit code and stderr a shell sees)."""
    monkeypatch.setattr(sys, "argv", ["computewise", *BASE, *args])
    with pytest.raises(SystemExit) as done:
        main()
    stderr = " ".join(capsys.readouterr().err.split())
    assert done.value.code == 2, stderr
    assert fragment in stderr and "To fix:" in stderr


def test_a_model_larger_than_the_client_device_is_refused(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Llama 3 70B was planned on an 8 GiB phone: 262.8 GiB downloaded to each client, and trained there."""
    argv = ["plan", "federated", "-m", "llama-3-70b", "--client-device", "apple-a17-pro", "--uplink", "20Mbps"]
    monkeypatch.setattr(sys, "argv", ["computewise", *argv, "--clients", "100", "--rounds", "10", "--local-steps", "5"])
    with pytest.raises(SystemExit) as done:
        main()
    stderr = " ".join(capsys.readouterr().err.split())
    assert done.value.code == 2, stderr
    assert stderr.startswith("error: llama-3-70b does not fit on apple-a17-pro: local training needs at least"), stderr
    assert "and the device has 8.0 GiB" in stderr and "To fix: pick a smaller --model" in stderr
