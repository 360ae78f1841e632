"""Why a run was slow or wasteful, in plain words: the classic utilization table plus idle periods.

    GPU util   CPU           verdict
    high       any           compute-bound: the GPU is the bottleneck (mixed precision, compile)
    low        high          input-bound: the CPU-side pipeline starves the GPU (more loader workers)
    low        low           starved: batch too small, or waiting on disk / network / synchronisation
    (no GPU)   all cores     CPU compute-bound
    (no GPU)   one core      single-threaded: one of N cores does the work
    (no GPU)   host busy     CPU contended: other processes hold the cores the job could use
    (no GPU)   low           waiting on I/O or sleeping (also: busy less than half the run)

Every mean is over time (each sample weighs the interval it covers), never over sample counts: the
last sample of a run may cover a few milliseconds of its exit, and must not weigh like a second.
Utilization is judged while the job was busy (its samples that were not idle); idle time is a
finding of its own, and a CPU job busy less than half the run is "mostly waiting" whatever its busy
moments looked like. Each finding quotes the figures it was judged on and the span they cover.

"CPU high" means the job's processes use >= 70 % of the host's cores, or the host is >= 80 % busy,
or one core is saturated (>= 90 % of one core: a Python main thread or single-process loader).
Thresholds are data, not magic: they are the defaults of ``Thresholds`` and named in each finding.

A loop watched by ``track()`` is judged on its steps instead (``data_wait_verdict``): the share of step
time spent waiting for data says input-bound (> ``INPUT_BOUND_FRACTION``) or compute-bound.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from computewise.ledger import SampleRow
from computewise.specs.codec import Jsonable, json_property
from computewise.units import format_duration, format_usd, plural

__all__ = [
    "INPUT_BOUND_FRACTION",
    "Finding",
    "IdlePeriod",
    "Thresholds",
    "UsageStats",
    "data_bench_command",
    "data_wait_verdict",
    "describe_idle",
    "diagnose",
    "idle_periods",
]

# A tracked loop's steps (``track()``): above this share of step time spent waiting for data, it is input-bound;
# above the noticeable share, loader workers would still help.
INPUT_BOUND_FRACTION = 0.20
_NOTICEABLE_WAIT_FRACTION = 0.05


@dataclass(frozen=True)
class Thresholds:
    gpu_busy_pct: float = 80.0
    gpu_low_pct: float = 50.0
    cpu_share_of_host: float = 0.7
    host_busy_pct: float = 80.0
    one_core_pct: float = 90.0
    busy_share_min: float = 0.5
    data_wait_share: float = 0.2
    min_idle_period_s: float = 10.0


@dataclass(frozen=True)
class UsageStats:
    """What the diagnosis looks at: time-weighted means while busy (module docstring), and the spans."""

    gpu_count: int
    logical_cpus: int
    gpu_util_pct_mean: float | None
    gpu_memory_share_peak: float | None  # peak memory used / total, when the total is known
    cpu_percent_mean: float
    host_cpu_percent_mean: float
    disk_read_bytes_per_s: float
    net_recv_bytes_per_s: float
    data_wait_share: float | None  # from track() steps, when the run recorded any
    busy_s: float = 0.0  # time covered by samples that were not idle
    run_s: float = 0.0  # time covered by all samples (0: unknown, every mean is over the whole run)
    cpu_percent_run_mean: float | None = None  # over the whole run: the summary's CPU figure
    accelerator: str | None = None  # catalog slug of the run's GPUs, for the data bench command


@dataclass(frozen=True)
class Finding(Jsonable):
    """One line of diagnosis: what we see, the numbers behind it, what to try."""

    json_description: ClassVar[str] = "One line of the diagnosis (monitor.diagnosis.Finding)."

    verdict: str
    evidence: str
    advice: str


@dataclass(frozen=True)
class IdlePeriod(Jsonable):
    """A stretch of idle samples and what it cost."""

    json_description: ClassVar[str] = "A stretch of idle samples and what it cost (monitor.diagnosis.IdlePeriod)."

    start_s: float
    end_s: float
    cost_usd: float

    @json_property(after="end_s")
    def duration_s(self) -> float:
        return self.end_s - self.start_s


def data_bench_command(
    gpus: int = 0, accelerator: str | None = None, samples_per_s: float | None = None, source: str | None = None
) -> str:
    """The ``computewise data bench`` line that measures this job's loader against what its GPUs consume.

    What the run knows goes in: its consumption rate when steps were timed (``--demand``), else its
    accelerators (``--gpu``/``--gpus``, the model left for the user); SOURCE is the dataset path or
    the ``package.module:function`` building the loader, which a monitor of a process cannot see."""
    words = ["computewise data bench", source or "SOURCE"]
    if samples_per_s is not None and samples_per_s > 0:
        words += ["--demand", f"{samples_per_s:.4g}"]
    elif gpus:
        words += ["--model", "MODEL", "--gpu", accelerator or "GPU", "--gpus", str(gpus)]
    return " ".join(words)


def data_wait_verdict(steps: int, wait_fraction: float | None, samples_per_s: float | None = None) -> str:
    """The verdict on data wait; an input-bound one names the ``data bench`` command with the rate the
    steps would consume without waiting (samples/s over the time not spent waiting)."""
    if steps == 0 or wait_fraction is None:
        return "no steps recorded: iterate over t.loader(your_loader) or time each step with t.step()"
    share = f"{wait_fraction:.0%}" if wait_fraction >= 0.01 else f"{wait_fraction:.1%}"
    if wait_fraction > INPUT_BOUND_FRACTION:
        consumed = samples_per_s / (1.0 - wait_fraction) if samples_per_s and wait_fraction < 1.0 else None
        return (
            f"input-bound: {share} of step time is spent waiting for data while the accelerator idles; "
            "use more DataLoader workers (num_workers), pin_memory=True and prefetching, or preprocess ahead; "
            f"measure the loader: `{data_bench_command(samples_per_s=consumed)}` "
            "(SOURCE: the dataset path or package.module:make_loader)"
        )
    if wait_fraction > _NOTICEABLE_WAIT_FRACTION:
        return f"mostly compute-bound, but waiting for data costs {share} of step time: more loader workers would help"
    return f"compute-bound: waiting for data is {share} of step time, the input pipeline keeps up"


def _bench_advice(stats: UsageStats) -> str:
    command = data_bench_command(stats.gpu_count, stats.accelerator)
    return f"; measure the loader: `{command}` (SOURCE: the dataset path or package.module:make_loader)"


def _cpu_high(stats: UsageStats, t: Thresholds) -> bool:
    share = stats.cpu_percent_mean / (100.0 * max(1, stats.logical_cpus))
    return (
        share >= t.cpu_share_of_host
        or stats.host_cpu_percent_mean >= t.host_busy_pct
        or stats.cpu_percent_mean >= t.one_core_pct
    )


def _while_busy(stats: UsageStats) -> str:
    """Says which span the means cover when it is not the whole run."""
    if 0 < stats.busy_s < stats.run_s:
        return f"while busy ({format_duration(stats.busy_s)} of {format_duration(stats.run_s)}) "
    return ""


def _cpu_text(stats: UsageStats) -> str:
    return (
        f"{_while_busy(stats)}the job's processes used {stats.cpu_percent_mean:.0f} % CPU (100 % = one core) of "
        f"{stats.logical_cpus} logical CPUs; host {stats.host_cpu_percent_mean:.0f} % busy"
    )


def _io_text(stats: UsageStats) -> str:
    disk_mb_s = stats.disk_read_bytes_per_s / 1e6
    return f"disk reads {disk_mb_s:.1f} MB/s, network in {stats.net_recv_bytes_per_s / 1e6:.1f} MB/s"


def diagnose(stats: UsageStats, thresholds: Thresholds | None = None) -> list[Finding]:
    """The verdicts that apply, most important first (see the module table)."""
    t = thresholds or Thresholds()
    findings: list[Finding] = []
    if stats.gpu_count and stats.gpu_util_pct_mean is not None:
        findings.extend(_gpu_findings(stats, t))
    else:
        findings.append(_cpu_finding(stats, t))
    if stats.data_wait_share is not None and stats.data_wait_share >= t.data_wait_share:
        findings.append(
            Finding(
                "input-bound steps",
                f"{stats.data_wait_share:.0%} of step time was spent waiting for the next batch "
                f"(>= {t.data_wait_share:.0%})",
                "raise DataLoader num_workers, set pin_memory=True and persistent_workers=True, prefetch, "
                "or pre-process the data once and cache it" + _bench_advice(stats),
            )
        )
    return findings


def _gpu_findings(stats: UsageStats, t: Thresholds) -> list[Finding]:
    util = stats.gpu_util_pct_mean or 0.0
    gpu_text = f"{_while_busy(stats)}GPU utilization averaged {util:.0f} % over {plural(stats.gpu_count, 'GPU')}"
    if util >= t.gpu_busy_pct:
        return [
            Finding(
                "compute-bound",
                f"{gpu_text} (>= {t.gpu_busy_pct:.0f} %)",
                "the GPU is the bottleneck, as it should be; to go faster use mixed precision (bf16/fp16, TF32), "
                "torch.compile, fused optimizers, or a larger batch if memory allows",
            )
        ]
    findings: list[Finding] = []
    if _cpu_high(stats, t):
        findings.append(
            Finding(
                "input-bound",
                f"{gpu_text} while {_cpu_text(stats)}",
                "the CPU side (data loading, augmentation, tokenization, Python overhead) starves the GPU: add "
                "DataLoader workers, move augmentation to the GPU, or cache pre-processed data" + _bench_advice(stats),
            )
        )
    else:
        memory = stats.gpu_memory_share_peak
        memory_text = f"; peak GPU memory {memory:.0%} of capacity" if memory is not None else ""
        findings.append(
            Finding(
                "starved",
                f"{gpu_text} and the CPU was mostly idle too ({_cpu_text(stats)}; {_io_text(stats)}){memory_text}",
                "the batch is probably too small to fill the GPU"
                + (" (memory is mostly free: raise the batch size)" if memory is not None and memory < 0.5 else "")
                + ", or the job waits on storage, the network or synchronisation; profile one step",
            )
        )
    if util >= t.gpu_low_pct:
        findings[-1] = Finding("partly stalled: " + findings[-1].verdict, findings[-1].evidence, findings[-1].advice)
    return findings


def _cpu_finding(stats: UsageStats, t: Thresholds) -> Finding:
    waiting_advice = "the job spends its time waiting on I/O, the network, a lock or sleep; profile where it blocks"
    if stats.run_s > 0 and stats.busy_s < t.busy_share_min * stats.run_s:
        run_cpu = stats.cpu_percent_mean if stats.cpu_percent_run_mean is None else stats.cpu_percent_run_mean
        return Finding(
            "mostly waiting",
            f"no GPU; busy {format_duration(stats.busy_s)} of {format_duration(stats.run_s)} "
            f"(< {t.busy_share_min:.0%}); over the run the job's processes used {run_cpu:.0f} % CPU "
            f"(100 % = one core) of {stats.logical_cpus} logical CPUs; {_io_text(stats)}",
            waiting_advice,
        )
    cores_used = stats.cpu_percent_mean / 100.0
    if stats.cpu_percent_mean / (100.0 * max(1, stats.logical_cpus)) >= t.cpu_share_of_host:
        return Finding(
            "CPU compute-bound",
            f"no GPU; {_cpu_text(stats)}",
            "the job uses the whole machine; a GPU or more cores would speed it up",
        )
    if stats.cpu_percent_mean >= t.one_core_pct and stats.logical_cpus > 1:
        return Finding(
            "single-threaded",
            f"no GPU; about {cores_used:.1f} of {stats.logical_cpus} cores busy ({_cpu_text(stats)})",
            "the work runs on one core: use more threads or processes (torch.set_num_threads, DataLoader "
            "workers, multiprocessing)",
        )
    if stats.host_cpu_percent_mean >= t.host_busy_pct:
        return Finding(
            "CPU contended",
            f"no GPU; {_cpu_text(stats)} (>= {t.host_busy_pct:.0f} %): the rest is other processes",
            "the job gets the cores other processes leave: run it on a quieter machine, or stop what competes; "
            "its timings here understate what it can do",
        )
    return Finding("mostly waiting", f"no GPU; {_cpu_text(stats)}; {_io_text(stats)}", waiting_advice)


def idle_periods(
    samples: Sequence[SampleRow], hourly_usd: float, min_period_s: float = Thresholds.min_idle_period_s
) -> list[IdlePeriod]:
    """Runs of consecutive idle samples at least ``min_period_s`` long, each with what it cost."""
    periods: list[IdlePeriod] = []
    start: float | None = None
    end = 0.0
    for sample in samples:
        if sample.idle:
            if start is None:
                start = sample.t_s - sample.interval_s
            end = sample.t_s
        elif start is not None:
            periods.append(IdlePeriod(start, end, hourly_usd * (end - start) / 3600.0))
            start = None
    if start is not None:
        periods.append(IdlePeriod(start, end, hourly_usd * (end - start) / 3600.0))
    return [p for p in periods if p.duration_s >= min_period_s]


def describe_idle(periods: Sequence[IdlePeriod], what: str) -> str:
    """'GPU idle in 3 periods, 2 min 10 s in all ($0.12)'."""
    total_s = sum(p.duration_s for p in periods)
    cost = sum(p.cost_usd for p in periods)
    return f"{what} idle in {plural(len(periods), 'period')}, {format_duration(total_s)} in all ({format_usd(cost)})"
