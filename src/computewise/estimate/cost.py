"""Money, energy and carbon of a job from its duration.

Spot capacity is cheap but can be taken back. A preempted job loses the work since its last
checkpoint (half an interval on average) plus the time to restart; checkpointing itself costs
write time. The checkpoint interval that minimises the sum is Young's (1974):
sqrt(2 * write time * mean time between failures).
"""

from __future__ import annotations

import numpy as np

from computewise.estimate.arrays import FloatArray, col

__all__ = ["co2_kg", "energy_kwh", "spot_slowdown", "young_checkpoint_interval_s"]


def young_checkpoint_interval_s(checkpoint_write_s: FloatArray, preemptions_per_h: float) -> FloatArray:
    mtbf_s = 3600.0 / max(preemptions_per_h, 1e-9)
    return np.sqrt(2.0 * col(checkpoint_write_s) * mtbf_s)


def spot_slowdown(
    checkpoint_write_s: FloatArray, preemptions_per_h: float, restart_overhead_s: float
) -> tuple[FloatArray, FloatArray]:
    """(wall-time multiplier >= 1, checkpoint interval in s) for a spot job checkpointing at Young's interval."""
    interval_s = young_checkpoint_interval_s(checkpoint_write_s, preemptions_per_h)
    lost_per_s = preemptions_per_h / 3600.0 * (restart_overhead_s + interval_s / 2.0)
    writing_per_s = col(checkpoint_write_s) / interval_s
    return 1.0 + lost_per_s + writing_per_s, interval_s


def energy_kwh(
    devices: FloatArray, tdp_w: FloatArray, power_fraction: float, time_s: FloatArray, pue: FloatArray
) -> FloatArray:
    """Accelerator energy at the facility meter: devices * TDP * average draw * hours * PUE."""
    return col(devices) * col(tdp_w) * power_fraction * col(time_s) / 3600.0 * col(pue) / 1000.0


def co2_kg(kwh: FloatArray, g_co2_per_kwh: FloatArray) -> FloatArray:
    return col(kwh) * col(g_co2_per_kwh) / 1000.0
