"""Ray Tune with ASHA on the real local Ray cluster (``ray_cluster``): a search, ``tune --engine ray``, refusals.

Everything that joins the cluster runs in a child process, so the pytest worker never becomes a Ray
driver: a driver left connected would outlive the session cluster's teardown.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip(
    "ray.tune",
    reason="the Ray Tune tests need the ray extra with Tune (pandas, pyarrow): pip install 'computewise[ray]'",
)

from computewise.errors import InputError
from computewise.ledger import Ledger
from computewise.scale.ray_cluster import gcs_address
from computewise.system.ports import free_port

# One Ray cluster per xdist worker: every Ray test runs on the same worker (make test uses --dist loadgroup).
pytestmark = pytest.mark.xdist_group("ray")

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "computewise.cli.app"]
_QUIET_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "disabled"}
TINY_GPT = {"preset": "smoke"}  # examples/tiny_gpt.py: the smallest model that still trains
# A learning curve per rate: the higher the rate, the better at every iteration, so the best is known
# (0.8) and ASHA, seeing the rates best first, stops the slower ones at their first rungs.
CURVES = textwrap.dedent(
    """
    import json, math, sys, time

    from computewise.scale.ray_tune import asha_search

    def curve(config):
        for step in range(1, 1000):
            time.sleep(0.02)
            yield {"score": 1.0 - math.exp(-config["rate"] * step)}

    result = asha_search(
        curve,
        {"rate": [0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1]},
        metric="score",
        mode="max",
        max_iterations=9,
        grace_period=1,
        reduction_factor=3,
        address=sys.argv[1],
        seed=0,
    )
    print(json.dumps(result.to_dict()))
    """
)


def _env(**extra: str) -> dict[str, str]:
    env = {**os.environ, **_QUIET_ENV, "COMPUTEWISE_FAKE_GPU": ""}
    for variable in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS"):
        env.pop(variable, None)
    env.update(extra)
    return env


def _run(command: list[str], timeout_s: float, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, capture_output=True, text=True, env=_env(**env), cwd=ROOT, timeout=timeout_s, check=False
    )


def _tune(*args: str, timeout_s: float = 60, **env: str) -> subprocess.CompletedProcess[str]:
    return _run([*CLI, "tune", "examples.tiny_gpt:setup", "--config", json.dumps(TINY_GPT), *args], timeout_s, **env)


def _said(done: subprocess.CompletedProcess[str]) -> str:
    """stderr with the terminal's line wrapping undone."""
    return " ".join(done.stderr.split())


def test_an_asha_search_stops_the_losing_trials_early_and_finds_the_best(ray_cluster: object) -> None:
    done = _run([sys.executable, "-c", CURVES, ray_cluster.gcs_address], timeout_s=180)  # type: ignore[attr-defined]
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["best_config"] == {"rate": 0.8}
    assert result["best_value"] == pytest.approx(1.0 - math.exp(-0.8 * 9))
    trials = {trial["config"]["rate"]: trial for trial in result["trials"]}
    assert len(trials) == 8 and all(trial["error"] is None for trial in trials.values())
    assert trials[0.8]["iterations"] == 9 and not trials[0.8]["stopped_early"]
    stopped = [trial for trial in trials.values() if trial["stopped_early"]]
    assert len(stopped) >= 4  # the four slowest are worse than everything recorded before them at rung 1
    assert all(trial["iterations"] < 9 for trial in stopped)
    assert trials[0.1]["stopped_early"] and trials[0.1]["iterations"] == 1
    assert result["iterations"] < result["iterations_without_stopping"]


def test_a_trial_no_node_can_hold_is_refused_instead_of_pending_forever(ray_cluster: object) -> None:
    script = textwrap.dedent(
        """
        import sys

        from computewise.scale.ray_tune import asha_search

        def never(config):
            yield {"score": 1.0}

        asha_search(never, {"x": [1]}, metric="score", mode="max", max_iterations=1, address=sys.argv[1],
                    resources_per_trial={"cpu": 64})
        """
    )
    done = _run([sys.executable, "-c", script, ray_cluster.gcs_address], timeout_s=120)  # type: ignore[attr-defined]
    assert done.returncode != 0
    assert "every trial asks for 64 CPU, and no node of the Ray cluster" in _said(done)
    assert "the largest of each: 4 CPU" in _said(done)


@pytest.mark.torch
def test_tune_with_the_ray_engine_runs_the_trials_as_an_asha_search(ray_cluster: object, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    db = f"sqlite:///{tmp_path / 'ledger.db'}"
    done = _tune(
        "--space",
        "precision=bf16;micro=1,2,4,8;checkpointing=off;compile=off;workers=0;fused=off",
        "--steps",
        "9",
        "--threads",
        "1",
        "--engine",
        "ray",
        "--address",
        ray_cluster.gcs_address,  # type: ignore[attr-defined]
        "--db",
        db,
        "--tag",
        "team=tests",
        "--json",
        timeout_s=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(done.stdout)  # nothing of Ray's on stdout: the JSON document only
    search = data["search"]["backend"]
    assert search["name"] == "ray" and search["scheduler"] == "ASHA"
    assert (search["grace_steps"], search["max_steps"], search["reduction_factor"]) == (3, 9, 3)
    assert [rung["steps"] for rung in data["search"]["rungs"]] == [3, 9]
    assert search["concurrent_trials"] == 1  # one node: trials measuring speed do not share its CPUs
    # Which configurations ASHA stops depends on measured speed, which a loaded 2-core machine makes noisy
    # (the generic search above checks early stopping on deterministic curves): here, that every trial ran
    # the first rung, and any stopped early stopped there.
    stopped = {entry["config"]: entry["steps"] for entry in search["stopped_early"]}
    assert set(stopped.values()) <= {3}
    halving = [trial for trial in data["trials"] if trial["stage"] == "halving"]
    assert len([t for t in halving if t["rung"] == 0]) == 4
    assert len([t for t in halving if t["rung"] == 1]) == 4 - len(stopped)
    assert all(trial["status"] == "ok" for trial in data["trials"]), data["trials"]
    assert data["best"]["config"]["precision"] == "bf16" and data["best"]["samples_per_s"] > 0
    # The naive baseline (FP32 is not in the space) ran on the cluster's trial host actor, as long as the winner.
    baseline = next(trial for trial in data["trials"] if trial["stage"] == "baseline")
    assert baseline["config"]["precision"] == "fp32" and baseline["steps"] == 9 and baseline["status"] == "ok"
    assert data["speedup"]["vs_baseline"] is not None
    assert any("ASHA stopped" in note for note in data["notes"])
    with Ledger.open(db) as ledger:
        run = ledger.run(data["ledger_run_id"])
    assert run.kind == "tune" and run.status == "succeeded" and run.tags == {"team": "tests"}
    assert run.summary is not None and run.summary["tune"]["best"] == data["best"]["config"]


def test_an_unreachable_cluster_is_refused_before_anything_runs(tmp_path: Path) -> None:
    db = tmp_path / "ledger.db"
    done = _tune("--engine", "ray", "--address", f"127.0.0.1:{free_port()}", "--db", f"sqlite:///{db}")
    assert done.returncode == 2, done.stderr
    assert "no Ray cluster reachable at 127.0.0.1:" in _said(done) and "To fix:" in _said(done)
    with Ledger.open(f"sqlite:///{db}") as ledger:
        assert ledger.runs() == []  # no tuning run was started


def test_a_loopback_only_cluster_is_joined_over_loopback(ray_cluster: object) -> None:
    """Ray rewrites 127.0.0.1 to this machine's network address, where the test cluster does not listen, and
    would retry for ever: ``ray_cluster.connected`` joins over loopback instead, even with Ray's switch on."""
    check = (
        "import sys\n"
        "from computewise.scale.ray_cluster import connected, largest_node\n"
        "with connected(sys.argv[1]):\n"
        "    print(largest_node('CPU'))\n"
    )
    address = ray_cluster.gcs_address  # type: ignore[attr-defined]
    done = _run([sys.executable, "-c", check, address], timeout_s=90, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="1")
    assert done.returncode == 0, _said(done)
    assert float(done.stdout.strip().splitlines()[-1]) == 4.0


def test_the_ray_engine_needs_an_address() -> None:
    done = _tune("--engine", "ray")
    assert done.returncode == 2 and "needs the cluster's address" in _said(done) and "--address" in _said(done)
    done = _tune("--engine", "ray", RAY_ADDRESS="http://127.0.0.1:8265")
    assert done.returncode == 2 and "RAY_ADDRESS=http://127.0.0.1:8265 is the dashboard" in _said(done)
    done = _tune("--address", "127.0.0.1:6379")
    assert done.returncode == 2 and "for --engine ray only" in _said(done)
    done = _tune("--engine", "spark")
    assert done.returncode == 2 and "--engine must be one of local, ray" in _said(done)


def test_addresses_are_host_and_port() -> None:
    assert gcs_address("127.0.0.1:6379") == "127.0.0.1:6379"
    assert gcs_address(None, {"RAY_ADDRESS": " 10.0.0.5:6380 "}) == "10.0.0.5:6380"
    assert gcs_address("head:6379", {"RAY_ADDRESS": "other:1"}) == "head:6379"
    for wrong, message in [
        ("ray://head:10001", "Ray Client address"),
        ("http://head:8265", "dashboard"),
        ("head", "not HOST:PORT"),
        ("head:port", "not HOST:PORT"),
        ("head:70000", "not HOST:PORT"),
    ]:
        with pytest.raises(InputError, match=message):
            gcs_address(wrong, {})
    with pytest.raises(InputError, match="needs the cluster's address"):
        gcs_address(None, {})
