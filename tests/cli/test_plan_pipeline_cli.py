"""``plan serve --pipeline`` through the real console script: a loadtest stage and a measured one, JSON against its
schema, and the refusals (exit 2, the file and the stage named)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from computewise.cli.app import main  # noqa: TID251
from computewise.specs.loadtest import LoadResult

CLI = [sys.executable, "-m", "computewise.cli.app"]
PIPELINE = """\
slo_p99_ms: 2000
stages:
  - name: embed
    loadtest: embed.json
    batch: 16
    accelerator: l4
  - name: rerank
    latency_ms: 40
    batch: 8
    accelerator: t4
    fan_out: 5
"""


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, "plan", "serve", *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def _files(tmp_path: Path) -> None:
    best = LoadResult(80.0, 10.0, 800, 800, 0, 0, 80.0, 20.0, 30.0, 40.0, 60.0, 0.0, 0.0)
    doc = {"url": "http://127.0.0.1:8000/x", "slo_p99_ms": 100.0, "max_rate_rps": 80.0, "best": best.to_dict(),
           "probes": [best.to_dict() | {"meets_slo": True}]}  # fmt: skip
    (tmp_path / "embed.json").write_text(json.dumps(doc))
    (tmp_path / "p.yaml").write_text(PIPELINE)


def test_a_pipeline_with_a_loadtest_stage(tmp_path: Path, json_schema: Callable[[object, str], None]) -> None:
    _files(tmp_path)
    result = _run("--pipeline", "p.yaml", "--peak-rps", "30", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    json_schema(data, "plan-pipeline")
    embed, rerank = data["stages"]
    # embed: 80 requests/s per replica from the loadtest, 30 calls/s at 80 x 0.65 = 52: one replica
    assert (embed["source"], embed["capacity_rps_per_replica"], embed["replicas"]) == ("loadtest", 80.0, 1)
    assert embed["service_s"] == 0.020  # the median latency at that rate
    # rerank: 8 / 0.040 s = 200 calls/s per replica; 150 calls/s at 130: 2 replicas
    assert (rerank["calls_per_s"], rerank["replicas"]) == (150.0, 2)
    assert data["meets_slo"] is True and data["alternatives"] == []  # measured stages stay where measured
    human = _run("--pipeline", "p.yaml", "--peak-rps", "30", cwd=tmp_path)
    assert human.returncode == 0 and "bottleneck" in human.stdout and "per 1000 requests" in human.stdout


def _refused(args: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> str:
    """Exit code 2 and the stderr a shell sees, in process through the CLI's own entry point."""
    monkeypatch.setattr(sys, "argv", ["computewise", "plan", "serve", *args])
    with pytest.raises(SystemExit) as done:
        main()
    stderr = " ".join(capsys.readouterr().err.split())
    assert done.value.code == 2, stderr
    assert "To fix:" in stderr
    return stderr


def test_refusals_name_the_file_the_stage_and_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _files(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert "--hourly-usd cannot be added" in _refused(
        ["--pipeline", "p.yaml", "--peak-rps", "30", "--hourly-usd", "1"], capsys, monkeypatch
    )
    assert "--peak-rps" in _refused(["--pipeline", "p.yaml"], capsys, monkeypatch)
    (tmp_path / "bad.yaml").write_text("stages:\n  - name: a\n   batch: 3\n")
    assert "bad.yaml:3" in _refused(["--pipeline", "bad.yaml", "--peak-rps", "30"], capsys, monkeypatch)
    (tmp_path / "missing.yaml").write_text(PIPELINE.replace("embed.json", "nowhere.json"))
    assert "nowhere.json: no such file" in _refused(
        ["--pipeline", "missing.yaml", "--peak-rps", "30"], capsys, monkeypatch
    )
