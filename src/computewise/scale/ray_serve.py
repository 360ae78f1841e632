"""``computewise deploy``: the API of ``computewise serve`` as a Ray Serve application on an existing cluster.

Each replica loads the target (an artifact directory, ``package.module:function`` or ``echo``) with
``computewise.serve.runners.load_runner`` and answers through the very Starlette app that
``computewise serve`` runs (``serve.app.create_app``), mounted as the replica's ASGI ingress: same
routes, same request parsing and validation, same JSON bodies and status codes. Only the batching
differs: validated items go one by one to a ``@serve.batch`` method (Ray's greedy batching, up to
``max_batch_size`` items or ``batch_wait_s``) instead of the local cost-aware batcher. A batch that
raises is re-run item by item, so a model error fails only the request whose input caused it (500),
as locally. ``/metrics`` and the 429/504 limits are per replica.

Replicas and autoscaling come from the file ``computewise plan serve --ray-config`` writes (its
``autoscaling_config`` and ``max_ongoing_requests``); without one, a single replica. The app is
named after the model and answers under a route prefix, ``/`` by default (the URLs of ``computewise serve``
exactly); give each model its own prefix (``/minilm``) to serve several on one cluster.

The order of work, so that nothing is left half deployed: refuse an exposed host without a token ->
build the application (a bad target or scaling file fails here, before any connection) -> reach the
GCS (a TCP connect, fast) -> ``ray.init(address=...)`` (over loopback when the cluster listens only
there) -> check one replica fits on a node -> ``serve.start`` (the HTTP proxy on the chosen host and
port) -> ``serve.run`` (waits until the replicas answer) -> disconnect. The app keeps running on the
cluster after the caller exits; ``delete_application`` (``computewise deploy TARGET --address HOST:PORT
--delete``) removes it.

Paths and modules are resolved where the command runs: the artifact directory is sent as an absolute
path and the working directory is put on the replica's ``sys.path``, so they must be visible to the
cluster's nodes (a local cluster, or a shared file system).

``ray`` is imported inside functions: it is the optional ``ray`` extra.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import json
import logging
import re
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from computewise.errors import InputError, ItemFailed, JobEngineError, MissingExtraError, QueueFull, RequestTimeout
from computewise.scale.deployment import RayServeDeployment
from computewise.scale.ray_cluster import connected, current_address, gcs_address, largest_node
from computewise.serve.app import DEFAULT_MAX_BODY_BYTES, create_app
from computewise.serve.batcher import BatchRecord
from computewise.serve.exposure import check_exposure
from computewise.serve.metrics import ServeMetrics
from computewise.serve.runners import ModelRunner, load_runner, model_name

if TYPE_CHECKING:
    from ray.serve import Application
    from starlette.applications import Starlette

__all__ = [
    "RayServeOptions",
    "RayServeScaling",
    "application_name",
    "application_status",
    "build_application",
    "delete_application",
    "deploy",
    "read_ray_config",
    "run_application",
]

_PREFIX_RE = re.compile(r"/|(/[A-Za-z0-9._-]+)+")
_SCALING_KEYS = frozenset({"name", "max_ongoing_requests", "autoscaling_config"})
_RETRY_AFTER_S = 1.0  # Retry-After of a full replica queue: @serve.batch gives no compute estimate
_DRAIN_TIMEOUT_S = 30.0
# Ray Serve's default of 5 ongoing requests per replica would cap every batch at 5 single-input requests.
_ONGOING_PER_BATCH_ITEM = 2


@dataclass(frozen=True)
class RayServeScaling:
    """What ``computewise plan serve --ray-config`` wrote: Ray's ``autoscaling_config`` and request cap per replica."""

    autoscaling_config: dict[str, Any]
    max_ongoing_requests: int | None = None
    deployment_name: str | None = None


@dataclass(frozen=True)
class RayServeOptions:
    """How the replicas batch, limit, protect and size themselves (the ``computewise serve`` flags that apply)."""

    max_batch_size: int = 32
    batch_wait_s: float = 0.01
    queue_limit: int = 256
    timeout_s: float = 30.0
    replica_cpus: float = 1.0
    token: str | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    scaling: RayServeScaling | None = None
    route_prefix: str = "/"

    def __post_init__(self) -> None:
        if self.max_batch_size < 1:
            raise InputError(f"max batch size {self.max_batch_size} must be at least 1", "e.g. --max-batch-size 32")
        if not self.batch_wait_s >= 0:
            raise InputError(f"batch wait {self.batch_wait_s} s must be >= 0", "e.g. --max-queue-delay-ms 10")
        if self.queue_limit < 1:
            raise InputError(f"queue limit {self.queue_limit} must be at least 1", "e.g. --queue-limit 256")
        if not self.timeout_s > 0:
            raise InputError(f"timeout {self.timeout_s} s must be positive", "e.g. --timeout-s 30")
        if not self.replica_cpus > 0:
            raise InputError(f"replica CPUs {self.replica_cpus} must be positive", "e.g. --replica-cpus 1")
        if self.token is not None and not self.token.strip():
            raise InputError("--token is empty", "give a long random token, e.g. --token $(openssl rand -hex 16)")
        if self.max_body_bytes < 1:
            raise InputError(f"max body {self.max_body_bytes} bytes must be positive", "e.g. --max-body-bytes 1048576")
        prefix = self.route_prefix
        if not _PREFIX_RE.fullmatch(prefix):
            raise InputError(
                f"route prefix {prefix!r} must be '/' or '/' followed by letters, digits, '-', '_' or '.' segments",
                "e.g. --route-prefix /minilm",
            )

    @property
    def max_ongoing_requests(self) -> int:
        if self.scaling is not None and self.scaling.max_ongoing_requests is not None:
            return self.scaling.max_ongoing_requests
        return _ONGOING_PER_BATCH_ITEM * self.max_batch_size


# -- the scaling file ------------------------------------------------------------------------------


def read_ray_config(path: Path) -> RayServeScaling:
    """The file ``computewise plan serve --ray-config FILE`` writes; ``InputError`` naming the file otherwise."""
    hint = "write it with `computewise plan serve ... --ray-config FILE`"
    try:
        text = path.read_text()
    except OSError as error:
        raise InputError(f"cannot read the Ray config {path}: {error.strerror or error}", hint) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise InputError(f"{path}:{error.lineno}: not JSON ({error.msg})", hint) from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a JSON object, got {type(data).__name__}", hint)
    unknown = sorted(set(data) - _SCALING_KEYS)
    if unknown:
        raise InputError(f"{path}: unknown key {unknown[0]!r}; expected {', '.join(sorted(_SCALING_KEYS))}", hint)
    autoscaling = data.get("autoscaling_config")
    if not isinstance(autoscaling, dict) or not autoscaling:
        raise InputError(f"{path}: 'autoscaling_config' must be a non-empty JSON object", hint)
    ongoing = data.get("max_ongoing_requests")
    if ongoing is not None and (not isinstance(ongoing, int) or isinstance(ongoing, bool) or ongoing < 1):
        raise InputError(f"{path}: 'max_ongoing_requests' must be a positive integer, got {ongoing!r}", hint)
    name = data.get("name")
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise InputError(f"{path}: 'name' must be a non-empty string, got {name!r}", hint)
    return RayServeScaling(dict(autoscaling), ongoing, name)


# -- inside a replica ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Failed:
    """An item the model failed on even alone: its request gets 500, its batch neighbours their outputs."""

    error: Exception


class _ServeBatchDispatcher:
    """The app's ``Dispatcher`` inside a replica: each item through Ray's ``@serve.batch``.

    Keeps the local batcher's contract: ``QueueFull`` past ``queue_limit`` waiting items, ``RequestTimeout``
    after ``timeout_s``, ``ItemFailed`` naming the request's input the model failed on.
    """

    def __init__(self, runner: ModelRunner, options: RayServeOptions, metrics: ServeMetrics) -> None:
        from ray import serve

        self.runner = runner
        self.options = options
        self.metrics = metrics
        self._waiting: set[object] = set()  # a token per item queued in @serve.batch, not yet in a batch
        self._in_flight = 0
        self._accepting = True
        # Applied to the bound method: the sizes come from the options at run time, not from a decorator.
        self._batched = serve.batch(max_batch_size=options.max_batch_size, batch_wait_timeout_s=options.batch_wait_s)(
            self._run_batch
        )

    @property
    def queue_depth(self) -> int:
        return len(self._waiting)

    async def start(self) -> None:
        self._accepting = True

    async def submit(self, items: list[Any]) -> list[Any]:
        if not items:
            return []
        if not self._accepting:
            raise QueueFull("the server is shutting down and accepts no new requests", _RETRY_AFTER_S)
        depth = self.queue_depth
        if depth and depth + len(items) > self.options.queue_limit:
            raise QueueFull(f"the queue is full ({depth} of {self.options.queue_limit} items waiting)", _RETRY_AFTER_S)
        tokens = [object() for _ in items]
        self._waiting.update(tokens)
        self._in_flight += 1
        arrived_s = time.monotonic()
        try:
            calls = [self._batched((token, item, arrived_s)) for token, item in zip(tokens, items, strict=True)]
            outputs = await asyncio.wait_for(asyncio.gather(*calls), self.options.timeout_s)
        except TimeoutError:
            raise RequestTimeout(
                f"no answer within {self.options.timeout_s:g} s (queue depth {self.queue_depth})"
            ) from None
        finally:
            self._waiting.difference_update(tokens)
            self._in_flight -= 1
        for index, output in enumerate(outputs):
            if isinstance(output, _Failed):
                error = output.error
                raise ItemFailed(f"the model failed on input {index}: {type(error).__name__}: {error}", index)
        return list(outputs)

    async def drain(self) -> None:
        self._accepting = False
        deadline_s = time.monotonic() + _DRAIN_TIMEOUT_S
        while self._in_flight and time.monotonic() < deadline_s:
            await asyncio.sleep(0.005)

    async def _run_batch(self, entries: list[tuple[object, Any, float]]) -> list[Any]:
        """One model call in a worker thread (the replica's event loop keeps accepting), one by one if it fails."""
        started_s = time.monotonic()
        self._waiting.difference_update(token for token, _item, _arrived_s in entries)
        items = [item for _token, item, _arrived_s in entries]
        clock_s = time.perf_counter()
        failed = 0
        try:
            outputs: list[Any] = await asyncio.to_thread(self._call, items)
        except Exception:
            outputs = []
            for item in items:
                try:
                    outputs.extend(await asyncio.to_thread(self._call, [item]))
                except Exception as error:
                    failed += 1
                    outputs.append(_Failed(error))
        lengths = [self.runner.length(item) for item in items]
        self.metrics.record_batch(
            BatchRecord(
                size=len(items),
                padded_length=max(lengths),
                real_tokens=sum(lengths),
                queue_wait_s=[started_s - arrived_s for _token, _item, arrived_s in entries],
                compute_s=time.perf_counter() - clock_s,
                failed=failed,
            )
        )
        return outputs

    def _call(self, items: list[Any]) -> list[Any]:
        outputs = self.runner.run(items)
        if len(outputs) != len(items):
            raise ValueError(f"the model returned {len(outputs)} outputs for {len(items)} inputs")
        return outputs


class _Replica:
    """A Ray Serve replica: loads the model once, then builds the ``computewise serve`` app as its ASGI ingress."""

    def __init__(self, target: str, options: RayServeOptions, search_path: str) -> None:
        if search_path not in sys.path:  # `package.module:function` resolves as it would where the command ran
            sys.path.insert(0, search_path)
        self._runner = load_runner(target)
        self._options = options

    def __serve_build_asgi_app__(self) -> Starlette:
        metrics = ServeMetrics()
        dispatcher = _ServeBatchDispatcher(self._runner, self._options, metrics)
        return create_app(
            self._runner, dispatcher, metrics, token=self._options.token, max_body_bytes=self._options.max_body_bytes
        )


# -- deploying -------------------------------------------------------------------------------------


def application_name(target: str) -> str:
    """The model's name, which is also the app's (``serve.runners.model_name``): known before anything
    reaches the cluster, and an ``InputError`` for a target that cannot be served."""
    return model_name(target)


def _portable_target(target: str) -> str:
    """An artifact directory as an absolute path: a replica's working directory is not the caller's."""
    path = Path(target)
    return str(path.resolve()) if target != "echo" and path.is_dir() else target


def build_application(target: str, options: RayServeOptions) -> Application:
    """The Ray Serve application (one deployment) serving ``target``; needs ``ray[serve]``, not a connection."""
    _require_ray()
    from ray import serve
    from ray.serve.config import AutoscalingConfig

    scaling = options.scaling
    settings: dict[str, Any] = {
        "name": (scaling.deployment_name if scaling else None) or application_name(target),
        "max_ongoing_requests": options.max_ongoing_requests,
        "ray_actor_options": {"num_cpus": options.replica_cpus},
    }
    if scaling is None:
        settings["num_replicas"] = 1
    else:
        known = set(AutoscalingConfig.model_fields)
        unknown = sorted(set(scaling.autoscaling_config) - known)
        if unknown:  # pydantic would drop a misspelt key silently, and its setting with it
            close = difflib.get_close_matches(unknown[0], sorted(known), n=1)
            raise InputError(
                f"unknown autoscaling_config key {unknown[0]!r}" + (f"; did you mean {close[0]!r}?" if close else ""),
                f"use Ray Serve's AutoscalingConfig fields: {', '.join(sorted(known))}",
            )
        try:
            settings["autoscaling_config"] = AutoscalingConfig(**scaling.autoscaling_config)
        except (TypeError, ValueError) as error:  # pydantic's ValidationError is a ValueError
            raise InputError(
                f"Ray Serve refuses the autoscaling_config: {_validation_text(error)}",
                "write it with `computewise plan serve ... --ray-config FILE`, or fix the named field",
            ) from None
    deployment = serve.deployment(**settings)(serve.ingress()(_Replica))
    return deployment.bind(_portable_target(target), options, str(Path.cwd()))


def run_application(
    target: str,
    host: str = "127.0.0.1",
    port: int = 8000,
    options: RayServeOptions | None = None,
    insecure: bool = False,
) -> RayServeDeployment:
    """Start Serve's HTTP proxy on ``host:port`` and deploy ``target``, on the cluster Ray is connected to now.

    Returns once the replicas answer. A Serve instance already running on the cluster keeps its own
    proxy address: the returned URL is the real one, with a note. Raises ``JobEngineError`` when Ray
    refuses the deployment (the failed app is deleted first).
    """
    options = options or RayServeOptions()
    check_exposure(host, options.token, insecure)
    return _start_and_run(build_application(target, options), application_name(target), host, port, options)


def _start_and_run(
    application: Application, name: str, host: str, port: int, options: RayServeOptions
) -> RayServeDeployment:
    from ray import serve

    started_s = time.perf_counter()
    with _quiet_serve_logs():
        try:
            serve.start(http_options={"host": host, "port": port})
            serve.run(application, name=name, route_prefix=options.route_prefix)
        except Exception as error:  # Ray raises RuntimeError, RayServeException, ValueError... all mean "refused"
            failed = serve.status().applications.get(name)
            if failed is not None and _status_text(failed.status) == "DEPLOY_FAILED":
                serve.delete(name)  # a half-deployed app would hold its replicas' CPUs for nothing
            raise JobEngineError(
                f"Ray Serve could not deploy {name!r}: {_cause(error)}",
                f"if another application holds the route prefix {options.route_prefix}, delete it first "
                "(`serve delete NAME`) or choose another --route-prefix; otherwise check the replica logs "
                "(`serve status`, the dashboard) and the target path",
            ) from error
        deploy_s = time.perf_counter() - started_s
        status = _status_text(serve.status().applications[name].status)
    real_host, real_port = _proxy_address(host, port)
    notes: tuple[str, ...] = ()
    if (real_host, real_port) != (host, port):
        notes = (
            f"Serve was already running on this cluster with its proxy at {real_host}:{real_port}; "
            f"--host/--port apply only when Serve starts",
        )
    scaling = options.scaling
    return RayServeDeployment(
        url=f"http://{real_host}:{real_port}{'' if options.route_prefix == '/' else options.route_prefix}",
        app_name=name,
        address=current_address(),
        status=status,
        deploy_s=deploy_s,
        replica_cpus=options.replica_cpus,
        max_ongoing_requests=options.max_ongoing_requests,
        autoscaling_config=dict(scaling.autoscaling_config) if scaling else None,
        notes=notes,
    )


def deploy(
    target: str,
    address: str,
    host: str = "127.0.0.1",
    port: int = 8000,
    options: RayServeOptions | None = None,
    insecure: bool = False,
) -> RayServeDeployment:
    """Deploy ``target`` on the Ray cluster whose GCS is at ``address`` (``HOST:PORT``); its URL once it answers.

    Raises ``InputError`` for a bad target, address or options, ``JobEngineError`` when no cluster answers at
    ``address`` or a replica can never fit on its nodes (both before anything is deployed), ``MissingExtraError``
    without ``ray[serve]``.
    """
    options = options or RayServeOptions()
    check_exposure(host, options.token, insecure)
    application = build_application(target, options)  # a bad target or scaling file fails before connecting
    with connected(gcs_address(address)):
        _check_fits(address, options.replica_cpus)
        return _start_and_run(application, application_name(target), host, port, options)


def application_status(address: str, name: str) -> str:
    """Ray Serve's status of the app (``RUNNING``, ``DEPLOYING``, ``DEPLOY_FAILED``...), ``NOT_FOUND`` if none."""
    with connected(gcs_address(address)):
        from ray import serve

        app = serve.status().applications.get(name)
        return "NOT_FOUND" if app is None else _status_text(app.status)


def delete_application(address: str, name: str) -> bool:
    """Delete the app and its replicas (waits until they are gone); False when there was none of that name."""
    with connected(gcs_address(address)):
        from ray import serve

        if name not in serve.status().applications:
            return False
        with _quiet_serve_logs():
            serve.delete(name)
        return True


# -- the cluster -----------------------------------------------------------------------------------


def _check_fits(address: str, replica_cpus: float) -> None:
    """Refuse a replica that no alive node can hold: Serve would otherwise wait for it forever."""
    largest = largest_node("CPU")
    if replica_cpus > largest + 1e-9:
        raise JobEngineError(
            f"a replica asks for {replica_cpus:g} CPU(s) but the largest node of the cluster at {address} "
            f"has {largest:g}: Ray Serve would wait for it forever",
            f"pass --replica-cpus {largest:g} or less, or add a larger node",
        )


def _proxy_address(host: str, port: int) -> tuple[str, int]:
    """Where Serve's HTTP proxy really listens: an already running Serve keeps its own options."""
    try:
        from ray.serve.context import _get_global_client  # no public API exposes the proxy's address
    except ImportError:
        return host, port
    client = _get_global_client()
    if client is None:
        return host, port
    config = client.http_config
    return (str(config.host) if config.host else host), int(config.port)


@contextlib.contextmanager
def _quiet_serve_logs() -> Iterator[None]:
    """Serve logs every step on the driver's stderr; the CLI prints its own lines (and notes a proxy it kept)."""
    logger = logging.getLogger("ray.serve")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _validation_text(error: Exception) -> str:
    """pydantic's messages without its URLs and input dumps: ``max_replicas (1) must be ... (3)``."""
    details = getattr(error, "errors", None)
    if not callable(details):
        return str(error)
    return "; ".join(str(detail.get("msg", detail)).removeprefix("Value error, ") for detail in details())


def _status_text(status: Any) -> str:
    """``RUNNING`` rather than ``ApplicationStatus.RUNNING``."""
    return str(getattr(status, "value", status))


def _cause(error: BaseException) -> str:
    """The controller's own words: a ``RayTaskError`` wraps them in a remote traceback."""
    cause = getattr(error, "cause", None)
    text = str(cause if isinstance(cause, BaseException) else error).strip()
    lines = text.splitlines()
    return "\n".join(lines[-4:]) if len(lines) > 4 else text


def _require_ray() -> None:
    """``MissingExtraError`` naming the extra, before any ``from ray import ...`` can fail with an ImportError."""
    try:
        import ray.serve  # noqa: F401  (the import is the check)
    except ImportError as error:
        raise MissingExtraError("ray[serve]", "ray", "computewise deploy") from error
