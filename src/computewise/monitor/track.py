"""``track()``: where the time of a training loop goes, step by step, and what it achieves (MFU).

Wrap the data loader and every batch becomes a step: the time spent inside ``next()`` is data
wait, the time from getting a batch to asking for the next one is compute.

    with computewise.track(tags={"team": "nlp"}, flops_per_step=6 * n_params * tokens_per_step) as t:
        for batch in t.loader(train_loader):
            train_step(batch)
    print(t.summary())

Choices, and why:

- **Overhead under 1 % of a step.** The loop only takes timestamps and appends a tuple; turning
  them into rows, statistics and ledger writes happens in batches, every ``flush_every_s``, on a
  background thread by default (``benchmarks/track_overhead.py`` measures both ways).
- **CUDA is timed by the GPU** (``monitor.clocks``): CUDA events where the caller's process has CUDA in
  use, read at flush time, never by synchronizing in the loop. Data wait is then the GPU's idle gap
  between the previous step's end and this step's start: loading that the host hides behind queued
  kernels costs nothing and is not counted. Elsewhere, ``time.perf_counter``. torch is never imported
  here, only found in ``sys.modules``: ``track()`` works in a plain Python loop.
- **FLOPs** per step are given, or traced from the model on the meta device
  (``computewise.models.trace``) per sample and scaled by the samples of each step. A training
  step is taken as 3 x the forward pass (backward ~ 2 x forward), the convention MFU is defined
  with (PaLM, Chowdhery et al. 2022, appendix B); recomputation is not counted.
- **MFU** = achieved FLOP/s over the steps' time / the dense peak of the actual accelerator at
  the training precision, from the catalog. One device: in data-parallel training every process
  tracks its own. A CPU has no detectable peak; name it with ``accelerator=`` to get MFU on CPU.

This module owns the ``Tracker`` (the run, the loop's hooks, the flusher); its parts live beside it:
``clocks`` (host and CUDA-event clocks), ``batches`` (samples and tokens of a batch), ``step_summary``
(totals, the peak, the summary) and ``diagnosis.data_wait_verdict`` (the verdict on data wait). The
names they export stay importable from here.
"""

from __future__ import annotations

import atexit
import contextvars
import functools
import os
import sys
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sized
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Generic, Literal, ParamSpec, TypeVar

from computewise.catalog import load_catalog
from computewise.errors import InputError
from computewise.ledger import Ledger, NewRun, PriceSnapshot, StepRow
from computewise.monitor.batches import Count, batch_samples, count_batch
from computewise.monitor.clocks import ClockChoice, CudaEventClock, HostClock, StepClock, cuda_in_use, pick_clock
from computewise.monitor.diagnosis import INPUT_BOUND_FRACTION
from computewise.monitor.pricing import DetectedHardware, unpriced
from computewise.monitor.recorded import RUN_ID_ENV, RecordedRun, new_run
from computewise.monitor.step_summary import Peak, Step, StepTotals, device_peak, summarize_steps
from computewise.specs.hardware import DTYPES, Dtype

__all__ = [
    "INPUT_BOUND_FRACTION",
    "RUN_ID_ENV",
    "ClockChoice",
    "Count",
    "CudaEventClock",
    "HostClock",
    "StepClock",
    "TrackedLoader",
    "Tracker",
    "batch_samples",
    "count_batch",
    "current_tracker",
    "track",
]

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")

# The MFU convention: one training step = forward + backward ~ 3 x forward (PaLM, Chowdhery et al. 2022).
_TRAIN_FLOPS_PER_FORWARD = 3.0
# Flush early when this many steps are buffered (very short steps), whatever the flush period.
_MAX_BUFFERED_STEPS = 4096

_CURRENT: contextvars.ContextVar[Tracker | None] = contextvars.ContextVar("computewise_tracker", default=None)


def current_tracker() -> Tracker | None:
    """The tracker of the innermost running ``track()``: how a ``@track()``-decorated function reaches it."""
    return _CURRENT.get()


# -- options ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Options:
    tags: Mapping[str, str]
    db: str | None
    flops_per_step: float | None
    model: Any
    example_inputs: Any
    accelerator: str | None
    precision: Dtype
    price: PriceSnapshot | None
    record: bool
    flush_every_s: float
    flush_in_background: bool
    clock: ClockChoice | StepClock
    first_step: int


# -- the tracker --------------------------------------------------------------------------------


class Tracker:
    """One tracked run: a context manager, a decorator, and the step recorder of a training loop.

    Made by ``track()``. ``with track() as t:`` records one run; ``@track()`` records one run per
    call of the decorated function (reach the tracker inside it with ``current_tracker()``).
    Frameworks without a loader to wrap call ``start()``, ``begin_wait()``, ``begin_step()``,
    ``end_step()`` and ``finish()`` themselves (see ``computewise.monitor.callbacks``).
    """

    def __init__(self, options: _Options) -> None:
        self._options = options
        self._state: Literal["new", "running", "finished"] = "new"
        self._lock = threading.RLock()  # drains come from the loop, the flusher and summary()
        self._pending: deque[Step] = deque()
        self._totals = StepTotals()
        self._clock: StepClock | None = options.clock if not isinstance(options.clock, str) else None
        self._open: tuple[Any, Any, int, int | None, int | None, float | None] | None = None
        self._wait_start: Any = None
        self._next_index = options.first_step
        self._started_perf = self._ended_perf = self._flushed_perf = 0.0
        self._started_s = 0.0
        self._ledger: Ledger | None = None
        self._record: RecordedRun | None = None  # the run this tracker started (not an enclosing one)
        self._run_id: int | None = None
        self._attached = False  # recording into the run of an enclosing `computewise run`
        self._flops_per_sample: float | None = None
        self._flops_note: str | None = "flops_per_step given" if options.flops_per_step is not None else None
        self._peak: Peak | None = None
        self._flusher: threading.Thread | None = None
        self._wake = threading.Event()
        self._stopping = False
        self._unrecorded_steps = 0
        self._write_warned = False
        self._context_token: contextvars.Token[Tracker | None] | None = None
        self._final: dict[str, Any] | None = None

    @property
    def run_id(self) -> int | None:
        """The ledger's id of this run (None before start or with ``record=False``)."""
        return self._run_id

    def fresh(self) -> Tracker:
        """A new, unstarted tracker with the same options: one run each."""
        return Tracker(self._options)

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> Tracker:
        """Open the ledger, start the run and the flusher. Errors here (bad ledger URL, unknown
        accelerator, a model that cannot be traced) are raised before training begins."""
        if self._state != "new":
            raise InputError(
                "this tracker already recorded a run", "call track() again, or tracker.fresh(), for another run"
            )
        options = self._options
        if options.accelerator is not None:
            self._peak = Peak(load_catalog().accelerator(options.accelerator), "given")
        if options.model is not None:
            self._flops_per_sample, self._flops_note = _traced_flops_per_sample(options.model, options.example_inputs)
        if self._clock is None and (options.clock == "cuda" or (options.clock == "auto" and cuda_in_use())):
            self._clock = self._pick_clock()
        if options.record:
            self._ledger = Ledger.open(options.db)
        self._started_s = time.time()
        self._started_perf = self._flushed_perf = time.perf_counter()
        parent = _parent_run_id() if options.db is None else None
        if self._ledger is not None and parent is not None:
            self._run_id, self._attached = parent, True
        elif self._ledger is not None:
            try:
                self._record = RecordedRun(self._ledger, self._new_run())
                self._run_id = self._record.start()
            except BaseException:
                self._ledger.close()
                raise
        self._state = "running"
        self._context_token = _CURRENT.set(self)
        atexit.register(self._at_exit)
        if options.flush_in_background:
            self._flusher = threading.Thread(target=self._flush_loop, name="computewise-track-flush", daemon=True)
            self._flusher.start()
        return self

    def finish(self, error: BaseException | None = None) -> dict[str, Any]:
        """Close the open step, write every step, finish the run and return the summary.

        The run ends by ``error`` as every run does (``computewise.monitor.recorded``): none succeeded,
        Ctrl-C or ``SystemExit(75)`` interrupted, another exception failed. A ledger that fails now
        only warns: the training result matters more.
        Calling it again returns the same summary.
        """
        if self._state != "running":
            return dict(self._final) if self._final is not None else self.summary()
        self.end_step()
        self._ended_perf = time.perf_counter()
        self._stopping = True
        self._wake.set()
        if self._flusher is not None:
            self._flusher.join()
        try:
            self._drain(wait=True)
        except Exception as failure:  # a failed device (CUDA error) cannot be read; finish the run anyway
            warnings.warn(f"computewise.track: could not read the last steps: {failure}", stacklevel=2)
        with self._lock:
            summary = self._summarize(self._ended_perf - self._started_perf)
        self._final = summary
        self._state = "finished"
        atexit.unregister(self._at_exit)
        self._reset_context()
        if self._ledger is not None and self._attached:
            self._ledger.close()  # the enclosing `computewise run` finishes and prices its run
        elif self._ledger is not None and self._record is not None:
            try:
                if self._options.price is None:
                    self._price_by_hardware(self._record)
                self._record.declare(summary=summary)
                self._record.finish(error)
            except Exception as failure:  # measurement degrades; the user's training result stands
                warnings.warn(f"computewise.track: could not finish run {self._run_id}: {failure}", stacklevel=2)
            finally:
                self._ledger.close()
        return dict(summary)

    def __enter__(self) -> Tracker:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.finish(exc)

    def __call__(self, func: Callable[P, R]) -> Callable[P, R]:
        """Decorate a training function: every call is one tracked run."""

        @functools.wraps(func)
        def tracked(*args: P.args, **kwargs: P.kwargs) -> R:
            with self.fresh():
                return func(*args, **kwargs)

        return tracked

    # -- steps ----------------------------------------------------------------------------------

    def loader(self, iterable: Iterable[T], *, samples: Count = None, tokens: Count = None) -> TrackedLoader[T]:
        """Wrap a data loader (any iterable): one step per batch, data wait timed inside ``next()``.

        ``samples`` and ``tokens`` count each batch: an int, a function of the batch, or None
        (samples then follow ``batch_samples``; tokens stay unknown).
        """
        return TrackedLoader(self, iterable, samples, tokens)

    def step(self, *, samples: int | None = None, tokens: int | None = None, flops: float | None = None) -> _StepTimer:
        """Time one step by hand: ``with t.step(samples=32): ...``.

        The step's data wait is the time since the previous step ended (so fetch the batch
        between steps, outside the ``with``); the first step has none. ``flops`` overrides the
        tracker's FLOPs for this step. Use this or ``loader()`` in one loop, not both: each
        counts a step.
        """
        return _StepTimer(self, samples, tokens, flops)

    def begin_wait(self) -> None:
        """Start the data-wait clock now: what passes until ``begin_step`` is the next step's data wait.

        ``end_step`` does this implicitly; call it to leave out time that is neither (evaluation,
        checkpoints) or to count the first step's wait.
        """
        if self._state == "running":
            self._wait_start = self._mark()

    def begin_step(self, *, samples: int | None = None, tokens: int | None = None, flops: float | None = None) -> None:
        """Compute starts now; a step still open is ended first. ``flops`` overrides the tracker's.

        Ignored once the run has finished; an error before it started (nothing would be recorded).
        """
        if self._state != "running":
            if self._state == "new":
                raise InputError(
                    "the tracker has not started, so this step would not be recorded",
                    "enter it first: `with track(...) as t:` (or call t.start())",
                )
            return
        if self._open is not None:
            self.end_step()
        self._open = (self._wait_start, self._mark(), self._next_index, samples, tokens, flops)
        self._next_index += 1

    def end_step(self, *, samples: int | None = None, tokens: int | None = None) -> bool:
        """Compute of the open step ends now; False when no step was open.

        Counts known only at the end (a framework's token counter) may be given here.
        """
        opened = self._open
        if opened is None:
            return False
        end = self._mark()
        now = time.perf_counter()
        self._open = None
        wait, start, index, begun_samples, begun_tokens, flops = opened
        samples = begun_samples if samples is None else samples
        if flops is None:
            flops = self._options.flops_per_step
            if flops is None and self._flops_per_sample is not None and samples is not None:
                flops = self._flops_per_sample * samples
        self._pending.append(
            Step(
                index,
                self._started_s + (now - self._started_perf),
                wait,
                start,
                end,
                samples,
                begun_tokens if tokens is None else tokens,
                flops,
            )
        )
        self._wait_start = end
        if self._flusher is None:
            if now - self._flushed_perf >= self._options.flush_every_s or len(self._pending) >= _MAX_BUFFERED_STEPS:
                self._drain(wait=False)
        elif len(self._pending) >= _MAX_BUFFERED_STEPS:
            self._wake.set()
        return True

    # -- results --------------------------------------------------------------------------------

    def flush(self) -> None:
        """Write every finished step now: call it at a checkpoint, so that a hard kill later cannot lose the
        steps the checkpoint holds, and the ledger knows where a resumed attempt picks up."""
        if self._state == "running":
            self._drain(wait=True)

    def summary(self) -> dict[str, Any]:
        """Steps, time split, throughput, MFU (with the peak used) and a one-line diagnosis, JSON-ready.

        While running this reads every pending step first, which waits for the GPU to catch up.
        """
        if self._final is not None:
            return dict(self._final)
        with self._lock:
            if self._state != "running":
                return self._summarize(0.0)
            self._drain(wait=True)
            return self._summarize(time.perf_counter() - self._started_perf)

    # -- internals ------------------------------------------------------------------------------

    def _mark(self) -> Any:
        if self._clock is None:
            self._clock = self._pick_clock()
        return self._clock.mark()

    def _pick_clock(self) -> StepClock:
        choice = self._options.clock
        return pick_clock(choice) if isinstance(choice, str) else choice

    def _new_run(self) -> NewRun:
        options = self._options
        peak = self._resolve_peak()
        argv = tuple(getattr(sys, "orig_argv", sys.argv))
        return new_run(
            "track",
            argv or ("python",),
            hardware=self._hardware(),
            price=options.price or unpriced(load_catalog()),
            tags=options.tags,
            interval_s=options.flush_every_s,
            argv=argv,
            accelerator=peak.accelerator.slug if peak.accelerator is not None else None,
            started_at_s=self._started_s,
        )

    def _hardware(self) -> DetectedHardware:
        """The device the steps are timed on (one GPU, or none: the host) and this machine's logical CPUs."""
        clock = self._clock
        device = clock.device_name if clock is not None else None
        memory = clock.memory_total_bytes if clock is not None and device is not None else None
        return DetectedHardware(
            gpu_count=1 if device else 0,
            gpu_name=device,
            gpu_memory_total_bytes=float(memory) if memory else None,
            logical_cpus=os.cpu_count() or 1,
        )

    def _flush_loop(self) -> None:
        while not self._stopping:
            self._wake.wait(self._options.flush_every_s)
            self._wake.clear()
            if not self._stopping:
                self._drain(wait=False)

    def _drain(self, *, wait: bool) -> None:
        """Read every step the clock can give (all of them when ``wait``), add them up and write them."""
        with self._lock:
            clock = self._clock
            rows: list[StepRow] = []
            while clock is not None and self._pending:
                step = self._pending[0]
                if not clock.done(step.end):
                    if not wait:
                        break
                    clock.wait(step.end)
                self._pending.popleft()
                data_wait_s = max(0.0, clock.seconds(step.wait, step.start)) if step.wait is not None else 0.0
                compute_s = max(0.0, clock.seconds(step.start, step.end))
                self._totals.add(data_wait_s, compute_s, step)
                if self._run_id is not None:
                    rows.append(
                        StepRow(
                            self._run_id,
                            step.number,
                            step.t_s,
                            data_wait_s,
                            compute_s,
                            step.samples,
                            step.tokens,
                            step.flops,
                        )
                    )
            self._flushed_perf = time.perf_counter()
            if self._ledger is not None and self._run_id is not None:
                self._write(rows)

    def _write(self, rows: list[StepRow]) -> None:
        if self._ledger is None or self._run_id is None:
            return
        try:
            self._ledger.add_steps(rows)
            self._ledger.heartbeat(self._run_id, time.time())
        except Exception as failure:  # a ledger hiccup must not stop training
            self._unrecorded_steps += len(rows)
            if not self._write_warned:
                self._write_warned = True
                warnings.warn(
                    f"computewise.track: could not write steps to the ledger ({failure}); training goes on "
                    "and the summary counts the unrecorded steps",
                    stacklevel=2,
                )

    def _resolve_peak(self) -> Peak:
        """The peak given, else the device the clock times, remembered once found."""
        if self._peak is not None:
            return self._peak
        peak = device_peak(self._clock)
        if peak.accelerator is not None:
            self._peak = peak
        return peak

    def _summarize(self, wall_s: float) -> dict[str, Any]:
        clock = self._clock.name if self._clock is not None else None
        return summarize_steps(
            self._totals,
            wall_s,
            self._resolve_peak(),
            self._options.precision,
            self._flops_note,
            clock,
            self._unrecorded_steps,
        )

    def _price_by_hardware(self, record: RecordedRun) -> None:
        """Price the run like ``computewise run`` does, now that the device the steps ran on is known."""
        named = self._peak.accelerator if self._peak is not None else None  # given, or matched from the device
        record.set_hardware(load_catalog(), self._hardware(), named.slug if named is not None else None)

    def _at_exit(self) -> None:
        # The interpreter is leaving with the run open: a framework stopped without its end hook.
        if self._state == "running":
            self.finish(RuntimeError("the process exited before the tracked training finished"))

    def _reset_context(self) -> None:
        token, self._context_token = self._context_token, None
        if token is None:
            return
        try:
            _CURRENT.reset(token)
        except (ValueError, RuntimeError):  # finished from another context (a framework's hook)
            if _CURRENT.get() is self:
                _CURRENT.set(None)


class _StepTimer:
    """``with t.step(...)``: begin_step on entry, end_step on exit (exceptions propagate)."""

    def __init__(self, tracker: Tracker, samples: int | None, tokens: int | None, flops: float | None) -> None:
        self._tracker = tracker
        self._counts = (samples, tokens, flops)

    def __enter__(self) -> None:
        samples, tokens, flops = self._counts
        self._tracker.begin_step(samples=samples, tokens=tokens, flops=flops)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._tracker.end_step()


class TrackedLoader(Generic[T]):
    """An iterable over the wrapped loader's batches that records one step per batch.

    Iterate it as often as the loader allows (one pass per epoch); ``len()`` is the loader's.
    Breaking out of the loop leaves the last step open until the next batch, the next
    ``begin_step`` or the tracker's end, which closes it.
    """

    def __init__(self, tracker: Tracker, iterable: Iterable[T], samples: Count, tokens: Count) -> None:
        self._tracker = tracker
        self._iterable = iterable
        self._samples = samples
        self._tokens = tokens

    def __iter__(self) -> Iterator[T]:
        tracker, samples, tokens = self._tracker, self._samples, self._tokens
        iterator = iter(self._iterable)
        while True:
            # Asking for the next batch ends the previous step's compute and starts its data wait.
            if not tracker.end_step():
                tracker.begin_wait()
            try:
                batch = next(iterator)
            except StopIteration:
                return
            tracker.begin_step(
                samples=count_batch(samples, batch, infer_samples=True),
                tokens=count_batch(tokens, batch, infer_samples=False),
            )
            yield batch

    def __len__(self) -> int:
        if not isinstance(self._iterable, Sized):
            raise TypeError(f"object of type {type(self._iterable).__name__!r} has no len()")
        return len(self._iterable)


def track(
    *,
    tags: Mapping[str, str] | None = None,
    db: str | None = None,
    flops_per_step: float | None = None,
    model: Any = None,
    example_inputs: Any = None,
    accelerator: str | None = None,
    precision: Dtype = "bf16",
    price: PriceSnapshot | None = None,
    record: bool = True,
    flush_every_s: float = 1.0,
    flush_in_background: bool = True,
    clock: ClockChoice | StepClock = "auto",
    first_step: int = 0,
) -> Tracker:
    """Track a training loop as one run of the ledger: ``with track(...) as t:`` or ``@track(...)``.

    ``flops_per_step`` (one optimizer step, forward and backward), or ``model`` with
    ``example_inputs`` (a batch the model accepts; its FLOPs are traced on the meta device, x 3
    for training, per sample) give MFU. ``accelerator`` names the catalog's device when it cannot
    be detected (any CPU); ``precision`` picks its peak. ``price`` is copied into the run; by
    default the run is priced when it finishes, from the device its steps ran on, as
    ``computewise run`` prices (the catalog's cheapest rate for that GPU, else per vCPU).
    Inside ``computewise run`` the steps go into that run (``$COMPUTEWISE_RUN_ID``) and ``tags`` and
    ``price`` are the run's. ``record=False`` keeps everything in memory.

    Steps are written every ``flush_every_s``, by a background thread that also keeps the run's
    heartbeat going through long evaluations (``flush_in_background=False`` flushes from the loop
    instead, when a step ends). ``clock`` 'auto' uses CUDA events when the process has CUDA in
    use, the host clock otherwise; or pass any ``StepClock``. ``first_step`` numbers the first step:
    a job resumed from a checkpoint passes the step it resumes at, so the steps of every attempt of one
    logical run (``$COMPUTEWISE_RUN_ID`` under ``computewise run --engine``) line up and redone steps show.
    """
    tags = dict(tags or {})
    for key, value in tags.items():
        if not isinstance(key, str) or not isinstance(value, str) or not key:
            raise InputError(f"tag {key!r}={value!r} is not a pair of strings", "pass tags={'team': 'nlp'}")
    if precision not in DTYPES:
        raise InputError(f"unknown precision {precision!r}", f"use one of: {', '.join(DTYPES)}")
    if not flush_every_s > 0:
        raise InputError(f"flush_every_s must be positive, not {flush_every_s!r}", "use e.g. flush_every_s=1.0")
    if flops_per_step is not None and not flops_per_step > 0:
        raise InputError(f"flops_per_step must be positive, not {flops_per_step!r}", "e.g. 6 * params * tokens")
    if model is not None and flops_per_step is not None:
        raise InputError("give flops_per_step or model, not both", "drop one: both say how much work a step does")
    if model is not None and example_inputs is None:
        raise InputError(
            "tracing the model's FLOPs needs example_inputs",
            "pass a batch the model accepts, e.g. example_inputs=torch.zeros(8, 512, dtype=torch.long)",
        )
    if isinstance(first_step, bool) or not isinstance(first_step, int) or first_step < 0:
        raise InputError(f"first_step must be a whole number >= 0, not {first_step!r}", "pass the step resumed at")
    if isinstance(clock, str) and clock not in ("auto", "host", "cuda"):
        raise InputError(f"unknown clock {clock!r}", "use 'auto', 'host' or 'cuda'")
    options = _Options(
        tags=tags,
        db=db,
        flops_per_step=flops_per_step,
        model=model,
        example_inputs=example_inputs,
        accelerator=accelerator,
        precision=precision,
        price=price,
        record=record,
        flush_every_s=float(flush_every_s),
        flush_in_background=flush_in_background,
        clock=clock,
        first_step=first_step,
    )
    return Tracker(options)


# -- helpers ------------------------------------------------------------------------------------


def _traced_flops_per_sample(model: Any, example_inputs: Any) -> tuple[float, str]:
    from computewise.models.trace import measure_module

    measured = measure_module(model, example_inputs)
    forward = measured.forward_flops_causal_aware / measured.batch_size
    note = (
        f"traced {measured.module_name}: {forward:.6g} forward FLOP per sample x {_TRAIN_FLOPS_PER_FORWARD:g} "
        "for forward and backward (backward ~ 2 x forward, the MFU convention of PaLM, Chowdhery et al. 2022)"
    )
    return forward * _TRAIN_FLOPS_PER_FORWARD, note


def _parent_run_id() -> int | None:
    text = os.environ.get(RUN_ID_ENV, "").strip()
    return int(text) if text.isdigit() else None
