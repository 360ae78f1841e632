"""Prometheus metrics of one serving process, and the running totals the ledger records.

Each app gets its own ``CollectorRegistry`` (never the process-global one), so two apps in one
process (tests, benchmarks) never share or double-register series. Series, all prefixed
``computewise_serve_``:

    requests_total{code}        inference requests answered, by HTTP status
    rejections_total            requests refused with 429 because the queue was full (back-pressure)
    errors_total                requests answered 5xx (a model error, a timeout)
    inferences_total            inputs answered with an output
    queue_depth                 inputs waiting for a worker (read from the batcher when scraped)
    batch_size                  inputs per model call (histogram)
    queue_wait_seconds          arrival to the start of its batch, per input (histogram)
    compute_seconds             one model call (histogram)
    tokens_total{kind}          real and padded tokens computed: real/padded is the padding efficiency
    request_duration_seconds{code}  arrival of an inference request to its answer (histogram): the
                                latency a client sees, less the network; by status, since a 429 is
                                answered at once and would flatter the percentiles of served requests

With ``--cache-size``, the prediction cache's series (``computewise_cache_``, read from the cache
when scraped): ``hits_total``, ``misses_total`` (one per input looked up), ``evictions_total{reason}``
(``size``: least recently used, to fit; ``ttl``: expired), ``bytes`` (held now, as counted against
the bound) and ``entries``.

``totals()`` returns plain numbers for the ledger run (requests, inferences, compute seconds, ...):
reading them back out of prometheus_client's counters would depend on its internals.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from computewise.serve.batcher import BatchRecord
from computewise.serve.cache import PredictionCache

__all__ = ["CONTENT_TYPE", "ServeMetrics"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_PREFIX = "computewise_serve"
# Powers of two up to beyond any sensible --max-batch-size.
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
# Half a millisecond (an echo model's whole round trip) to ten seconds (a request about to time out).
_LATENCY_BUCKETS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)


class _CacheCollector(Collector):
    """The cache's counts at scrape time, from one consistent ``stats()`` snapshot (no double bookkeeping)."""

    def __init__(self, cache: PredictionCache) -> None:
        self._cache = cache

    def collect(self) -> Iterator[Metric]:
        stats = self._cache.stats()
        yield CounterMetricFamily("computewise_cache_hits", "Inputs answered from the prediction cache.", stats.hits)
        yield CounterMetricFamily(
            "computewise_cache_misses", "Inputs looked up in the prediction cache and not found.", stats.misses
        )
        evictions = CounterMetricFamily(
            "computewise_cache_evictions",
            "Entries dropped from the prediction cache: size (least recently used, to fit) or ttl (expired).",
            labels=["reason"],
        )
        evictions.add_metric(["size"], stats.evictions)
        evictions.add_metric(["ttl"], stats.expirations)
        yield evictions
        yield GaugeMetricFamily(
            "computewise_cache_bytes", "Bytes the prediction cache holds, as counted against its bound.", stats.bytes
        )
        yield GaugeMetricFamily("computewise_cache_entries", "Entries in the prediction cache.", stats.entries)


class ServeMetrics:
    """The series above, plus thread-safe totals; ``record_batch`` may be called from any thread."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            f"{_PREFIX}_requests", "Inference requests answered, by HTTP status code.", ["code"], registry=self.registry
        )
        self.rejections = Counter(
            f"{_PREFIX}_rejections", "Requests refused with 429 because the queue was full.", registry=self.registry
        )
        self.errors = Counter(
            f"{_PREFIX}_errors", "Requests answered with a 5xx status (model error, timeout).", registry=self.registry
        )
        self.inferences = Counter(f"{_PREFIX}_inferences", "Inputs answered with an output.", registry=self.registry)
        self.queue_depth = Gauge(f"{_PREFIX}_queue_depth", "Inputs waiting for a worker.", registry=self.registry)
        self.batch_size = Histogram(
            f"{_PREFIX}_batch_size", "Inputs per model call.", buckets=_BATCH_BUCKETS, registry=self.registry
        )
        self.queue_wait_s = Histogram(
            f"{_PREFIX}_queue_wait_seconds",
            "Time from an input's arrival to the start of its batch.",
            buckets=_LATENCY_BUCKETS_S,
            registry=self.registry,
        )
        self.compute_s = Histogram(
            f"{_PREFIX}_compute_seconds",
            "Duration of one model call.",
            buckets=_LATENCY_BUCKETS_S,
            registry=self.registry,
        )
        self.tokens = Counter(
            f"{_PREFIX}_tokens", "Tokens computed, real or padded (real/padded = padding efficiency).", ["kind"],
            registry=self.registry,
        )  # fmt: skip
        self.request_s = Histogram(
            f"{_PREFIX}_request_duration_seconds",
            "Time from an inference request's arrival to its answer, by HTTP status code.",
            ["code"],
            buckets=_LATENCY_BUCKETS_S,
            registry=self.registry,
        )
        self._by_code: dict[int, Counter] = {}
        self._duration_by_code: dict[int, Histogram] = {}
        self._real_tokens = self.tokens.labels(kind="real")
        self._padded_tokens = self.tokens.labels(kind="padded")
        self._lock = threading.Lock()
        self._cache: PredictionCache | None = None
        self._totals: dict[str, float] = {
            "requests": 0,
            "inferences": 0,
            "rejections": 0,
            "errors": 0,
            "batches": 0,
            "batched_inputs": 0,
            "failed_inputs": 0,
            "compute_s": 0.0,
            "real_tokens": 0,
            "padded_tokens": 0,
        }

    def watch_queue(self, depth: Callable[[], int]) -> None:
        """Read the queue depth from ``depth()`` at every scrape, so the gauge is never stale."""
        self.queue_depth.set_function(lambda: float(depth()))

    def watch_cache(self, cache: PredictionCache) -> None:
        """Expose ``cache``'s counts (the ``computewise_cache_`` series) and add them to ``totals()``."""
        self._cache = cache
        self.registry.register(_CacheCollector(cache))

    def record_batch(self, record: BatchRecord) -> None:
        """One model call of the batcher (its ``on_batch`` hook)."""
        padded = record.size * record.padded_length
        self.batch_size.observe(record.size)
        self.compute_s.observe(record.compute_s)
        for wait_s in record.queue_wait_s:
            self.queue_wait_s.observe(wait_s)
        self._real_tokens.inc(record.real_tokens)
        self._padded_tokens.inc(padded)
        with self._lock:
            self._totals["batches"] += 1
            self._totals["batched_inputs"] += record.size
            self._totals["failed_inputs"] += record.failed
            self._totals["compute_s"] += record.compute_s
            self._totals["real_tokens"] += record.real_tokens
            self._totals["padded_tokens"] += padded

    def record_response(self, code: int, inferences: int = 0) -> None:
        """One inference request answered with ``code``; ``inferences`` outputs were in its body."""
        counter = self._by_code.get(code)
        if counter is None:  # labels() hashes and locks on every call; a request should not pay for it
            counter = self._by_code[code] = self.requests.labels(code=str(code))
        counter.inc()
        if code == 429:
            self.rejections.inc()
        elif code >= 500:
            self.errors.inc()
        if inferences:
            self.inferences.inc(inferences)
        with self._lock:
            self._totals["requests"] += 1
            self._totals["inferences"] += inferences
            self._totals["rejections"] += code == 429
            self._totals["errors"] += code >= 500

    def record_duration(self, code: int, duration_s: float) -> None:
        """One inference request answered with ``code`` ``duration_s`` seconds after it arrived."""
        histogram = self._duration_by_code.get(code)
        if histogram is None:
            histogram = self._duration_by_code[code] = self.request_s.labels(code=str(code))
        histogram.observe(duration_s)

    def totals(self) -> dict[str, Any]:
        """Plain numbers so far (counts as ints): what the ledger's serving run summarises."""
        with self._lock:
            values = dict(self._totals)
        totals: dict[str, Any] = {key: value if key == "compute_s" else int(value) for key, value in values.items()}
        if self._cache is not None:
            stats = self._cache.stats()
            totals |= {"cache_hits": stats.hits, "cache_misses": stats.misses, "cache_evictions": stats.evictions}
        return totals

    def render(self) -> bytes:
        """The text exposition format 0.0.4 of every series (serve with ``CONTENT_TYPE``)."""
        return generate_latest(self.registry)
