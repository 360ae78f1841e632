"""``plan serve --max-usd-per-hour``: through the real console script, JSON against its schema, refusals exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import yaml

CLI = [sys.executable, "-m", "computewise.cli.app"]


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def test_a_capped_plan_writes_capped_configs_and_the_budget_command(
    tmp_path: Path, json_schema: Callable[[object, str], None]
) -> None:
    (tmp_path / "day.csv").write_text("hour,rps\n0,20\n1,40\n2,60\n3,180\n4,60\n5,0\n")
    args = ("plan", "serve", "--capacity-rps", "50", "--latency-ms", "40", "--traffic", "day.csv")
    args += ("--hourly-usd", "1.2")
    capped = ("--max-usd-per-hour", "4", "--monthly-usd", "2000", "--name", "minilm")
    written = ("--hpa", "hpa.yaml", "--ray-config", "ray.json")
    result = _run(*args, *capped, *written, "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    json_schema(data, "plan-serve")
    cap = data["spend_cap"]
    assert cap["max_replicas"] == 3 and cap["capped_hours"][0]["hour"] == 3
    # $3.60/h (3 replicas) x 24 h = $86.40 of $2,000: alert at 95.6 % (rounded down)
    assert cap["budget"]["threshold_pct"] == 95.6
    assert cap["budget"]["command"] == (
        "computewise budget set --scope deployment=minilm --monthly-usd 2000 --alert-at 95.6,100"
    )
    assert yaml.safe_load((tmp_path / "hpa.yaml").read_text())["spec"]["maxReplicas"] == 3
    assert json.loads((tmp_path / "ray.json").read_text())["autoscaling_config"]["max_replicas"] == 3
    human = _run(*args, *capped, cwd=tmp_path)
    assert human.returncode == 0 and "spend cap" in human.stdout and "16.7%" in human.stdout


def test_a_cap_below_one_replica_exits_2_and_writes_nothing(tmp_path: Path) -> None:
    result = _run(
        "plan", "serve", "--capacity-rps", "50", "--peak-rps", "100", "--hourly-usd", "1.2",
        "--max-usd-per-hour", "1", "--hpa", "hpa.yaml", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 2
    assert "below the price of one replica" in result.stderr and "To fix:" in result.stderr
    assert not (tmp_path / "hpa.yaml").exists()
    lone = _run("plan", "serve", "--capacity-rps", "50", "--peak-rps", "100", "--hourly-usd", "1.2",
                "--monthly-usd", "100", cwd=tmp_path)  # fmt: skip
    assert lone.returncode == 2 and "--monthly-usd needs --max-usd-per-hour" in lone.stderr
