"""``computewise deploy`` on the session's real Ray cluster: the same API as ``computewise serve``.

Every CLI call is a child process (ray is never imported into the pytest worker). The echo model is
deployed once with a scaling file written by a real ``computewise plan serve --ray-config`` and a bearer
token, next to a local ``computewise serve echo`` with the same token; the same requests go to both and
must get the same status codes and JSON bodies. A second deployment (an entry point that fails on one
input, under its own route prefix beside echo) shows a model error fails only the request that caused it.
Every app is deleted at the end, whatever happened.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from computewise.scale.deployment import DeployedApp
from computewise.system.ports import free_port

pytest.importorskip("ray.serve", reason="the Ray tests need the ray extra: pip install 'computewise[ray]'")
pytest.importorskip("uvicorn", reason="computewise serve needs the serve extra: pip install 'computewise[serve]'")

# One Ray cluster per xdist worker: every Ray test runs on the same worker (make test uses --dist loadgroup).
pytestmark = pytest.mark.xdist_group("ray")

CLI = [sys.executable, "-m", "computewise.cli.app"]
TOKEN = "ray-serve-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
_QUIET_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
_DEPLOY_TIMEOUT_S = 120
_START_TIMEOUT_S = 60
FLAKY_MODULE = """
def model():
    def predict(items):
        if "boom" in items:
            raise ValueError("cannot take boom")
        return [str(item).upper() for item in items]
    return predict
"""


def _env(**extra: str) -> dict[str, str]:
    env = {**os.environ, **_QUIET_ENV, "COMPUTEWISE_FAKE_GPU": ""}
    # Not set by users: without it Ray rewrites 127.0.0.1 to the outward IP, where this loopback-only
    # cluster does not listen, and computewise must connect over loopback anyway.
    for variable in ("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "RAY_ADDRESS", "RAY_API_SERVER_ADDRESS"):
        env.pop(variable, None)
    env.pop("COMPUTEWISE_SERVE_TOKEN", None)
    env.update(extra)
    return env


def cli(*args: str, cwd: Path | None = None, timeout_s: float = 60, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, env=_env(**env), cwd=cwd, timeout=timeout_s, check=False
    )


@dataclass(frozen=True)
class Deployed:
    url: str
    info: dict[str, Any]


@pytest.fixture(scope="module")
def ray_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("plan") / "ray.json"
    result = cli(
        "plan", "serve", "--capacity-rps", "50", "--peak-rps", "120", "--mean-rps", "40", "--hourly-usd", "1",
        "--latency-ms", "40", "--name", "echo-replicas", "--ray-config", str(path), "--json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return path


def _deploy(address: str, target: str, *args: str, cwd: Path | None = None) -> Deployed:
    result = cli(
        "deploy", target, "--address", address, "--port", str(free_port()),
        "--replica-cpus", "0.5", "--json", *args, cwd=cwd, timeout_s=_DEPLOY_TIMEOUT_S, COMPUTEWISE_SERVE_TOKEN=TOKEN,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    info = json.loads(result.stdout)
    return Deployed(info["url"], info)


def _delete(address: str, target: str, cwd: Path | None = None) -> dict[str, Any]:
    result = cli("deploy", target, "--address", address, "--delete", "--json", cwd=cwd)
    assert result.returncode == 0, result.stderr[-3000:]
    return dict(json.loads(result.stdout))


@pytest.fixture(scope="module")
def ray_echo(ray_cluster: Any, ray_config: Path) -> Iterator[Deployed]:
    try:
        yield _deploy(ray_cluster.gcs_address, "echo", "--ray-config", str(ray_config))
    finally:
        _delete(ray_cluster.gcs_address, "echo")


@pytest.fixture(scope="module")
def local_echo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    work = tmp_path_factory.mktemp("local-echo")
    ready_file = work / "ready.json"
    command = [*CLI, "serve", "echo", "--port", "0", "--db", f"sqlite:///{work / 'ledger.sqlite'}"]
    command += ["--ready-file", str(ready_file)]
    log = work / "serve.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            command, stdout=sink, stderr=subprocess.STDOUT, env=_env(COMPUTEWISE_SERVE_TOKEN=TOKEN)
        )
    try:
        deadline_s = time.monotonic() + _START_TIMEOUT_S
        while not ready_file.exists():
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline_s, log.read_text()
            time.sleep(0.05)
        yield str(json.loads(ready_file.read_text())["url"])
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def _answer(response: httpx.Response) -> tuple[int, Any]:
    return response.status_code, response.json()


def test_deploy_reports_the_url_and_the_delete_command(
    ray_echo: Deployed, ray_cluster: Any, json_schema: Callable[[object, str], None]
) -> None:
    info = ray_echo.info
    json_schema(info, "deploy")
    assert DeployedApp.from_dict(info).to_dict() == info  # the document reads back whole
    assert info["url"].startswith("http://127.0.0.1:") and info["app_name"] == "echo"
    assert info["status"] == "RUNNING" and info["address"] == ray_cluster.gcs_address
    assert info["deploy_s"] > 0 and info["replica_cpus"] == 0.5
    assert info["delete_command"].endswith(f"--address {ray_cluster.gcs_address} --delete")
    assert httpx.get(f"{ray_echo.url}/readyz", timeout=10).json() == {"status": "ready"}


@pytest.mark.parametrize(
    "payload",
    [
        {"inputs": [1, "two", {"three": [3.5, None]}, [True, False]]},
        {"input": "one sentence"},
        {"inputs": ["é", "中文", ""]},
    ],
)
def test_infer_answers_exactly_like_local(ray_echo: Deployed, local_echo: str, payload: dict[str, Any]) -> None:
    ray_answer = _answer(httpx.post(f"{ray_echo.url}/v1/models/echo/infer", json=payload, headers=AUTH, timeout=30))
    local_answer = _answer(httpx.post(f"{local_echo}/v1/models/echo/infer", json=payload, headers=AUTH, timeout=30))
    assert ray_answer == local_answer
    assert ray_answer[0] == 200


@pytest.mark.parametrize("path", ["/v1/models", "/healthz", "/readyz", "/openapi.json", "/no/such/route"])
def test_get_routes_match_local(ray_echo: Deployed, local_echo: str, path: str) -> None:
    assert _answer(httpx.get(ray_echo.url + path, headers=AUTH, timeout=10)) == _answer(
        httpx.get(local_echo + path, headers=AUTH, timeout=10)
    )


@pytest.mark.parametrize(
    ("path", "body", "headers", "status"),
    [
        ("/v1/models/echo/infer", b'{"inputs": [1,', AUTH, 400),  # malformed JSON
        ("/v1/models/echo/infer", b"[1, 2]", AUTH, 400),  # not an object
        ("/v1/models/echo/infer", b'{"inputs": "one"}', AUTH, 422),  # wrong type, named
        ("/v1/models/echo/infer", b'{"inputs": []}', AUTH, 422),
        ("/v1/models/echo/infer", b'{"inputz": [1]}', AUTH, 422),
        ("/v1/models/other/infer", b'{"inputs": [1]}', AUTH, 404),
        ("/v1/models/echo/infer", b'{"inputs": [1]}', {}, 401),  # no token
    ],
)
def test_errors_match_local(
    ray_echo: Deployed, local_echo: str, path: str, body: bytes, headers: dict[str, str], status: int
) -> None:
    sent = {"content": body, "headers": {"Content-Type": "application/json", **headers}, "timeout": 10}
    ray_answer = _answer(httpx.post(ray_echo.url + path, **sent))  # type: ignore[arg-type]
    assert ray_answer == _answer(httpx.post(local_echo + path, **sent))  # type: ignore[arg-type]
    assert ray_answer[0] == status and "error" in ray_answer[1]
    if status == 422:
        assert ray_answer[1]["field"] in ray_answer[1]["error"]


def test_plan_serve_autoscaling_config_is_applied(ray_echo: Deployed, ray_cluster: Any, ray_config: Path) -> None:
    planned = json.loads(ray_config.read_text())
    applications = httpx.get(f"{ray_cluster.address}/api/serve/applications/", timeout=30).json()["applications"]
    app = applications["echo"]
    assert app["status"] == "RUNNING" and app["route_prefix"] == "/"
    config = app["deployments"]["echo-replicas"]["deployment_config"]
    assert config["max_ongoing_requests"] == planned["max_ongoing_requests"]
    assert config["ray_actor_options"]["num_cpus"] == 0.5
    applied = config["autoscaling_config"]
    assert {key: applied[key] for key in planned["autoscaling_config"]} == planned["autoscaling_config"]
    assert ray_echo.info["autoscaling_config"] == planned["autoscaling_config"]


def test_model_error_fails_only_its_request(ray_cluster: Any, ray_echo: Deployed, tmp_path: Path) -> None:
    (tmp_path / "flaky_model.py").write_text(FLAKY_MODULE)
    try:
        # Beside echo (which holds /) under its own prefix; the entry point is importable from the command's
        # working directory only, so the replica must be given that directory too.
        deployed = _deploy(
            ray_cluster.gcs_address, "flaky_model:model", "--route-prefix", "/flaky", "--max-batch-size", "8",
            cwd=tmp_path,
        )  # fmt: skip
        assert deployed.url.endswith("/flaky")
        url = f"{deployed.url}/v1/models/flaky_model/infer"
        bad = httpx.post(url, json={"inputs": ["a", "boom"]}, headers=AUTH, timeout=30)
        good = httpx.post(url, json={"inputs": ["a", "b"]}, headers=AUTH, timeout=30)
        listed = httpx.get(f"{deployed.url}/v1/models", headers=AUTH, timeout=10).json()
        echo_listed = httpx.get(f"{ray_echo.url}/v1/models", headers=AUTH, timeout=10).json()
    finally:
        deleted = _delete(ray_cluster.gcs_address, "flaky_model:model", cwd=tmp_path)
    assert _answer(bad) == (
        500,
        {"error": "the model failed on input 1: ValueError: cannot take boom", "field": "inputs[1]"},
    )
    assert _answer(good) == (200, {"outputs": ["A", "B"], "model": "flaky_model"})
    assert listed == {"models": [{"name": "flaky_model", "kind": "tensor", "entry_point": "flaky_model:model"}]}
    assert echo_listed == {"models": [{"name": "echo", "kind": "echo"}]}
    assert deleted == {
        "schema_version": 1,
        "app_name": "flaky_model",
        "address": ray_cluster.gcs_address,
        "deleted": True,
    }


def test_unreachable_address_is_refused_before_deploying() -> None:
    closed = free_port()
    started_s = time.monotonic()
    result = cli("deploy", "echo", "--address", f"127.0.0.1:{closed}")
    assert result.returncode == 2, result.stderr
    said = " ".join(result.stderr.split())
    assert f"no Ray cluster reachable at 127.0.0.1:{closed}" in said and "To fix:" in said
    assert "Traceback" not in said
    assert time.monotonic() - started_s < 30


def test_misspelt_scaling_file_is_refused_before_connecting(tmp_path: Path) -> None:
    config = tmp_path / "ray.json"
    config.write_text(json.dumps({"autoscaling_config": {"min_replica": 1, "max_replicas": 2}}))
    result = cli("deploy", "echo", "--address", f"127.0.0.1:{free_port()}", "--ray-config", str(config))
    assert result.returncode == 2, result.stderr
    said = " ".join(result.stderr.split())  # Rich wraps the message at the terminal width
    assert "unknown autoscaling_config key 'min_replica'; did you mean 'min_replicas'?" in said
    assert "no Ray cluster reachable" not in said


@pytest.mark.parametrize(
    ("args", "said"),
    [
        ([], "computewise deploy needs the cluster's address"),
        (["--address", "http://127.0.0.1:8265"], "is the dashboard (Jobs API) address"),
        (["--address", "127.0.0.1:6379", "--batching", "eager"], "--batching must be one of none, greedy, cost"),
    ],
)
def test_bad_flags_exit_2_with_a_fix(args: list[str], said: str) -> None:
    result = cli("deploy", "echo", *args)
    assert result.returncode == 2, result.stderr
    assert said in " ".join(result.stderr.split()) and "To fix:" in result.stderr
