"""NVIDIA GPUs as the sampler sees them: a ``GpuSource`` protocol, the NVML source, and a replayed trace.

Measurement degrades, it never crashes: without nvidia-ml-py, without a driver, or without a GPU,
``NvmlGpuSource.status()`` says "not available: ..." and ``read()`` returns no readings. A metric a
device does not support (power on some vGPUs, utilization on MIG slices) reads as None, per field.

``ReplayGpuSource`` plays back a trace file (one row per device per tick, looping), so tests and
``computewise run`` on a machine without a GPU exercise the same code path as a real one. Set
``COMPUTEWISE_FAKE_GPU`` to a trace path or to the name of a bundled trace (``a100-training``,
``2xh100-ddp``); the bundled traces are synthetic, see ``monitor/data/README.md``.
"""

from __future__ import annotations

import csv
import io
import logging
import os
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any, Protocol, TypeVar

from computewise.errors import InputError, UnknownNameError

__all__ = [
    "ENV_FAKE_GPU",
    "GpuDevice",
    "GpuReading",
    "GpuSource",
    "GpuStatus",
    "NvmlGpuSource",
    "ReplayGpuSource",
    "bundled_traces",
    "open_gpu_source",
    "visible_devices",
]

ENV_FAKE_GPU = "COMPUTEWISE_FAKE_GPU"
_KIB = 1024  # NVML's PCIe throughput is in KB/s, which nvidia-smi and nvitop read as KiB/s
_LOG = logging.getLogger(__name__)
_T = TypeVar("_T")


@dataclass(frozen=True)
class GpuDevice:
    index: int
    name: str
    uuid: str
    memory_total_bytes: int | None
    power_limit_w: float | None


@dataclass(frozen=True)
class GpuStatus:
    """Whether GPUs can be read; ``reason`` says why not ("not available: no NVIDIA driver ...") or from where."""

    available: bool
    reason: str
    devices: tuple[GpuDevice, ...] = ()


@dataclass(frozen=True)
class GpuReading:
    """One device at one instant; None where the driver does not report the metric."""

    index: int
    utilization_pct: float | None
    sm_clock_mhz: float | None
    memory_used_bytes: int | None
    power_w: float | None
    energy_counter_j: float | None  # cumulative since the driver loaded (Volta and newer)
    pcie_tx_bytes_per_s: float | None
    pcie_rx_bytes_per_s: float | None
    process_memory_bytes: int | None  # GPU memory held by the watched processes


class GpuSource(Protocol):
    """Where GPU readings come from. Implementations never raise from these methods."""

    def status(self) -> GpuStatus: ...

    def read(self, pids: Collection[int]) -> list[GpuReading]: ...

    def close(self) -> None: ...


# -- NVML ------------------------------------------------------------------------------------------


class NvmlGpuSource:
    """Reads NVIDIA GPUs through NVML (nvidia-ml-py, imported on first use).

    ``visible`` restricts the devices to NVML indices or UUIDs, as ``CUDA_VISIBLE_DEVICES`` lists them
    (indices match CUDA's only with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``; UUIDs always match).
    """

    def __init__(self, visible: Sequence[str] | None = None) -> None:
        self._visible = tuple(visible) if visible is not None else None
        self._lock = threading.Lock()
        self._status: GpuStatus | None = None
        self._nvml: Any = None
        self._handles: list[tuple[int, Any]] = []

    def status(self) -> GpuStatus:
        with self._lock:
            if self._status is None:
                self._status = self._start()
            return self._status

    def read(self, pids: Collection[int]) -> list[GpuReading]:
        if not self.status().available:
            return []
        nvml = self._nvml
        wanted = set(pids)
        readings = []
        for index, handle in self._handles:
            utilization = _query(nvml, nvml.nvmlDeviceGetUtilizationRates, handle)
            memory = _query(nvml, nvml.nvmlDeviceGetMemoryInfo, handle)
            clock_mhz = _query(nvml, nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_SM)
            power_mw = _query(nvml, nvml.nvmlDeviceGetPowerUsage, handle)
            energy_mj = _query(nvml, nvml.nvmlDeviceGetTotalEnergyConsumption, handle)
            tx_kib = _query(nvml, nvml.nvmlDeviceGetPcieThroughput, handle, nvml.NVML_PCIE_UTIL_TX_BYTES)
            rx_kib = _query(nvml, nvml.nvmlDeviceGetPcieThroughput, handle, nvml.NVML_PCIE_UTIL_RX_BYTES)
            readings.append(
                GpuReading(
                    index=index,
                    utilization_pct=None if utilization is None else float(utilization.gpu),
                    sm_clock_mhz=None if clock_mhz is None else float(clock_mhz),
                    memory_used_bytes=None if memory is None else int(memory.used),
                    power_w=None if power_mw is None else power_mw / 1000.0,
                    energy_counter_j=None if energy_mj is None else energy_mj / 1000.0,
                    pcie_tx_bytes_per_s=None if tx_kib is None else float(tx_kib) * _KIB,
                    pcie_rx_bytes_per_s=None if rx_kib is None else float(rx_kib) * _KIB,
                    process_memory_bytes=self._process_memory(handle, wanted),
                )
            )
        return readings

    def close(self) -> None:
        with self._lock:
            if self._status is not None and self._status.available:
                _query(self._nvml, self._nvml.nvmlShutdown)
            self._status = GpuStatus(False, "not available: the GPU source was closed")
            self._handles = []

    def _start(self) -> GpuStatus:
        try:
            import pynvml
        except ImportError:
            return GpuStatus(False, "not available: nvidia-ml-py is not installed (pip install 'computewise[gpu]')")
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError_LibraryNotFound as error:
            return GpuStatus(False, f"not available: no NVIDIA driver ({error})")
        except pynvml.NVMLError_DriverNotLoaded as error:
            return GpuStatus(False, f"not available: the NVIDIA driver is not loaded ({error})")
        except Exception as error:  # NVMLError or an OSError from ctypes: measurement degrades
            return GpuStatus(False, f"not available: NVML failed to start ({error})")
        self._nvml = pynvml
        devices = []
        count = _query(pynvml, pynvml.nvmlDeviceGetCount) or 0
        for index in range(count):
            handle = _query(pynvml, pynvml.nvmlDeviceGetHandleByIndex, index)
            if handle is None:
                continue
            uuid = str(_query(pynvml, pynvml.nvmlDeviceGetUUID, handle) or "")
            if self._visible is not None and str(index) not in self._visible and uuid not in self._visible:
                continue
            memory = _query(pynvml, pynvml.nvmlDeviceGetMemoryInfo, handle)
            limit_mw = _query(pynvml, pynvml.nvmlDeviceGetEnforcedPowerLimit, handle)
            devices.append(
                GpuDevice(
                    index=index,
                    name=str(_query(pynvml, pynvml.nvmlDeviceGetName, handle) or f"GPU {index}"),
                    uuid=uuid,
                    memory_total_bytes=None if memory is None else int(memory.total),
                    power_limit_w=None if limit_mw is None else limit_mw / 1000.0,
                )
            )
            self._handles.append((index, handle))
        if not devices:
            _query(pynvml, pynvml.nvmlShutdown)
            why = "no NVIDIA GPU found" if not count else "no visible GPU (check CUDA_VISIBLE_DEVICES)"
            return GpuStatus(False, f"not available: {why}")
        version = _query(pynvml, pynvml.nvmlSystemGetDriverVersion)
        return GpuStatus(True, f"NVML, driver {version}" if version else "NVML", tuple(devices))

    def _process_memory(self, handle: Any, pids: set[int]) -> int | None:
        """GPU memory of the watched pids; None when the driver lists no processes at all (e.g. in a container)."""
        nvml = self._nvml
        listed = False
        used = 0
        for call in (nvml.nvmlDeviceGetComputeRunningProcesses, nvml.nvmlDeviceGetGraphicsRunningProcesses):
            processes = _query(nvml, call, handle)
            if processes is None:
                continue
            listed = True
            used += sum(int(p.usedGpuMemory or 0) for p in processes if p.pid in pids)
        return used if listed else None


def _query(nvml: Any, call: Callable[..., _T], *args: Any) -> _T | None:
    try:
        return call(*args)
    except nvml.NVMLError:
        return None


def visible_devices(env: Mapping[str, str]) -> tuple[str, ...] | None:
    """The entries of ``CUDA_VISIBLE_DEVICES`` (None: unset, every device is visible)."""
    value = env.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    return tuple(part.strip() for part in value.split(",") if part.strip())


# -- replay ----------------------------------------------------------------------------------------

_REPLAY_COLUMNS = (
    "tick",
    "gpu_index",
    "name",
    "uuid",
    "memory_total_bytes",
    "power_limit_w",
    "utilization_pct",
    "sm_clock_mhz",
    "memory_used_bytes",
    "power_w",
    "energy_counter_j",
    "pcie_tx_bytes_per_s",
    "pcie_rx_bytes_per_s",
    "process_memory_bytes",
)


class ReplayGpuSource:
    """Plays a trace file back, one tick per ``read()``, looping; the energy counter keeps rising across loops.

    The file is CSV with the columns of ``_REPLAY_COLUMNS``; lines starting with ``#`` are comments,
    an empty field is a metric the device does not report. The pids given to ``read`` are ignored:
    ``process_memory_bytes`` is what the trace recorded.
    """

    def __init__(self, path: str | Path, tick_s: float = 1.0) -> None:
        self.path = Path(path)
        try:
            text = self.path.read_text()
        except OSError as error:
            raise InputError(f"cannot read the GPU trace {self.path}: {error.strerror}", _TRACE_HINT) from error
        self._ticks, self._devices = _parse_trace(text, str(self.path))
        self._tick_s = tick_s
        self._lock = threading.Lock()
        self._position = 0
        self._energy_offset_j: dict[int, float] = {}

    def status(self) -> GpuStatus:
        return GpuStatus(True, f"replaying {self.path.name} (a trace file, not this machine's GPUs)", self._devices)

    def read(self, pids: Collection[int]) -> list[GpuReading]:
        with self._lock:
            if self._position == len(self._ticks):
                self._loop()
            rows = self._ticks[self._position]
            self._position += 1
            return [
                row
                if row.energy_counter_j is None
                else replace(row, energy_counter_j=row.energy_counter_j + self._energy_offset_j.get(row.index, 0.0))
                for row in rows
            ]

    def close(self) -> None:
        """Nothing to release; present for the protocol."""

    def _loop(self) -> None:
        """Restart the trace, shifting each counter so that it continues from its last value at its last power."""
        first, last = self._ticks[0], self._ticks[-1]
        for start, end in zip(first, last, strict=True):
            if start.energy_counter_j is None or end.energy_counter_j is None:
                continue
            step_j = (end.power_w or 0.0) * self._tick_s
            shift = end.energy_counter_j - start.energy_counter_j + step_j
            self._energy_offset_j[start.index] = self._energy_offset_j.get(start.index, 0.0) + shift
        self._position = 0


_TRACE_HINT = f"set {ENV_FAKE_GPU} to a trace CSV file or to one of the bundled traces, or unset it to read real GPUs"


def _parse_trace(text: str, where: str) -> tuple[list[list[GpuReading]], tuple[GpuDevice, ...]]:
    lines = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    reader = csv.DictReader(io.StringIO("\n".join(lines)))
    missing = set(_REPLAY_COLUMNS) - set(reader.fieldnames or ())
    if missing:
        raise InputError(f"GPU trace {where} lacks the columns {', '.join(sorted(missing))}", _TRACE_HINT)
    ticks: dict[int, list[GpuReading]] = {}
    devices: dict[int, GpuDevice] = {}
    for line, row in enumerate(reader, start=2):
        try:
            index = int(row["gpu_index"])
            ticks.setdefault(int(row["tick"]), []).append(
                GpuReading(
                    index=index,
                    utilization_pct=_float(row["utilization_pct"]),
                    sm_clock_mhz=_float(row["sm_clock_mhz"]),
                    memory_used_bytes=_int(row["memory_used_bytes"]),
                    power_w=_float(row["power_w"]),
                    energy_counter_j=_float(row["energy_counter_j"]),
                    pcie_tx_bytes_per_s=_float(row["pcie_tx_bytes_per_s"]),
                    pcie_rx_bytes_per_s=_float(row["pcie_rx_bytes_per_s"]),
                    process_memory_bytes=_int(row["process_memory_bytes"]),
                )
            )
            devices.setdefault(
                index,
                GpuDevice(
                    index=index,
                    name=row["name"],
                    uuid=row["uuid"],
                    memory_total_bytes=_int(row["memory_total_bytes"]),
                    power_limit_w=_float(row["power_limit_w"]),
                ),
            )
        except (TypeError, ValueError) as error:
            raise InputError(f"GPU trace {where}, data row {line}: {error}", _TRACE_HINT) from error
    if not ticks:
        raise InputError(f"GPU trace {where} has no rows", _TRACE_HINT)
    ordered = [sorted(ticks[tick], key=lambda r: r.index) for tick in sorted(ticks)]
    if any([r.index for r in rows] != sorted(devices) for rows in ordered):
        raise InputError(f"GPU trace {where}: every tick must have one row per device", _TRACE_HINT)
    return ordered, tuple(devices[index] for index in sorted(devices))


def _float(text: str) -> float | None:
    return float(text) if text.strip() else None


def _int(text: str) -> int | None:
    return int(float(text)) if text.strip() else None


def bundled_traces() -> tuple[str, ...]:
    """Names of the traces shipped in ``computewise/monitor/data`` (usable as ``COMPUTEWISE_FAKE_GPU``)."""
    folder = resources.files("computewise.monitor") / "data"
    return tuple(sorted(entry.name.removesuffix(".csv") for entry in folder.iterdir() if entry.name.endswith(".csv")))


def open_gpu_source(env: Mapping[str, str] | None = None) -> GpuSource:
    """The replayed trace named by ``COMPUTEWISE_FAKE_GPU`` if set, else NVML on the visible devices."""
    env = os.environ if env is None else env
    fake = env.get(ENV_FAKE_GPU, "").strip()
    if not fake:
        return NvmlGpuSource(visible_devices(env))
    if Path(fake).is_file():
        return ReplayGpuSource(fake)
    names = bundled_traces()
    if fake not in names:
        raise UnknownNameError("GPU trace", fake, names, _TRACE_HINT)
    with resources.as_file(resources.files("computewise.monitor") / "data" / f"{fake}.csv") as path:
        return ReplayGpuSource(path)
