"""What the serving stack itself costs: an echo model served end to end at batch 1.

Starts ``computewise serve echo`` (the model returns its inputs, so everything measured is HTTP,
JSON, the queue and the batcher) on 127.0.0.1 and offers ``--rate`` requests/s open-loop for
``--duration-s``. Target: >= 2,000 requests/s answered with p99 < 20 ms — the server is never the
bottleneck of a real model. The load generator shares the machine, so on a 2-core VM the figure is
a floor. Exit status 1 when missed (not in ``--quick`` mode).

Usage: python benchmarks/serve_overhead.py [--rate 2000] [--duration-s 10] [--quick] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from computewise.serve.eventloop import run_fast
from computewise.serve.loadtest import run_load
from computewise.system.cpu import cpu_model_name

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve_batching import Server  # the same child-process server

TARGET_RPS = 2000.0
TARGET_P99_MS = 20.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=TARGET_RPS)
    parser.add_argument("--duration-s", type=float, default=10.0)
    parser.add_argument("--quick", action="store_true", help="200 requests/s for 2 s (CI smoke run)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.quick:
        args.rate, args.duration_s = 200.0, 2.0
    print(
        f"hardware: {cpu_model_name()}, {os.cpu_count()} logical cores; echo model, batch 1, "
        f"{args.rate:g} req/s for {args.duration_s:g} s"
    )
    with tempfile.TemporaryDirectory(prefix="computewise-serve-overhead-") as scratch:
        server = Server(Path(scratch) / "echo", ["--batching", "none"], slo_p99_ms=1000.0, target="echo")
        try:
            server.wait_ready()
            result = run_fast(
                run_load(
                    f"{server.url}/v1/models/echo/infer",
                    [{"inputs": ["ping"]}],
                    rate_rps=args.rate,
                    duration_s=args.duration_s,
                )
            )
        finally:
            server.stop()
    if result.p50_ms is None or result.p99_ms is None:
        sys.exit("  FAIL  the server answered no request, so there is no latency to report")
    print(
        f"  answered {result.throughput_rps:.0f} req/s, p50 {result.p50_ms:.2f} ms, p99 {result.p99_ms:.2f} ms, "
        f"errors {result.error_rate:.2%}, rejected {result.rejection_rate:.2%}"
    )
    ok = result.throughput_rps >= TARGET_RPS * 0.98 and result.p99_ms < TARGET_P99_MS and result.error_rate == 0
    print(f"  {'PASS' if ok else 'FAIL'}  >= {TARGET_RPS:g} req/s with p99 < {TARGET_P99_MS:g} ms")
    if args.json:
        args.json.write_text(json.dumps(result.to_dict(), indent=2) + "\n")
    if not args.quick and not ok:
        sys.exit(1)


if __name__ == "__main__":
    main()
