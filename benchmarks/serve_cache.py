"""What the prediction cache buys one server: the highest rate at p99 <= the SLO with half the requests repeated.

Serves all-MiniLM-L6-v2 (the fused FP32 ONNX artifact exported by ``computewise optimize``, built
here first unless ``--artifact`` is given, as ``serve_batching.py`` does) twice on 127.0.0.1 with the
same flags (cost-aware batching, max batch 32, the SLO's admission, the same ONNX Runtime threads):
(a) without a cache, (b) with ``--cache-size 256MB``. Each is probed open-loop (Poisson arrivals) by
``find_max_rate`` with ``--repeat-ratio 0.5``: half the requests repeat a sentence sent earlier in
the same probe, the other half are sentences never sent before (``examples/sentences.txt`` numbered
into distinct variants, enough for the whole search, so no probe warms the cache for the next).

Target: (b) >= 1.8 x (a) on a CPU. The cached server's hit ratio is read from its ``/metrics``.
``--rounds 3`` measures a, b, a, b, a, b and compares the best rate of each server (other work on a
shared machine only ever lowers a sustained rate), printing the medians beside it. Exit status 1 when missed (not in
``--quick`` mode, which is a structure test: short probes, a loose SLO).

Usage: python benchmarks/serve_cache.py [--slo-p99-ms 100] [--probe-s 8] [--rounds 1] [--quick] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx

from computewise.serve.loadtest import find_max_rate
from computewise.system.cpu import cpu_model_name
from serve_batching import POLICIES, ROOT, Server, add_probe_options, export_artifact

TARGET_OVER_UNCACHED = 1.8
CACHE_FLAGS = ["--cache-size", "256MB", "--cache-ttl", "10m"]
DISTINCT_PAYLOADS = 60_000  # more than a whole search sends: fresh requests never repeat across probes


def distinct_payloads(sentences: list[str], count: int) -> list[dict[str, Any]]:
    """``count`` different single-sentence requests: the real sentences, then numbered variants of them.

    A number appended to a sentence changes its tokens a little and its length by one or two; the
    length mix stays that of the real sentences, and every body is new to the cache.
    """
    payloads = []
    for index in range(count):
        sentence = sentences[index % len(sentences)]
        round_ = index // len(sentences)
        payloads.append({"inputs": [sentence if round_ == 0 else f"{sentence} ({round_})"]})
    return payloads


def cache_counts(url: str) -> dict[str, float]:
    """hits and misses from the server's /metrics (Prometheus text)."""
    counts = {"hits": 0.0, "misses": 0.0}
    for line in httpx.get(f"{url}/metrics", timeout=5.0).text.splitlines():
        for name in counts:
            if line.startswith(f"computewise_cache_{name}_total "):
                counts[name] = float(line.split()[1])
    return counts


def measure(artifact: Path, cached: bool, payloads: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    flags = POLICIES["cost"] + (CACHE_FLAGS if cached else [])
    server = Server(artifact, flags, args.slo_p99_ms)
    try:
        server.wait_ready()
        url = f"{server.url}/v1/models/{artifact.name}/infer"
        best, probes = find_max_rate(
            url,
            payloads,
            slo_p99_ms=args.slo_p99_ms,
            duration_s=args.probe_s,
            low_rps=args.low_rps,
            high_rps=args.high_rps,
            repeat_ratio=args.repeat_ratio,
        )
        counts = cache_counts(server.url) if cached else None
    finally:
        server.stop()
    looked_up = (counts["hits"] + counts["misses"]) if counts else 0
    return {
        "cached": cached,
        "max_rate_rps": best,
        "hit_ratio": counts["hits"] / looked_up if counts and looked_up else None,
        "probes": [p.to_dict() for p in probes],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_probe_options(parser)
    parser.add_argument("--repeat-ratio", type=float, default=0.5)
    parser.add_argument("--rounds", type=int, default=1, help="uncached/cached pairs measured in turn")
    parser.add_argument("--quick", action="store_true", help="2 s probes, 1 s SLO (CI structure run; not checked)")
    parser.add_argument("--json", type=Path)
    parser.set_defaults(high_rps=1000.0)
    args = parser.parse_args()
    if args.quick:
        args.probe_s, args.high_rps, args.slo_p99_ms, args.rounds = 2.0, 40.0, 1000.0, 1
    sentences = (ROOT / "examples" / "sentences.txt").read_text().splitlines()
    payloads = distinct_payloads(sentences, DISTINCT_PAYLOADS)
    print(
        f"hardware: {cpu_model_name()}, {os.cpu_count()} logical cores; SLO p99 <= {args.slo_p99_ms:g} ms, "
        f"{args.probe_s:g} s per probe, repeat ratio {args.repeat_ratio:g}, cache {' '.join(CACHE_FLAGS)}; "
        f"load average {os.getloadavg()[0]:.1f} (other work on this machine shares its cores)"
    )
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="computewise-serve-cache-") as scratch:
        artifact = args.artifact or export_artifact(Path(scratch), sentences)
        for _round in range(args.rounds):
            for cached in (False, True):
                runs.append(measure(artifact, cached, payloads, args))
                run = runs[-1]
                hits = f", hit ratio {run['hit_ratio']:.2f}" if run["hit_ratio"] is not None else ""
                rate = f"{run['max_rate_rps']:.1f} req/s" if run["max_rate_rps"] else "no probed rate"
                label = "cached  " if cached else "uncached"
                load = f", load average {os.getloadavg()[0]:.1f}"
                print(f"  {label} sustains {rate} at p99 <= {args.slo_p99_ms:g} ms{hits}{load}")
    # Other work on the machine only ever lowers a sustained rate, so the best of the rounds is each server's
    # least disturbed measure; the medians are printed beside it.
    uncached = max(r["max_rate_rps"] or 0.0 for r in runs if not r["cached"])
    cached_rate = max(r["max_rate_rps"] or 0.0 for r in runs if r["cached"])
    medians = [statistics.median(r["max_rate_rps"] or 0.0 for r in runs if r["cached"] is c) for c in (False, True)]
    if args.rounds > 1:
        print(f"  medians of {args.rounds} rounds: uncached {medians[0]:.1f}, cached {medians[1]:.1f} req/s")
        print(f"  best of {args.rounds} rounds: uncached {uncached:.1f}, cached {cached_rate:.1f} req/s")
    # No rate for either server means the machine, not the cache, decided: no ratio, and not a pass.
    ratio = cached_rate / uncached if uncached and cached_rate else None
    ok = ratio is not None and ratio >= TARGET_OVER_UNCACHED
    shown = f"{ratio:.2f}x" if ratio is not None else "undefined (a server sustained no probed rate)"
    print(f"  {'PASS' if ok else 'FAIL'}  cached / uncached = {shown} >= {TARGET_OVER_UNCACHED}")
    if args.json:
        figures = {
            "uncached_rps": uncached,
            "cached_rps": cached_rate,
            "cached_over_uncached": ratio,
            "median_uncached_rps": medians[0],
            "median_cached_rps": medians[1],
            "runs": runs,
        }
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    if not args.quick and not ok:
        sys.exit(1)


if __name__ == "__main__":
    main()
