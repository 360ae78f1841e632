"""Check what ``computewise run`` measures on a GPU (energy, utilization, idle time) against nvidia-smi and NVML.

Method
------
A small real training job (a pre-norm transformer, bf16 autocast, AdamW, random data; written to a
temporary file and run as its own process) goes through three phases: busy for a quarter of the
working time, ``time.sleep`` for a ninth of it (the GPU idles, so idle detection and idle cost are
exercised), busy again; 90 s by default: 20 s busy, 10 s asleep, 60 s busy. Each step ends with a
CUDA synchronize, so the phases start and stop on time. The job prints its own steps/s.

It runs as ``computewise run --db <temporary SQLite> --json --interval 1s -- python workload.py``
(``python -m computewise.cli.app``: this checkout). Two references watch the same GPUs meanwhile,
from one second before until one second after:

- ``nvidia-smi --query-gpu=timestamp,index,utilization.gpu,power.draw,memory.used
  --format=csv,noheader,nounits -lms 200``: its own process, its stdout on a pseudo-terminal so
  every line arrives as it is written (a pipe would buffer them), ended by its PID;
- the NVML energy counter (``nvmlDeviceGetTotalEnergyConsumption``) read directly through pynvml
  every 100 ms, interpolated to the window's ends.

Everything is compared over the run's own window, ``started_at_s`` to ``ended_at_s`` of its ledger
row, on the GPUs computewise recorded:

- energy: computewise's ``energy_kwh / price.pue`` against nvidia-smi's ``power.draw`` integrated
  with the trapezoid rule, and against the NVML counter's delta;
- mean GPU utilization: computewise's ``utilization.gpu_util_pct.mean`` (the mean of its samples,
  which the run summary prints) and its time-weighted ``gpu_util_pct_mean`` (which cost reports
  use) against the mean of nvidia-smi's ``utilization.gpu``, each reading held over the 200 ms
  before it;
- idle time: computewise's ``idle_s`` against the seconds nvidia-smi shows the GPUs' mean
  utilization below computewise's idle threshold (5 %).

Shown beside them, not gated: mean power, the two references against each other, and
sample-by-sample agreement (each computewise sample against nvidia-smi over the same interval).
nvidia-smi's timestamps are local wall-clock time; they are put on our clock by the whole number of
quarter hours (a time-zone difference) that separates them from the lines' arrival times (a line
whose timestamp has no milliseconds is placed at its arrival time).

Targets
-------
energy within 5 % of both references; mean utilization within 5 percentage points; idle seconds
within 3 s. A reference missing on a GPU machine fails the check (nothing was validated). Exit
status: 0 PASS, 1 FAIL (or the run failed), 2 no NVIDIA GPU, nvidia-smi or nvidia-ml-py.

Usage
-----
    python benchmarks/validate_run_gpu.py                        # 90 s on the local GPU(s)
    python benchmarks/validate_run_gpu.py --json run.json --markdown run.md   # table for docs
    python benchmarks/validate_run_gpu.py --seconds 180          # longer: smaller edge effects
    python benchmarks/validate_run_gpu.py --quick                # 20 s
    python benchmarks/validate_run_gpu.py --device cpu --quick   # smoke run without a GPU: no references
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import json
import math
import os
import platform
import pty
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from itertools import pairwise
from pathlib import Path
from typing import Any

from computewise.ledger import GpuSampleRow, Ledger, RunRow, SampleRow
from computewise.monitor.idle import IdleRule
from computewise.system.cpu import cpu_model_name

ENERGY_TARGET = 0.05  # relative
UTILIZATION_TARGET_PP = 5.0  # percentage points
IDLE_TARGET_S = 3.0
IDLE_UTIL_PCT = IdleRule().gpu_util_pct  # computewise's own threshold: both sides count idle the same way
SMI_PERIOD_MS = 200
COUNTER_PERIOD_S = 0.1
LEAD_S = 1.0  # references start this long before the run and stop this long after it
J_PER_KWH = 3.6e6
QUARTER_HOUR_S = 900.0
WORKLOAD_NO_CUDA = 3  # the workload's exit code when torch sees no CUDA device
SMI_QUERY = "timestamp,index,utilization.gpu,power.draw,memory.used"
SMI_ARGV = ("nvidia-smi", f"--query-gpu={SMI_QUERY}", "--format=csv,noheader,nounits", "-lms", str(SMI_PERIOD_MS))
NO_DRIVER = "n/a: no NVIDIA driver"
NO_GPU_HINT = "run on a machine with an NVIDIA GPU, or use --device cpu --quick for a smoke run"
# Only stamps with milliseconds (what -lms prints): whole seconds would pile 5 readings on one instant.
_TIMESTAMP_FORMATS = ("%Y/%m/%d %H:%M:%S.%f", "%Y-%m-%d %H:%M:%S.%f")

Point = tuple[float, float]  # (epoch seconds, value)


# ----------------------------------------------------------------------------------- nvidia-smi lines


@dataclass(frozen=True)
class SmiSample:
    """One GPU in one nvidia-smi line; None where it printed ``[N/A]`` or ``[Not Supported]``."""

    t_s: float  # the line's timestamp as epoch seconds (its arrival time if it has no milliseconds)
    received_s: float
    index: int
    utilization_pct: float | None
    power_w: float | None
    memory_used_mib: float | None


def _number(text: str) -> float | None:
    words = text.split()
    if not words:
        return None
    try:
        value = float(words[0])  # "698.12", or "698.12 W" if nounits was ignored
    except ValueError:
        return None  # [N/A], [Not Supported], [Unknown Error]
    return value if math.isfinite(value) else None


def _timestamp_s(text: str) -> float | None:
    for form in _TIMESTAMP_FORMATS:
        try:
            return datetime.strptime(text.strip(), form).timestamp()  # naive: local time, as nvidia-smi prints it
        except ValueError:
            continue
    return None


def parse_smi_line(line: str, received_s: float) -> SmiSample | None:
    """A ``timestamp, index, utilization.gpu, power.draw, memory.used`` line; None if it is not one."""
    fields = [f.strip() for f in line.strip().split(",")]
    if len(fields) != 5:
        return None
    try:
        index = int(fields[1])
    except ValueError:
        return None
    stamped_s = _timestamp_s(fields[0])
    return SmiSample(
        t_s=received_s if stamped_s is None else stamped_s,
        received_s=received_s,
        index=index,
        utilization_pct=_number(fields[2]),
        power_w=_number(fields[3]),
        memory_used_mib=_number(fields[4]),
    )


def clock_offset_s(samples: Sequence[SmiSample]) -> float:
    """What to add to nvidia-smi's timestamps to put them on our clock: whole quarter hours (time zones).

    The lines arrive within milliseconds of their timestamps, so any larger gap is a time-zone
    difference between nvidia-smi's local time and ours; rounding keeps the millisecond stamps.
    """
    if not samples:
        return 0.0
    gap_s = statistics.median(s.received_s - s.t_s for s in samples)
    return round(gap_s / QUARTER_HOUR_S) * QUARTER_HOUR_S


def parse_smi_output(lines: Sequence[tuple[float, str]]) -> tuple[list[SmiSample], list[str], float]:
    """Samples on our clock (by GPU, then time), the lines that were not samples, and the clock offset applied."""
    parsed: list[SmiSample] = []
    other: list[str] = []
    for received_s, line in lines:
        sample = parse_smi_line(line, received_s)
        if sample is not None:
            parsed.append(sample)
        elif line.strip():
            other.append(line.strip())  # an error nvidia-smi printed instead of a sample
    offset_s = clock_offset_s(parsed)
    shifted = [replace(s, t_s=s.t_s + offset_s) for s in parsed]
    return sorted(shifted, key=lambda s: (s.index, s.t_s)), other, offset_s


def smi_series(samples: Sequence[SmiSample], index: int, what: str) -> list[Point]:
    """One GPU's ``utilization_pct`` or ``power_w`` readings, sorted, None readings left out."""
    return points([(s.t_s, getattr(s, what)) for s in samples if s.index == index])


# ------------------------------------------------------------------------------------- series maths


def points(raw: Sequence[tuple[float, float | None]]) -> list[Point]:
    """Sorted by time, None values dropped, one value per instant (the last one)."""
    by_time: dict[float, float] = {}
    for t_s, value in sorted(raw, key=lambda p: p[0]):
        if value is not None:
            by_time[t_s] = value
    return sorted(by_time.items())


def interpolate(series: Sequence[Point], t_s: float) -> float | None:
    """Linear interpolation at ``t_s``; None outside the series' span."""
    if not series or t_s < series[0][0] or t_s > series[-1][0]:
        return None
    times = [p[0] for p in series]
    i = bisect.bisect_left(times, t_s)
    if times[i] == t_s:
        return series[i][1]
    (t0, v0), (t1, v1) = series[i - 1], series[i]
    return v0 + (v1 - v0) * (t_s - t0) / (t1 - t0)


def integrate(series: Sequence[Point], start_s: float, end_s: float) -> tuple[float, float]:
    """Trapezoid integral over the part of [start_s, end_s] the series spans, and that part's length."""
    if not series:
        return 0.0, 0.0
    lo, hi = max(start_s, series[0][0]), min(end_s, series[-1][0])
    if hi <= lo:
        return 0.0, 0.0
    first, last = interpolate(series, lo), interpolate(series, hi)
    if first is None or last is None:
        return 0.0, 0.0
    knots = [(lo, first), *(p for p in series if lo < p[0] < hi), (hi, last)]
    return sum((t1 - t0) * (v0 + v1) / 2.0 for (t0, v0), (t1, v1) in pairwise(knots)), hi - lo


def counter_delta(series: Sequence[Point], start_s: float, end_s: float) -> float | None:
    """Growth of a cumulative counter between two instants (linear between readings); None outside its span."""
    first, last = interpolate(series, start_s), interpolate(series, end_s)
    return None if first is None or last is None else last - first


@dataclass(frozen=True)
class Segment:
    start_s: float
    end_s: float
    value: float  # the mean over the GPUs of their readings held over the segment


def held_segments(series: Sequence[Sequence[Point]], start_s: float, end_s: float) -> list[Segment]:
    """Split [start_s, end_s] at every reading; on each piece, the mean over GPUs of the reading that ends it.

    A utilization reading describes the time before it, so reading i holds over (t[i-1], t[i]]. Pieces
    before a GPU's first reading or after its last are not covered and are left out.
    """
    if not series or end_s <= start_s:
        return []
    times = [[p[0] for p in s] for s in series]
    cuts = sorted({start_s, end_s, *(t for ts in times for t in ts if start_s < t < end_s)})
    segments = []
    for a, b in pairwise(cuts):
        values = []
        for s, ts in zip(series, times, strict=True):
            j = bisect.bisect_left(ts, b)  # the first reading at or after b holds over (a, b]
            if j == 0 or j == len(ts):
                break
            values.append(s[j][1])
        else:
            segments.append(Segment(a, b, statistics.fmean(values)))
    return segments


def covered_s(segments: Sequence[Segment]) -> float:
    return sum(s.end_s - s.start_s for s in segments)


def held_mean(segments: Sequence[Segment]) -> float | None:
    """Time-weighted mean of the held values; None when nothing is covered."""
    span_s = covered_s(segments)
    return sum(s.value * (s.end_s - s.start_s) for s in segments) / span_s if span_s > 0 else None


def seconds_below(segments: Sequence[Segment], threshold: float) -> float:
    """Seconds the held value is below ``threshold`` (idle time when the value is GPU utilization)."""
    return sum(s.end_s - s.start_s for s in segments if s.value < threshold)


# ---------------------------------------------------------------------------------- the references


class LineRecorder:
    """Runs a command with its stdout on a pseudo-terminal and keeps each line with the time it arrived.

    C programs buffer a pipe in 4 KiB blocks but flush a terminal at every newline, so a pty gives
    arrival times a few milliseconds after the lines were written, and nothing is lost when the
    command is ended by its PID. Where no pty can be opened, a pipe through ``stdbuf -oL`` is used.
    """

    def __init__(self, argv: Sequence[str], stderr_path: Path, use_pty: bool = True) -> None:
        self.argv = tuple(argv)
        self.stderr_path = stderr_path
        self.use_pty = use_pty
        self.lines: list[tuple[float, str]] = []
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._master_fd: int | None = None  # ours to close (pty); a pipe is closed with the Popen
        self._thread: threading.Thread | None = None

    def start(self) -> LineRecorder:
        master = slave = None
        if self.use_pty:
            try:
                master, slave = pty.openpty()
            except OSError:
                master = slave = None
        with self.stderr_path.open("wb") as stderr:
            if master is not None and slave is not None:
                try:
                    self._process = subprocess.Popen(
                        self.argv, stdin=subprocess.DEVNULL, stdout=slave, stderr=stderr, start_new_session=True
                    )
                except BaseException:
                    os.close(master)
                    raise
                finally:
                    os.close(slave)  # the child holds its own copy; EIO on the master once it exits
                self._master_fd = master
                fd = master
            else:
                argv = ["stdbuf", "-oL", *self.argv] if shutil.which("stdbuf") else list(self.argv)
                self._process = subprocess.Popen(
                    argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr, start_new_session=True
                )
                if self._process.stdout is None:
                    raise RuntimeError("subprocess gave no stdout pipe")
                fd = self._process.stdout.fileno()
        self._thread = threading.Thread(target=self._read, args=(fd,), name="validate-line-recorder", daemon=True)
        self._thread.start()
        return self

    def _read(self, fd: int) -> None:
        pending = b""
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # EIO: the pty's other side is closed
                break
            if not chunk:
                break
            received_s = time.time()
            pending += chunk
            *complete, pending = pending.split(b"\n")
            with self._lock:
                self.lines.extend((received_s, line.decode(errors="replace").strip()) for line in complete)
        if pending.strip():
            with self._lock:
                self.lines.append((time.time(), pending.decode(errors="replace").strip()))

    def stop(self, timeout_s: float = 5.0) -> list[tuple[float, str]]:
        """End the command by its PID (SIGTERM, then SIGKILL), read what is left, return every non-empty line."""
        process = self._process
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=timeout_s)
        if self._thread is not None:
            self._thread.join(timeout=timeout_s)
            self._thread = None
        if self._master_fd is not None:
            os.close(self._master_fd)
            self._master_fd = None
        if process is not None and process.stdout is not None:
            process.stdout.close()
        with self._lock:
            return [(t, line) for t, line in self.lines if line]

    def stderr_text(self) -> str:
        try:
            return self.stderr_path.read_text(errors="replace").strip()
        except OSError:
            return ""


class EnergyCounterPoller:
    """Reads every GPU's NVML energy counter (``nvmlDeviceGetTotalEnergyConsumption``, mJ) every ``period_s``."""

    def __init__(self, period_s: float = COUNTER_PERIOD_S) -> None:
        self.period_s = period_s
        self.readings: dict[int, list[Point]] = {}
        self.reason: str | None = None  # why there are no readings
        self._nvml: Any = None
        self._handles: list[tuple[int, Any]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> EnergyCounterPoller:
        try:
            import pynvml

            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
        except Exception as error:  # ImportError, NVMLError, OSError: this reference is missing, no more
            self.reason = f"n/a: NVML did not start ({error})"
            return self
        self._nvml = pynvml
        unsupported = []
        for index in range(count):
            try:
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
            except pynvml.NVMLError as error:
                unsupported.append(f"GPU {index}: {error}")
                continue
            self._handles.append((index, handle))
        if not self._handles:
            self.reason = f"n/a: no energy counter ({'; '.join(unsupported) or 'no GPU'})"
            return self
        self._poll()
        self._thread = threading.Thread(target=self._run, name="validate-energy-counter", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            self._poll()

    def _poll(self) -> None:
        for index, handle in self._handles:
            before_s = time.time()
            try:
                energy_mj = self._nvml.nvmlDeviceGetTotalEnergyConsumption(handle)
            except self._nvml.NVMLError:
                continue
            at_s = (before_s + time.time()) / 2.0
            self.readings.setdefault(index, []).append((at_s, energy_mj / 1000.0))

    def stop(self) -> dict[int, list[Point]]:
        """Stop polling (one last reading first) and shut NVML down; the readings in joules, by GPU index."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=5.0)
            self._poll()
            self._thread = None
        if self._nvml is not None:
            with contextlib.suppress(self._nvml.NVMLError):
                self._nvml.nvmlShutdown()
            self._nvml = None
        return {index: points(series) for index, series in self.readings.items()}


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    memory_total_mib: float | None
    power_limit_w: float | None


@dataclass(frozen=True)
class DriverProbe:
    """Whether nvidia-smi and NVML can read NVIDIA GPUs here, and which."""

    available: bool
    reason: str
    driver_version: str | None = None
    gpus: tuple[GpuInfo, ...] = ()


def probe_driver() -> DriverProbe:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return DriverProbe(False, "nvidia-smi is not on PATH (no NVIDIA driver)")
    try:
        done = subprocess.run(
            [smi, "--query-gpu=index,name,driver_version,memory.total,power.limit", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return DriverProbe(False, f"nvidia-smi failed: {error}")
    if done.returncode != 0:
        return DriverProbe(False, f"nvidia-smi failed: {(done.stdout + done.stderr).strip()[:300]}")
    gpus, driver = [], None
    for line in done.stdout.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 5 or not fields[0].isdigit():
            continue
        gpus.append(GpuInfo(int(fields[0]), fields[1], _number(fields[3]), _number(fields[4])))
        driver = fields[2]
    if not gpus:
        return DriverProbe(False, "nvidia-smi lists no GPU")
    try:
        import pynvml
    except ImportError:
        return DriverProbe(
            False, "nvidia-ml-py is not installed (pip install nvidia-ml-py): computewise reads GPUs with it"
        )
    try:
        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
    except pynvml.NVMLError as error:
        return DriverProbe(False, f"NVML did not start ({error})")
    return DriverProbe(True, f"NVIDIA driver {driver}", driver, tuple(gpus))


# ------------------------------------------------------------------------------------- the workload

WORKLOAD = '''"""Training workload of benchmarks/validate_run_gpu.py: busy, asleep (GPU idle), busy; random data."""
import argparse
import json
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

SIZES = {  # hidden, heads, layers, batch, sequence
    "cuda": (2048, 16, 8, 8, 1024),  # ~400M parameters, ~20 TFLOP per step
    "cpu": (64, 4, 2, 4, 32),
}


class Block(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.qkv, self.proj = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)
        self.up, self.down = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, s, h))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", choices=("cuda", "cpu"), required=True)
    parser.add_argument("--busy1", type=float, required=True)
    parser.add_argument("--sleep", type=float, required=True)
    parser.add_argument("--busy2", type=float, required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        print("workload: torch sees no CUDA device (a CPU-only build of torch?)", file=sys.stderr)
        sys.exit(3)
    if not cuda:
        torch.set_num_threads(1)  # a smoke run on a small shared machine
    device = torch.device(args.device)
    hidden, heads, layers, batch, seq = SIZES[args.device]
    torch.manual_seed(0)
    with device:
        model = nn.Sequential(*(Block(hidden, heads) for _ in range(layers)), nn.LayerNorm(hidden))
        x = torch.randn(batch, seq, hidden)
        y = torch.randn(batch, seq, hidden)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=cuda)

    def sync():
        if cuda:
            torch.cuda.synchronize()

    def busy(name, seconds):
        sync()
        start_s, began = time.time(), time.perf_counter()
        steps = 0
        while True:
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast(device_type=args.device, dtype=torch.bfloat16, enabled=cuda):
                loss = F.mse_loss(model(x).float(), y)
            loss.backward()
            optimizer.step()
            sync()  # the phase ends when the GPU's work does
            steps += 1
            if time.perf_counter() - began >= seconds:
                break
        took = time.perf_counter() - began
        rate = steps / took
        print(f"workload: {name}: {steps} steps in {took:.1f} s, {rate:.2f} steps/s", file=sys.stderr, flush=True)
        return {"phase": name, "start_s": start_s, "end_s": time.time(), "steps": steps, "steps_per_s": rate}

    def asleep(seconds):
        sync()
        start_s = time.time()
        time.sleep(seconds)
        print(f"workload: asleep for {seconds:.1f} s (GPU idle)", file=sys.stderr, flush=True)
        return {"phase": "sleep", "start_s": start_s, "end_s": time.time(), "steps": 0, "steps_per_s": 0.0}

    phases = [busy("busy 1", args.busy1), asleep(args.sleep), busy("busy 2", args.busy2)]
    result = {
        "torch": torch.__version__,
        "device_name": torch.cuda.get_device_name(device) if cuda else "cpu",
        "params": sum(p.numel() for p in model.parameters()),
        "sizes": dict(zip(("hidden", "heads", "layers", "batch", "seq"), SIZES[args.device])),
        "phases": phases,
    }
    with open(args.out, "w") as out:
        json.dump(result, out)


if __name__ == "__main__":
    main()
'''


def phase_plan(seconds: float) -> tuple[float, float, float]:
    """(busy, asleep, busy) seconds: a ninth asleep (at least 1 s), then a quarter and three quarters of the rest."""
    if not math.isfinite(seconds) or seconds < 3.0:
        raise ValueError(f"--seconds must be at least 3, not {seconds:g}")
    sleep_s = max(1.0, round(seconds / 9.0, 1))
    busy1_s = (seconds - sleep_s) / 4.0
    return busy1_s, sleep_s, seconds - sleep_s - busy1_s


@dataclass(frozen=True)
class Launched:
    exit_code: int
    summary: dict[str, Any] | None
    stdout_tail: str


def parse_summary(stdout: str) -> dict[str, Any] | None:
    """The JSON summary ``computewise run --json`` printed, even if the job also wrote to stdout."""
    decoder = json.JSONDecoder()
    found: dict[str, Any] | None = None
    position = 0
    while (start := stdout.find("{", position)) != -1:
        position = start + 1
        if start and stdout[start - 1] != "\n":
            continue
        try:
            value, end = decoder.raw_decode(stdout, start)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict) and "run" in value and "energy_kwh" in value:
            found = value
            position = end
    return found


def run_computewise(argv: Sequence[str], timeout_s: float) -> Launched:
    """``computewise run`` in its own session (it and the job end together, by its PID, if we are stopped)."""
    env = {k: v for k, v in os.environ.items() if k != "COMPUTEWISE_FAKE_GPU"}  # real GPUs, never a replayed trace
    process = subprocess.Popen(list(argv), stdout=subprocess.PIPE, text=True, env=env, start_new_session=True)
    try:
        stdout, _ = process.communicate(timeout=timeout_s)
    except BaseException:  # a timeout or Ctrl-C: computewise forwards SIGTERM to the job
        process.terminate()
        try:
            process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # the session we created: computewise and the job
            process.communicate()
        raise
    return Launched(process.returncode, parse_summary(stdout), stdout[-2000:])


# ------------------------------------------------------------------------------------- comparison


@dataclass(frozen=True)
class Check:
    """One figure of computewise against one reference."""

    name: str
    unit: str  # of computewise / reference: "J", "%", "s", "W"
    computewise: float | None
    reference: float | None
    error: float | None  # relative for J and W, absolute otherwise
    target: str
    status: str  # PASS, FAIL, info, or "n/a: why"
    gated: bool

    @property
    def ratio(self) -> float | None:
        if self.computewise is None or not self.reference:
            return None
        return self.computewise / self.reference


def _check(
    name: str,
    unit: str,
    computewise: float | None,
    reference: float | None,
    missing: str | None,
    limit: float | None,
    relative: bool,
) -> Check:
    """``limit`` None: shown, not gated. ``missing``: why the reference is absent (it wins over a value)."""
    error = None
    if computewise is not None and reference is not None and missing is None:
        error = (computewise / reference - 1.0 if reference else math.inf) if relative else computewise - reference
    if limit is None:
        target = "info"
    else:
        target = (
            f"|error| <= {limit * 100:g} %" if relative else f"|error| <= {limit:g} {'pp' if unit == '%' else unit}"
        )
    if missing is not None:
        status = missing
    elif error is None:
        status = "n/a: computewise reported no figure" if computewise is None else "n/a: no reference figure"
    elif limit is None:
        status = "info"
    else:
        status = "PASS" if abs(error) <= limit else "FAIL"
    return Check(name, unit, computewise, None if missing else reference, error, target, status, limit is not None)


@dataclass(frozen=True)
class Window:
    start_s: float
    end_s: float

    @property
    def seconds(self) -> float:
        return self.end_s - self.start_s


@dataclass
class References:
    """What nvidia-smi and the NVML counter saw over the window (None where they could not say)."""

    smi_missing: str | None
    counter_missing: str | None
    smi_energy_j: float | None = None
    smi_power_w_mean: float | None = None
    smi_util_pct_mean: float | None = None
    smi_idle_s: float | None = None
    smi_covered_share: float | None = None
    smi_samples: int = 0
    counter_energy_j: float | None = None
    notes: list[str] = field(default_factory=list)


def measure_references(
    window: Window,
    gpu_indices: Sequence[int],
    smi: Sequence[SmiSample],
    smi_missing: str | None,
    counters: dict[int, list[Point]],
    counter_missing: str | None,
) -> References:
    refs = References(smi_missing, counter_missing)
    if smi_missing is None:
        power = [smi_series(smi, i, "power_w") for i in gpu_indices]
        util = [smi_series(smi, i, "utilization_pct") for i in gpu_indices]
        refs.smi_samples = sum(1 for u in util for t, _ in u if window.start_s <= t <= window.end_s)
        if all(power):
            integrals = [integrate(p, window.start_s, window.end_s) for p in power]
            refs.smi_energy_j = sum(j for j, _ in integrals)
            spanned_s = min(s for _, s in integrals)
            refs.smi_power_w_mean = refs.smi_energy_j / spanned_s if spanned_s > 0 else None
            if spanned_s < window.seconds - 1.0:
                refs.notes.append(f"nvidia-smi power spans {spanned_s:.1f} s of the {window.seconds:.1f} s window")
        else:
            refs.notes.append("nvidia-smi printed no power.draw reading for some GPU ([N/A])")
        if all(util):
            segments = held_segments(util, window.start_s, window.end_s)
            refs.smi_util_pct_mean = held_mean(segments)
            refs.smi_idle_s = seconds_below(segments, IDLE_UTIL_PCT)
            refs.smi_covered_share = covered_s(segments) / window.seconds if window.seconds > 0 else None
        else:
            refs.notes.append("nvidia-smi printed no utilization.gpu reading for some GPU ([N/A])")
    if counter_missing is None:
        deltas = [counter_delta(counters.get(i, []), window.start_s, window.end_s) for i in gpu_indices]
        if all(d is not None for d in deltas):
            refs.counter_energy_j = sum(d for d in deltas if d is not None)
        else:
            refs.counter_missing = "n/a: the NVML counter readings do not span the run"
    return refs


def per_sample(samples: Sequence[SampleRow], gpu_indices: Sequence[int], smi: Sequence[SmiSample]) -> dict[str, Any]:
    """Each computewise sample against nvidia-smi over the same interval (utilization, idle) or instant (power)."""
    util = [smi_series(smi, i, "utilization_pct") for i in gpu_indices]
    power = [smi_series(smi, i, "power_w") for i in gpu_indices]
    util_gaps, power_gaps, agree, compared = [], [], 0, 0
    for s in samples:
        if s.gpu_util_pct is None or s.interval_s < 0.5:  # the last sample can cover a few milliseconds
            continue
        reference = held_mean(held_segments(util, s.t_s - s.interval_s, s.t_s)) if all(util) else None
        if reference is not None:
            compared += 1
            util_gaps.append(abs(s.gpu_util_pct - reference))
            agree += s.idle == (reference < IDLE_UTIL_PCT)
        watts = [interpolate(p, s.t_s) for p in power]
        if s.gpu_power_w is not None and watts and all(w is not None for w in watts):
            power_gaps.append(abs(s.gpu_power_w - sum(w for w in watts if w is not None)))
    return {
        "samples_compared": compared,
        "util_abs_error_pp_mean": statistics.fmean(util_gaps) if util_gaps else None,
        "idle_flag_agreement": agree / compared if compared else None,
        "power_abs_error_w_mean": statistics.fmean(power_gaps) if power_gaps else None,
    }


def build_checks(computewise: dict[str, Any], refs: References, cpu_only: str | None) -> list[Check]:
    """The gated comparisons and the informative ones; ``cpu_only``: why no reference exists at all."""
    smi_missing = cpu_only or refs.smi_missing
    counter_missing = cpu_only or refs.counter_missing
    energy_j = computewise["energy_j"]
    return [
        _check(
            "energy vs nvidia-smi power.draw (trapezoid)",
            "J",
            energy_j,
            refs.smi_energy_j,
            smi_missing,
            ENERGY_TARGET,
            relative=True,
        ),
        _check(
            "energy vs NVML energy counter",
            "J",
            energy_j,
            refs.counter_energy_j,
            counter_missing,
            ENERGY_TARGET,
            relative=True,
        ),
        _check(
            "mean GPU utilization vs nvidia-smi",
            "%",
            computewise["gpu_util_pct_sample_mean"],
            refs.smi_util_pct_mean,
            smi_missing,
            UTILIZATION_TARGET_PP,
            relative=False,
        ),
        _check(
            "time-weighted mean GPU utilization vs nvidia-smi",
            "%",
            computewise["gpu_util_pct_mean"],
            refs.smi_util_pct_mean,
            smi_missing,
            UTILIZATION_TARGET_PP,
            relative=False,
        ),
        _check(
            f"idle seconds vs nvidia-smi (util < {IDLE_UTIL_PCT:g} %)",
            "s",
            computewise["idle_s"],
            refs.smi_idle_s,
            smi_missing,
            IDLE_TARGET_S,
            relative=False,
        ),
        _check(
            "mean GPU power vs nvidia-smi",
            "W",
            computewise["gpu_power_w_mean"],
            refs.smi_power_w_mean,
            smi_missing,
            None,
            relative=True,
        ),
        _check(
            "references: nvidia-smi energy vs NVML counter",
            "J",
            refs.smi_energy_j,
            refs.counter_energy_j,
            smi_missing or counter_missing,
            None,
            relative=True,
        ),
    ]


def verdict(checks: Sequence[Check], cpu_only: bool) -> str:
    """PASS only when every gated check passed; on a GPU a missing reference is a FAIL (nothing was validated)."""
    if cpu_only:
        return "n/a"
    gated = [c for c in checks if c.gated]
    return "PASS" if all(c.status == "PASS" for c in gated) else "FAIL"


def computewise_figures(summary: dict[str, Any], samples: Sequence[SampleRow]) -> dict[str, Any]:
    pue = float(summary["price"]["pue"]) or 1.0
    utilization = summary.get("utilization") or {}
    percentiles = utilization.get("gpu_util_pct") or {}
    return {
        "run_id": summary["run_id"],
        "status": summary["run"]["status"],
        "gpu_count": summary["run"]["gpu_count"],
        "gpu_name": summary["run"]["gpu_name"],
        "accelerator": summary["run"]["accelerator"],
        "duration_s": summary["duration_s"],
        "gpu_hours": summary["gpu_hours"],
        "energy_kwh": summary["energy_kwh"],
        "pue": pue,
        "energy_j": summary["energy_kwh"] / pue * J_PER_KWH,
        "ledger_energy_j": sum(s.energy_j for s in samples),
        "energy_measured": summary["energy_measured"],
        "energy_basis": summary["energy_basis"],
        "gpu_util_pct_sample_mean": percentiles.get("mean"),  # what the run summary prints
        "gpu_util_pct_mean": summary["gpu_util_pct_mean"],  # time-weighted, as cost reports use it
        "gpu_util_pct_p50": percentiles.get("p50"),
        "gpu_util_pct_p95": percentiles.get("p95"),
        "gpu_power_w_mean": utilization.get("gpu_power_w_mean"),
        "cpu_percent_mean": summary["cpu_percent_mean"],
        "idle_s": summary["idle_s"],
        "idle_cost_usd": summary["idle_cost_usd"],
        "idle_periods": len(summary.get("idle_periods") or []),
        "cost_usd": summary["cost_usd"],
        "samples": len(samples),
        "diagnosis": [d.get("verdict") for d in summary.get("diagnosis") or []],
    }


# ------------------------------------------------------------------------------------------ output


def _quantity(value: float | None, unit: str) -> str:
    if value is None:
        return "n/a"
    if unit == "J":
        return f"{value / 1000:.3f} kJ" if abs(value) >= 1000 else f"{value:.2f} J"
    if unit == "%":
        return f"{value:.1f} %"
    return f"{value:.1f} {unit}"


def _error(check: Check) -> str:
    if check.error is None:
        return "n/a"
    if check.unit in ("J", "W"):
        return f"{check.error * 100:+.2f} %"
    return f"{check.error:+.1f} {'pp' if check.unit == '%' else check.unit}"


def _cells(check: Check) -> list[str]:
    ratio = check.ratio if check.error is not None else None
    return [
        check.name,
        _quantity(check.computewise, check.unit),
        _quantity(check.reference, check.unit) if check.reference is not None else "n/a",
        "n/a" if ratio is None else f"{ratio:.3f}",
        _error(check),
        check.target,
        check.status,
    ]


HEADER = ["check", "computewise", "reference", "ratio", "error", "target", "result"]


def format_table(checks: Sequence[Check]) -> str:
    rows = [HEADER, *(_cells(c) for c in checks)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADER))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def format_markdown(result: dict[str, Any], checks: Sequence[Check]) -> str:
    env, cw, window = result["environment"], result["computewise"], result["window"]
    gpus = ", ".join(g["name"] for g in env["gpus"]) or "no NVIDIA GPU"
    lines = [
        f"`computewise run` against nvidia-smi and the NVML energy counter, {env['date']}: {gpus} "
        f"(driver {env['driver'] or 'n/a'}), {env['cpu']}; torch {env['torch']}; "
        f"{window['seconds']:.1f} s run, {cw['samples']} samples at {result['settings']['interval']}, "
        f"job {'/'.join(f'{p:g}' for p in result['settings']['phases_s'])} s busy/asleep/busy. "
        f"Verdict: **{result['verdict']}**.",
        "",
        "| " + " | ".join(HEADER) + " |",
        "|" + "|".join("---" for _ in HEADER) + "|",
        *("| " + " | ".join(cell.replace("|", "\\|") for cell in _cells(c)) + " |" for c in checks),
    ]
    return "\n".join(lines) + "\n"


def environment(probe: DriverProbe, workload: dict[str, Any] | None) -> dict[str, Any]:
    import computewise

    return {
        "cpu": cpu_model_name(),
        "logical_cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "computewise": computewise.__version__,
        "torch": (workload or {}).get("torch", "n/a"),
        "driver": probe.driver_version,
        "gpus": [asdict(g) for g in probe.gpus],
        "driver_probe": probe.reason,
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
    }


# ------------------------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cpu: smoke run, no references")
    parser.add_argument("--seconds", type=float, help="working time of the job (default 90; --quick: 20, or 4 on cpu)")
    parser.add_argument("--quick", action="store_true", help="a short run")
    parser.add_argument("--interval", default="1s", help="computewise's sampling interval (default 1s)")
    parser.add_argument("--json", type=Path, metavar="OUT", help="write every figure as JSON")
    parser.add_argument("--markdown", type=Path, metavar="OUT", help="write the table as Markdown")
    return parser.parse_args(argv)


@dataclass(frozen=True)
class Measured:
    """What one monitored run left behind: the summary, its ledger rows, the job's report, the references' raw data."""

    summary: dict[str, Any]
    run: RunRow
    samples: list[SampleRow]
    gpu_rows: list[GpuSampleRow]
    workload: dict[str, Any]
    smi_lines: list[tuple[float, str]]
    smi_stderr: str
    counters: dict[int, list[Point]]
    counter_missing: str | None


class RunFailed(Exception):
    """``computewise run`` or the job did not finish as it should; ``exit_status`` is ours to return."""

    def __init__(self, message: str, exit_status: int) -> None:
        super().__init__(message)
        self.exit_status = exit_status


def measure(device: str, phases: tuple[float, float, float], interval: str) -> Measured:
    """Run the job under ``computewise run``; on a GPU, nvidia-smi and the NVML counter watch it too."""
    cuda = device == "cuda"
    with tempfile.TemporaryDirectory(prefix="validate_run_gpu-") as tmp:
        folder = Path(tmp)
        workload_path, result_path, db_path = folder / "workload.py", folder / "workload.json", folder / "ledger.sqlite"
        workload_path.write_text(WORKLOAD)
        job = [sys.executable, str(workload_path), "--device", device, "--out", str(result_path)]
        job += ["--busy1", f"{phases[0]:.3f}", "--sleep", f"{phases[1]:.3f}", "--busy2", f"{phases[2]:.3f}"]
        command = [sys.executable, "-m", "computewise.cli.app", "run", "--db", str(db_path), "--json"]
        command += ["--interval", interval, "--no-live", "--", *job]
        recorder: LineRecorder | None = None
        poller: EnergyCounterPoller | None = None
        smi_lines: list[tuple[float, str]] = []
        counters: dict[int, list[Point]] = {}
        try:
            if cuda:
                recorder = LineRecorder(SMI_ARGV, folder / "nvidia-smi.err").start()
                poller = EnergyCounterPoller().start()
                time.sleep(LEAD_S)
            launched = run_computewise(command, timeout_s=3.0 * sum(phases) + 300.0)
            if cuda:
                time.sleep(LEAD_S)
        finally:
            if recorder is not None:
                smi_lines = recorder.stop()
            if poller is not None:
                counters = poller.stop()
        if launched.exit_code == WORKLOAD_NO_CUDA:
            raise RunFailed(f"the workload found no CUDA device through torch; {NO_GPU_HINT}", 2)
        if launched.summary is None or launched.exit_code != 0:
            raise RunFailed(
                f"FAIL: `computewise run` exited {launched.exit_code} "
                f"{'without' if launched.summary is None else 'with'} a JSON summary; its stdout ended with:\n"
                f"{launched.stdout_tail}",
                1,
            )
        with Ledger.open(str(db_path)) as ledger:
            run = ledger.run(int(launched.summary["run_id"]))
            samples, gpu_rows = ledger.samples(run.id), ledger.gpu_samples(run.id)
        return Measured(
            summary=launched.summary,
            run=run,
            samples=samples,
            gpu_rows=gpu_rows,
            workload=json.loads(result_path.read_text()),
            smi_lines=smi_lines,
            smi_stderr=recorder.stderr_text() if recorder is not None else "",
            counters=counters,
            counter_missing=poller.reason if poller is not None else None,
        )


def evaluate(measured: Measured, probe: DriverProbe, cuda: bool) -> tuple[dict[str, Any], list[Check]]:
    """Every figure (the ``--json`` document) and the checks, from one run and its references."""
    run = measured.run
    window = Window(run.started_at_s, run.ended_at_s if run.ended_at_s is not None else run.heartbeat_at_s)
    figures = computewise_figures(measured.summary, measured.samples)
    gpu_indices = sorted({g.gpu_index for g in measured.gpu_rows}) or [g.index for g in probe.gpus]
    smi, smi_other, offset_s = parse_smi_output(measured.smi_lines)
    cpu_only = None if cuda else (NO_DRIVER if not probe.available else "n/a: --device cpu (smoke run)")
    smi_missing = None
    if cuda and not any(s.index in gpu_indices for s in smi):
        why = smi_other[0] if smi_other else measured.smi_stderr[:300] or "no output"
        smi_missing = f"n/a: nvidia-smi printed no sample ({why})"
    if cuda:
        refs = measure_references(window, gpu_indices, smi, smi_missing, measured.counters, measured.counter_missing)
    else:
        refs = References(cpu_only, cpu_only)
    checks = build_checks(figures, refs, cpu_only)
    if cuda and not (figures["gpu_count"] and figures["energy_measured"]):
        seen = Check(
            "computewise saw the GPUs and measured their energy",
            "",
            None,
            None,
            None,
            "gpu_count >= 1, energy measured",
            f"FAIL: {figures['gpu_count']} GPUs, energy {figures['energy_basis']}",
            True,
        )
        checks.insert(0, seen)
    sampled = per_sample(measured.samples, gpu_indices, smi) if cuda and smi_missing is None else None
    smi_figures = {
        "energy_j": refs.smi_energy_j,
        "power_w_mean": refs.smi_power_w_mean,
        "util_pct_mean": refs.smi_util_pct_mean,
        "idle_s": refs.smi_idle_s,
        "covered_share": refs.smi_covered_share,
        "samples": refs.smi_samples,
        "clock_offset_s": offset_s,
        "unparsed_lines": smi_other[:5],
    }
    counter_figures = {
        "energy_j": refs.counter_energy_j,
        "readings": sum(len(v) for v in measured.counters.values()),
        "period_s": COUNTER_PERIOD_S,
    }
    result: dict[str, Any] = {
        "environment": environment(probe, measured.workload),
        "window": {"start_s": window.start_s, "end_s": window.end_s, "seconds": window.seconds, "gpus": gpu_indices},
        "workload": measured.workload,
        "computewise": figures,
        "references": {
            "nvidia_smi": refs.smi_missing or smi_figures,
            "nvml_counter": refs.counter_missing or counter_figures,
            "notes": refs.notes,
        },
        "per_sample": sampled,
        "checks": [{**asdict(c), "ratio": c.ratio if c.error is not None else None} for c in checks],
        "verdict": verdict(checks, cpu_only=not cuda),
        "series": {
            "computewise": [
                {
                    "t_s": s.t_s - window.start_s,
                    "interval_s": s.interval_s,
                    "gpu_util_pct": s.gpu_util_pct,
                    "gpu_power_w": s.gpu_power_w,
                    "energy_j": s.energy_j,
                    "idle": s.idle,
                    "cpu_percent": s.cpu_percent,
                }
                for s in measured.samples
            ],
            "nvidia_smi": [
                {
                    "t_s": s.t_s - window.start_s,
                    "index": s.index,
                    "utilization_pct": s.utilization_pct,
                    "power_w": s.power_w,
                    "memory_used_mib": s.memory_used_mib,
                }
                for s in smi
            ],
        },
    }
    return result, checks


def report(result: dict[str, Any], checks: Sequence[Check]) -> None:
    figures, sampled = result["computewise"], result["per_sample"]
    for phase in result["workload"]["phases"]:
        print(f"  {phase['phase']}: {phase['steps']} steps, {phase['steps_per_s']:.2f} steps/s")
    print(
        f"run {figures['run_id']}: {result['window']['seconds']:.1f} s, {figures['samples']} samples, "
        f"{figures['gpu_count']} GPU(s), energy {figures['energy_basis']}"
    )
    print()
    print(format_table(checks))
    for note in result["references"]["notes"]:
        print(f"note: {note}")
    if sampled is not None and sampled["samples_compared"]:
        power, util = sampled["power_abs_error_w_mean"], sampled["util_abs_error_pp_mean"]
        print(
            f"per sample ({sampled['samples_compared']}): utilization off by {util:.1f} pp "
            f"on average, idle flag agrees on {sampled['idle_flag_agreement'] * 100:.0f} %"
            + (f", power off by {power:.1f} W on average" if power is not None else "")
        )
    print(f"verdict: {result['verdict']}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cuda = args.device == "cuda"
    seconds = args.seconds if args.seconds is not None else (20.0 if cuda else 4.0) if args.quick else 90.0
    try:
        phases = phase_plan(seconds)
    except ValueError as error:
        print(error, file=sys.stderr)
        return 2
    probe = probe_driver()
    if cuda and not probe.available:
        print(f"no NVIDIA GPU to validate against: {probe.reason}; {NO_GPU_HINT}", file=sys.stderr)
        return 2
    gpus = ", ".join(f"{g.index}: {g.name}" for g in probe.gpus) or "none"
    print(
        f"hardware: {cpu_model_name()}, {os.cpu_count()} logical CPUs; GPUs: {gpus}; "
        f"driver {probe.driver_version or 'n/a'}"
    )
    print(f"workload on {args.device}: {phases[0]:.1f} s busy, {phases[1]:.1f} s asleep, {phases[2]:.1f} s busy")
    sys.stdout.flush()
    try:
        measured = measure(args.device, phases, args.interval)
    except RunFailed as error:
        print(error, file=sys.stderr)
        return error.exit_status
    result, checks = evaluate(measured, probe, cuda)
    result["settings"] = {
        "device": args.device,
        "seconds": seconds,
        "phases_s": [round(p, 2) for p in phases],
        "interval": args.interval,
        "smi_period_ms": SMI_PERIOD_MS,
        "idle_util_pct": IDLE_UTIL_PCT,
    }
    report(result, checks)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, default=str) + "\n")
    if args.markdown:
        args.markdown.write_text(format_markdown(result, checks))
    return 1 if result["verdict"] == "FAIL" else 0


if __name__ == "__main__":
    sys.exit(main())
