"""Typed figures the printers read from every estimate and plan option: one shape, whatever computed it.

Pure values, no numpy: ``report`` reads them without string keys, and a plan read back from its
``--json`` file (``plan.result.Plan.from_dict``) yields the same figures as a live run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["MEMORY_PART_KEYS", "DeviceMemory"]

# Parts of a device's memory, in the order a user reasons about them: state first, then per-step buffers.
MEMORY_PART_KEYS = ("weights", "gradients", "optimizer_states", "activations", "kv_cache", "overhead")


@dataclass(frozen=True)
class DeviceMemory:
    """Bytes per device by part (``MEMORY_PART_KEYS``), the step's peaks and ``total`` where known, and the capacity.

    ``capacity_bytes`` is None where the figure has no device to fit (an inference option); ``fits`` is the
    estimate's own verdict, None where it gave none (the total is then compared with the capacity).
    """

    per_device: Mapping[str, float]
    capacity_bytes: float | None = None
    fits: bool | None = None

    @property
    def total(self) -> float:
        """What must fit on the card: the estimate's total, or the parts' sum for figures that lack one."""
        if "total" in self.per_device:
            return self.per_device["total"]
        return sum(self.per_device.get(key, 0.0) for key in MEMORY_PART_KEYS)
