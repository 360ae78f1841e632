"""A Prometheus ``/metrics`` endpoint for a running job, fed as a sampler sink.

Written against the text exposition format 0.0.4 directly (HELP and TYPE lines, escaped label
values, ``+Inf``/``NaN``), so serving needs no prometheus-client. Every series carries the run's
``run_id``; per-GPU series add ``gpu="<index>"``. Gauges hold the latest sample; the ``*_total``
counters only grow: energy, disk bytes, idle seconds, samples and the cost at the run's hourly
price (hourly price x sampled seconds / 3600, the run summary's formula, see ``account.totals``).

The server listens on 127.0.0.1 unless told otherwise, one thread per request, and stops with
``close()`` (or the ``with`` block).
"""

from __future__ import annotations

import errno
import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Literal

from computewise.errors import InputError
from computewise.ledger import GpuSampleRow, SampleRow

__all__ = ["CONTENT_TYPE", "MetricsServer"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
Kind = Literal["gauge", "counter"]


@dataclass(frozen=True)
class _Totals:
    energy_j: float = 0.0
    sampled_s: float = 0.0
    idle_s: float = 0.0
    samples: int = 0
    energy_measured: bool = True


class MetricsServer:
    """Serves the latest sample of run ``run_id`` at ``http://host:port/metrics``; ``port=0``: any free port."""

    def __init__(self, run_id: int, hourly_usd: float, port: int = 0, host: str = "127.0.0.1") -> None:
        if not 0 <= port <= 65535:
            raise InputError(f"{port} is not a TCP port", "pick a port between 1024 and 65535, or 0 for any free one")
        self.run_id = run_id
        self.hourly_usd = hourly_usd
        self.host = host
        self._requested_port = port
        self._lock = threading.Lock()
        self._row: SampleRow | None = None
        self._gpu_rows: tuple[GpuSampleRow, ...] = ()
        self._totals = _Totals()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- sink -----------------------------------------------------------------------------------

    def __call__(self, row: SampleRow, gpu_rows: Sequence[GpuSampleRow]) -> None:
        with self._lock:
            totals = self._totals
            self._totals = _Totals(
                energy_j=totals.energy_j + row.energy_j,
                sampled_s=totals.sampled_s + row.interval_s,
                idle_s=totals.idle_s + (row.interval_s if row.idle else 0.0),
                samples=totals.samples + 1,
                energy_measured=totals.energy_measured and row.energy_measured,
            )
            self._row = row
            self._gpu_rows = tuple(gpu_rows)

    def render(self) -> str:
        with self._lock:
            row, gpu_rows, totals = self._row, self._gpu_rows, self._totals
        return _render(self.run_id, self.hourly_usd, row, gpu_rows, totals)

    # -- server ---------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The port actually bound (useful with ``port=0``); valid after ``start()``."""
        if self._server is None:
            return self._requested_port
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def start(self) -> MetricsServer:
        if self._server is not None:
            return self
        metrics = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?", 1)[0] != "/metrics":
                    self.send_error(404, "only /metrics is served here")
                    return
                body = metrics.render().encode()
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                """Silent: the job's terminal is not ours to fill with access logs."""

        try:
            server = ThreadingHTTPServer((self.host, self._requested_port), Handler)
        except OSError as error:
            where = f"{self.host}:{self._requested_port}"
            if error.errno == errno.EADDRINUSE:
                raise InputError(
                    f"cannot serve metrics on {where}: the port is already in use",
                    "pick another --prometheus-port, or 0 for any free port",
                ) from error
            raise InputError(
                f"cannot serve metrics on {where}: {error.strerror or error}",
                "pick another --prometheus-port (ports below 1024 need root), or 0 for any free port",
            ) from error
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.2}, name="computewise-metrics", daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            self._thread = None

    def __enter__(self) -> MetricsServer:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()


def _render(
    run_id: int,
    hourly_usd: float,
    row: SampleRow | None,
    gpu_rows: Sequence[GpuSampleRow],
    totals: _Totals,
) -> str:
    """The exposition text for one run's latest sample and running totals."""
    run = {"run_id": str(run_id)}
    lines: list[str] = []

    def family(name: str, kind: Kind, help_text: str, samples: Sequence[tuple[dict[str, str], float | None]]) -> None:
        present = [(labels, value) for labels, value in samples if value is not None]
        if not present:
            return
        lines.append(f"# HELP {name} {_escape_help(help_text)}")
        lines.append(f"# TYPE {name} {kind}")
        lines.extend(f"{name}{_labels(labels)} {_number(value)}" for labels, value in present)

    cost_usd = hourly_usd * totals.sampled_s / 3600.0
    family("computewise_samples_total", "counter", "Samples taken by the sampler.", [(run, totals.samples)])
    family(
        "computewise_energy_joules_total",
        "counter",
        "Energy of the job (GPU, or CPU estimate).",
        [(run, totals.energy_j)],
    )
    family(
        "computewise_energy_measured",
        "gauge",
        "1 if every sample's energy was measured (NVML counter or power), 0 if any was estimated.",
        [(run, float(totals.energy_measured))],
    )
    family("computewise_cost_usd_total", "counter", "Cost so far at the run's hourly price.", [(run, cost_usd)])
    family(
        "computewise_hourly_price_usd", "gauge", "The run's price per hour (snapshot at launch).", [(run, hourly_usd)]
    )
    family("computewise_idle_seconds_total", "counter", "Seconds of samples judged idle.", [(run, totals.idle_s)])
    if row is not None:
        family(
            "computewise_last_sample_timestamp_seconds", "gauge", "Unix time of the latest sample.", [(run, row.t_s)]
        )
        family("computewise_idle", "gauge", "1 if the latest sample was idle.", [(run, float(row.idle))])
        family(
            "computewise_process_cpu_percent",
            "gauge",
            "CPU use of the job's process tree (100 = one core).",
            [(run, row.cpu_percent)],
        )
        family("computewise_process_rss_bytes", "gauge", "Resident memory of the process tree.", [(run, row.rss_bytes)])
        family(
            "computewise_process_read_bytes_total",
            "counter",
            "Bytes the process tree read from storage.",
            [(run, row.read_bytes)],
        )
        family(
            "computewise_process_write_bytes_total",
            "counter",
            "Bytes the process tree wrote to storage.",
            [(run, row.write_bytes)],
        )
        family(
            "computewise_host_cpu_percent",
            "gauge",
            "CPU use of the whole host (100 = all cores).",
            [(run, row.host_cpu_percent)],
        )
        family(
            "computewise_host_memory_used_bytes",
            "gauge",
            "Memory in use on the host.",
            [(run, row.host_memory_used_bytes)],
        )
        family("computewise_gpu_count", "gauge", "GPUs watched.", [(run, row.gpu_count)])
    per_gpu = [({**run, "gpu": str(g.gpu_index)}, g) for g in gpu_rows]
    for name, help_text, pick in _GPU_GAUGES:
        family(name, "gauge", help_text, [(labels, pick(g)) for labels, g in per_gpu])
    return "\n".join(lines) + "\n"


def _mhz_to_hz(mhz: float | None) -> float | None:
    return None if mhz is None else mhz * 1e6


_GPU_GAUGES: tuple[tuple[str, str, Callable[[GpuSampleRow], float | None]], ...] = (
    (
        "computewise_gpu_utilization_percent",
        "Share of the last sample period in which a kernel ran (NVML); not a measure of useful work.",
        lambda g: g.utilization_pct,
    ),
    ("computewise_gpu_sm_clock_hertz", "SM clock.", lambda g: _mhz_to_hz(g.sm_clock_mhz)),
    ("computewise_gpu_memory_used_bytes", "GPU memory in use by all processes.", lambda g: g.memory_used_bytes),
    (
        "computewise_gpu_process_memory_bytes",
        "GPU memory held by the job's processes.",
        lambda g: g.process_memory_bytes,
    ),
    ("computewise_gpu_power_watts", "Board power draw.", lambda g: g.power_w),
    ("computewise_gpu_pcie_tx_bytes_per_second", "PCIe transmit throughput.", lambda g: g.pcie_tx_bytes_per_s),
    ("computewise_gpu_pcie_rx_bytes_per_second", "PCIe receive throughput.", lambda g: g.pcie_rx_bytes_per_s),
)


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{key}="{_escape_label(value)}"' for key, value in labels.items()) + "}"


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))
