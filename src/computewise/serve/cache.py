"""The prediction cache of ``computewise serve --cache-size``: repeated inputs answered from memory.

A hit never reaches the batcher or the model: the app looks every validated input up before it
submits anything and sends only the misses. What is stored is the output exactly as the server
encoded it in its first answer (JSON bytes), so a hit is byte-identical to that answer.

**Key.** SHA-256 over the model's identity and the canonical JSON of the *validated* input:
``json.dumps(item, sort_keys=True, separators=(",", ":"), ensure_ascii=False)``. Normalising means
only what parsing already did, for every runner kind alike: object key order and the whitespace,
escapes and number spelling of the request (``1e2`` and ``100.0`` are the same float; ``100`` is an
int and stays apart, because a list of ints becomes an int64 array where floats become float32).
Text is *not* normalised (no case folding, no Unicode NFC, no whitespace collapsing): the
tokenizer owns what is the same sentence, and a wrong hit would be a wrong answer. The identity is
the artifact's model SHA-256 plus its tokenizer files (``runners.cache_identity``), so a changed
artifact can never be answered from another one's entries.

**Bound.** ``max_bytes`` counts what an entry really holds: ``sys.getsizeof`` of the key and value
``bytes`` objects plus ``ENTRY_OVERHEAD_BYTES`` for the ordered-dict node and the entry record
(measured with ``tracemalloc`` in the tests, which keep the count within the real footprint). The
least recently used entries go first when a new one would not fit; an entry larger than the whole
bound is not stored. **TTL**: an entry older than ``ttl_s`` (from when it was stored) is a miss
and is dropped when met; it still counts in the bytes until then, which the bound allows for.

**Batch invariance.** Only a model whose output for an input does not depend on its batch
neighbours may be cached (``runners.cache_identity`` refuses the others): a hit returns the output
the input got in whatever batch it first ran in. See ``runners.cache_identity`` for the rule.

All methods are thread-safe (one lock): the app calls them on the event loop, tests from threads.
"""

from __future__ import annotations

import hashlib
import json
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from computewise.errors import InputError

__all__ = ["ENTRY_OVERHEAD_BYTES", "CacheStats", "PredictionCache", "cache_key", "canonical_json"]

ENTRY_OVERHEAD_BYTES = 240
"""Per entry beyond the key and value objects: the OrderedDict's hash slot and linked node, the
``_Entry`` record, its float and int. ``tracemalloc`` measures 185-200 B on CPython 3.11 (the table
grows in powers of two, so the share per entry varies); rounded up, so the bound errs on the safe side."""


def canonical_json(item: Any) -> bytes:
    """The input as the cache sees it: parsed values, sorted keys, no whitespace (see the module docstring)."""
    return json.dumps(item, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def cache_key(identity: str, item: Any) -> bytes:
    """SHA-256 (32 bytes) of the model's identity and the canonical input: equal only for the same model and input."""
    digest = hashlib.sha256(identity.encode())
    digest.update(b"\0")
    digest.update(canonical_json(item))
    return digest.digest()


@dataclass(frozen=True)
class CacheStats:
    """Counts since the cache was made, and what it holds now."""

    hits: int
    misses: int
    evictions: int
    expirations: int
    entries: int
    bytes: int
    max_bytes: int


@dataclass(frozen=True, slots=True)
class _Entry:
    value: bytes
    expires_s: float
    size_bytes: int


class PredictionCache:
    """A bytes-bounded LRU map from ``cache_key`` to output bytes, with a TTL; ``clock`` is injectable for tests."""

    def __init__(self, max_bytes: int, ttl_s: float | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        if max_bytes < 1:
            raise InputError(f"cache size {max_bytes} bytes must be positive", "e.g. --cache-size 256MB")
        if ttl_s is not None and not ttl_s > 0:
            raise InputError(f"cache TTL {ttl_s} s must be positive", "e.g. --cache-ttl 10m")
        self.max_bytes = max_bytes
        self.ttl_s = ttl_s
        self._clock = clock
        self._entries: OrderedDict[bytes, _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self._bytes = 0
        self._hits = 0
        self._misses = 0
        self._evictions = 0
        self._expirations = 0

    @staticmethod
    def entry_bytes(key: bytes, value: bytes) -> int:
        """What one entry costs against ``max_bytes``."""
        return sys.getsizeof(key) + sys.getsizeof(value) + ENTRY_OVERHEAD_BYTES

    def get(self, key: bytes) -> bytes | None:
        """The stored output (now the most recently used), or None: a miss, counted; an expired entry is dropped."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry.expires_s <= self._clock():
                self._remove(key, entry)
                self._expirations += 1
                entry = None
            if entry is None:
                self._misses += 1
                return None
            self._entries.move_to_end(key)
            self._hits += 1
            return entry.value

    def put(self, key: bytes, value: bytes) -> bool:
        """Store ``value``, evicting least recently used entries to fit; False when it alone exceeds the bound."""
        size = self.entry_bytes(key, value)
        expires_s = self._clock() + self.ttl_s if self.ttl_s is not None else float("inf")
        with self._lock:
            old = self._entries.get(key)
            if old is not None:
                self._remove(key, old)
            if size > self.max_bytes:
                return False
            while self._bytes + size > self.max_bytes:
                lru_key, lru = next(iter(self._entries.items()))
                self._remove(lru_key, lru)
                self._evictions += 1
            self._entries[key] = _Entry(value, expires_s, size)
            self._bytes += size
            return True

    def stats(self) -> CacheStats:
        with self._lock:
            return CacheStats(
                hits=self._hits,
                misses=self._misses,
                evictions=self._evictions,
                expirations=self._expirations,
                entries=len(self._entries),
                bytes=self._bytes,
                max_bytes=self.max_bytes,
            )

    def _remove(self, key: bytes, entry: _Entry) -> None:
        del self._entries[key]
        self._bytes -= entry.size_bytes
