"""The prediction cache: its LRU, TTL and byte bound against a second implementation, and in the server.

``ReferenceCache`` below is a deliberately naive model (a list in recency order, scanned on every
call) of what ``PredictionCache`` promises; random operations drive both and every answer, count
and byte total must agree. The byte count is checked against ``tracemalloc``'s measure of what the
entries really hold. In the server: a hit answers byte for byte what the model answered, the
``/metrics`` counts match the requests sent, and an artifact whose outputs depend on its batch
neighbours is refused.
"""

from __future__ import annotations

import gc
import json
import os
import random
import subprocess
import sys
import threading
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from computewise.errors import InputError
from computewise.serve.cache import PredictionCache, cache_key, canonical_json

REPO_ROOT = Path(__file__).resolve().parents[2]


class FakeClock:
    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


@dataclass
class ReferenceCache:
    """LRU + TTL + byte bound, the obvious slow way: ``order`` holds (key, value, stored_at) oldest use first."""

    max_bytes: int
    ttl_s: float | None
    clock: FakeClock
    order: list[tuple[bytes, bytes, float]]
    hits: int = 0
    misses: int = 0
    evictions: int = 0
    expirations: int = 0

    def size(self, key: bytes, value: bytes) -> int:
        return PredictionCache.entry_bytes(key, value)

    def total(self) -> int:
        return sum(self.size(k, v) for k, v, _ in self.order)

    def get(self, key: bytes) -> bytes | None:
        for position, (k, v, stored_at) in enumerate(self.order):
            if k == key:
                del self.order[position]
                if self.ttl_s is not None and self.clock() >= stored_at + self.ttl_s:
                    self.expirations += 1
                    break
                self.order.append((k, v, stored_at))
                self.hits += 1
                return v
        self.misses += 1
        return None

    def put(self, key: bytes, value: bytes) -> bool:
        self.order = [entry for entry in self.order if entry[0] != key]
        if self.size(key, value) > self.max_bytes:
            return False
        while self.total() + self.size(key, value) > self.max_bytes:
            self.order.pop(0)
            self.evictions += 1
        self.order.append((key, value, self.clock()))
        return True


@pytest.mark.parametrize("ttl_s", [None, 5.0])
def test_lru_ttl_and_byte_bound_agree_with_a_reference_model(ttl_s: float | None) -> None:
    rng = random.Random(20)
    clock = FakeClock()
    max_bytes = 3000
    cache = PredictionCache(max_bytes, ttl_s, clock)
    reference = ReferenceCache(max_bytes, ttl_s, clock, [])
    keys = [cache_key("model", n) for n in range(40)]
    for _step in range(5000):
        key = rng.choice(keys)
        if rng.random() < 0.5:
            assert cache.get(key) == reference.get(key)
        else:
            value = bytes(rng.randrange(256) for _ in range(rng.choice([1, 50, 300, 900, 3000])))
            assert cache.put(key, value) == reference.put(key, value)
        clock.now_s += rng.random()
        stats = cache.stats()
        assert stats.bytes == reference.total() <= max_bytes
        assert stats.entries == len(reference.order)
    stats = cache.stats()
    assert (stats.hits, stats.misses, stats.evictions, stats.expirations) == (
        reference.hits,
        reference.misses,
        reference.evictions,
        reference.expirations,
    )
    assert stats.hits > 100 and stats.evictions > 100 and (ttl_s is None or stats.expirations > 10)


def test_counted_bytes_are_what_the_entries_really_hold() -> None:
    """tracemalloc measures the allocations of 2,000 entries; the cache's count must be close to it."""
    cache = PredictionCache(1 << 30, ttl_s=60)
    rng = random.Random(0)
    keys = [cache_key("model", n) for n in range(2000)]
    gc.collect()
    tracemalloc.start()
    try:
        before, _peak = tracemalloc.get_traced_memory()
        for n, key in enumerate(keys):
            cache.put(key, json.dumps([rng.random() for _ in range(n % 50 + 1)]).encode())
        after, _peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # The keys were allocated before tracing: add them as the cache counts them.
    measured = after - before + sum(sys.getsizeof(key) for key in keys)
    counted = cache.stats().bytes
    assert measured <= counted <= 1.2 * measured, (counted, measured)


def test_threads_hammering_the_cache_keep_the_byte_bound() -> None:
    cache = PredictionCache(20_000, ttl_s=0.05)
    broken: list[str] = []

    def hammer(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(3000):
            key = cache_key("model", rng.randrange(200))
            if cache.get(key) is None:
                cache.put(key, os.urandom(rng.randrange(1, 600)))
            stats = cache.stats()
            if stats.bytes > stats.max_bytes:
                broken.append(f"{stats.bytes} > {stats.max_bytes}")

    threads = [threading.Thread(target=hammer, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stats = cache.stats()
    assert not broken
    assert stats.hits + stats.misses == 8 * 3000
    # What the cache says it holds is what its entries add up to.
    held = sum(entry.size_bytes for entry in cache._entries.values())
    assert stats.bytes == held <= 20_000 and stats.entries == len(cache._entries)


def test_keys_normalise_parsing_only_and_name_the_model() -> None:
    assert canonical_json({"b": [1.0, 2], "a": "x"}) == canonical_json(json.loads('{ "a" : "x", "b": [1e0, 2] }'))
    assert cache_key("m", [100.0]) == cache_key("m", json.loads("[1e2]"))
    assert cache_key("m", [100]) != cache_key("m", [100.0])  # an int64 array is not a float32 one
    assert cache_key("m", "A cat") != cache_key("m", "a cat") != cache_key("m", "a  cat")  # text is not folded
    assert cache_key("artifact-a", "a cat") != cache_key("artifact-b", "a cat")


def test_bad_sizes_are_input_errors() -> None:
    with pytest.raises(InputError):
        PredictionCache(0)
    with pytest.raises(InputError):
        PredictionCache(1000, ttl_s=0)


# -- the rule: which runners may be cached ------------------------------------------------------


def test_cache_identity_follows_batch_invariance_and_the_artifact_sha(minilm_artifact: Path) -> None:
    from computewise.serve.runners import ArtifactRunner, EntryPointRunner, cache_identity, load_runner

    runner = load_runner(str(minilm_artifact))
    assert isinstance(runner, ArtifactRunner)
    assert runner.artifact.manifest.batch_invariant is True
    identity = cache_identity(runner)
    assert cache_identity(load_runner("echo")) == "echo"

    def with_manifest(**changes: Any) -> ArtifactRunner:
        artifact = replace(runner.artifact, manifest=replace(runner.artifact.manifest, **changes))
        return ArtifactRunner(artifact, runner.name)

    # Another export (another model SHA-256) never shares entries.
    assert cache_identity(with_manifest(sha256="0" * 64)) != identity
    for invariant, reason in ((False, "depends on the other inputs"), (None, "not measured")):
        with pytest.raises(InputError, match=reason):
            cache_identity(with_manifest(batch_invariant=invariant))
    with pytest.raises(InputError, match="nothing tells"):
        cache_identity(EntryPointRunner("pkg.mod:fn", list, "fn"))


def test_minilm_outputs_alone_and_in_a_padded_batch_agree_within_the_stated_tolerance(
    minilm_artifact: Path, sentences: list[str]
) -> None:
    """The measurement behind caching MiniLM: each sentence alone vs inside a batch padded to its longest."""
    from computewise.serve.runners import load_runner

    runner = load_runner(str(minilm_artifact), threads=1)
    batch = sorted(sentences[:16], key=len)  # the shortest sentence is padded the most
    together = np.asarray(runner.run(batch))
    alone = np.asarray([runner.run([sentence])[0] for sentence in batch])
    assert np.abs(together - alone).max() < 1e-5  # the tolerance runners.cache_identity states


# -- in the server ------------------------------------------------------------------------------


def test_hits_are_byte_identical_to_the_model_and_metrics_count_them(minilm_artifact: Path) -> None:
    from prometheus_client.parser import text_string_to_metric_families
    from starlette.testclient import TestClient

    from computewise.serve.app import create_app
    from computewise.serve.batcher import Batcher, BatchPolicy
    from computewise.serve.metrics import ServeMetrics
    from computewise.serve.runners import load_runner

    runner = load_runner(str(minilm_artifact), threads=1)

    def app(cache: PredictionCache | None) -> Any:
        metrics = ServeMetrics()
        batcher = Batcher(runner, BatchPolicy(mode="none"), on_batch=metrics.record_batch)
        return create_app(runner, batcher, metrics, cache=cache)

    url = f"/v1/models/{runner.name}/infer"
    requests = ["a cat sat", "a dog ran", "a cat sat", "a cat sat", "the sun", "a dog ran"]
    with TestClient(app(None)) as plain:
        model_answers = {text: plain.post(url, json={"input": text}).content for text in set(requests)}
    cache = PredictionCache(1 << 20)
    with TestClient(app(cache)) as cached:
        answers = [cached.post(url, json={"input": text}) for text in requests]
        both = cached.post(url, json={"inputs": ["a cat sat", "never seen"]})
        scraped = cached.get("/metrics").text
    assert all(answer.status_code == 200 for answer in answers)
    for text, answer in zip(requests, answers, strict=True):
        assert answer.content == model_answers[text]  # hit or miss, the bytes the model's answer has
    assert both.json()["outputs"][0] == json.loads(model_answers["a cat sat"])["outputs"][0]
    samples = {
        (sample.name, sample.labels.get("reason")): sample.value
        for family in text_string_to_metric_families(scraped)
        for sample in family.samples
    }
    distinct = len(set(requests)) + 1  # "never seen"
    looked_up = len(requests) + 2
    assert samples[("computewise_cache_misses_total", None)] == distinct
    assert samples[("computewise_cache_hits_total", None)] == looked_up - distinct
    assert samples[("computewise_cache_evictions_total", "size")] == 0
    assert samples[("computewise_cache_entries", None)] == distinct
    assert samples[("computewise_cache_bytes", None)] == cache.stats().bytes > 0
    assert samples[("computewise_serve_inferences_total", None)] == looked_up


def test_a_tiny_cache_evicts_and_counts_it() -> None:
    from starlette.testclient import TestClient

    from computewise.serve.app import create_app
    from computewise.serve.batcher import Batcher, BatchPolicy
    from computewise.serve.metrics import ServeMetrics
    from computewise.serve.runners import load_runner

    runner = load_runner("echo")
    metrics = ServeMetrics()
    one_entry = PredictionCache.entry_bytes(cache_key("echo", 0), b"1000")
    cache = PredictionCache(2 * one_entry)  # two small outputs fit, a third evicts the least recent
    app = create_app(runner, Batcher(runner, BatchPolicy(mode="none")), metrics, cache=cache)
    with TestClient(app) as client:
        for value in (1000, 1001, 1000, 1002, 1001):  # 1001 is evicted by 1002, so its return is a miss
            assert client.post("/v1/models/echo/infer", json={"input": value}).json()["outputs"] == [value]
    stats = cache.stats()
    assert (stats.hits, stats.misses, stats.evictions, stats.entries) == (1, 4, 2, 2)
    assert metrics.totals()["cache_hits"] == 1


# -- the CLI ------------------------------------------------------------------------------------


def computewise(*args: str, cwd: Path = REPO_ROOT) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "computewise.cli.app", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False, cwd=cwd)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["serve", "echo", "--cache-size", "1KB"], "--cache-size must be between"),
        (["serve", "echo", "--cache-size", "lots"], "--cache-size"),
        (["serve", "echo", "--cache-size", "1MB", "--cache-ttl", "0s"], "--cache-ttl must be between"),
        (["serve", "echo", "--cache-ttl", "10m"], "--cache-ttl needs --cache-size"),
        (["serve", "cache_models:echo", "--cache-size", "1MB", "--port", "0"], "nothing tells"),
        (["loadtest", "http://127.0.0.1:9/x", "--repeat-ratio", "1.5"], "--repeat-ratio must be between"),
        (["plan", "serve", "--capacity-rps", "40", "--peak-rps", "10", "--hourly-usd", "1", "--cache-hit-ratio", "1"],
         "--cache-hit-ratio must be between"),
    ],
)  # fmt: skip
def test_bad_cache_flags_exit_2(args: list[str], message: str, tmp_path: Path) -> None:
    if args[0] == "serve":
        args = [*args, "--db", f"sqlite:///{tmp_path / 'ledger.sqlite'}"]
    # An entry point that loads fine: the refusal is about caching it, not about loading it.
    (tmp_path / "cache_models.py").write_text("def echo():\n    return lambda items: list(items)\n")
    done = computewise(*args, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and "To fix" in done.stderr


def test_plan_serve_shows_the_replicas_and_dollars_a_cache_saves(json_schema: Callable[[object, str], None]) -> None:
    """Hand-computed: 40 req/s per replica at 65 % = 26; peak 200 -> ceil(7.7) = 8 replicas, half of it
    (100) -> ceil(3.8) = 4; always-on at $0.10/h for 730 h: 8 x $73 = $584 -> 4 x $73 = $292."""
    done = computewise(
        "plan", "serve", "--capacity-rps", "40", "--peak-rps", "200", "--hourly-usd", "0.10",
        "--target-utilization", "0.65", "--cache-hit-ratio", "0.5", "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    json_schema(data, "plan-serve")
    cache = data["cache"]
    assert (cache["replicas_at_peak"], cache["cached_replicas_at_peak"]) == (8, 4)
    assert cache["monthly_usd"]["always-on"] == pytest.approx(584.0)
    assert cache["cached_monthly_usd"]["always-on"] == pytest.approx(292.0)
    assert cache["saved_monthly_usd"]["always-on"] == pytest.approx(292.0)
    # Over all the requests, hits included: $292 / (200 req/s x 3600 x 730) x 1000.
    assert cache["cached_usd_per_1000_requests"]["always-on"] == pytest.approx(292.0 / (200 * 3600 * 730) * 1000)
