"""The search: build every variant, grade it on held-aside inputs, time it, pick the fastest that fits.

Order of work: the FP32 baseline first (its outputs are the reference), then the variants that are
cheap to build and likely to win, then the slow ones (static calibration, pruning, compilation), so
that a ``--time-budget`` cut loses the least. Two variants are derived from the others' results:
selective precision (the fastest dynamic-INT8 variant that missed the budget, with its most
sensitive layers back in FP32) and structured pruning combined with the best INT8 setting.
A variant that fails to build or run is recorded with its reason and the search goes on; a user
metric that raises or returns NaN stops everything, since no variant can then be graded.

Honesty rules, one place each:

- *Only what serves is chosen.* A variant is eligible only when it has a file ``computewise
  serve`` loads (an ONNX graph or a TorchScript program); ``torch.compile`` is measured, not chosen.
- *Same batching.* Speed-ups compare a variant with the baseline in the same order (arrival with
  arrival, length-sorted with length-sorted); what sorting adds is a separate figure.
- *Stable timing.* Every runtime gets the same thread count; passes disturbed by other processes
  are set aside (``bench``); the baseline and the front-runner are timed again back to back at the
  end, each keeping its faster figure, so a busy moment during one of them cannot decide the
  choice. Quality never depends on timing, so ``meets_budget`` cannot flip under load. A speed-up
  above ``SUSPECT_RATIO`` is flagged: model changes alone rarely give that on the same hardware.
- *The time budget is a deadline.* It counts from ``started_at`` (the CLI passes its process's
  start) and covers loading the model (``loading``: a load still running at the deadline is an
  error, since nothing can be compared without it); a variant still building or measuring when it
  passes is interrupted and recorded as skipped, leaving a few seconds for the export. Only the
  FP32 baseline, the reference every figure needs, runs to its end.
"""

from __future__ import annotations

import contextlib
import fnmatch
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from computewise.errors import EvaluationError, InputError, VariantSkipped
from computewise.optimize import onnx_variants as ox
from computewise.optimize import torch_variants as tv
from computewise.optimize.bench import BatchSpeed, PeakMemory, measure_speed
from computewise.optimize.feeds import Feed, split_indices
from computewise.optimize.predictors import predict_all
from computewise.optimize.quality import INVARIANCE_COSINE, Metric, Score, agreement
from computewise.optimize.selective import build_selective
from computewise.optimize.source import ModelSource
from computewise.optimize.summary import (
    HardwareLine,
    MetricLine,
    ModelLine,
    OptimizeSummary,
    Speedup,
    VariantStatus,
    VariantSummary,
)
from computewise.optimize.workspace import Built, Doctor, DynamicInt8, Workspace, first_line
from computewise.system.cpu import usable_cpus
from computewise.system.hardware import Hardware, detect_hardware

__all__ = ["SUSPECT_RATIO", "Progress", "SearchOptions", "SearchResult", "VariantResult", "loading", "run_search"]

BASELINE = "baseline"
# A speed-up above this, from software alone on the same CPU, usually means the baseline was timed badly.
SUSPECT_RATIO = 50.0
# Kept back from the time budget for the export and the report after the search.
_EXPORT_RESERVE_S = 3.0
Builder = Callable[[Workspace], Built]
Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class SearchOptions:
    batch_sizes: tuple[int, ...] = (1, 32)
    target: str = "throughput"  # or "latency"
    time_budget_s: float = 900.0
    batch_invariant: bool = False
    only: tuple[str, ...] = ()  # glob patterns over variant names; the baseline always runs
    bench_items: int = 96
    calibration_fraction: float = 0.25
    threads: int | None = None
    started_at: float | None = None  # epoch seconds the time budget counts from; None: when the search starts

    def __post_init__(self) -> None:
        if self.target not in ("throughput", "latency"):
            raise InputError(f"unknown target {self.target!r}", "use --target throughput or --target latency")
        if not self.batch_sizes or min(self.batch_sizes) < 1:
            raise InputError("batch sizes must be positive integers", "e.g. --batch-sizes 1,32")
        if self.time_budget_s <= 0:
            raise InputError("the time budget must be positive", "e.g. --time-budget 10m")

    @property
    def largest_batch(self) -> int:
        return max(self.batch_sizes)

    def deadline(self) -> float:
        """Epoch seconds the work must end by: the budget from ``started_at``, less a few seconds for the export."""
        started = time.time() if self.started_at is None else self.started_at
        return started + self.time_budget_s - min(_EXPORT_RESERVE_S, 0.1 * self.time_budget_s)


@dataclass
class VariantResult:
    """One variant as measured; ``built`` is kept (without its session) so the winner can be exported."""

    name: str
    family: str
    status: VariantStatus
    reason: str | None = None
    recipe: list[str] = field(default_factory=list)
    quality: Score | None = None
    meets_budget: bool = False
    invariance: float | None = None
    speeds: list[BatchSpeed] = field(default_factory=list)
    peak_memory_bytes: int | None = None
    size_bytes: int | None = None
    load_time_s: float | None = None
    build_time_s: float | None = None
    built: Built | None = None

    @property
    def batch_invariant(self) -> bool | None:
        return None if self.invariance is None else self.invariance >= INVARIANCE_COSINE

    def speed_at(self, batch_size: int) -> BatchSpeed | None:
        return next((speed for speed in self.speeds if speed.batch_size == batch_size), None)

    @property
    def exportable(self) -> bool:
        return self.built is not None and self.built.exportable

    @property
    def kept_fp32(self) -> list[str] | None:
        """The layers selective precision left in FP32; None for every other variant."""
        return None if self.built is None else self.built.kept_fp32

    @property
    def export_blocker(self) -> str | None:
        return None if self.built is None else self.built.export_blocker

    def summary(self, speedup: Speedup | None) -> VariantSummary:
        """This variant's figures, with its ``speedup`` over the baseline (the search computes it)."""
        built = self.built
        return VariantSummary(
            name=self.name,
            family=self.family,
            status=self.status,
            reason=self.reason,
            recipe=tuple(self.recipe),
            quality=None if self.quality is None else self.quality.value,
            quality_worst=None if self.quality is None else self.quality.worst,
            meets_budget=self.meets_budget,
            batch_invariance=self.invariance,
            batch_invariant=self.batch_invariant,
            speeds=tuple(self.speeds),
            peak_memory_bytes=self.peak_memory_bytes,
            size_bytes=self.size_bytes,
            load_time_s=self.load_time_s,
            build_time_s=self.build_time_s,
            kept_fp32=None if self.kept_fp32 is None else tuple(self.kept_fp32),
            format=None if built is None else built.format,
            exportable=self.exportable,
            export_blocker=self.export_blocker,
            providers=() if built is None else tuple(built.providers),
            speedup=speedup,
        )


@dataclass
class SearchResult:
    source: ModelSource
    hardware: Hardware
    metric: Metric
    options: SearchOptions
    baseline_quality: float
    variants: list[VariantResult]
    chosen: VariantResult | None
    doctor: Doctor
    workspace: Workspace
    eval_examples: int
    calibration_examples: int
    notes: list[str] = field(default_factory=list)
    exported_to: Path | None = None  # where ``optimize.run.optimize`` wrote the chosen variant, if it did

    def summary(self) -> OptimizeSummary:
        """Everything ``--json`` and the manifest show, as plain data."""
        best_quality, best_speed = self.best_quality, self.best_speed
        return OptimizeSummary(
            model=ModelLine(self.source.description, self.source.kind, self.source.task),
            hardware=HardwareLine.of(self.hardware),
            metric=MetricLine(
                name=self.metric.name,
                baseline=self.baseline_quality,
                max_drop=str(self.metric.budget),
                allowed_drop=self.metric.budget.allowed(self.baseline_quality),
                item_floor=self.metric.item_floor,
                eval_examples=self.eval_examples,
                calibration_examples=self.calibration_examples,
            ),
            target=self.options.target,
            batch_sizes=self.options.batch_sizes,
            batch_invariant_required=self.options.batch_invariant,
            variants=tuple(v.summary(self.speedup(v)) for v in self.variants),
            chosen=None if self.chosen is None else self.chosen.name,
            best_quality=None if best_quality is None else best_quality.name,
            best_speed=None if best_speed is None else best_speed.name,
            doctor=self.doctor,
            notes=tuple(self.notes),
            warnings=tuple(self.warnings),
            time_budget_s=self.options.time_budget_s,
            exported_to=None if self.exported_to is None else str(self.exported_to),
        )

    def to_dict(self) -> dict[str, Any]:
        """``optimize --json``: the summary's JSON (``summary`` is the typed value)."""
        return self.summary().to_dict()

    def variant(self, name: str) -> VariantResult:
        return next(v for v in self.variants if v.name == name)

    def speed(self, variant: VariantResult) -> float | None:
        """What the search ranks by, higher is faster: best items/s at the largest batch, or calls/s (1000 / p50)
        at the smallest; None where it was not measured. The report ranks and plots the same figure."""
        if self.options.target == "latency":
            small = variant.speed_at(min(self.options.batch_sizes))
            return 1000.0 / small.p50_ms if small and small.p50_ms > 0 else None
        large = variant.speed_at(self.options.largest_batch)
        return float(large.best_items_per_s) if large else None

    def speed_key(self, variant: VariantResult) -> float:
        """``speed`` as a sort key: an unmeasured variant ranks below every measured one."""
        speed = self.speed(variant)
        return float("-inf") if speed is None else speed

    @property
    def best_speed(self) -> VariantResult | None:
        """The fastest exportable variant, inside the budget or not (what ``--force`` exports)."""
        measured = [v for v in self.variants if v.status == "ok" and v.speeds and v.name != BASELINE and v.exportable]
        return max(measured, key=self.speed_key, default=None)

    @property
    def best_quality(self) -> VariantResult | None:
        graded = [v for v in self.variants if v.status == "ok" and v.quality and v.name != BASELINE]
        return max(graded, key=lambda v: (v.quality.value if v.quality else 0.0, self.speed_key(v)), default=None)

    def speedup(self, variant: VariantResult) -> Speedup | None:
        """Against the baseline at the same batching (see ``Speedup``): throughput at the largest batch, in
        arrival order and (text only) both length-sorted, p50 latency at the smallest, and what length-sorting
        alone gives this variant. None for a variant never timed."""
        if not variant.speeds:
            return None
        base = self.variant(BASELINE)
        large, small = self.options.largest_batch, min(self.options.batch_sizes)
        base_large, mine_large = base.speed_at(large), variant.speed_at(large)
        base_small, mine_small = base.speed_at(small), variant.speed_at(small)
        throughput = mine_large.items_per_s / base_large.items_per_s if base_large and mine_large else None
        sorted_throughput = sorting = None
        if base_large and mine_large and base_large.sorted_items_per_s and mine_large.sorted_items_per_s:
            sorted_throughput = mine_large.sorted_items_per_s / base_large.sorted_items_per_s
            sorting = mine_large.sorted_items_per_s / mine_large.items_per_s
        latency = base_small.p50_ms / mine_small.p50_ms if base_small and mine_small else None
        ratios = [r for r in (throughput, sorted_throughput, latency) if r is not None]
        timed = [s for s in (base_large, mine_large, base_small, mine_small) if s is not None]
        return Speedup(
            throughput=throughput,
            sorted_throughput=sorted_throughput,
            latency=latency,
            sorting=sorting,
            suspect=any(r > SUSPECT_RATIO or r < 1 / SUSPECT_RATIO for r in ratios),
            contended=any(s.contended for s in timed),
        )

    @property
    def warnings(self) -> list[str]:
        """What a reader must know before trusting the speed columns: suspect ratios, contended timings."""
        lines = []
        for v in self.variants:
            speedup = self.speedup(v)
            if v.status != "ok" or speedup is None:
                continue
            if speedup.suspect and v.name != BASELINE:
                lines.append(
                    f"{v.name}: a speed-up above {SUSPECT_RATIO:g}x from software alone is suspect; "
                    "the baseline was probably timed under contention: re-run on a quiet machine (or with --threads 1)"
                )
            contended = [s for s in v.speeds if s.contended]
            if contended:
                share = max(s.others_cpu_share for s in contended)
                sizes = ", ".join(str(s.batch_size) for s in contended)
                lines.append(
                    f"{v.name}: timed while other processes used up to {share:.0%} of its CPUs "
                    f"(batch {sizes}); its figures are slower than on a quiet machine"
                )
        return lines

    def why_nothing_chosen(self) -> str:
        """The reason no variant was chosen, in the terms of the rule that ruled them out (``choose``)."""
        measured = [v for v in self.variants if v.name != BASELINE and v.status == "ok"]
        if not measured:
            return "no variant could be built and measured"
        fits = [v for v in measured if v.meets_budget]
        if not fits:
            return "no variant meets the quality budget"
        if not any(v.exportable for v in fits):
            return "the variants within the quality budget cannot be exported"
        if self.options.batch_invariant and not any(v.batch_invariant for v in fits):
            return "no variant within the quality budget is batch-invariant"
        return "no exportable variant within the quality budget is faster than the FP32 baseline"


def _eligible(result: SearchResult, variant: VariantResult) -> bool:
    if variant.status != "ok" or not variant.meets_budget or not variant.speeds or not variant.exportable:
        return False
    return not result.options.batch_invariant or bool(variant.batch_invariant)


def choose(result: SearchResult) -> VariantResult | None:
    """The fastest exportable variant inside the budget that beats the baseline, or None."""
    baseline = result.variant(BASELINE)
    fits = [v for v in result.variants if v.name != BASELINE and _eligible(result, v)]
    best = max(fits, key=result.speed_key, default=None)
    if best is None or result.speed_key(best) <= result.speed_key(baseline):
        return None
    return best


class _Search:
    """Mutable state of one search; ``run_search`` is its only caller."""

    def __init__(
        self,
        source: ModelSource,
        metric: Metric,
        options: SearchOptions,
        directory: Path,
        progress: Progress | None,
        hardware: Hardware | None,
    ) -> None:
        self.source, self.metric, self.options = source, metric, options
        self.hardware = hardware or detect_hardware(options.threads)
        self.deadline = options.deadline()
        self.progress = progress or (lambda name, done, total: None)
        calibration, held_aside = split_indices(len(source.feed), options.calibration_fraction)
        self.eval_feed: Feed = source.feed.subset(held_aside)
        self.workspace = Workspace(
            source, self.hardware, directory, source.feed.subset(calibration), options.largest_batch
        )
        self.reference: np.ndarray | None = None
        self.baseline_quality = 1.0
        self.results: list[VariantResult] = []

    def remaining_s(self) -> float:
        return self.deadline - time.time()

    def out_of_time(self) -> bool:
        return self.remaining_s() <= 0

    def wanted(self, name: str) -> bool:
        return (
            name == BASELINE
            or not self.options.only
            or any(fnmatch.fnmatch(name, pattern) for pattern in self.options.only)
        )

    def measure(self, name: str, family: str, build: Builder) -> VariantResult:
        result = self._measure(name, family, build)
        self.results.append(result)
        return result

    def _measure(self, name: str, family: str, build: Builder) -> VariantResult:
        if name == BASELINE:  # the reference every variant needs: never cut
            return self._build_and_grade(name, family, build)
        reason = f"time budget ({self.options.time_budget_s:g} s) reached"
        if self.out_of_time():
            return VariantResult(name, family, "skipped", reason)
        try:
            with _alarm(self.remaining_s()):
                return self._build_and_grade(name, family, build)
        except _OutOfTime:
            return VariantResult(name, family, "skipped", f"{reason} while it was being built or measured")

    def _build_and_grade(self, name: str, family: str, build: Builder) -> VariantResult:
        started = time.monotonic()
        with PeakMemory() as peak:
            try:
                built = build(self.workspace)
            except VariantSkipped as reason:
                return VariantResult(name, family, "skipped", reason.message)
            except (EvaluationError, KeyboardInterrupt):
                raise
            except Exception as error:  # a variant that fails to build must not stop the search
                return VariantResult(name, family, "failed", f"build failed: {first_line(error)}")
            build_time_s = time.monotonic() - started
            try:
                result = self._grade(name, family, built)
            except (EvaluationError, KeyboardInterrupt):
                raise
            except Exception as error:
                return VariantResult(name, family, "failed", f"run failed: {first_line(error)}", built.recipe)
        result.build_time_s = build_time_s
        result.peak_memory_bytes = peak.rise_bytes
        # the session or module is let go; files and recipe stay for the export
        built.predictor = _released
        return result

    def _grade(self, name: str, family: str, built: Built) -> VariantResult:
        batch = self.options.largest_batch
        load_started = time.monotonic()
        built.predictor(self.eval_feed.batch([0]))  # first call: lazy initialisation counts as loading
        load_time_s = time.monotonic() - load_started
        if self.reference is None:
            self.reference = predict_all(built.predictor, self.eval_feed, batch)
            self.workspace.baseline_predictor = built.predictor
            self.workspace.calibration_reference()
        score, _outputs = self.metric.score(built.predictor, self.eval_feed, self.reference, batch)
        if name == BASELINE:
            self.baseline_quality = score.value
        speeds = [self.time_at(built.predictor, size) for size in self.options.batch_sizes]
        return VariantResult(
            name=name,
            family=family,
            status="ok",
            recipe=built.recipe,
            quality=score,
            meets_budget=self.metric.meets(score, self.baseline_quality),
            invariance=self._invariance(built),
            speeds=speeds,
            size_bytes=built.size_bytes,
            load_time_s=load_time_s,
            built=built,
        )

    def time_at(self, predictor: Callable[[Any], np.ndarray], batch_size: int) -> BatchSpeed:
        """One speed measurement, every runtime on the same thread count, cut short at the deadline."""
        return measure_speed(
            predictor,
            self.eval_feed,
            batch_size,
            self.options.bench_items,
            threads=self.hardware.threads,
            out_of_time=self.out_of_time,
        )

    def _invariance(self, built: Built) -> float | None:
        """Worst agreement of an example's output alone (batch 1) and among mixed-length neighbours."""
        batch = self.options.largest_batch
        sample = self.eval_feed.subset(range(min(len(self.eval_feed), max(batch, 16))))
        if batch == 1:
            return None
        alone = predict_all(built.predictor, sample, 1, by_length=False)
        together = predict_all(built.predictor, sample, batch, by_length=False)
        task = "regressor" if self.source.task == "regressor" else "embedding"
        return agreement(task, together, alone).worst

    def step(self, name: str, family: str, build: Builder, done: int, total: int) -> VariantResult | None:
        if not self.wanted(name):
            return None
        self.progress(name, done, total)
        return self.measure(name, family, build)


def _released(batch: Any) -> np.ndarray:
    raise RuntimeError("this variant's session was released after it was measured")


class _OutOfTime(BaseException):
    """The time budget ran out inside a variant; a BaseException so that no builder's ``except`` eats it."""


@contextlib.contextmanager
def _alarm(seconds: float) -> Iterator[None]:
    """Raise ``_OutOfTime`` in this thread after ``seconds``: the one way to cut a long library call
    (static calibration, compilation) at the deadline. Python delivers the signal between bytecodes,
    so a single native call still finishes first. Off the main thread (where signals cannot be
    caught) the search falls back to its checks between steps and between timing passes."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def ring(signum: int, frame: Any) -> None:
        raise _OutOfTime

    previous = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.001))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _singles(source: ModelSource, hardware: Hardware) -> list[tuple[str, str, Builder]]:
    """Every single-technique variant, cheapest and most promising first."""
    dynamic = [
        ("ort-int8-u8-channel", DynamicInt8(signed_weights=False, per_channel=True)),
        ("ort-int8-s8-channel", DynamicInt8(signed_weights=True, per_channel=True)),
        ("ort-int8-u8-tensor", DynamicInt8(signed_weights=False, per_channel=False)),
        ("ort-int8-s8-tensor", DynamicInt8(signed_weights=True, per_channel=False)),
    ]
    if not hardware.has_vnni:  # the setting ONNX Runtime advises for such CPUs, measured rather than trusted
        dynamic.append(("ort-int8-u8-channel-reduce-range", DynamicInt8(False, True, reduce_range=True)))
    singles: list[tuple[str, str, Builder]] = [
        ("ort-fused", "onnxruntime", ox.build_fused),
        *[
            (name, "onnxruntime", partial(ox.build_dynamic_int8, setting=setting, name=name))
            for name, setting in dynamic
        ],
        ("ort-int8-default", "onnxruntime", partial(ox.build_ort_default_int8, name="ort-int8-default")),
        *[
            (f"ort-{level}", "onnxruntime", partial(ox.build_graph_level, level=level))
            for level in ("disabled", "basic", "extended", "all")
            if not (source.kind == "onnx" and level == "all")
        ],
        ("pytorch-int8-dynamic", "pytorch", tv.build_dynamic_int8),
        ("pytorch-bf16", "pytorch", tv.build_bf16),
        ("pytorch-fp16", "pytorch", tv.build_fp16),
        *[
            (
                f"ort-static-int8-{method}",
                "onnxruntime",
                partial(ox.build_static_int8, method=method, name=f"ort-static-int8-{method}"),
            )
            for method in ("minmax", "entropy", "percentile")
        ],
        *[
            (f"pytorch-prune-magnitude-{round(s * 100)}", "pruning", partial(tv.build_magnitude_pruned, sparsity=s))
            for s in (0.3, 0.5)
        ],
        *[
            (f"pytorch-prune-structured-{round(s * 100)}", "pruning", partial(tv.build_structured_pruned, sparsity=s))
            for s in (0.2, 0.4)
        ],
        ("pytorch-compile", "pytorch", tv.build_compile),
        ("ort-cuda", "provider", partial(ox.build_provider, provider="CUDAExecutionProvider", half=False)),
        ("ort-cuda-fp16", "provider", partial(ox.build_provider, provider="CUDAExecutionProvider", half=True)),
        ("ort-tensorrt-fp16", "provider", partial(ox.build_provider, provider="TensorrtExecutionProvider", half=True)),
        ("ort-openvino", "provider", partial(ox.build_provider, provider="OpenVINOExecutionProvider", half=False)),
    ]
    return singles


def _baseline_builder(source: ModelSource) -> Builder:
    if source.kind == "onnx":
        return partial(ox.build_graph_level, level="all")
    return tv.build_fp32


def run_search(
    source: ModelSource,
    metric: Metric,
    options: SearchOptions,
    directory: Path | None = None,
    progress: Progress | None = None,
    hardware: Hardware | None = None,
) -> SearchResult:
    """Build, grade and time every variant; the returned result names the winner (or None).

    ``hardware`` defaults to this machine; passing another says which variants to build (the BF16
    path of a CPU with AMX can then be exercised, emulated and slowly, on one without).
    """
    work = Path(directory) if directory else Path(tempfile.mkdtemp(prefix="computewise-optimize-"))
    work.mkdir(parents=True, exist_ok=True)
    search = _Search(source, metric, options, work, progress, hardware)
    with _torch_threads(search.hardware.threads):
        return _run(search)


@contextlib.contextmanager
def loading(options: SearchOptions, what: str) -> Iterator[None]:
    """Load the model as the search will run it: on its thread count and inside its time budget.

    An entry point may train or download its model. PyTorch's default of one thread per core is many
    times slower on a busy machine than the ``--threads`` asked for (the digits example trains in
    78 s on two contended threads, 6 s on one), and the budget covers loading as well as the variants.
    """
    try:
        with _torch_threads(options.threads or usable_cpus()), _alarm(options.deadline() - time.time()):
            yield
    except _OutOfTime:
        fix = "raise --time-budget (loading alone takes longer on this machine)"
        if options.threads != 1:  # one thread is what a busy machine loads fastest with; say it once only
            fix += ", or pass --threads 1 if it is busy"
        raise InputError(f"the time budget ({options.time_budget_s:g} s) ran out while loading {what}", fix) from None


@contextlib.contextmanager
def _torch_threads(threads: int) -> Iterator[None]:
    """PyTorch gets the same thread count as ONNX Runtime sessions, so the comparison is fair."""
    try:
        import torch
    except ImportError:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _run(search: _Search) -> SearchResult:
    source, metric, options = search.source, search.metric, search.options
    singles = _singles(source, search.hardware)
    total = 1 + sum(search.wanted(name) for name, _family, _build in singles) + 2
    baseline = search.step(
        BASELINE, "pytorch" if source.kind != "onnx" else "onnxruntime", _baseline_builder(source), 0, total
    )
    if baseline is None or baseline.status != "ok":
        reason = baseline.reason if baseline else "not run"
        raise InputError(
            f"the FP32 baseline could not be measured: {reason}", "check that the model runs on its inputs"
        )
    done = 1
    for name, family, build in singles:
        if search.step(name, family, build, done, total) is not None:
            done += 1
    _derived(search, done, total)
    _retime_front_runner(search)
    result = SearchResult(
        source=source,
        hardware=search.hardware,
        metric=metric,
        options=options,
        baseline_quality=search.baseline_quality,
        variants=search.results,
        chosen=None,
        doctor=search.workspace.doctor,
        workspace=search.workspace,
        eval_examples=len(search.eval_feed),
        calibration_examples=len(search.workspace.calibration),
        notes=list(source.notes),
    )
    result.chosen = choose(result)
    search.progress("done", total, total)
    return result


def _derived(search: _Search, done: int, total: int) -> None:
    """Selective precision for the fastest INT8 variant that missed, pruning + the best INT8 that fit."""
    results = [r for r in search.results if r.status == "ok" and r.built and r.built.quantized_from]
    key = partial(_throughput_at, batch=search.options.largest_batch)
    missed = sorted((r for r in results if not r.meets_budget), key=key, reverse=True)
    if missed and missed[0].built is not None:
        name = f"{missed[0].name}-selective"
        selective = partial(
            build_selective,
            quantized=missed[0].built,
            metric=search.metric,
            calibration_baseline=1.0 if search.metric.user_function is None else search.baseline_quality,
            name=name,
            out_of_time=search.out_of_time,
        )
        search.step(name, "onnxruntime", selective, done, total)
    fitting = sorted((r for r in results if r.meets_budget), key=key, reverse=True)
    pruned_fits = [r for r in search.results if r.name.startswith("pytorch-prune-structured") and r.meets_budget]
    if fitting and pruned_fits and fitting[0].built and fitting[0].built.quantized_from:
        setting = fitting[0].built.quantized_from[1]
        sparsity = max(int(r.name.rsplit("-", 1)[1]) for r in pruned_fits) / 100
        name = f"ort-prune-structured-{round(sparsity * 100)}-{fitting[0].name.removeprefix('ort-')}"
        search.step(
            name,
            "pruning",
            partial(ox.build_pruned_int8, sparsity=sparsity, setting=setting, name=name),
            done + 1,
            total,
        )


def _retime_front_runner(search: _Search) -> None:
    """Time the baseline and the fastest eligible variant again at the deciding batch size, one after the
    other, each keeping its faster figure.

    They were first timed minutes apart; a busy spell during either one would otherwise decide the
    choice. Both get the same second chance, so the comparison stays fair.
    """
    baseline = next(r for r in search.results if r.name == BASELINE)
    provisional = SearchResult(
        search.source, search.hardware, search.metric, search.options, search.baseline_quality, search.results,
        None, search.workspace.doctor, search.workspace, len(search.eval_feed), 0,
    )  # fmt: skip
    candidates = [r for r in search.results if r.name != BASELINE and _eligible(provisional, r)]
    front = max(candidates, key=provisional.speed_key, default=None)
    if front is None or front.built is None or search.workspace.baseline_predictor is None:
        return
    try:
        with _alarm(search.remaining_s()):
            again = front.built.reopen(search.hardware.threads)
            pairs = ((baseline, search.workspace.baseline_predictor), (front, again))
            deciding = (
                min(search.options.batch_sizes) if search.options.target == "latency" else search.options.largest_batch
            )
            index = search.options.batch_sizes.index(deciding)
            for variant, predictor in pairs:
                variant.speeds[index] = _faster(variant.speeds[index], search.time_at(predictor, deciding))
    except _OutOfTime:
        return


def _faster(first: BatchSpeed, second: BatchSpeed) -> BatchSpeed:
    """Of two timings of the same thing, the less disturbed one: contention only ever slows a run down."""
    return second if second.items_per_s > first.items_per_s else first


def _throughput_at(result: VariantResult, batch: int) -> float:
    speed = result.speed_at(batch)
    return speed.best_items_per_s if speed else 0.0
