"""What watching a job costs: the sampler's own CPU, and the slowdown of a CPU-bound job it watches.

Targets (issue 3): the sampler at 1 Hz costs <= 1 % of one core, and a watched CPU-bound job runs
within 1 % of its unwatched speed.

(a) Sampler cost. The whole pipeline of ``computewise run`` (process tree, host, GPU source, energy,
    idle rule, batched writes with heartbeats to a SQLite ledger) watches an idle child. The CPU time
    of this process (``getrusage``: the sampler and writer threads; the main thread only sleeps) over
    the window, divided by the window, is the share of one core. Measured at 1 Hz, and at 20 Hz to
    get the cost of one sample precisely (cost at 1 Hz = cost per sample x 1/s).
(b) Job slowdown. The same CPU-bound child (a fixed number of loop iterations; it times itself with
    ``perf_counter``, so start-up is excluded) runs alternately without and with the sampler at
    1 Hz; the ratio of the medians is reported. On a machine with fewer free cores than the job's
    threads plus one, the sampler competes with the job; with a spare core it should not.

Absolute times on a shared machine are noise; the ratios are measured in the same run.

Usage: python benchmarks/monitor_overhead.py [--quick] [--json OUT] [--fake-gpu a100-training]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from computewise.catalog import load_catalog
from computewise.ledger import Ledger, NewRun, PriceSnapshot
from computewise.monitor.energy import EnergyModel
from computewise.monitor.gpu import ENV_FAKE_GPU, GpuSource, open_gpu_source
from computewise.monitor.process import ProcessTreeSampler
from computewise.monitor.sampler import LedgerWriter, Sampler, Sink
from computewise.system.cpu import cpu_model_name

JOB = """
import sys, time
n = int(sys.argv[1])
start = time.perf_counter()
x = 0
for i in range(n):
    x += i * i
print(time.perf_counter() - start)
"""


def _process_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@contextmanager
def _watching(
    pid: int, interval_s: float, gpu: GpuSource, ledger: Ledger, sinks: Sequence[Sink] = ()
) -> Iterator[Sampler]:
    """The pipeline of ``computewise run`` around ``pid``: sampler at ``interval_s``, writer flushing each second."""
    run_id = ledger.start_run(
        NewRun(
            kind="command",
            command="benchmark",
            argv=("benchmark",),
            tags={},
            host=platform.node(),
            pid=os.getpid(),
            user="benchmark",
            cwd=os.getcwd(),
            started_at_s=time.time(),
            interval_s=interval_s,
            price=PriceSnapshot(
                1.0, "benchmark", "benchmark", assumed=True, carbon_g_per_kwh=475.0, carbon_source="benchmark", pue=1.0
            ),
        )
    )
    writer = LedgerWriter(ledger, run_id, flush_s=1.0)
    energy = EnergyModel.from_catalog(load_catalog(), gpu.status().devices)
    sampler = Sampler(run_id, ProcessTreeSampler(pid), gpu, energy, interval_s, [writer, *sinks])
    writer.start()
    sampler.start()
    try:
        yield sampler
    finally:
        sampler.stop()
        writer.close()


def sampler_cost(interval_s: float, window_s: float, gpu: GpuSource, ledger: Ledger) -> dict[str, float]:
    """CPU of this process while it watches an idle child for ``window_s``: share of one core, cost per sample."""
    child = subprocess.Popen([sys.executable, "-c", "import time\ntime.sleep(3600)"])
    times: list[float] = []
    try:
        with _watching(child.pid, interval_s, gpu, ledger, [lambda row, gpu_rows: times.append(row.t_s)]):
            time.sleep(min(interval_s, 1.0) * 1.5)  # the first tick and flush happen outside the window
            cpu_start, wall_start, ticks_before = _process_cpu_s(), time.monotonic(), len(times)
            time.sleep(window_s)
            cpu_s, wall_s, ticks = (
                _process_cpu_s() - cpu_start,
                time.monotonic() - wall_start,
                len(times) - ticks_before,
            )
    finally:
        child.kill()
        child.wait()
    return {
        "interval_s": interval_s,
        "window_s": wall_s,
        "samples": ticks,
        "core_pct": 100.0 * cpu_s / wall_s,
        "cpu_ms_per_sample": 1000.0 * cpu_s / max(1, ticks),
    }


def job_slowdown(iterations: int, pairs: int, gpu: GpuSource, ledger: Ledger) -> dict[str, float]:
    plain: list[float] = []
    watched: list[float] = []
    for _ in range(pairs):
        plain.append(_run_job(iterations))
        watched.append(_run_job(iterations, gpu, ledger))
    plain_s, watched_s = statistics.median(plain), statistics.median(watched)
    return {
        "iterations": iterations,
        "pairs": pairs,
        "unwatched_s": plain_s,
        "watched_s": watched_s,
        "ratio": watched_s / plain_s,
        "ratio_of_fastest": min(watched) / min(plain),  # least disturbed by other load on a shared machine
        "spread_pct": 100.0 * (max(plain) - min(plain)) / plain_s,
    }


def _run_job(iterations: int, gpu: GpuSource | None = None, ledger: Ledger | None = None) -> float:
    argv = [sys.executable, "-c", JOB, str(iterations)]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    if gpu is None or ledger is None:
        out, _ = process.communicate()
    else:
        with _watching(process.pid, 1.0, gpu, ledger):
            out, _ = process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"the benchmark job failed with exit code {process.returncode}")
    return float(out)


def _calibrate(target_s: float) -> int:
    iterations = 200_000
    while True:
        took_s = _run_job(iterations)
        if took_s >= 0.2:
            return max(1, int(iterations * target_s / took_s))
        iterations *= 4


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a few seconds, for tests: figures are rough")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this file")
    parser.add_argument("--fake-gpu", default=None, help="replay this GPU trace instead of reading NVML")
    args = parser.parse_args(argv)
    env = dict(os.environ)
    if args.fake_gpu:
        env[ENV_FAKE_GPU] = args.fake_gpu
    gpu = open_gpu_source(env)
    status = gpu.status()
    hardware = f"{cpu_model_name()}, {os.cpu_count()} logical CPUs, Python {platform.python_version()}"
    print(f"hardware: {hardware}")
    print(f"GPU source: {status.reason}" + (f" ({len(status.devices)} GPU)" if status.available else ""))

    window_s, fast_window_s, job_target_s, pairs = (3.0, 1.0, 0.3, 2) if args.quick else (30.0, 5.0, 3.0, 7)
    with tempfile.TemporaryDirectory() as folder:
        ledger = Ledger.open(f"sqlite:///{Path(folder) / 'ledger.sqlite'}")
        try:
            at_1hz = sampler_cost(1.0, window_s, gpu, ledger)
            at_20hz = sampler_cost(0.05, fast_window_s, gpu, ledger)
            slowdown = job_slowdown(_calibrate(job_target_s), pairs, gpu, ledger)
        finally:
            ledger.close()
            gpu.close()

    print(
        f"(a) sampler at 1 Hz, ledger writes included: {at_1hz['core_pct']:.3f} % of one core "
        f"over {at_1hz['window_s']:.1f} s, {at_1hz['cpu_ms_per_sample']:.2f} ms per sample (target <= 1 %)"
    )
    print(
        f"    at 20 Hz for {at_20hz['window_s']:.1f} s (ledger writes shared by 20 samples): "
        f"{at_20hz['cpu_ms_per_sample']:.2f} ms of CPU per sample"
    )
    print(
        f"(b) CPU-bound job, median of {pairs} alternating pairs: unwatched {slowdown['unwatched_s']:.3f} s, "
        f"watched at 1 Hz {slowdown['watched_s']:.3f} s, ratio {slowdown['ratio']:.4f} (target <= 1.01); "
        f"fastest of each {slowdown['ratio_of_fastest']:.4f}; "
        f"run-to-run spread of the unwatched job {slowdown['spread_pct']:.1f} %"
    )
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {
                    "hardware": hardware,
                    "gpu": status.reason,
                    "sampler_1hz": at_1hz,
                    "sampler_20hz": at_20hz,
                    "job": slowdown,
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
