"""A run's summary, rebuilt from the ledger alone.

The summary printed when ``computewise run`` ends and the one ``computewise runs show ID`` prints
weeks later are the same function of the same rows, priced by ``account.totals`` (the one cost
formula) at the snapshot price taken at launch. A crashed run is summarised like any other; a run
resubmitted through ``computewise run --engine`` also lists its attempts and what interruptions added.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Literal

from computewise.account.interruptions import InterruptionCost, interruption_cost
from computewise.account.totals import RunCost, price_run
from computewise.catalog import Catalog
from computewise.errors import UnknownNameError
from computewise.ledger import AttemptRow, GpuSampleRow, Ledger, PriceSnapshot, RunRow, SampleRow, StepRow
from computewise.monitor.diagnosis import (
    Finding,
    IdlePeriod,
    UsageStats,
    describe_idle,
    diagnose,
    idle_periods,
)
from computewise.specs.codec import Document, Jsonable, Layout, json_field, json_property

__all__ = ["RunHead", "RunSummary", "Spread", "StepStats", "Utilization", "summarize"]

_MAX_SERIES_POINTS = 600
_COUNT = json_field(minimum=0)


@dataclass(frozen=True)
class Spread(Jsonable):
    """A figure over a run's samples: its mean and quantiles over time (each sample weighs the interval it
    covers), its extremes per sample."""

    json_description: ClassVar[str] = "Mean and quantiles over time (each sample weighs its interval); min and max."

    mean: float
    p50: float
    p95: float
    lowest: float = field(metadata=json_field(name="min"))
    highest: float = field(metadata=json_field(name="max"))


@dataclass(frozen=True)
class Utilization(Jsonable):
    """What the run used, over all its samples (the diagnosis judges the busy ones: ``UsageStats``)."""

    json_description: ClassVar[str] = "What the run used, over all its samples (null: not sampled)."

    samples: int = field(metadata=_COUNT)
    gpu_util_pct: Spread | None
    gpu_util_pct_by_gpu: dict[str, float] = field(metadata=json_field(description="Mean per GPU index."))
    cpu_percent: Spread | None = field(metadata=json_field(description="Of one core, the whole process tree."))
    host_cpu_percent_mean: float | None
    busy_s: float = field(metadata=json_field(description="The span the diagnosis judged: samples not idle."))
    logical_cpus: int = field(metadata=_COUNT)
    peak_rss_bytes: int | None
    peak_gpu_memory_bytes: int | None
    gpu_power_w_mean: float | None
    disk_read_bytes: int = field(metadata=_COUNT)
    disk_write_bytes: int = field(metadata=_COUNT)
    net_recv_bytes: int = field(metadata=_COUNT)
    net_sent_bytes: int = field(metadata=_COUNT)


@dataclass(frozen=True)
class StepStats(Jsonable):
    """The steps ``track()`` recorded: where their time went and the work they did."""

    json_description: ClassVar[str] = "The steps track() recorded: data wait against compute, and throughput."

    steps: int = field(metadata=_COUNT)
    data_wait_s: float
    compute_s: float
    data_wait_share: float | None
    samples_per_s: float | None
    tokens_per_s: float | None


@dataclass(frozen=True)
class RunHead(Jsonable):
    """The run as its summary opens: the keys of every document about a run, then its GPUs and error."""

    json_layout: ClassVar[Layout] = ("run", "gpu_count", "gpu_name", "accelerator", "error")

    run: RunRow = field(metadata=json_field(inline=True))

    @json_property(minimum=0)
    def gpu_count(self) -> int:
        return self.run.gpu_count

    @json_property()
    def gpu_name(self) -> str | None:
        return self.run.gpu_name

    @json_property()
    def accelerator(self) -> str | None:
        return self.run.accelerator

    @json_property()
    def error(self) -> str | None:
        return self.run.error


@dataclass(frozen=True)
class RunSummary(Jsonable):
    """What ``runs show ID`` (and ``run`` at its end) prints: the run, its price and cost, what it used and why
    it was slow; its JSON opens with the run and its price, then the cost's keys in place."""

    json_document: ClassVar[Document] = Document(
        "run-summary",
        "runs show ID --json",
        "One run's summary (monitor.summary.RunSummary): the run and its launch price, what it cost, what it "
        "used, the diagnosis and idle periods; `computewise run --json` prints the same document when the run ends.",
    )
    json_layout: ClassVar[Layout] = (
        "head", "price", "cost", "energy_basis", "stats", "findings", "idle", "idle_text", "steps", "series",
        "attempts", "interruption", "child_stdout",
    )  # fmt: skip

    run: RunRow
    cost: RunCost = field(metadata=json_field(inline=True))
    energy_basis: str = field(metadata=json_field(description="How energy_kwh was found: measured or estimated."))
    usage: UsageStats  # not written: what the diagnosis judged
    stats: Utilization = field(metadata=json_field(name="utilization"))
    findings: tuple[Finding, ...] = field(metadata=json_field(name="diagnosis"))
    idle: tuple[IdlePeriod, ...] = field(metadata=json_field(name="idle_periods"))
    idle_text: str | None = field(metadata=json_field(description="The idle periods in words; null when none."))
    steps: StepStats | None = field(metadata=json_field(description="null: the run recorded no track() steps."))
    series: dict[str, list[float | None]] = field(
        metadata=json_field(description="Thinned time series for the plots: seconds since start and each figure.")
    )
    attempts: tuple[AttemptRow, ...] = field(
        default=(), metadata=json_field(description="A resubmitted run's attempts (run --engine); empty otherwise.")
    )
    interruption: InterruptionCost | None = field(
        default=None, metadata=json_field(description="What interruptions added; null for a run without attempts.")
    )
    # Where ``computewise run`` sent the command's own stdout (stderr under --json); None: not a fresh run's.
    child_stdout: Literal["stdout", "stderr"] | None = field(default=None, metadata=json_field(omit_empty=True))

    @json_property(name="run")
    def head(self) -> RunHead:
        return RunHead(self.run)

    @json_property()
    def price(self) -> PriceSnapshot:
        return self.run.price


def summarize(ledger: Ledger, run_id: int, now_s: float, catalog: Catalog | None = None) -> RunSummary:
    """Everything the end-of-run report says, from the ledger rows of ``run_id``."""
    run = ledger.run(run_id)
    samples = ledger.samples(run_id)
    gpu_rows = ledger.gpu_samples(run_id)
    steps = ledger.steps(run_id)
    totals = ledger.run_totals([run_id])[run_id]
    cost = price_run(run, totals, now_s)
    usage = _usage(run, samples, steps, _gpu_memory_total(run, catalog))
    periods = idle_periods(samples, run.price.hourly_usd)
    what = "GPU" if run.gpu_count else "job"
    attempts = tuple(ledger.attempts(run_id))
    return RunSummary(
        run=run,
        cost=cost,
        energy_basis=_energy_basis(run, cost, samples),
        usage=usage,
        stats=_stats(samples, gpu_rows, usage),
        findings=tuple(diagnose(usage)),
        idle=tuple(periods),
        idle_text=describe_idle(periods, what) if periods else None,
        steps=_step_stats(steps),
        series=_series(samples),
        attempts=attempts,
        interruption=interruption_cost(attempts, steps, run.price.hourly_usd, now_s) if attempts else None,
    )


def _energy_basis(run: RunRow, cost: RunCost, samples: Sequence[SampleRow]) -> str:
    if not samples:
        return "no samples recorded"
    if cost.energy_measured:
        return "measured by the GPU driver (NVML energy counter or power draw)"
    if run.gpu_count:
        return "estimated from GPU TDP x utilization (no energy counter)"
    return "estimated from busy CPUs x W per CPU (no GPU)"


def _gpu_memory_total(run: RunRow, catalog: Catalog | None) -> float | None:
    if catalog is None or run.accelerator is None:
        return None
    try:
        return catalog.accelerator(run.accelerator).memory_bytes * run.gpu_count
    except UnknownNameError:
        return None


def _rate(first: float, last: float, seconds: float) -> float:
    return max(0.0, last - first) / seconds if seconds > 0 else 0.0


def _time_mean(samples: Sequence[SampleRow], value: Callable[[SampleRow], float | None]) -> float | None:
    """Mean over time: each sample weighs the interval it covers.

    A plain mean would let the last sample, which may cover a few milliseconds of a job's exit, weigh as
    much as a whole second: a sleeping job's teardown then reads as a busy CPU.
    """
    import numpy as np  # here, not at the top: the dashboard imports this module and starts faster without it

    pairs = [(v, s.interval_s) for s in samples if (v := value(s)) is not None]
    weight_s = sum(w for _, w in pairs)
    if not pairs:
        return None
    if weight_s <= 0:
        return float(np.mean([v for v, _ in pairs]))
    return sum(v * w for v, w in pairs) / weight_s


def _usage(
    run: RunRow, samples: Sequence[SampleRow], steps: Sequence[StepRow], gpu_memory_total: float | None
) -> UsageStats:
    # Time-weighted, judged while busy, with the spans said (diagnosis module docstring).
    span_s = sum(s.interval_s for s in samples)
    first, last = (samples[0], samples[-1]) if samples else (None, None)
    busy = [s for s in samples if not s.idle]
    judged = busy or list(samples)
    gpu_memory = [s.gpu_memory_used_bytes for s in samples if s.gpu_memory_used_bytes is not None]
    data_wait = sum(s.data_wait_s for s in steps)
    step_time = data_wait + sum(s.compute_s for s in steps)
    return UsageStats(
        gpu_count=run.gpu_count,
        logical_cpus=run.logical_cpus,
        gpu_util_pct_mean=_time_mean(judged, lambda s: s.gpu_util_pct),
        gpu_memory_share_peak=max(gpu_memory) / gpu_memory_total if gpu_memory and gpu_memory_total else None,
        cpu_percent_mean=_time_mean(judged, lambda s: s.cpu_percent) or 0.0,
        host_cpu_percent_mean=_time_mean(judged, lambda s: s.host_cpu_percent) or 0.0,
        disk_read_bytes_per_s=_rate(first.read_bytes, last.read_bytes, span_s) if first and last else 0.0,
        net_recv_bytes_per_s=_rate(first.net_recv_bytes, last.net_recv_bytes, span_s) if first and last else 0.0,
        data_wait_share=data_wait / step_time if steps and step_time > 0 else None,
        busy_s=sum(s.interval_s for s in busy),
        run_s=span_s,
        cpu_percent_run_mean=_time_mean(samples, lambda s: s.cpu_percent),
        accelerator=run.accelerator,
    )


def _percentiles(samples: Sequence[SampleRow], value: Callable[[SampleRow], float | None]) -> Spread | None:
    """Mean and quantiles over time (each sample weighs the interval it covers); min and max per sample."""
    pairs = sorted((v, s.interval_s) for s in samples if (v := value(s)) is not None)
    mean = _time_mean(samples, value)
    if not pairs or mean is None:
        return None
    return Spread(mean, _time_quantile(pairs, 0.50), _time_quantile(pairs, 0.95), pairs[0][0], pairs[-1][0])


def _time_quantile(sorted_pairs: Sequence[tuple[float, float]], share: float) -> float:
    """The smallest value the job was at or below for ``share`` of the time ((value, seconds), sorted)."""
    import numpy as np

    total_s = sum(seconds for _, seconds in sorted_pairs)
    if total_s <= 0:
        return float(np.percentile([v for v, _ in sorted_pairs], 100.0 * share))
    covered_s = 0.0
    for value, seconds in sorted_pairs:
        covered_s += seconds
        if covered_s >= share * total_s:
            return value
    return sorted_pairs[-1][0]


def _stats(samples: Sequence[SampleRow], gpu_rows: Sequence[GpuSampleRow], usage: UsageStats) -> Utilization:
    import numpy as np

    per_gpu: dict[int, list[float]] = {}
    for row in gpu_rows:
        if row.utilization_pct is not None:
            per_gpu.setdefault(row.gpu_index, []).append(row.utilization_pct)
    written = samples[-1].write_bytes - samples[0].write_bytes if samples else 0
    read = samples[-1].read_bytes - samples[0].read_bytes if samples else 0
    return Utilization(
        samples=len(samples),
        gpu_util_pct=_percentiles(samples, lambda s: s.gpu_util_pct),
        gpu_util_pct_by_gpu={str(i): float(np.mean(v)) for i, v in sorted(per_gpu.items())},
        cpu_percent=_percentiles(samples, lambda s: s.cpu_percent),
        host_cpu_percent_mean=_time_mean(samples, lambda s: s.host_cpu_percent),
        busy_s=usage.busy_s,
        logical_cpus=usage.logical_cpus,
        peak_rss_bytes=max((s.rss_bytes for s in samples), default=None),
        peak_gpu_memory_bytes=max(
            (s.gpu_memory_used_bytes for s in samples if s.gpu_memory_used_bytes is not None), default=None
        ),
        gpu_power_w_mean=_mean([s.gpu_power_w for s in samples if s.gpu_power_w is not None]),
        disk_read_bytes=max(0, read),
        disk_write_bytes=max(0, written),
        net_recv_bytes=max(0, samples[-1].net_recv_bytes - samples[0].net_recv_bytes) if samples else 0,
        net_sent_bytes=max(0, samples[-1].net_sent_bytes - samples[0].net_sent_bytes) if samples else 0,
    )


def _mean(values: Sequence[float]) -> float | None:
    import numpy as np

    return float(np.mean(values)) if values else None


def _step_stats(steps: Sequence[StepRow]) -> StepStats | None:
    if not steps:
        return None
    data_wait = sum(s.data_wait_s for s in steps)
    compute = sum(s.compute_s for s in steps)
    total = data_wait + compute
    samples = sum(s.samples or 0 for s in steps)
    tokens = sum(s.tokens or 0 for s in steps)
    return StepStats(
        steps=len(steps),
        data_wait_s=data_wait,
        compute_s=compute,
        data_wait_share=data_wait / total if total > 0 else None,
        samples_per_s=samples / total if total > 0 and samples else None,
        tokens_per_s=tokens / total if total > 0 and tokens else None,
    )


def _series(samples: Sequence[SampleRow]) -> dict[str, list[float | None]]:
    """Time series for the HTML plots, thinned to at most a few hundred points."""
    step = max(1, len(samples) // _MAX_SERIES_POINTS)
    picked = samples[::step]
    start = samples[0].t_s - samples[0].interval_s if samples else 0.0
    return {
        "t_s": [s.t_s - start for s in picked],
        "cpu_percent": [s.cpu_percent for s in picked],
        "rss_bytes": [float(s.rss_bytes) for s in picked],
        "gpu_util_pct": [s.gpu_util_pct for s in picked],
        "gpu_memory_used_bytes": [
            None if s.gpu_memory_used_bytes is None else float(s.gpu_memory_used_bytes) for s in picked
        ],
        "gpu_power_w": [s.gpu_power_w for s in picked],
        "idle": [1.0 if s.idle else 0.0 for s in picked],
    }
