"""Money, energy and carbon of a job from its duration, and what its interruptions add to it.

A synchronous job stops whenever any of its devices fails, and a spot job also whenever any of its
instances is taken back. An interrupted job loses the work since its last checkpoint (half an
interval on average) plus the time to restart; checkpointing itself costs write time. The
checkpoint interval that minimises the sum is Young's (1974):
sqrt(2 * write time * mean time between interruptions).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from computewise.estimate.arrays import FloatArray, col

if TYPE_CHECKING:
    from computewise.specs.hardware import Accelerator

__all__ = [
    "co2_kg",
    "energy_kwh",
    "interruption_slowdown",
    "needs_host",
    "server_w_per_device",
    "young_checkpoint_interval_s",
]


def needs_host(accelerator: Accelerator) -> bool:
    """GPUs, TPUs and NPUs run inside a host server; a CPU socket or an edge module is the machine itself."""
    return accelerator.kind in ("gpu", "tpu", "npu")


def young_checkpoint_interval_s(checkpoint_write_s: FloatArray, interruptions_per_h: FloatArray) -> FloatArray:
    mtbf_s = 3600.0 / np.maximum(col(interruptions_per_h), 1e-9)
    return np.sqrt(2.0 * col(checkpoint_write_s) * mtbf_s)


def interruption_slowdown(
    checkpoint_write_s: FloatArray, interruptions_per_h: FloatArray, restart_overhead_s: float
) -> tuple[FloatArray, FloatArray]:
    """(wall-time multiplier >= 1, checkpoint interval in s) for a job checkpointing at Young's interval."""
    interval_s = young_checkpoint_interval_s(checkpoint_write_s, interruptions_per_h)
    lost_per_s = col(interruptions_per_h) / 3600.0 * (restart_overhead_s + interval_s / 2.0)
    writing_per_s = col(checkpoint_write_s) / interval_s
    return 1.0 + lost_per_s + writing_per_s, interval_s


def server_w_per_device(accelerator: Accelerator, host_fraction_of_tdp: float) -> float:
    """One device's full-load power with its share of the server around it (CPUs, memory, NICs, fans).

    A GPU does not run without its host, and a DGX H100 draws 10.2 kW for 8 x 700 W of GPUs: counting
    the GPUs alone would put half of an 8-GPU server's energy, and of its CO2, out of sight, and
    disagree with the on-premises rows, which price the whole server. A CPU socket or an edge module
    (a phone, a Jetson) is the machine itself and is counted at its package power.
    """
    return accelerator.tdp_w * (1.0 + (host_fraction_of_tdp if needs_host(accelerator) else 0.0))


def energy_kwh(
    devices: FloatArray, device_w: FloatArray, power_fraction: float, time_s: FloatArray, pue: FloatArray
) -> FloatArray:
    """Energy at the facility meter: devices * full-load power each * average draw * hours * PUE.

    ``device_w`` is what one device's share of the machine draws at full load: its TDP with its share
    of the host (:func:`server_w_per_device`) for the whole server, or its TDP alone for the chip only.
    """
    return col(devices) * col(device_w) * power_fraction * col(time_s) / 3600.0 * col(pue) / 1000.0


def co2_kg(kwh: FloatArray, g_co2_per_kwh: FloatArray) -> FloatArray:
    return col(kwh) * col(g_co2_per_kwh) / 1000.0
