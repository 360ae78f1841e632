"""The energy of one sampling interval: measured where the hardware tells, estimated where it does not.

Per GPU, the best source available wins:

1. the NVML energy counter (``nvmlDeviceGetTotalEnergyConsumption``, Volta and newer): its delta over
   the interval, the most exact figure there is;
2. the board power reading: ``(P_previous + P_now) / 2 x interval`` (trapezoid). Also a measurement,
   but of a power sampled at instants (on A100/H100 NVML averages only part of each second, see Yang
   et al., "Part-time Power Measurements: nvidia-smi's Lack of Attention", arXiv:2312.02741), so it
   is less exact than the counter;
3. an estimate from the TDP: ``TDP x (idle + (busy - idle) x utilization / 100) x interval``, with the
   idle and busy fractions of TDP taken from the catalog's assumptions (busy: unknown utilization).

``measured`` is True when every GPU came from (1) or (2). Without GPUs the job's CPU energy is
estimated as ``busy cores x W per busy core x interval`` (busy cores = tree CPU % / 100). With GPUs
only the GPU energy is counted: host CPU, DRAM and fans are left to the PUE of the price snapshot.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from computewise.catalog import Catalog
from computewise.errors import InputError
from computewise.monitor.gpu import GpuDevice, GpuReading

__all__ = [
    "CPU_W_PER_BUSY_CORE_KEY",
    "GPU_BUSY_FRACTION_KEY",
    "GPU_IDLE_FRACTION_KEY",
    "EnergyModel",
    "IntervalEnergy",
]

GPU_BUSY_FRACTION_KEY = "gpu_power_fraction_of_tdp"
GPU_IDLE_FRACTION_KEY = "gpu_idle_power_fraction_of_tdp"
CPU_W_PER_BUSY_CORE_KEY = "cpu_power_w_per_busy_cpu"

Method = Literal["counter", "power", "estimate", "cpu-estimate"]


@dataclass(frozen=True)
class IntervalEnergy:
    """Joules of one interval and how they were obtained (the least exact method of any GPU)."""

    energy_j: float
    measured: bool
    method: Method


@dataclass(frozen=True)
class EnergyModel:
    """TDP per GPU index and the assumed power fractions used when a GPU reports no power."""

    gpu_idle_fraction_of_tdp: float
    gpu_busy_fraction_of_tdp: float
    cpu_w_per_busy_core: float  # per fully busy logical CPU (psutil's 100 %)
    gpu_tdp_w: Mapping[int, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        idle, busy = self.gpu_idle_fraction_of_tdp, self.gpu_busy_fraction_of_tdp
        if not 0.0 <= idle <= busy <= 1.0:
            raise InputError(
                f"GPU power fractions of TDP must satisfy 0 <= idle ({idle}) <= busy ({busy}) <= 1",
                f"fix {GPU_IDLE_FRACTION_KEY} / {GPU_BUSY_FRACTION_KEY} in your assumptions.csv",
            )
        if self.cpu_w_per_busy_core < 0 or any(w < 0 for w in self.gpu_tdp_w.values()):
            raise InputError("power figures cannot be negative", f"fix {CPU_W_PER_BUSY_CORE_KEY} or the TDP")

    @classmethod
    def from_catalog(cls, catalog: Catalog, devices: Sequence[GpuDevice] = ()) -> EnergyModel:
        """Fractions from the catalog's assumptions; TDP from the catalog GPU matching each device's name,
        else the device's NVML power limit."""
        tdp: dict[int, float] = {}
        for device in devices:
            accelerator = catalog.match_device(device.name, device.memory_total_bytes)
            if accelerator is not None and accelerator.tdp_w > 0:
                tdp[device.index] = accelerator.tdp_w
            elif device.power_limit_w:
                tdp[device.index] = device.power_limit_w
        return cls(
            gpu_tdp_w=tdp,
            gpu_idle_fraction_of_tdp=catalog.assumption(GPU_IDLE_FRACTION_KEY),
            gpu_busy_fraction_of_tdp=catalog.assumption(GPU_BUSY_FRACTION_KEY),
            cpu_w_per_busy_core=catalog.assumption(CPU_W_PER_BUSY_CORE_KEY),
        )

    def gpu_estimate_w(self, index: int, utilization_pct: float | None) -> float:
        """Assumed draw of one GPU; 0 W when its TDP is unknown (no catalog match and no power limit)."""
        tdp = self.gpu_tdp_w.get(index, 0.0)
        if utilization_pct is None:
            return tdp * self.gpu_busy_fraction_of_tdp
        share = min(100.0, max(0.0, utilization_pct)) / 100.0
        idle, busy = self.gpu_idle_fraction_of_tdp, self.gpu_busy_fraction_of_tdp
        return tdp * (idle + (busy - idle) * share)

    def interval(
        self,
        previous: Mapping[int, GpuReading],
        current: Sequence[GpuReading],
        interval_s: float,
        cpu_percent: float,
    ) -> IntervalEnergy:
        """Energy of the interval ending with ``current`` (``previous``: the readings at its start, by index)."""
        if not current:
            busy_cores = max(0.0, cpu_percent) / 100.0
            return IntervalEnergy(busy_cores * self.cpu_w_per_busy_core * interval_s, False, "cpu-estimate")
        total_j = 0.0
        methods: set[Method] = set()
        for now in current:
            before = previous.get(now.index)
            if (
                now.energy_counter_j is not None
                and before is not None
                and before.energy_counter_j is not None
                and now.energy_counter_j >= before.energy_counter_j  # a driver reload resets the counter
            ):
                total_j += now.energy_counter_j - before.energy_counter_j
                methods.add("counter")
            elif now.power_w is not None:
                start_w = before.power_w if before is not None and before.power_w is not None else now.power_w
                total_j += (start_w + now.power_w) / 2.0 * interval_s
                methods.add("power")
            else:
                total_j += self.gpu_estimate_w(now.index, now.utilization_pct) * interval_s
                methods.add("estimate")
        method: Method = next(m for m in ("estimate", "power", "counter") if m in methods)
        return IntervalEnergy(total_j, method != "estimate", method)
