"""What to change in an input pipeline, from what ``data bench`` measured.

Each piece of advice carries its evidence and says whether it was measured here (a worker count
that was read, a CSV part converted to Parquet and read both ways) or reasoned from the figures (a
worker count beyond the cores, extrapolated from the per-worker rate; the storage rate a demand
implies). Advice is only given where the figures point to it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from computewise.data.result import Advice, Demand, Measurement
from computewise.data.sources import Source
from computewise.units import format_bytes, format_count

__all__ = ["advise"]

_WORTH_CONVERTING = 1.2  # Parquet must read this much faster, measured, before converting is advised
_CPU_BOUND_PCT = 80.0  # a worker this busy decodes: more workers or cached decoded samples help, faster disks do not
_SCALING_EFFICIENCY = 0.7  # below this share of linear scaling, extrapolating a worker count is not honest
_TRANSPORT_GAP = 2.0  # decoding alone this much faster than the loader: the batches' trip costs the rest


def advise(
    source: Source, measurements: Sequence[Measurement], demand: Demand | None, batch_rows: int, cores: int
) -> list[Advice]:
    advice: list[Advice] = []
    plain = [m for m in measurements if m.prefetch == 2 and not m.pin_memory] or list(measurements)
    best = max(measurements, key=lambda m: m.samples_per_s)
    advice.extend(_workers(plain, demand, cores))
    advice.extend(_columnar(source, batch_rows))
    if demand is not None and best.samples:
        per_sample = best.read_bytes / best.samples
        need = demand.samples_per_s * per_sample
        advice.append(
            Advice(
                f"storage that sustains {format_bytes(need)}/s of reads",
                f"{format_bytes(per_sample)} per sample x {format_count(demand.samples_per_s)} samples/s; "
                f"the loader read {format_bytes(best.bytes_per_s)}/s here",
                measured=False,
            )
        )
    if best.cpu_per_worker_pct >= _CPU_BOUND_PCT and source.format in ("csv", "jsonl", "images", "tar"):
        advice.append(
            Advice(
                "cache decoded samples (e.g. as .npy or Parquet) and read those each epoch",
                f"each worker kept {best.cpu_per_worker_pct:.0f} % of a core busy decoding at "
                f"{best.workers} workers: decoding, not storage, limits the rate",
                measured=False,
            )
        )
    if best.workers and source.parts:
        advice.extend(_transport(source, best, batch_rows))
    widest = max(m.workers for m in measurements)
    if source.parts and len(source.parts) < widest:
        advice.append(
            Advice(
                f"shard the data into at least {widest} pieces (files, row groups or .tar shards)",
                f"only {len(source.parts)} part(s) to share among {widest} workers: the rest sat idle",
                measured=True,
            )
        )
    return advice


def _workers(plain: Sequence[Measurement], demand: Demand | None, cores: int) -> list[Advice]:
    by_workers = {m.workers: m for m in plain}
    if len(by_workers) < 2:
        return []
    fastest = max(by_workers.values(), key=lambda m: m.samples_per_s)
    rates = ", ".join(f"{n}: {format_count(by_workers[n].samples_per_s)}" for n in sorted(by_workers))
    evidence = f"samples/s by workers {rates}"
    if demand is not None and fastest.samples_per_s >= demand.samples_per_s:
        enough = min((m for m in plain if m.samples_per_s >= demand.samples_per_s), key=lambda m: m.workers)
        return [
            Advice(
                f"num_workers={enough.workers} is enough",
                f"{evidence}; {format_count(demand.samples_per_s)}/s needed",
                measured=True,
            )
        ]
    if demand is None:
        return [Advice(f"num_workers={fastest.workers}", evidence, measured=True)]
    one = by_workers[min(by_workers)]
    speedup = fastest.samples_per_s / one.samples_per_s if one.samples_per_s > 0 else 0.0
    widest = max(by_workers)
    if fastest.workers == one.workers or speedup < _SCALING_EFFICIENCY * fastest.workers / one.workers:
        return [
            Advice(
                "more loader workers alone will not close the gap",
                f"{evidence}: up to {widest / one.workers:.0f}x the workers gave at best {speedup:.2f}x the rate "
                "here; look at the other advice",
                measured=True,
            )
        ]
    per_worker = fastest.samples_per_s / max(1, fastest.workers)
    needed = math.ceil(demand.samples_per_s / per_worker) if per_worker > 0 else 0
    where = "" if needed <= cores else f"; this machine has {cores} usable cores, so spread loading over more hosts"
    return [
        Advice(
            f"about {needed} loader workers (num_workers={needed}) to meet "
            f"{format_count(demand.samples_per_s)} samples/s",
            f"{evidence}; {format_count(per_worker)}/s per worker, if it keeps scaling{where}",
            measured=False,
        )
    ]


def _transport(source: Source, best: Measurement, batch_rows: int) -> list[Advice]:
    """The same parts decoded in this process, without the DataLoader: what the format alone allows."""
    from computewise.data.convert import decode_rate

    samples, seconds = decode_rate(source.parts, batch_rows)
    if seconds <= 0 or samples / seconds < _TRANSPORT_GAP * best.samples_per_s:
        return []
    return [
        Advice(
            f"larger batches than {batch_rows} samples (measure with --batch-size {batch_rows * 8}), "
            "or fewer arrays per batch",
            f"one process decodes the first {format_count(samples)} samples at {format_count(samples / seconds)}/s, "
            f"the DataLoader delivered {format_count(best.samples_per_s)}/s: the rest goes to moving "
            f"{batch_rows}-sample batches between processes",
            measured=True,
        )
    ]


def _columnar(source: Source, batch_rows: int) -> list[Advice]:
    if source.format not in ("csv", "jsonl") or not source.parts:
        return []
    from computewise.data.convert import columnar_speedup

    rows, text_s, parquet_s = columnar_speedup(source.parts, batch_rows)
    if rows == 0 or parquet_s <= 0 or text_s < _WORTH_CONVERTING * parquet_s:
        return []  # measured no faster: nothing to advise
    name = source.files[0].rsplit("/", 1)[-1]
    stem = name.rsplit(".", 1)[0]
    return [
        Advice(
            f"a columnar format: computewise data convert {source.files[0]} {stem}.parquet",
            f"the first {format_count(rows)} rows read {text_s / parquet_s:.1f}x faster as Parquet than as "
            f"{source.format.upper()} ({text_s * 1e3:.0f} ms vs {parquet_s * 1e3:.0f} ms, one process, from cache)",
            measured=True,
        )
    ]
