"""The dynamic batcher: a bounded queue of items, worker coroutines, and three ways to form a batch.

Every request is split into its items (one per input); each item waits in one queue in arrival
order. A request's items may land in different batches; the request resolves when its last item
is done, or fails as soon as one of its items fails (its remaining queued items are dropped then).
A worker coroutine forms a batch when it is free, runs it in a thread pool (the model never runs
on the event loop) and resolves the items. The policies:

- ``none``: one item per call, arrival order; what a naive server does.
- ``greedy``: up to ``max_batch_size`` items in arrival order, waiting until the batch is full or
  its oldest item has waited ``max_queue_delay_ms`` (Triton's dynamic batcher, Ray Serve's
  ``@serve.batch`` at 32 items / 10 ms by default). Mixed lengths pay for padding.
- ``cost``: never waits. When a worker frees it takes the oldest item and adds queued items of
  the most similar length one at a time, where the learned cost model (``costmodel.py``) predicts
  that doing so lowers the cost per item and costs less than running the item alone; so every
  batch is predicted cheaper than its items one at a time: no worse than ``none`` wherever the
  model is right (``benchmarks/serve_batching.py`` measures it). Until the model is ready it sends
  batches of 1, 2, 4 and 8 similar-length items in turn: sizes the model needs to learn from,
  small enough to cost little padding while it does. The model keeps learning while it serves: a
  fit made on a busy machine may say batching costs more, and batches of one alone would never
  prove it wrong, so after ``_REEXPLORE_AFTER`` lone batches sent while others waited it sends one
  of the exploration sizes again, and once the window holds one size only it explores in turn.

With ``slo_p99_ms`` the batcher also admits against the SLO: a request whose predicted queue wait
plus compute exceeds it is refused at once (``QueueFull``, which the server answers 429) rather
than accepted and answered late, unless nothing is queued and a worker is free. Refusing then
answers no one sooner, and only answered requests teach the cost model: on an H200 the first
batches of MiniLM's TorchScript program predicted a compute over a 50 ms SLO, and a batcher that
refused on that alone refused every request that followed. ``greedy`` shortens its wait to what
the SLO leaves after the predicted compute of a full batch; ``cost`` stops growing a batch whose
predicted compute would take more than half the SLO. Waiting and compute are predicted from
observed batches only, so the admission adapts to the machine's load as it is.

If a batch raises, its items are run again one at a time, so only the item the model cannot take
fails its request (``ItemFailed``); neighbours in the batch are answered normally.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

from computewise.errors import InputError, ItemFailed, QueueFull, RequestTimeout
from computewise.serve.costmodel import BatchCostModel
from computewise.serve.runners import ModelRunner

__all__ = ["POLICIES", "BatchPolicy", "BatchRecord", "Batcher"]

POLICIES = ("none", "greedy", "cost")
_LOG = logging.getLogger(__name__)
_EXPLORE_SIZES = (1, 2, 4, 8)  # what the cost policy sends until its model is ready
_REEXPLORE_AFTER = 64  # lone batches with company waiting before the cost policy measures a larger one again
_SLO_BATCH_SHARE = 0.5  # a batch may take this much of the SLO; queueing behind it needs the rest
_UNKNOWN_RETRY_AFTER_S = 1.0  # Retry-After before any batch has been timed
_MIN_RETRY_AFTER_S = 0.05
_EWMA_WEIGHT = 0.2
_ROUNDING = 1e-9  # a cost per item lower by this fraction only is float rounding, not a gain

_P = ParamSpec("_P")  # a submitted call's parameters and result, kept through _DaemonThreads.submit
_T = TypeVar("_T")


@dataclass(frozen=True)
class BatchPolicy:
    """How batches are formed; see the module docstring for the three modes."""

    mode: str = "cost"
    max_batch_size: int = 32
    max_queue_delay_ms: float = 10.0
    slo_p99_ms: float | None = None

    def __post_init__(self) -> None:
        if self.mode not in POLICIES:
            raise InputError(f"unknown batching policy {self.mode!r}", f"use one of: {', '.join(POLICIES)}")
        if self.max_batch_size < 1:
            raise InputError(f"max batch size {self.max_batch_size} must be at least 1", "e.g. --max-batch-size 32")
        if not self.max_queue_delay_ms >= 0:
            raise InputError(
                f"max queue delay {self.max_queue_delay_ms} ms must be >= 0", "e.g. --max-queue-delay-ms 10"
            )
        if self.slo_p99_ms is not None and not self.slo_p99_ms > 0:
            raise InputError(f"SLO p99 {self.slo_p99_ms} ms must be positive", "e.g. --slo-p99-ms 100")


@dataclass(frozen=True)
class BatchRecord:
    """One model call as it happened: what the metrics and the ledger record.

    ``compute_s`` includes the one-by-one re-runs of a batch that failed; ``failed`` counts the
    items that failed even alone.
    """

    size: int
    padded_length: int
    real_tokens: int
    queue_wait_s: list[float]
    compute_s: float
    failed: int


@dataclass
class _Request:
    future: asyncio.Future[list[Any]]
    outputs: list[Any]
    remaining: int


@dataclass
class _Entry:
    """One queued item: its request, its place in that request, its length, when it arrived."""

    request: _Request
    index: int
    item: Any
    length: int
    arrived_s: float = field(default_factory=time.monotonic)


@dataclass(eq=False)
class _Running:
    """A batch in the thread pool and when the cost model expects it to end."""

    until_s: float
    batch: list[_Entry]


class _DaemonThreads(Executor):
    """A fixed pool of daemon threads for the model calls, so a hung call cannot keep the process alive.

    ``ThreadPoolExecutor`` joins its threads at interpreter exit: a model stuck in a call (a deadlock, a
    50 s sleep) then held a stopped server's process until the call returned, past the drain timeout
    and past any further signal. Once the drain has given up on a call, nothing waits for it any more.
    """

    def __init__(self, workers: int, name: str) -> None:
        self._calls: queue.SimpleQueue[tuple[Future[Any], Callable[[], Any]] | None] = queue.SimpleQueue()
        self._workers, self._name = workers, name
        self._threads: list[threading.Thread] = []

    def submit(self, fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs) -> Future[_T]:
        if not self._threads:  # started at the first call: a batcher that never computes leaves no thread behind
            self._threads = [
                threading.Thread(target=self._work, name=f"{self._name}-{n}", daemon=True) for n in range(self._workers)
            ]
            for thread in self._threads:
                thread.start()
        future: Future[_T] = Future()
        self._calls.put((future, lambda: fn(*args, **kwargs)))
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Each thread stops after the call it is in (``cancel_futures`` is moot: only the batcher submits)."""
        for _ in self._threads:
            self._calls.put(None)
        if wait:
            for thread in self._threads:
                thread.join()

    def _work(self) -> None:
        while (call := self._calls.get()) is not None:
            future, function = call
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = function()
            except BaseException as error:  # handed to the awaiting coroutine, as ThreadPoolExecutor does
                future.set_exception(error)
            else:
                future.set_result(result)


class Batcher:
    """Feeds a model runner batches formed by ``policy`` from a queue of at most ``queue_limit`` items.

    ``timeout_s`` bounds a request from submission to answer, and the drain at shutdown; ``workers``
    model calls may run at once (one per daemon thread); ``on_batch`` is called on the event loop after
    every model call.
    """

    def __init__(
        self,
        runner: ModelRunner,
        policy: BatchPolicy,
        queue_limit: int = 256,
        timeout_s: float = 30.0,
        workers: int = 1,
        on_batch: Callable[[BatchRecord], None] | None = None,
    ) -> None:
        if queue_limit < 1:
            raise InputError(f"queue limit {queue_limit} must be at least 1", "e.g. --queue-limit 256")
        if not timeout_s > 0:
            raise InputError(f"timeout {timeout_s} s must be positive", "e.g. --timeout 30s")
        if workers < 1:
            raise InputError(f"workers {workers} must be at least 1", "e.g. --workers 1")
        self.runner = runner
        self.policy = policy
        self.queue_limit = queue_limit
        self.timeout_s = timeout_s
        self.workers = workers
        self.on_batch = on_batch
        self.cost_model = BatchCostModel()
        self._queue: deque[_Entry] = deque()
        self._changed = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._executor: _DaemonThreads | None = None
        self._accepting = True
        self._abandoned = False  # abandon(): the drain stops waiting for the work in progress
        self._running: list[_Running] = []  # batches in the thread pool now
        self._item_s: float | None = None  # EWMA of compute seconds per item, for waits and Retry-After
        self._lone_with_company = 0  # cost-policy batches of one item sent while others waited, in a row

    # -- public ---------------------------------------------------------------------------------

    @property
    def queue_depth(self) -> int:
        """Items waiting for a batch (not those being computed)."""
        return len(self._queue)

    @property
    def accepting(self) -> bool:
        return self._accepting

    async def start(self) -> None:
        """Start the worker coroutines on the running loop; a second call does nothing."""
        if self._tasks:
            return
        self._executor = _DaemonThreads(self.workers, "computewise-batch")
        self._tasks = [asyncio.create_task(self._worker(), name=f"batch-worker-{n}") for n in range(self.workers)]

    async def submit(self, items: list[Any]) -> list[Any]:
        """Outputs for ``items`` (validated already), in order, once every one of them has been computed.

        Raises ``QueueFull`` (not accepted; nothing was queued), ``RequestTimeout`` or ``ItemFailed``.
        """
        if not items:
            return []
        if not self._accepting:
            raise QueueFull("the server is shutting down and accepts no new requests", _UNKNOWN_RETRY_AFTER_S)
        await self.start()
        lengths = [self.runner.length(item) for item in items]
        self._admit(lengths)
        request = _Request(asyncio.get_running_loop().create_future(), [None] * len(items), len(items))
        entries = [
            _Entry(request, index, item, length)
            for index, (item, length) in enumerate(zip(items, lengths, strict=True))
        ]
        self._queue.extend(entries)
        self._changed.set()
        try:
            return await asyncio.wait_for(asyncio.shield(request.future), self.timeout_s)
        except TimeoutError:
            raise RequestTimeout(f"no answer within {self.timeout_s:g} s (queue depth {self.queue_depth})") from None
        finally:
            self._drop(request)  # timed out or cancelled (client gone): its queued items are not computed

    def abandon(self) -> None:
        """Stop waiting for the work in progress now (a second SIGTERM or Ctrl-C): accept nothing more, fail
        every queued or running request with ``RequestTimeout`` (so its client gets a 504 and its
        connection closes), and make ``drain`` return without waiting. Call it on the event loop's thread."""
        self._abandoned = True
        self._accepting = False
        self._fail_unfinished("the server was stopped by a second signal before this request finished")
        self._changed.set()

    async def drain(self, timeout_s: float | None = None) -> None:
        """Stop accepting (``submit`` raises ``QueueFull``), finish queued and running work, stop the workers.

        Requests still queued or running after ``timeout_s`` (the batcher's request timeout unless given),
        or once ``abandon`` is called, fail with ``RequestTimeout``; a model call still running then is
        left to its daemon thread, which does not hold the process at exit.
        """
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        self._accepting = False
        self._changed.set()
        deadline_s = time.monotonic() + timeout_s
        while (self._queue or self._running) and self._tasks and time.monotonic() < deadline_s:
            if self._abandoned:
                break
            await asyncio.sleep(0.005)
        self._fail_unfinished(f"the server shut down before this request finished (drain timeout {timeout_s:g} s)")
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._executor is not None:
            self._executor.shutdown(wait=False)

    def _fail_unfinished(self, reason: str) -> None:
        """Fail every request still queued or running with ``RequestTimeout(reason)``; empty the queue."""
        unfinished = [*self._queue, *(entry for running in self._running for entry in running.batch)]
        for entry in unfinished:
            if not entry.request.future.done():
                entry.request.future.set_exception(RequestTimeout(reason))
        self._queue.clear()

    # -- admission ------------------------------------------------------------------------------

    def _admit(self, lengths: list[int]) -> None:
        depth = len(self._queue)
        if depth and depth + len(lengths) > self.queue_limit:
            raise QueueFull(
                f"the queue is full ({depth} of {self.queue_limit} items waiting)", self._retry_after_s(depth)
            )
        slo_ms = self.policy.slo_p99_ms
        if slo_ms is None or self._item_s is None:
            return
        if not depth and len(self._running) < self.workers:
            # A free worker starts it now: refusing would answer no one sooner, and only answered
            # requests teach the cost model that compute is faster than its first batches showed.
            return
        wait_s = self._predicted_wait_s(depth)
        compute_s = self.cost_model.predict(len(lengths), max(lengths))
        if wait_s + compute_s > slo_ms / 1000:
            raise QueueFull(
                f"the request cannot be answered within the {slo_ms:g} ms SLO "
                f"(predicted wait {wait_s * 1000:.0f} ms + compute {compute_s * 1000:.0f} ms)",
                max(_MIN_RETRY_AFTER_S, wait_s),
            )

    def _predicted_wait_s(self, depth: int) -> float:
        """Queue ahead at the recent compute per item, shared by the workers, plus what is running now."""
        per_item_s = self._item_s or 0.0
        now_s = time.monotonic()
        running_s = min((running.until_s - now_s for running in self._running), default=0.0)
        return max(0.0, running_s) + depth * per_item_s / self.workers

    def _retry_after_s(self, depth: int) -> float:
        if self._item_s is None:
            return _UNKNOWN_RETRY_AFTER_S
        return max(_MIN_RETRY_AFTER_S, self._predicted_wait_s(depth))

    def _drop(self, request: _Request) -> None:
        if not request.future.done():
            request.future.cancel()
        if any(entry.request is request for entry in self._queue):
            self._queue = deque(entry for entry in self._queue if entry.request is not request)

    # -- forming batches ------------------------------------------------------------------------

    async def _worker(self) -> None:
        while True:
            batch = await self._next_batch()
            await self._execute(batch)

    async def _next_batch(self) -> list[_Entry]:
        """Wait until the policy says a batch is due, then take it off the queue."""
        while True:
            self._discard_finished()
            if self._queue:
                wait_s = self._wait_s()
                if wait_s <= 0:
                    return self._take()
            else:
                wait_s = math.inf
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), None if math.isinf(wait_s) else wait_s)

    def _discard_finished(self) -> None:
        # Items of a request that already failed need no compute; a timed-out one was dropped by submit.
        while self._queue and self._queue[0].request.future.done():
            self._queue.popleft()

    def _wait_s(self) -> float:
        """How much longer to wait before forming a batch; <= 0 means now."""
        policy = self.policy
        if policy.mode != "greedy" or not self._accepting or len(self._queue) >= policy.max_batch_size:
            return 0.0
        delay_s = policy.max_queue_delay_ms / 1000
        if policy.slo_p99_ms is not None:
            full_s = self.cost_model.predict(policy.max_batch_size, self._queue[0].length)
            delay_s = min(delay_s, max(0.0, policy.slo_p99_ms / 1000 - full_s))
        return self._queue[0].arrived_s + delay_s - time.monotonic()

    def _take(self) -> list[_Entry]:
        policy = self.policy
        if policy.mode == "none":
            chosen = [self._queue[0]]
        elif policy.mode == "greedy":
            chosen = [entry for entry in self._queue if not entry.request.future.done()][: policy.max_batch_size]
        else:
            chosen = self._cost_batch()
        taken = {id(entry) for entry in chosen}
        self._queue = deque(entry for entry in self._queue if id(entry) not in taken)
        return chosen

    def _cost_batch(self) -> list[_Entry]:
        """The oldest item plus similar-length items, each only where the model predicts it pays.

        An item joins when the batch's predicted cost per item falls *and* the predicted extra cost
        of adding it is below what it would cost alone. The first test alone is not enough: a long
        oldest item makes the average high, so a short item padded to its length would lower the
        average while costing more than its own call would; the second keeps every batch cheaper
        than the same items one at a time. An item that does not pay is skipped; a shorter one
        further down the list may still pay, as it adds no padding.
        """
        oldest = self._queue[0]
        others = sorted(
            (entry for entry in list(self._queue)[1:] if not entry.request.future.done()),
            key=lambda entry: (abs(entry.length - oldest.length), entry.arrived_s),
        )
        model = self.cost_model
        if not model.ready or self._lone_with_company >= _REEXPLORE_AFTER:
            # Not ready: each exploration size in turn. Ready but sending items alone: a larger one.
            sizes = _EXPLORE_SIZES if not model.ready else _EXPLORE_SIZES[1:]
            self._lone_with_company = 0
            size = min(self.policy.max_batch_size, sizes[model.seen % len(sizes)])
            return [oldest, *others[: size - 1]]
        budget_s = math.inf if self.policy.slo_p99_ms is None else self.policy.slo_p99_ms / 1000 * _SLO_BATCH_SHARE
        chosen = [oldest]
        padded = oldest.length
        batch_s = model.predict(1, padded)
        for entry in others:
            if len(chosen) >= self.policy.max_batch_size:
                break
            size, length = len(chosen) + 1, max(padded, entry.length)
            grown_s = model.predict(size, length)
            cheaper_per_item = grown_s / size < batch_s / (size - 1) * (1 - _ROUNDING)
            cheaper_than_alone = grown_s - batch_s < model.predict(1, entry.length) * (1 - _ROUNDING)
            if cheaper_per_item and cheaper_than_alone and grown_s <= budget_s:
                chosen.append(entry)
                padded, batch_s = length, grown_s
        self._lone_with_company = self._lone_with_company + 1 if len(chosen) == 1 and others else 0
        return chosen

    # -- running batches ------------------------------------------------------------------------

    def _call(self, items: list[Any]) -> tuple[list[Any], float]:
        """One model call in a worker thread: outputs and seconds, checked for one output per item."""
        start_s = time.perf_counter()
        outputs = self.runner.run(items)
        seconds = time.perf_counter() - start_s
        if len(outputs) != len(items):
            raise ValueError(f"the model returned {len(outputs)} outputs for {len(items)} inputs")
        return outputs, seconds

    async def _execute(self, batch: list[_Entry]) -> None:
        loop = asyncio.get_running_loop()
        started_s = time.monotonic()
        clock_s = time.perf_counter()
        padded = max(entry.length for entry in batch)
        running = _Running(started_s + self.cost_model.predict(len(batch), padded), batch)
        self._running.append(running)
        failed = 0
        try:
            try:
                outputs, compute_s = await loop.run_in_executor(self._executor, self._call, [e.item for e in batch])
            except Exception:
                outputs, failed = await self._one_by_one(batch)
                compute_s = time.perf_counter() - clock_s
            else:
                self._learn(len(batch), padded, compute_s)
        finally:
            self._running.remove(running)
        for entry, output in zip(batch, outputs, strict=True):
            if not isinstance(output, _Failure):
                self._resolve(entry, output)
        record = BatchRecord(
            size=len(batch),
            padded_length=padded,
            real_tokens=sum(entry.length for entry in batch),
            queue_wait_s=[started_s - entry.arrived_s for entry in batch],
            compute_s=compute_s,
            failed=failed,
        )
        self._changed.set()
        if self.on_batch is not None:
            try:
                self.on_batch(record)
            except Exception:  # a broken metrics hook must not stop the serving
                _LOG.exception("on_batch callback failed")

    def _learn(self, size: int, padded: int, compute_s: float) -> None:
        self.cost_model.observe(size, padded, compute_s)
        per_item_s = compute_s / size
        if self._item_s is None:
            self._item_s = per_item_s
        else:
            self._item_s += _EWMA_WEIGHT * (per_item_s - self._item_s)

    async def _one_by_one(self, batch: list[_Entry]) -> tuple[list[Any], int]:
        """Re-run a failed batch item by item; an item that fails alone fails its request."""
        loop = asyncio.get_running_loop()
        outputs: list[Any] = []
        failed = 0
        for entry in batch:
            if entry.request.future.done():
                outputs.append(_Failure())
                continue
            try:
                (output,), _seconds = await loop.run_in_executor(self._executor, self._call, [entry.item])
            except Exception as error:
                failed += 1
                outputs.append(_Failure())
                if not entry.request.future.done():  # it may have timed out while this item ran
                    message = f"the model failed on input {entry.index}: {type(error).__name__}: {error}"
                    entry.request.future.set_exception(ItemFailed(message, entry.index))
            else:
                outputs.append(output)
        return outputs, failed

    def _resolve(self, entry: _Entry, output: Any) -> None:
        request = entry.request
        if request.future.done():
            return
        request.outputs[entry.index] = output
        request.remaining -= 1
        if request.remaining == 0:
            request.future.set_result(request.outputs)


class _Failure:
    """Marks an item with no output: it failed, or its request had already ended."""
