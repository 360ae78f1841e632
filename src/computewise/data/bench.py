"""``data bench``: read a source through a real loader at 1, 2, 4, ... workers and say what it delivers.

Each configuration is read to the end or for ``seconds_per_config``, whichever comes first; the
rate counts from asking for the iterator, so worker start-up is in it (a training epoch pays it
too). CPU time is the process's own (``RUSAGE_SELF``) and its reaped workers' (``RUSAGE_CHILDREN``:
the DataLoader joins its workers when its iterator ends or is dropped, before we read the counter).
At the fastest worker count a deeper prefetch is tried, and pinned memory where a CUDA device is
there to use it (pinning without one measures nothing).

The measured loop does one addition per batch on top of the bare loop; ``benchmarks/data_formats.py``
measures what that costs against a bare loop over the same loader.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from computewise.data.advice import advise
from computewise.data.demand import verdict
from computewise.data.loader import (
    EntryLoader,
    LoaderConfig,
    count_batch,
    cuda_available,
    parts_loader,
    torch_available,
)
from computewise.data.result import DataBenchResult, Demand, Measurement
from computewise.data.sources import Source, is_entry_point, open_source
from computewise.errors import InputError
from computewise.system.cpu import cpu_model_name, usable_cpus

__all__ = ["BenchOptions", "Progress", "bare_loop_s", "measure", "run_data_bench", "worker_counts"]

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class BenchOptions:
    source: str
    format: str | None = None  # None: from the file names
    max_workers: int | None = None  # None: the usable cores
    seconds_per_config: float = 10.0
    batch_rows: int = 256
    seq_len: int = 1024  # a 1-D token file (.npy, .bin) is read in windows of this many tokens
    token_dtype: str = "uint16"  # the element type of a headerless .bin token file


def worker_counts(max_workers: int) -> tuple[int, ...]:
    """1, 2, 4, ... up to ``max_workers``, which is always measured itself."""
    counts = []
    n = 1
    while n < max_workers:
        counts.append(n)
        n *= 2
    counts.append(max(1, max_workers))
    return tuple(counts)


def _item_count(item: Any) -> tuple[int, int]:
    return int(item[0]), int(item[1])


def measure(
    loader: Iterable[Any], config: LoaderConfig, limit_s: float, count: Callable[[Any], tuple[int, int]] = _item_count
) -> Measurement:
    """Read ``loader`` to its end or for ``limit_s``; the CPU, rate and first-batch time of doing so."""
    own_before = resource.getrusage(resource.RUSAGE_SELF)
    workers_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    iterator = iter(loader)
    first_s: float | None = None
    samples = read_bytes = 0
    complete = True
    for batch in iterator:
        now = time.perf_counter() - start
        if first_s is None:
            first_s = now
        rows, size = count(batch)
        samples += rows
        read_bytes += size
        if now >= limit_s:
            complete = False
            break
    elapsed_s = time.perf_counter() - start
    del iterator  # a DataLoader's iterator joins its workers here, so RUSAGE_CHILDREN holds their CPU
    own_after = resource.getrusage(resource.RUSAGE_SELF)
    workers_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return Measurement(
        workers=config.workers,
        prefetch=config.prefetch,
        pin_memory=config.pin_memory,
        samples=samples,
        read_bytes=read_bytes,
        elapsed_s=elapsed_s,
        first_batch_s=first_s if first_s is not None else elapsed_s,
        cpu_main_s=_cpu_s(own_after) - _cpu_s(own_before),
        cpu_workers_s=_cpu_s(workers_after) - _cpu_s(workers_before) if config.workers else 0.0,
        complete=complete,
    )


def _cpu_s(usage: resource.struct_rusage) -> float:
    return float(usage.ru_utime + usage.ru_stime)


def _configs(max_workers: int, with_workers: bool) -> list[LoaderConfig]:
    if not with_workers:
        return [LoaderConfig(workers=0)]
    return [LoaderConfig(workers=n) for n in worker_counts(max_workers)]


def _empty(text: str) -> InputError:
    return InputError(f"{text}: the loader yielded no samples (the dataset is empty)", "point at data that has rows")


def run_data_bench(options: BenchOptions, demand: Demand | None, progress: Progress) -> DataBenchResult:
    """Measure ``options.source`` and compare the best configuration with ``demand``."""
    max_workers = options.max_workers or usable_cpus()
    if is_entry_point(options.source):
        return _bench_entry(options, demand, progress, max_workers)
    source = open_source(options.source, options.format, options.seq_len, options.token_dtype)
    has_torch = torch_available()
    configs = _configs(max_workers, has_torch)
    measurements: list[Measurement] = []
    pinning = has_torch and cuda_available()
    steps = len(configs) + (1 if has_torch else 0) + (1 if pinning else 0)
    for index, config in enumerate(configs):
        progress(f"{source.format}, {config.label}", index, steps)
        measurements.append(_read(source, options, config))
        if measurements[-1].samples == 0:
            raise _empty(options.source)
    notes = [f"one sample is {source.sample}", *_load_note()]
    if has_torch:
        best = max(measurements, key=lambda m: m.samples_per_s)
        extra = [LoaderConfig(best.workers, prefetch=4)]
        if pinning:
            extra.append(LoaderConfig(best.workers, prefetch=2, pin_memory=True))
        else:
            notes.append("pin_memory not measured: it needs a CUDA device to copy to, and none is visible")
        for offset, config in enumerate(extra):
            progress(f"{source.format}, {config.label}", len(configs) + offset, steps)
            measurements.append(_read(source, options, config))
    else:
        notes.append("torch is not installed: read in this process only, no worker scaling (pip install torch)")
    return _result(options, source, "torch DataLoader" if has_torch else "plain iterator", measurements, demand, notes)


def _load_note() -> list[str]:
    """A host busier than its cores makes every rate here an understatement: say so with the figures."""
    load_1m = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    cores = usable_cpus()
    if load_1m <= cores:
        return []
    return [
        f"the host was busy (load average {load_1m:.1f} on {cores} usable cores): these rates understate the loader"
    ]


def _read(source: Source, options: BenchOptions, config: LoaderConfig) -> Measurement:
    return measure(parts_loader(source, options.batch_rows, config), config, options.seconds_per_config)


def _bench_entry(options: BenchOptions, demand: Demand | None, progress: Progress, max_workers: int) -> DataBenchResult:
    entry = EntryLoader.load(options.source)
    counts: tuple[int | None, ...] = worker_counts(max_workers) if entry.takes_workers else (None,)
    measurements = []
    for index, workers in enumerate(counts):
        progress(f"{options.source}, {workers if workers is not None else 'its own'} workers", index, len(counts))
        loader = entry.build(workers)
        config = LoaderConfig(workers=workers if workers is not None else getattr(loader, "num_workers", 0))
        measurements.append(measure(loader, config, options.seconds_per_config, count_batch))
        if measurements[-1].samples == 0:
            raise _empty(options.source)
    notes = ["one sample is the first dimension of a batch (a dict's first value, a tuple's first element)"]
    notes.extend(_load_note())
    if not entry.takes_workers:
        notes.append(f"{options.source} takes no num_workers argument: measured as it builds its loader, no scaling")
    source = Source(options.source, "entry-point", (), 0, (), None, "one item of the first dimension of a batch")
    return _result(options, source, options.source, measurements, demand, notes)


def _result(
    options: BenchOptions,
    source: Source,
    loader: str,
    measurements: list[Measurement],
    demand: Demand | None,
    notes: list[str],
) -> DataBenchResult:
    best = max(measurements, key=lambda m: m.samples_per_s)
    judged = verdict(best, demand) if demand is not None else None
    entry = source.format == "entry-point"
    advice = advise(source, measurements, demand, options.batch_rows, usable_cpus())
    return DataBenchResult(
        source=options.source,
        format=source.format,
        sample=source.sample,
        files=len(source.files),
        total_bytes=source.total_bytes,
        rows_known=source.rows,
        loader=loader,
        bytes_kind="in the batches' arrays" if entry else "read from storage",
        cpu=cpu_model_name(),
        usable_cpus=usable_cpus(),
        measurements=tuple(measurements),
        demand=demand,
        verdict=judged,
        advice=tuple(advice),
        notes=tuple(notes),
    )


def bare_loop_s(loader: Iterable[Any]) -> float:
    """Seconds to iterate ``loader`` doing nothing with its batches: the baseline of the tool's overhead."""
    start = time.perf_counter()
    for _batch in loader:
        pass
    return time.perf_counter() - start
