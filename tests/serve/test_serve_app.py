"""The HTTP app in process: every route and status code, against real model runners and the real batcher.

Three model runners: ``echo``; an artifact exported by the real ``computewise optimize`` pipeline from
a one-MatMul ONNX graph (a tensor model that validates its inputs, in a few seconds); and entry
points written into a temporary directory (a model that raises on one poisoned input, and a slow
one). Requests go through Starlette's TestClient, or httpx's ASGI transport inside the app's own
lifespan where requests must overlap. The API is fuzzed from its own OpenAPI document with
schemathesis: no generated request, valid or not, may get a 5xx.
"""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from prometheus_client.parser import text_string_to_metric_families
from schemathesis import GenerationMode
from schemathesis.core.result import Ok
from starlette.applications import Starlette
from starlette.testclient import TestClient

from computewise.serve.app import ServeState, create_app
from computewise.serve.batcher import Batcher, BatchPolicy
from computewise.serve.metrics import ServeMetrics
from computewise.serve.runners import ModelRunner, load_runner

MODELS = '''
import time

def poison():
    """Echo, except that a call holding the input "poison" raises (the whole batch fails)."""
    def predict(items):
        if "poison" in items:
            raise ValueError("poisoned input")
        return list(items)
    return predict

def slow():
    """Echo after 0.3 s per call."""
    def predict(items):
        time.sleep(0.3)
        return list(items)
    return predict
'''


@pytest.fixture(scope="module")
def models_module(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An importable module of entry-point models, under a name no other test uses."""
    directory = tmp_path_factory.mktemp("serve-app-models")
    (directory / "serve_app_models.py").write_text(textwrap.dedent(MODELS))
    sys.path.insert(0, str(directory))
    yield "serve_app_models"
    sys.path.remove(str(directory))
    sys.modules.pop("serve_app_models", None)


@pytest.fixture(scope="module")
def linear_artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 4 -> 3 linear model exported by ``computewise optimize`` (its baseline, ONNX Runtime)."""
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper

    from computewise.optimize.artifact import write_artifact
    from computewise.optimize.quality import load_metric, parse_drop
    from computewise.optimize.search import SearchOptions, run_search
    from computewise.optimize.source import load_source

    directory = tmp_path_factory.mktemp("linear")
    weight = np.arange(12, dtype=np.float32).reshape(4, 3) / 10 - 0.5
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "weight"], ["output"])],
        "linear",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", 3])],
        [numpy_helper.from_array(weight, "weight")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(directory / "linear.onnx"))
    np.savez(directory / "x.npz", x=np.random.default_rng(0).normal(size=(32, 4)).astype(np.float32))
    source = load_source(str(directory / "linear.onnx"), directory / "x.npz", "regressor")
    metric = load_metric("agreement", source.task, parse_drop("1%"))
    result = run_search(source, metric, SearchOptions(only=("none",), bench_items=16), directory / "work")
    return write_artifact(result, result.variants[0], directory / "linear-model", forced=True)


def make_app(
    runner: ModelRunner,
    policy: BatchPolicy | None = None,
    queue_limit: int = 256,
    timeout_s: float = 30.0,
    token: str | None = None,
    max_body_bytes: int = 1 << 20,
    state: ServeState | None = None,
) -> tuple[Starlette, ServeMetrics]:
    metrics = ServeMetrics()
    batcher = Batcher(
        runner, policy or BatchPolicy(), queue_limit=queue_limit, timeout_s=timeout_s, on_batch=metrics.record_batch
    )
    return create_app(runner, batcher, metrics, token, max_body_bytes, state), metrics


@pytest.fixture
def echo() -> Iterator[TestClient]:
    app, _metrics = make_app(load_runner("echo"))
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client


def overlapping(app: Starlette, calls: Callable[[httpx.AsyncClient], Awaitable[Any]]) -> Any:
    """Run ``calls`` inside the app's real lifespan (batcher started, then drained) with an async client."""

    async def main() -> Any:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://serve.test", timeout=30) as client:
                return await calls(client)

    return asyncio.run(main())


# -- the happy path ---------------------------------------------------------------------------


def test_many_inputs_or_one_come_back_in_order(echo: TestClient) -> None:
    inputs = [1, "two", [3.5], {"four": None}]
    response = echo.post("/v1/models/echo/infer", json={"inputs": inputs})
    assert response.status_code == 200
    assert response.json() == {"outputs": inputs, "model": "echo"}
    single = echo.post("/v1/models/echo/infer", json={"input": "alone"})
    assert single.status_code == 200 and single.json() == {"outputs": ["alone"], "model": "echo"}


def test_artifact_model_computes_and_names_the_bad_field(linear_artifact: Path) -> None:
    runner = load_runner(str(linear_artifact))
    app, _metrics = make_app(runner)
    with TestClient(app) as client:
        url = f"/v1/models/{runner.name}/infer"
        good = client.post(url, json={"inputs": [[1, 0, 0, 0], [0, 0, 0, 1]]})
        assert good.status_code == 200
        weight = np.arange(12, dtype=np.float32).reshape(4, 3) / 10 - 0.5
        assert np.allclose(good.json()["outputs"], [weight[0], weight[3]], atol=1e-6)
        short = client.post(url, json={"inputs": [[1, 0, 0, 0], [1, 2, 3]]})
        assert short.status_code == 422 and short.json()["field"] == "inputs[1]"
        assert "4" in short.json()["error"]
        wrong_type = client.post(url, json={"inputs": [[1, 0, "x", 0]]})
        assert wrong_type.status_code == 422 and wrong_type.json()["field"] == "inputs[0][2]"
        one = client.post(url, json={"input": [1, True, 0, 0]})
        assert one.status_code == 422 and one.json()["field"] == "input[1]"
        models = client.get("/v1/models").json()["models"]
        assert models[0]["name"] == runner.name and models[0]["kind"] == "tensor"


# -- bad requests -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (b'{"inputs": [1, 2', "malformed JSON"),
        (b"\xff\xfe not utf-8", "malformed JSON"),
        (b'{"inputs": [NaN]}', "NaN is not valid JSON"),
        (b'{"inputs": [1e400]}', "the number 1e400 is out of range for a 64-bit float"),
        (b"[" * 100_000 + b"]" * 100_000, "malformed JSON"),
        (b'["inputs"]', "must be a JSON object"),
        (b'"text"', "must be a JSON object"),
        (b"", "malformed JSON"),
    ],
)
def test_malformed_body_is_400_with_a_message(echo: TestClient, body: bytes, said: str) -> None:
    response = echo.post("/v1/models/echo/infer", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 400
    assert said in response.json()["error"]


@pytest.mark.parametrize(
    ("document", "field"),
    [
        ({}, "inputs"),
        ({"inputs": "not a list"}, "inputs"),
        ({"inputs": []}, "inputs"),
        ({"inputs": [1], "input": 1}, "input"),
        ({"inptus": [1]}, "inptus"),
    ],
)
def test_wrong_shape_is_422_naming_the_field(echo: TestClient, document: dict[str, Any], field: str) -> None:
    response = echo.post("/v1/models/echo/infer", json=document)
    assert response.status_code == 422
    assert response.json()["field"] == field


def test_unknown_model_route_and_method(echo: TestClient) -> None:
    response = echo.post("/v1/models/bert/infer", json={"inputs": [1]})
    assert response.status_code == 404 and "'echo'" in response.json()["error"]
    assert echo.get("/v2/nothing").status_code == 404
    wrong_method = echo.get("/v1/models/echo/infer")
    assert wrong_method.status_code == 405 and wrong_method.headers["allow"] == "POST"


def test_body_over_the_limit_is_413_declared_or_streamed() -> None:
    app, _metrics = make_app(load_runner("echo"), max_body_bytes=1000)
    with TestClient(app) as client:
        fits = client.post("/v1/models/echo/infer", json={"inputs": ["x" * 900]})
        assert fits.status_code == 200
        declared = client.post("/v1/models/echo/infer", json={"inputs": ["x" * 2000]})
        assert declared.status_code == 413 and "1000 bytes" in declared.json()["error"]

        def chunks() -> Iterator[bytes]:  # no Content-Length: the limit is enforced while reading
            yield b'{"inputs": ["'
            for _ in range(100):
                yield b"x" * 100
            yield b'"]}'

        streamed = client.post("/v1/models/echo/infer", content=chunks())
        assert streamed.status_code == 413


# -- the model, the queue and time ------------------------------------------------------------


def test_model_error_fails_only_its_own_request(models_module: str) -> None:
    """Three requests batched together (greedy, 50 ms wait): the poisoned one gets 500, its neighbours 200."""
    runner = load_runner(f"{models_module}:poison")
    app, metrics = make_app(runner, BatchPolicy(mode="greedy", max_queue_delay_ms=50))
    url = f"/v1/models/{runner.name}/infer"

    async def calls(client: httpx.AsyncClient) -> list[httpx.Response]:
        bodies = [{"inputs": [1, 2]}, {"inputs": [3, "poison"]}, {"input": 4}]
        return list(await asyncio.gather(*(client.post(url, json=body) for body in bodies)))

    first, poisoned, last = overlapping(app, calls)
    assert (first.status_code, last.status_code) == (200, 200)
    assert first.json()["outputs"] == [1, 2] and last.json()["outputs"] == [4]
    assert poisoned.status_code == 500
    assert poisoned.json()["field"] == "inputs[1]" and "poisoned input" in poisoned.json()["error"]
    totals = metrics.totals()
    assert totals["failed_inputs"] == 1 and totals["errors"] == 1 and totals["inferences"] == 3


def test_full_queue_is_429_with_retry_after(models_module: str) -> None:
    runner = load_runner(f"{models_module}:slow")
    app, metrics = make_app(runner, BatchPolicy(mode="none"), queue_limit=2)
    url = f"/v1/models/{runner.name}/infer"

    async def calls(client: httpx.AsyncClient) -> list[httpx.Response]:
        return list(await asyncio.gather(*(client.post(url, json={"input": n}) for n in range(6))))

    responses = overlapping(app, calls)
    codes = sorted(response.status_code for response in responses)
    assert codes.count(200) >= 2 and codes.count(429) >= 1 and set(codes) <= {200, 429}
    for response in responses:
        if response.status_code == 429:
            assert int(response.headers["retry-after"]) >= 1
            assert "queue is full" in response.json()["error"]
    assert metrics.totals()["rejections"] == codes.count(429)


def test_request_over_the_timeout_is_504(models_module: str) -> None:
    runner = load_runner(f"{models_module}:slow")
    app, metrics = make_app(runner, BatchPolicy(mode="none"), timeout_s=0.1)
    with TestClient(app) as client:
        response = client.post(f"/v1/models/{runner.name}/infer", json={"input": 1})
    assert response.status_code == 504 and "0.1 s" in response.json()["error"]
    assert metrics.totals()["errors"] == 1


def test_request_duration_is_recorded_by_status_and_brackets_the_model_call(models_module: str) -> None:
    """A 0.3 s model call lands in the 200 series between 0.3 s and the client's own clock; a 404 apart."""
    runner = load_runner(f"{models_module}:slow")
    app, _metrics = make_app(runner, BatchPolicy(mode="none"))
    with TestClient(app) as client:
        started_s = time.perf_counter()
        assert client.post(f"/v1/models/{runner.name}/infer", json={"input": 1}).status_code == 200
        client_s = time.perf_counter() - started_s
        assert client.post("/v1/models/nobody/infer", json={"input": 1}).status_code == 404
        text = client.get("/metrics").text
    values = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith("computewise_serve_request_duration_seconds")
    }
    name = "computewise_serve_request_duration_seconds"
    assert values[f"{name}_count", (("code", "200"),)] == 1
    assert values[f"{name}_count", (("code", "404"),)] == 1
    assert 0.3 <= values[f"{name}_sum", (("code", "200"),)] <= client_s
    assert values[f"{name}_bucket", (("code", "200"), ("le", "0.2"))] == 0  # cumulative buckets: not under 0.2 s
    if client_s <= 0.5:  # the server's clock is inside the client's, so then it is under 0.5 s too
        assert values[f"{name}_bucket", (("code", "200"), ("le", "0.5"))] == 1


# -- probes, metrics, auth, document ----------------------------------------------------------


def test_readyz_follows_the_state() -> None:
    state = ServeState()
    app, _metrics = make_app(load_runner("echo"), state=state)
    with TestClient(app) as client:
        assert client.get("/healthz").status_code == 200
        assert client.get("/readyz").status_code == 503 and client.get("/readyz").json()["status"] == "warming up"
        state.ready = True
        assert client.get("/readyz").status_code == 200
        state.draining = True
        assert client.get("/readyz").json() == {"status": "draining"}
    ready_by_itself, _metrics = make_app(load_runner("echo"))
    with TestClient(ready_by_itself) as client:
        assert client.get("/readyz").status_code == 200


def test_metrics_are_prometheus_text(echo: TestClient) -> None:
    for n in range(3):
        echo.post("/v1/models/echo/infer", json={"inputs": list(range(n + 1))})
    echo.post("/v1/models/echo/infer", content=b"{")
    response = echo.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    text = response.text
    for line in [
        'computewise_serve_requests_total{code="200"} 3.0',
        'computewise_serve_requests_total{code="400"} 1.0',
        "computewise_serve_inferences_total 6.0",
        "computewise_serve_queue_depth 0.0",
        "computewise_serve_batch_size_sum 6.0",
        "computewise_serve_rejections_total 0.0",
    ]:
        assert line in text.splitlines(), line
    assert "computewise_serve_queue_wait_seconds_bucket" in text and "computewise_serve_compute_seconds_count" in text


def test_bearer_token_guards_all_but_the_probes() -> None:
    app, _metrics = make_app(load_runner("echo"), token="s3cret")
    with TestClient(app) as client:
        for path in ("/v1/models", "/metrics", "/openapi.json"):
            assert client.get(path).status_code == 401, path
        missing = client.post("/v1/models/echo/infer", json={"input": 1})
        assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
        assert "missing" in missing.json()["error"]
        wrong = client.post("/v1/models/echo/infer", json={"input": 1}, headers={"Authorization": "Bearer guess"})
        assert wrong.status_code == 401 and "wrong" in wrong.json()["error"]
        right = client.post("/v1/models/echo/infer", json={"input": 1}, headers={"Authorization": "Bearer s3cret"})
        assert right.status_code == 200
        assert client.get("/healthz").status_code == 200 and client.get("/readyz").status_code == 200
        document = client.get("/openapi.json", headers={"Authorization": "bearer s3cret"}).json()
        assert document["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"


def test_openapi_document_describes_every_route(echo: TestClient) -> None:
    document = echo.get("/openapi.json").json()
    assert document["openapi"].startswith("3.0")
    assert set(document["paths"]) == {
        "/v1/models/{name}/infer",
        "/v1/models",
        "/healthz",
        "/readyz",
        "/metrics",
        "/openapi.json",
    }
    infer = document["paths"]["/v1/models/{name}/infer"]["post"]
    assert {"200", "400", "404", "413", "422", "429", "500", "504"} <= set(infer["responses"])
    assert "Retry-After" in infer["responses"]["429"]["headers"]
    assert json.dumps(document)  # JSON through and through


# -- fuzzing from the OpenAPI document ----------------------------------------------------------


@pytest.mark.parametrize("target", ["echo", "artifact"])
def test_no_generated_request_gets_a_5xx(target: str, request: pytest.FixtureRequest) -> None:
    """Valid and invalid requests generated from /openapi.json for every operation, 30 of each kind."""
    runner = load_runner("echo" if target == "echo" else str(request.getfixturevalue("linear_artifact")))
    app, _metrics = make_app(runner)
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    seen: set[int] = set()
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), result  # an operation the document describes wrongly fails here
        operation = result.ok()
        # Only infer takes input; an operation without parameters or body has no invalid requests to make.
        modes = (
            [GenerationMode.POSITIVE, GenerationMode.NEGATIVE]
            if operation.method == "post"
            else [GenerationMode.POSITIVE]
        )
        for mode in modes:

            @given(case=operation.as_strategy(generation_mode=mode))
            @settings(max_examples=30, deadline=None, database=None, suppress_health_check=list(HealthCheck))
            def check(case: Any) -> None:
                response = case.call()
                seen.add(response.status_code)
                case.validate_response(response)
                assert response.status_code < 500, (response.status_code, response.text)

            check()
    # Both kinds were exercised: answers, and refusals of bad input (which refusal depends on the draw).
    assert 200 in seen and seen & {400, 422}, seen
