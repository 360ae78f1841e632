"""``computewise serve``: one model behind uvicorn, warmed up, drained on SIGTERM, recorded in the ledger.

The order of work, so that nothing is half started and nothing accepted is lost:

    refuse an exposed address without --token/--insecure -> bind the port -> open the ledger
    -> load the model -> start the run row -> uvicorn (the app's lifespan starts the batcher)
    -> warm up through the batcher (/readyz turns 200, the ready file appears)
    -> SIGTERM: /readyz 503, the listener closes, in-flight requests are answered, the batcher
       drains -> the run is finished with its counts -> exit 0

The port is bound before the model loads, so a taken port fails in a second, not after a long load.
Warm-up goes through the batcher rather than straight to the model: the cost model's first
observations (batches of 1, 2, 4, 8) are paid before the first client arrives, not by it.

The ledger run (kind ``serve``) is priced like ``computewise run`` prices a job (the hardware at
launch, frozen) and carries the inferences served; a heartbeat every few seconds keeps its cost
growing with its wall time and tells ``mark_crashed`` it is alive. It is sampled like a run too (the
same ``Sampler`` over this server's process tree, every ``HEARTBEAT_S``, plus one last sample at
exit): CPU, memory, GPUs and the energy of each interval, so its kWh and utilization are measured.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Generator
from dataclasses import asdict
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

import uvicorn

from computewise.catalog import Catalog
from computewise.errors import ComputewiseError, InputError
from computewise.estimate.quote import PriceRequest
from computewise.ledger import Ledger
from computewise.monitor.gpu import GpuSource, open_gpu_source
from computewise.monitor.recorded import CTRL_C_EXIT_CODE, Ending, RecordedRun, hardware_of
from computewise.monitor.sampler import MAX_FLUSH_S
from computewise.monitor.watch import Periodic, Watch, priced_row, say
from computewise.serve.app import DEFAULT_MAX_BODY_BYTES, ServeState, create_app
from computewise.serve.batcher import Batcher, BatchPolicy, BatchRecord
from computewise.serve.cache import PredictionCache
from computewise.serve.eventloop import fastest_loop, freeze_startup_heap
from computewise.serve.exposure import bind_listener, check_exposure
from computewise.serve.metrics import ServeMetrics
from computewise.serve.runners import ModelRunner, load_runner
from computewise.system.files import check_writable
from computewise.system.signals import stop_signals_to
from computewise.units import format_bytes, format_duration

__all__ = ["HEARTBEAT_S", "serve"]

HEARTBEAT_S = 5.0
_WARMUP_ROUNDS = 2
_WARMUP_SIZES = (1, 2, 4, 8)
_WARMUP_WORDS = (3, 12, 40)  # short, typical and long sentences: the padding the cost model must learn
_DRAIN_EXTRA_S = 5.0  # uvicorn's graceful-shutdown bound: the request timeout plus this


def _warmup_example(runner: ModelRunner, words: int) -> Any | None:
    """An input the model accepts, or None when nothing is known about its inputs (an entry point)."""
    if runner.kind == "echo":
        return 0
    if runner.kind == "text":
        return " ".join(["warm"] * words)
    signatures = runner.describe().get("inputs")
    if not signatures:
        return None

    def zeros(signature: dict[str, Any]) -> Any:
        value: Any = 0 if "int" in str(signature.get("dtype", "")) else 0.0
        for size in reversed(signature["shape"][1:]):  # without the batch axis; symbolic sizes become 1
            value = [value] * (size if isinstance(size, int) and size > 0 else 1)
        return value

    if len(signatures) == 1:
        return zeros(signatures[0])
    return {str(signature["name"]): zeros(signature) for signature in signatures}


async def _warm_up(runner: ModelRunner, batcher: Batcher, max_batch_size: int, stream: TextIO) -> None:
    """A few batches of each size: the first clients pay neither lazy initialisation nor the cost model's learning."""
    examples = [example for words in _WARMUP_WORDS if (example := _warmup_example(runner, words)) is not None]
    if not examples:
        return
    try:
        items = [runner.validate(example) for example in examples]
        for _round in range(_WARMUP_ROUNDS):
            for size in _WARMUP_SIZES:
                if size <= max_batch_size:
                    await batcher.submit([items[n % len(items)] for n in range(size)])
    except Exception as error:  # made-up inputs may not suit the model; real ones still might: say so, go on
        say(stream, f"warm-up failed, serving without it: {type(error).__name__}: {error}")


def _cache_text(cache: PredictionCache | None) -> str:
    if cache is None:
        return ""
    ttl = f", TTL {format_duration(cache.ttl_s)}" if cache.ttl_s is not None else ""
    return f", cache {format_bytes(cache.max_bytes)}{ttl}"


def _write_ready_file(path: Path, url: str, model: str) -> None:
    """Atomically, so a script polling for the file never reads half of it."""
    staging = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    staging.write_text(json.dumps({"url": url, "model": model, "pid": os.getpid()}) + "\n")
    staging.replace(path)


class _DrainingServer(uvicorn.Server):
    """uvicorn, except that SIGTERM/SIGINT first mark the app as draining and the process then exits 0.

    Stock uvicorn re-raises the captured signal after its graceful shutdown, so the process dies
    of SIGTERM; a server that drained cleanly has done what was asked and should say so with 0.
    A second signal stops the waiting (``force``): whoever sends it has given up on the drain, and a
    hung model call must not keep the process alive against them.
    """

    def __init__(self, config: uvicorn.Config, state: ServeState, stream: TextIO, force: Callable[[], None]) -> None:
        super().__init__(config)
        self._state = state
        self._stream = stream
        self._force = force
        self._stopped_by: int | None = None

    def ending(self) -> Ending:
        """How the server ended once ``serve`` returned: SIGTERM is how a server is asked to stop (an
        orchestrator scaling down, ``kill``), so drained after it, it succeeded (exit 0); Ctrl-C is an
        interrupt, recorded as on every run (``monitor.recorded``): interrupted, exit 130."""
        if self._stopped_by == signal.SIGINT:
            return Ending.of_exit(CTRL_C_EXIT_CODE, signal.SIGINT)
        return Ending.of_exit(0)

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        """SIGTERM and Ctrl-C start the drain (``handle_exit``); unlike stock uvicorn, neither is re-raised after it."""
        with stop_signals_to(self.handle_exit):
            yield

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self._state.draining:
            say(self._stream, f"{signal.Signals(sig).name} again: stopping now, without waiting for in-flight requests")
            try:  # a signal handler interrupts the loop's own code: the batcher is told from the loop, not here
                asyncio.get_running_loop().call_soon_threadsafe(self._force)
            except RuntimeError:  # no loop running (it has just ended): nothing is racing with it
                self._force()
            return
        self._state.draining = True
        self._stopped_by = sig
        say(self._stream, f"{signal.Signals(sig).name}: draining in-flight requests, then stopping")
        super().handle_exit(sig, frame)


class _RunRecord:
    """What the serving run records while it serves: samples (``monitor.watch``), and a heartbeat with the
    inferences served."""

    def __init__(
        self, record: RecordedRun, metrics: ServeMetrics, stream: TextIO, catalog: Catalog, gpu: GpuSource
    ) -> None:
        self.ledger, self.run_id, self.metrics, self.stream = record.ledger, record.run_id, metrics, stream
        self._recorded = 0
        self._watch = Watch(
            record,
            os.getpid(),  # the server is the job: its own process and any workers
            gpu,
            catalog,
            HEARTBEAT_S,
            flush_s=MAX_FLUSH_S,
            on_error=lambda e: say(stream, f"ledger write failed: {e}"),
        ).start()
        self._beating = Periodic(self._beat, HEARTBEAT_S, f"computewise-serve-{self.run_id}").start()

    def flush(self) -> None:
        served = self.metrics.totals()["inferences"]
        if served > self._recorded:
            self.ledger.add_inferences(self.run_id, served - self._recorded)
            self._recorded = served
        self.ledger.heartbeat(self.run_id, time.time())

    def _beat(self) -> None:
        try:
            self.flush()
        except ComputewiseError as error:  # measurement degrades; serving goes on
            say(self.stream, f"ledger write failed: {error.message}")

    def stop(self) -> None:
        """The last sample (even a short run has its energy) and the last inferences, before the run ends."""
        self._beating.stop()
        self._watch.stop()
        try:
            self.flush()
        except ComputewiseError as failure:
            say(self.stream, f"could not record the last inferences of run {self.run_id}: {failure.message}")


def serve(
    target: str,
    host: str = "127.0.0.1",
    port: int = 8000,
    policy: BatchPolicy | None = None,
    token: str | None = None,
    insecure: bool = False,
    queue_limit: int = 256,
    timeout_s: float = 30.0,
    db: str | None = None,
    tags: dict[str, str] | None = None,
    ready_file: Path | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    hourly_usd: float | None = None,
    stream: TextIO | None = None,
    cache_bytes: int | None = None,
    cache_ttl_s: float | None = None,
) -> int:
    """Serve ``target`` (artifact directory, ``package.module:function`` or ``echo``) until SIGTERM; the exit code.

    ``port`` 0 takes any free port (the ready file says which). Raises ``InputError`` for an exposed
    ``host`` without ``token`` or ``insecure``, a taken port, or bad limits; ``LedgerError`` for a ledger
    that cannot record the run. Returns the exit code of its ending, recorded with the run by the rule
    of every run (``monitor.recorded``): 0 after a drain on SIGTERM, 130 after Ctrl-C, 1 when the
    server failed (or the code of a ``SystemExit`` it raised). Messages go to ``stream`` (stderr).
    ``cache_bytes`` turns on the prediction cache (``serve.cache``) of that size, ``cache_ttl_s`` its TTL;
    a model that may not be cached (``runners.cache_identity``) is an ``InputError`` before serving.
    """
    policy = policy or BatchPolicy()
    stream = stream or sys.stderr
    check_exposure(host, token, insecure)
    if max_body_bytes < 1:
        raise InputError(f"--max-body-bytes {max_body_bytes} must be positive", "e.g. --max-body-bytes 1048576")
    if cache_ttl_s is not None and cache_bytes is None:
        raise InputError("--cache-ttl needs --cache-size", "e.g. --cache-size 256MB --cache-ttl 10m")
    if ready_file is not None:
        # Written after the model loads (minutes for a large one), and what a script waits on: checked first.
        check_writable(ready_file, "--ready-file", "nothing was loaded")
    cache = PredictionCache(cache_bytes, cache_ttl_s) if cache_bytes is not None else None
    sock = bind_listener(host, port)
    try:
        if ready_file is not None:
            ready_file.unlink(missing_ok=True)  # a stale one from an earlier server would say "ready" too soon
        return _serve_bound(
            sock, target, policy, token, queue_limit, timeout_s, db, tags or {}, ready_file, max_body_bytes,
            hourly_usd, stream, cache,
        )  # fmt: skip
    finally:
        sock.close()
        if ready_file is not None:
            ready_file.unlink(missing_ok=True)


def _serve_bound(
    sock: socket.socket,
    target: str,
    policy: BatchPolicy,
    token: str | None,
    queue_limit: int,
    timeout_s: float,
    db: str | None,
    tags: dict[str, str],
    ready_file: Path | None,
    max_body_bytes: int,
    hourly_usd: float | None,
    stream: TextIO,
    cache: PredictionCache | None,
) -> int:
    from computewise.catalog import load_catalog

    started_at_s = time.time()
    ledger = Ledger.open(db)
    gpu: GpuSource | None = None
    try:
        ledger.mark_crashed(started_at_s, socket.gethostname())
        runner = load_runner(target)
        state = ServeState()
        metrics = ServeMetrics()

        def on_batch(record: BatchRecord) -> None:
            if state.ready:  # warm-up batches are not traffic
                metrics.record_batch(record)

        batcher = Batcher(runner, policy, queue_limit=queue_limit, timeout_s=timeout_s, on_batch=on_batch)
        app = create_app(runner, batcher, metrics, token=token, max_body_bytes=max_body_bytes, state=state, cache=cache)
        catalog = load_catalog()
        gpu = open_gpu_source()
        row = priced_row(
            catalog,
            "serve",
            ("computewise", "serve", target),
            hardware_of(gpu.status()),
            PriceRequest(hourly_usd=hourly_usd),
            tags=tags,
            interval_s=HEARTBEAT_S,
            started_at_s=started_at_s,
            stream=stream,
        )
        with RecordedRun(ledger, row) as record:
            run = _RunRecord(record, metrics, stream, catalog, gpu)
            bound_host, bound_port = sock.getsockname()[:2]
            url = f"http://{f'[{bound_host}]' if ':' in bound_host else bound_host}:{bound_port}"
            config = uvicorn.Config(
                app,
                log_level="warning",
                access_log=False,
                lifespan="on",
                timeout_graceful_shutdown=int(timeout_s + _DRAIN_EXTRA_S),
            )
            server = _DrainingServer(config, state, stream, force=batcher.abandon)

            async def main() -> None:
                serving = asyncio.create_task(server.serve(sockets=[sock]))
                while not server.started and not serving.done():
                    await asyncio.sleep(0.01)
                helpers: list[asyncio.Task[None]] = []
                if server.started and not server.should_exit:

                    async def become_ready() -> None:
                        try:
                            await _warm_up(runner, batcher, policy.max_batch_size, stream)
                            freeze_startup_heap()  # no full collection over the model stalls a request later
                            if not state.draining:
                                state.ready = True
                                if ready_file is not None:
                                    _write_ready_file(ready_file, url, runner.name)
                                say(
                                    stream,
                                    f"serving {runner.name!r} at {url} (batching {policy.mode}{_cache_text(cache)}, "
                                    f"run {run.run_id})",
                                )
                        except Exception:  # never ready (no ready file for whoever waits on it): stop, with the error
                            server.should_exit = True
                            raise

                    helpers = [asyncio.create_task(become_ready())]
                try:
                    await serving
                finally:
                    for helper in helpers:
                        helper.cancel()
                    ended = await asyncio.gather(*helpers, return_exceptions=True)
                if ended and isinstance(ended[0], Exception):  # become_ready failed
                    raise ended[0]

            summary: dict[str, Any] = {"model": runner.name, "target": target, "kind": runner.kind}
            summary["batching"] = asdict(policy)
            if cache is not None:
                summary["cache"] = {"max_bytes": cache.max_bytes, "ttl_s": cache.ttl_s}
            try:
                with asyncio.Runner(loop_factory=fastest_loop()) as event_loop:
                    event_loop.run(main())
            except (Exception, SystemExit) as error:  # uvicorn exits with SystemExit(3) when the app cannot start
                say(stream, f"the server stopped: {type(error).__name__}: {error}")
                ending = Ending.of_exception(error)
            else:
                ending = server.ending()
            finally:
                run.stop()
            record.declare(ending, {**summary, **metrics.totals()})
            try:
                record.finish()
            except ComputewiseError as failure:  # the serving is over; what it did stands
                say(stream, f"could not finish run {record.run_id} in the ledger: {failure.message}")
        if ending.status != "failed":
            say(stream, f"stopped; {metrics.totals()['inferences']} inferences served (run {record.run_id})")
        return ending.exit_code if ending.exit_code is not None else 1
    finally:
        if gpu is not None:
            gpu.close()
        ledger.close()
