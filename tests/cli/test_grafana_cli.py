"""``computewise grafana-dashboard`` as a user runs it: JSON on stdout, an atomic ``--out``, refused flags.

What the dashboard's expressions return against a real Prometheus is
``tests/dashboard/test_grafana_prometheus.py``'s business; this file checks the verb around it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

CLI = [sys.executable, "-m", "computewise.cli.app", "grafana-dashboard"]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=60, check=False)


def _exprs(dashboard: dict[str, object]) -> list[str]:
    panels = dashboard["panels"]
    assert isinstance(panels, list)
    return [target["expr"] for panel in panels for target in panel.get("targets", [])]


def test_stdout_is_the_dashboard_for_the_default_jobs_and_out_writes_the_same(tmp_path: Path) -> None:
    printed = _cli()
    assert printed.returncode == 0, printed.stderr
    dashboard = json.loads(printed.stdout)
    exprs = _exprs(dashboard)
    assert exprs and all('job="computewise-run"' in e or 'job="computewise-serve"' in e for e in exprs)
    assert dashboard["templating"]["list"][0]["current"] == {}  # no uid: Grafana asks on import

    out = tmp_path / "dashboard.json"
    out.write_text("an older dashboard")
    written = _cli("--out", str(out), "--datasource-uid", "prom-1", "--job-run", 'tr"ain')
    assert written.returncode == 0, written.stderr
    assert written.stdout == "" and f"wrote {out}" in written.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["dashboard.json"]  # no temporary file left behind
    custom = json.loads(out.read_text())
    assert custom["templating"]["list"][0]["current"]["value"] == "prom-1"
    assert any('job="tr\\"ain"' in e for e in _exprs(custom))  # escaped as a PromQL string literal
    assert dashboard["panels"][1]["title"] == custom["panels"][1]["title"]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--datasource-uid", "not a uid"), "is not a Grafana uid"),
        (("--job-serve", " "), "--job-serve must name a Prometheus job"),
    ],
)
def test_bad_flags_exit_2_and_write_nothing(tmp_path: Path, args: tuple[str, ...], said: str) -> None:
    out = tmp_path / "dashboard.json"
    refused = _cli("--out", str(out), *args)
    assert refused.returncode == 2
    assert said in refused.stderr and "To fix:" in refused.stderr
    assert not out.exists() and refused.stdout == ""


def test_out_into_a_missing_directory_is_refused(tmp_path: Path) -> None:
    refused = _cli("--out", str(tmp_path / "nowhere" / "dashboard.json"))
    assert refused.returncode == 2 and "does not exist" in refused.stderr
