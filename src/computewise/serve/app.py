"""The HTTP face of the server: a Starlette app over one model runner and its batcher.

    POST /v1/models/{name}/infer   {"inputs": [...]} or {"input": x}  ->  {"outputs": [...], "model": name}
    GET  /v1/models                what is served
    GET  /healthz                  200 as soon as the process answers (liveness)
    GET  /readyz                   200 once the model is loaded and warmed up, 503 before and while draining
    GET  /metrics                  Prometheus text format 0.0.4
    GET  /openapi.json             the OpenAPI 3.0 document of these routes, written by hand

Every error is JSON ``{"error": message}``, plus ``"field"`` naming the offending input
(``inputs[3]``) where there is one. Status codes say whose fault it is: 400 malformed JSON or
not an object, 401 missing or wrong bearer token, 404 unknown model or route, 413 body over
``max_body_bytes``, 422 wrong shape or type, 429 (with ``Retry-After``) queue full, 504 request
timed out in the queue, and 500 when the model failed on that request's own input (or for a bug of
ours, logged with its traceback). Bad input never reaches the model, so no request can turn into a
500 by its shape alone.

The body is read in chunks and abandoned at ``max_body_bytes``, so an oversized request costs at
most that much memory whatever its ``Content-Length`` claims.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import secrets
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from computewise.errors import InvalidInput, ItemFailed, QueueFull, RequestTimeout
from computewise.serve.cache import PredictionCache, cache_key
from computewise.serve.metrics import CONTENT_TYPE, ServeMetrics
from computewise.serve.runners import ModelRunner, cache_identity

__all__ = ["DEFAULT_MAX_BODY_BYTES", "Dispatcher", "ServeState", "create_app", "openapi_document"]

DEFAULT_MAX_BODY_BYTES = 1 << 20
_LOG = logging.getLogger(__name__)
_OPEN_PATHS = frozenset({"/healthz", "/readyz"})  # probes must work without the token (kubelet has none)


class Dispatcher(Protocol):
    """Where the app sends validated items: the local ``Batcher``, or ``@serve.batch`` inside a Ray Serve replica.

    One app over either keeps the routes, bodies and status codes identical whoever batches.
    ``submit`` raises ``QueueFull`` (429), ``RequestTimeout`` (504) or ``ItemFailed`` (500 for that request).
    """

    @property
    def queue_depth(self) -> int:
        """Items waiting for a batch (the ``/metrics`` queue gauge)."""
        ...

    async def start(self) -> None: ...

    async def submit(self, items: list[Any]) -> list[Any]: ...

    async def drain(self) -> None:
        """Stop accepting, finish what was accepted, bounded by the request timeout: called at shutdown."""
        ...


@dataclass
class ServeState:
    """What the probes report: ``ready`` once warmed up, ``draining`` from SIGTERM on."""

    ready: bool = False
    draining: bool = False


class _RequestError(Exception):
    """An answer other than 200 decided while reading the request; becomes its JSON error response."""

    def __init__(self, status: int, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.field = field


def _error(status: int, message: str, field: str | None = None, headers: Mapping[str, str] | None = None) -> Response:
    body: dict[str, Any] = {"error": message}
    if field is not None:
        body["field"] = field
    return JSONResponse(body, status_code=status, headers=headers)


class _BearerAuth:
    """Pure ASGI middleware: every route but the probes needs ``Authorization: Bearer <token>``."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._token = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in _OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        given = dict(scope["headers"]).get(b"authorization", b"")
        scheme, _, credentials = given.partition(b" ")
        # compare_digest: the time taken must not tell how much of a guessed token was right.
        if scheme.lower() != b"bearer" or not secrets.compare_digest(credentials.strip(), self._token):
            reason = "missing bearer token" if not given else "wrong bearer token"
            response = _error(
                401,
                f"{reason}: send the header 'Authorization: Bearer <token>'",
                headers={"WWW-Authenticate": "Bearer"},
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


async def _read_body(request: Request, limit_bytes: int) -> bytes:
    """The body, or 413 as soon as it is known to exceed ``limit_bytes`` (from the header or while reading)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit_bytes:
        raise _RequestError(413, f"request body of {declared} bytes exceeds the limit of {limit_bytes} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit_bytes:
            raise _RequestError(413, f"request body exceeds the limit of {limit_bytes} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    """A JSON number as a float, refusing one too large for a float (1e400): it would parse as infinity,
    reach the model, and fail only when the answer is written back (a 500 for the client's mistake)."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is out of range for a 64-bit float")
    return value


def _parse_inputs(body: bytes) -> tuple[list[Any], str]:
    """The raw inputs and how to name them in errors: ``inputs`` (a list) or ``input`` (one value)."""
    try:
        # NaN and Infinity are not JSON, and 1e400 overflows to infinity; accepting them would only fail
        # later, when echoing them back.
        document = json.loads(body, parse_constant=_reject_constant, parse_float=_finite_float)
    except (ValueError, RecursionError) as error:  # UnicodeDecodeError is a ValueError
        raise _RequestError(400, f"malformed JSON: {error}") from None
    if not isinstance(document, dict):
        raise _RequestError(400, f"the body must be a JSON object, got {type(document).__name__}")
    unknown = sorted(set(document) - {"inputs", "input"})
    if unknown:
        raise _RequestError(422, f"unknown field {unknown[0]!r}; send 'inputs' (a list) or 'input' (one)", unknown[0])
    if "inputs" in document and "input" in document:
        raise _RequestError(422, "send either 'inputs' (a list) or 'input' (one), not both", "input")
    if "input" in document:
        return [document["input"]], "input"
    if "inputs" not in document:
        raise _RequestError(422, "missing field 'inputs' (a list of inputs) or 'input' (one input)", "inputs")
    inputs = document["inputs"]
    if not isinstance(inputs, list):
        raise _RequestError(422, f"'inputs' must be a list, got {type(inputs).__name__}", "inputs")
    if not inputs:
        raise _RequestError(422, "'inputs' is empty; send at least one input", "inputs")
    return inputs, "inputs"


def _field(base: str, index: int, sub: str) -> str:
    """``inputs[3]`` plus the runner's path inside that input (``inputs[3][0]``, ``inputs[3].ids``)."""
    where = f"{base}[{index}]" if base == "inputs" else base
    if not sub or sub in {"input", "inputs"}:
        return where
    return where + (sub if sub.startswith("[") else f".{sub}")


def _validate(runner: ModelRunner, inputs: list[Any], base: str) -> list[Any]:
    items = []
    for index, raw in enumerate(inputs):
        try:
            items.append(runner.validate(raw))
        except InvalidInput as error:
            field = _field(base, index, error.field)
            raise _RequestError(422, f"{field}: {error.message}", field) from None
    return items


def _retry_after_s(error: QueueFull) -> str:
    # Retry-After carries whole seconds (RFC 9110); rounding down to 0 would invite an immediate retry storm.
    return str(max(1, math.ceil(error.retry_after_s)))


def _json(data: Any) -> bytes:
    return json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


class _Cached:
    """The prediction cache in front of the batcher: hits are answered here, only misses reach the model.

    Outputs are kept as the JSON bytes of the first answer, and a body is assembled from them exactly
    as ``_json({"outputs": [...], "model": name})`` writes it, so a hit is byte-identical to a miss.
    """

    def __init__(self, cache: PredictionCache, identity: str, model: str) -> None:
        self.cache = cache
        self._identity = identity
        self._model_json = _json(model)

    async def answer(self, items: list[Any], batcher: Dispatcher) -> tuple[bytes, int]:
        """The response body for ``items`` and the number of outputs; raises what ``batcher.submit`` raises,
        or ``_RequestError`` (500) for an output that is not JSON (it is not cached)."""
        keys = [cache_key(self._identity, item) for item in items]
        parts: list[bytes | None] = [self.cache.get(key) for key in keys]
        missing = [index for index, part in enumerate(parts) if part is None]
        if missing:
            try:
                outputs = await batcher.submit([items[index] for index in missing])
            except ItemFailed as error:  # its index is among the misses: name the request's own input
                index = missing[error.index]
                message = error.message.replace(f"input {error.index}:", f"input {index}:", 1)
                raise ItemFailed(message, index) from None
            for index, output in zip(missing, outputs, strict=True):
                try:
                    parts[index] = encoded = _json(output)
                except (TypeError, ValueError) as error:
                    raise _RequestError(500, f"the model's output cannot be sent as JSON: {error}") from None
                self.cache.put(keys[index], encoded)
        body = b'{"outputs":[' + b",".join(part for part in parts if part is not None) + b'],"model":'
        return body + self._model_json + b"}", len(parts)


def create_app(
    runner: ModelRunner,
    batcher: Dispatcher,
    metrics: ServeMetrics,
    token: str | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    state: ServeState | None = None,
    cache: PredictionCache | None = None,
) -> Starlette:
    """The app; its lifespan starts the batcher and, at shutdown, drains it.

    ``state`` is shared with whoever decides readiness: ``computewise serve`` passes one that turns
    ready after warm-up. Without it the app is ready as soon as the batcher has started. With
    ``cache``, repeated inputs are answered from it (``InputError`` for a runner that may not be cached).
    """
    serve_state = state if state is not None else ServeState()
    ready_on_start = state is None
    metrics.watch_queue(lambda: batcher.queue_depth)
    cached = _Cached(cache, cache_identity(runner), runner.name) if cache is not None else None
    if cache is not None:
        metrics.watch_cache(cache)
    document = openapi_document(runner, token is not None, max_body_bytes)

    async def infer(request: Request) -> Response:
        started_s = time.perf_counter()
        response = await answer(request)
        metrics.record_duration(response.status_code, time.perf_counter() - started_s)
        return response

    async def answer(request: Request) -> Response:
        name = request.path_params["name"]
        if name != runner.name:
            metrics.record_response(404)
            return _error(404, f"no model named {name!r}; this server serves {runner.name!r}", "name")
        try:
            inputs, base = _parse_inputs(await _read_body(request, max_body_bytes))
            items = _validate(runner, inputs, base)
        except _RequestError as error:
            metrics.record_response(error.status)
            return _error(error.status, error.message, error.field)
        except ClientDisconnect:  # gone before its body arrived: nobody to answer, nothing to count
            return Response(status_code=400)
        try:
            if cached is not None:
                body, answered = await cached.answer(items, batcher)
                metrics.record_response(200, answered)
                return Response(body, media_type="application/json")
            outputs = await batcher.submit(items)
        except QueueFull as error:
            metrics.record_response(429)
            return _error(429, error.message, headers={"Retry-After": _retry_after_s(error)})
        except RequestTimeout as error:
            metrics.record_response(504)
            return _error(504, error.message)
        except ItemFailed as error:
            metrics.record_response(500)
            return _error(500, error.message, _field(base, error.index, ""))
        except _RequestError as error:  # an output the cache could not encode
            metrics.record_response(error.status)
            return _error(error.status, error.message)
        except Exception as error:  # a bug, not the request's fault: logged with its traceback, counted, JSON
            _LOG.exception("inference failed")
            metrics.record_response(500)
            return _error(500, f"internal error: {type(error).__name__}: {error}")
        try:
            body = _json({"outputs": outputs, "model": runner.name})
        except (TypeError, ValueError) as error:
            metrics.record_response(500)
            return _error(500, f"the model's output cannot be sent as JSON: {error}")
        metrics.record_response(200, len(outputs))
        return Response(body, media_type="application/json")

    async def models(request: Request) -> Response:
        return JSONResponse({"models": [runner.describe()]})

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(request: Request) -> Response:
        if serve_state.draining:
            return JSONResponse({"status": "draining"}, status_code=503)
        if not serve_state.ready:
            return JSONResponse({"status": "warming up"}, status_code=503)
        return JSONResponse({"status": "ready"})

    async def prometheus(request: Request) -> Response:
        return Response(metrics.render(), headers={"Content-Type": CONTENT_TYPE})

    async def openapi(request: Request) -> Response:
        return JSONResponse(document)

    async def http_error(request: Request, exc: Exception) -> Response:
        # Starlette's own 404 and 405 (with its Allow header), in the JSON every other error uses.
        if not isinstance(exc, HTTPException):
            raise exc
        return _error(exc.status_code, exc.detail, headers=exc.headers)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await batcher.start()
        if ready_on_start:
            serve_state.ready = True
        try:
            yield
        finally:
            serve_state.draining = True
            await batcher.drain()  # within the server's --timeout-s: a hung model call is not waited for

    app = Starlette(
        routes=[
            Route("/v1/models/{name}/infer", infer, methods=["POST"]),
            Route("/v1/models", models, methods=["GET"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/readyz", readyz, methods=["GET"]),
            Route("/metrics", prometheus, methods=["GET"]),
            Route("/openapi.json", openapi, methods=["GET"]),
        ],
        exception_handlers={HTTPException: http_error},
        lifespan=lifespan,
    )
    app.state.serve = serve_state
    if token is not None:
        app.add_middleware(_BearerAuth, token=token)
    return app


# -- OpenAPI ------------------------------------------------------------------------------------

_FLOAT32_MAX = 3.4028234663852886e38


def _tensor_schema(signature: dict[str, Any]) -> dict[str, Any]:
    """JSON Schema of one example of a graph input: nested lists of its shape without the batch axis."""
    integral = "int" in str(signature.get("dtype", ""))
    schema: dict[str, Any] = (
        {"type": "integer"} if integral else {"type": "number", "minimum": -_FLOAT32_MAX, "maximum": _FLOAT32_MAX}
    )
    for size in reversed(signature.get("shape", [])[1:]):
        fixed = isinstance(size, int) and size > 0
        schema = {"type": "array", "items": schema, "minItems": size if fixed else 1}
        if fixed:
            schema["maxItems"] = size
    return schema


def _item_schema(runner: ModelRunner) -> dict[str, Any]:
    """What one input may be, as precisely as the runner says: the fuzz test holds the server to it."""
    if runner.kind == "text":
        return {"type": "string", "pattern": "\\S", "description": "One text, tokenized by the model's tokenizer."}
    signatures = runner.describe().get("inputs") or []
    if len(signatures) == 1:
        return {**_tensor_schema(signatures[0]), "description": "One example, without the batch axis."}
    if signatures:
        names = [str(signature["name"]) for signature in signatures]
        return {
            "type": "object",
            "properties": {str(s["name"]): _tensor_schema(s) for s in signatures},
            "required": names,
            "additionalProperties": False,
            "description": "One example: each model input by name, without the batch axis.",
        }
    return {"description": "Any JSON value: the model (an echo or a Python function) decides what it means."}


def _error_response(description: str, headers: dict[str, Any] | None = None) -> dict[str, Any]:
    response: dict[str, Any] = {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
    }
    if headers:
        response["headers"] = headers
    return response


def _json_response(description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def openapi_document(runner: ModelRunner, secured: bool, max_body_bytes: int) -> dict[str, Any]:
    """OpenAPI 3.0.3 for the routes above, specific to this runner (its name, its input type).

    Written by hand rather than generated: the status codes and error bodies are the contract,
    and the fuzz test (schemathesis) checks the server against exactly this document.
    """
    item = _item_schema(runner)
    status = {"type": "object", "properties": {"status": {"type": "string"}}, "required": ["status"]}
    auth_errors = {"401": _error_response("Missing or wrong bearer token.")} if secured else {}
    infer_responses = {
        "200": _json_response("One output per input, in order.", {"$ref": "#/components/schemas/InferResponse"}),
        "400": _error_response("Malformed JSON, or the body is not a JSON object."),
        **auth_errors,
        "404": _error_response("No model of that name is served here."),
        "413": _error_response(f"The body exceeds {max_body_bytes} bytes."),
        "422": _error_response("An input has the wrong shape or type; 'field' names it (inputs[3])."),
        "429": _error_response(
            "The queue is full: retry after the number of seconds in Retry-After.",
            {"Retry-After": {"description": "Seconds to wait before retrying.", "schema": {"type": "integer"}}},
        ),
        "500": _error_response("The model failed on this request's own input; other requests are unaffected."),
        "504": _error_response("The request waited longer than the server's timeout."),
    }
    document: dict[str, Any] = {
        "openapi": "3.0.3",
        "info": {
            "title": f"computewise serve: {runner.name}",
            "version": "1",
            "description": "Dynamic-batching inference server of computewise.",
        },
        "paths": {
            "/v1/models/{name}/infer": {
                "post": {
                    "operationId": "infer",
                    "summary": "Run the model on one input or a list of inputs.",
                    "parameters": [
                        {
                            "name": "name",
                            "in": "path",
                            "required": True,
                            "schema": {"type": "string", "enum": [runner.name]},
                        },
                    ],
                    "requestBody": {
                        "required": True,
                        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/InferRequest"}}},
                    },
                    "responses": infer_responses,
                }
            },
            "/v1/models": {
                "get": {
                    "operationId": "listModels",
                    "summary": "The model served here.",
                    "responses": {
                        "200": _json_response(
                            "The served models.",
                            {
                                "type": "object",
                                "properties": {"models": {"type": "array", "items": {"type": "object"}}},
                                "required": ["models"],
                            },
                        ),
                        **auth_errors,
                    },
                }
            },
            "/healthz": {
                "get": {
                    "operationId": "healthz",
                    "summary": "Liveness: the process answers.",
                    "security": [],
                    "responses": {"200": _json_response("Alive.", status)},
                }
            },
            "/readyz": {
                "get": {
                    "operationId": "readyz",
                    "summary": "Readiness: loaded, warmed up and not draining.",
                    "security": [],
                    "responses": {
                        "200": _json_response("Ready to serve.", status),
                        "503": _json_response("Warming up or draining.", status),
                    },
                }
            },
            "/metrics": {
                "get": {
                    "operationId": "metrics",
                    "summary": "Prometheus metrics (text exposition format 0.0.4).",
                    "responses": {
                        "200": {"description": "Metrics.", "content": {"text/plain": {"schema": {"type": "string"}}}},
                        **auth_errors,
                    },
                }
            },
            "/openapi.json": {
                "get": {
                    "operationId": "openapi",
                    "summary": "This document.",
                    "responses": {"200": _json_response("OpenAPI 3.0 document.", {"type": "object"}), **auth_errors},
                }
            },
        },
        "components": {
            "schemas": {
                "InferRequest": {
                    "oneOf": [
                        {
                            "type": "object",
                            "properties": {"inputs": {"type": "array", "minItems": 1, "items": item}},
                            "required": ["inputs"],
                            "additionalProperties": False,
                        },
                        {
                            "type": "object",
                            "properties": {"input": item},
                            "required": ["input"],
                            "additionalProperties": False,
                        },
                    ]
                },
                "InferResponse": {
                    "type": "object",
                    "properties": {"outputs": {"type": "array", "items": {}}, "model": {"type": "string"}},
                    "required": ["outputs", "model"],
                },
                "Error": {
                    "type": "object",
                    "properties": {"error": {"type": "string"}, "field": {"type": "string"}},
                    "required": ["error"],
                },
            },
        },
    }
    if secured:
        document["components"]["securitySchemes"] = {"bearerAuth": {"type": "http", "scheme": "bearer"}}
        document["security"] = [{"bearerAuth": []}]
    return document
