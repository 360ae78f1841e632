"""computewise serve beside Ray Serve ``@serve.batch``: the same model, the same machine, the same load and SLO.

Both servers load one artifact (all-MiniLM-L6-v2 exported by ``computewise optimize``, built here
first unless ``--artifact`` is given) through the same ``computewise.serve.runners.load_runner``,
so they run the same ONNX Runtime session and tokenizer, behind the same HTTP API (routes, parsing,
validation, JSON); only the serving stack differs:

- computewise: ``computewise serve ARTIFACT`` (uvicorn, the cost-aware batcher), one process.
- Ray Serve: what ``computewise deploy ARTIFACT`` deploys
  (``computewise.scale.ray_serve.run_application``): one replica whose
  ``@serve.batch(max_batch_size=32, batch_wait_timeout_s=0.01)`` (Ray's documented defaults for
  batching) runs the model in a worker thread so the replica's event loop keeps accepting requests,
  ``max_ongoing_requests`` 64 so batches can fill (Ray's default of 5 would cap them), behind Ray's
  HTTP proxy on 127.0.0.1. Ray runs a local cluster of its own (GCS, raylet, controller, proxy):
  that weight is part of what is compared.

Each is warmed up with 20 sequential requests, then probed open-loop with single-sentence
requests from ``examples/sentences.txt``, and ``find_max_rate`` searches the highest rate whose
p99 stays within ``--slo-p99-ms`` with under 1 % errors and 429s: "at equal p99". Target:
computewise >= 1.3 x Ray Serve (exit 1 when missed, except with ``--quick``, the CI smoke run).

Usage: python benchmarks/serve_vs_ray.py [--slo-p99-ms 100] [--probe-s 8] [--quick] [--json OUT]
Needs the ray extra: pip install 'computewise[ray,serve,optimize]'.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx

from computewise.serve.loadtest import find_max_rate
from computewise.system.cpu import cpu_model_name
from computewise.system.ports import free_port
from private_ray import QUIET_ENV, private_head
from serve_batching import POLICIES, ROOT, Server, add_probe_options, export_artifact, rate_ratio

TARGET_OVER_RAY = 1.3
RAY_MAX_BATCH = 32
RAY_BATCH_WAIT_S = 0.01
WARMUP_REQUESTS = 20


def probe(url: str, payloads: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    """Warm the server up (first calls pay for lazy initialisation on both stacks), then search its rate."""
    with httpx.Client(timeout=60.0) as client:
        for payload in payloads[:WARMUP_REQUESTS]:
            client.post(url, json=payload).raise_for_status()
    best, probes = find_max_rate(
        url, payloads, slo_p99_ms=args.slo_p99_ms, duration_s=args.probe_s, low_rps=args.low_rps, high_rps=args.high_rps
    )
    return {"max_rate_rps": best, "probes": [p.to_dict() for p in probes]}


def measure_computewise(artifact: Path, payloads: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    server = Server(artifact, POLICIES["cost"], args.slo_p99_ms)
    try:
        server.wait_ready()
        return probe(f"{server.url}/v1/models/{artifact.name}/infer", payloads, args)
    finally:
        server.stop()


def measure_ray(artifact: Path, payloads: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    os.environ.update(QUIET_ENV)
    from ray import serve

    from computewise.scale.ray_cluster import connected
    from computewise.scale.ray_serve import RayServeOptions, run_application

    options = RayServeOptions(max_batch_size=RAY_MAX_BATCH, batch_wait_s=RAY_BATCH_WAIT_S)
    with private_head(num_cpus=os.cpu_count() or 2, dashboard=False) as head, connected(head.gcs_address):
        try:
            deployment = run_application(str(artifact), port=free_port(), options=options)
            return probe(f"{deployment.url}/v1/models/{deployment.app_name}/infer", payloads, args)
        finally:
            serve.shutdown()  # type: ignore[no-untyped-call]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_probe_options(parser)
    parser.add_argument("--quick", action="store_true", help="2 s probes, 1 s SLO (CI smoke run; figures not checked)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.quick:
        args.probe_s, args.low_rps, args.high_rps, args.slo_p99_ms = 2.0, 2.0, 100.0, 1000.0
    try:
        import ray
    except ImportError:
        sys.exit("Ray Serve is not installed: pip install 'computewise[ray]'")
    sentences = (ROOT / "examples" / "sentences.txt").read_text().splitlines()
    payloads = [{"inputs": [sentence]} for sentence in sentences]
    print(
        f"hardware: {cpu_model_name()}, {os.cpu_count()} logical cores; ray {ray.__version__}; "
        f"SLO p99 <= {args.slo_p99_ms:g} ms, {args.probe_s:g} s per probe"
    )
    with tempfile.TemporaryDirectory(prefix="computewise-serve-vs-ray-") as scratch:
        artifact = args.artifact or export_artifact(Path(scratch), sentences)
        results = {
            "computewise": measure_computewise(artifact, payloads, args),
            "ray-serve": measure_ray(artifact, payloads, args),
        }
    for name, result in results.items():
        rate = result["max_rate_rps"]
        sustained = f"{rate:7.1f} req/s" if rate else "no probed rate"
        print(f"  {name:12s} sustains {sustained} at p99 <= {args.slo_p99_ms:g} ms")
    ours, theirs = results["computewise"]["max_rate_rps"] or 0.0, results["ray-serve"]["max_rate_rps"] or 0.0
    ratio = rate_ratio(ours, theirs)
    ok = ratio >= TARGET_OVER_RAY
    print(f"  {'PASS' if ok else 'FAIL'}  computewise / Ray Serve = {ratio:.2f}x >= {TARGET_OVER_RAY}")
    if args.json:
        args.json.write_text(json.dumps({"results": results, "computewise_over_ray": ratio}, indent=2) + "\n")
    if not args.quick and not ok:
        sys.exit(1)


if __name__ == "__main__":
    main()
