"""Synthesises the bundled GPU traces in ``src/computewise/monitor/data`` (not a test module).

The traces are NOT recordings: no NVIDIA GPU was available where they were made. Each value follows
published behaviour of the card (clocks, power limits, idle draw, memory sizes as NVML reports them)
with seeded noise, so the file is reproducible: ``test_gpu_source.py`` checks that the shipped files
equal what this script writes. Regenerate with ``python tests/monitor/gpu_traces.py``.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "src" / "computewise" / "monitor" / "data"
MIB = 1024**2
KIB = 1024
COLUMNS = (
    "tick,gpu_index,name,uuid,memory_total_bytes,power_limit_w,utilization_pct,sm_clock_mhz,memory_used_bytes,"
    "power_w,energy_counter_j,pcie_tx_bytes_per_s,pcie_rx_bytes_per_s,process_memory_bytes"
)


@dataclass(frozen=True)
class Device:
    name: str
    uuid: str
    memory_total_bytes: int
    power_limit_w: float
    energy_start_j: float


@dataclass(frozen=True)
class Tick:
    utilization_pct: int
    sm_clock_mhz: int
    memory_used_bytes: int
    power_w: float
    pcie_tx_kib_s: int
    pcie_rx_kib_s: int
    process_memory_bytes: int


def render(header: str, devices: list[Device], ticks: list[list[Tick]]) -> str:
    lines = [f"# {line}".rstrip() for line in header.strip().splitlines()]
    lines.append(COLUMNS)
    energy = [d.energy_start_j for d in devices]
    previous: list[float | None] = [None] * len(devices)
    for k, row in enumerate(ticks):
        for i, (device, tick) in enumerate(zip(devices, row, strict=True)):
            before = previous[i]
            if before is not None:
                energy[i] += (before + tick.power_w) / 2.0  # trapezoid over one 1 s tick
            previous[i] = tick.power_w
            lines.append(
                f"{k},{i},{device.name},{device.uuid},{device.memory_total_bytes},{device.power_limit_w:.0f},"
                f"{tick.utilization_pct},{tick.sm_clock_mhz},{tick.memory_used_bytes},{tick.power_w:.3f},"
                f"{energy[i]:.3f},{tick.pcie_tx_kib_s * KIB},{tick.pcie_rx_kib_s * KIB},{tick.process_memory_bytes}"
            )
    return "\n".join(lines) + "\n"


A100_HEADER = """
SYNTHETIC TRACE, NOT A MEASUREMENT. Written by tests/monitor/gpu_traces.py (seeded), see README.md.
1 x NVIDIA A100-SXM4-80GB (400 W power limit), 120 ticks of 1 s, steady-state image-classification
training with a data loader that stalls for 3-4 s about every 20 s. Modelled on published A100 behaviour:
SM clock 1410 MHz (max boost) under load and 210 MHz when no kernel runs; board power 250-400 W under load
and ~80-90 W idle with a CUDA context resident; ~61 GB of the 81920 MiB in use (allocator cache, steady);
host-to-device PCIe traffic ~0.2-0.5 GB/s while batches flow. The energy counter (NVML
nvmlDeviceGetTotalEnergyConsumption, here in joules) integrates the power column over each 1 s tick.
"""


def a100_training() -> str:
    rng = random.Random(20240611)
    device = Device(
        "NVIDIA A100-SXM4-80GB",
        "GPU-00000000-0000-0000-0000-00000000a100",
        81920 * MIB,
        400.0,
        5_832_417.25,
    )
    stalls = {14: (6, 0, 0, 9), 34: (4, 0, 7), 55: (8, 0, 0, 0), 75: (5, 0, 11), 96: (7, 0, 0, 4)}
    stall_util: dict[int, int] = {}
    for start, utils in stalls.items():
        for offset, util in enumerate(utils):
            stall_util[start + offset] = util
    used = 58_368 * MIB  # 61.2 GB
    ticks = []
    for k in range(120):
        if k in stall_util:
            util = stall_util[k]
            clock = 210 if util == 0 else 1410
            power = rng.uniform(82.0, 88.0) if util == 0 else rng.uniform(108.0, 142.0)
            tx, rx = rng.randint(0, 300), rng.randint(200, 2_400)
        else:
            util = min(100, round(rng.gauss(97.0, 2.0)))
            clock = 1410 if rng.random() > 0.08 else rng.choice((1395, 1380))
            power = max(248.0, min(398.0, rng.gauss(335.0, 32.0)))
            tx, rx = rng.randint(8_000, 30_000), rng.randint(180_000, 520_000)
        ticks.append([Tick(util, clock, used, power, tx, rx, used - 432 * MIB)])
    return render(A100_HEADER, [device], ticks)


H100_HEADER = """
SYNTHETIC TRACE, NOT A MEASUREMENT. Written by tests/monitor/gpu_traces.py (seeded), see README.md.
2 x NVIDIA H100 80GB HBM3 (SXM5, 700 W power limit), 60 ticks of 1 s, data-parallel (DDP) language-model
training. Modelled on published H100 behaviour: SM clock 1980 MHz (max boost) under load, 345 MHz with no
kernel; 520-690 W under load, ~115-125 W idle with a CUDA context. Ticks 25-28: rank 0 saves a checkpoint
(device-to-host copy at several GB/s over PCIe, GPU otherwise idle) while rank 1 waits in an NCCL barrier,
whose spinning kernel NVML counts as 100 % utilization at ~180-200 W: utilization is not useful work.
"""


def h100_ddp() -> str:
    rng = random.Random(20240612)
    devices = [
        Device("NVIDIA H100 80GB HBM3", f"GPU-00000000-0000-0000-0000-0000000d100{i}", 81559 * MIB, 700.0, start)
        for i, start in enumerate((9_174_002.5, 8_960_311.75))
    ]
    used = 68_004 * MIB  # 71.3 GB
    checkpoint = range(25, 29)

    def busy() -> Tick:
        util = min(100, round(rng.gauss(98.5, 1.2)))
        power = max(520.0, min(690.0, rng.gauss(615.0, 40.0)))
        clock = 1980 if rng.random() > 0.1 else rng.choice((1965, 1950))
        return Tick(util, clock, used, power, rng.randint(2_000, 9_000), rng.randint(5_000, 40_000), used - 520 * MIB)

    def saving() -> Tick:
        return Tick(
            rng.randint(0, 3),
            345,
            used,
            rng.uniform(118.0, 126.0),
            rng.randint(2_500_000, 6_000_000),
            rng.randint(0, 500),
            used - 520 * MIB,
        )

    def barrier() -> Tick:
        return Tick(100, 1980, used, rng.uniform(180.0, 198.0), 0, rng.randint(0, 200), used - 520 * MIB)

    ticks = [[saving(), barrier()] if k in checkpoint else [busy(), busy()] for k in range(60)]
    return render(H100_HEADER, devices, ticks)


TRACES: dict[str, Callable[[], str]] = {"a100-training": a100_training, "2xh100-ddp": h100_ddp}


def main() -> None:
    for name, make in TRACES.items():
        (DATA / f"{name}.csv").write_text(make())


if __name__ == "__main__":
    main()
