"""Cap this process's share of a GPU shared with other jobs: Ray's fractional GPUs limit placement, not memory.

Four Ray jobs at 0.25 GPU all see the whole device, and the first to grow takes memory the others
planned on. A job placed on a fraction gets ``COMPUTEWISE_GPU_MEMORY_FRACTION`` in its environment
(``computewise.scale`` sets it); ``fit()`` calls ``apply_gpu_memory_cap()`` before training, so
PyTorch's caching allocator refuses to grow past that share (``torch.cuda.set_per_process_memory_fraction``)
and the job fails with an out-of-memory error of its own instead of crashing its neighbours.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from computewise.errors import InputError

__all__ = ["GPU_MEMORY_FRACTION_ENV", "apply_gpu_memory_cap", "fraction_memory_cap"]

GPU_MEMORY_FRACTION_ENV = "COMPUTEWISE_GPU_MEMORY_FRACTION"

logger = logging.getLogger(__name__)


def fraction_memory_cap(gpus: float) -> dict[str, str]:
    """The environment that caps a job sharing a GPU to its share; empty for whole GPUs or none.

    Ray's fractional GPUs only stop Ray from over-packing a device; they do not limit memory.
    """
    if 0 < gpus < 1:
        return {GPU_MEMORY_FRACTION_ENV: f"{gpus:g}"}
    return {}


def apply_gpu_memory_cap(environ: Mapping[str, str] | None = None) -> float | None:
    """Cap this process's PyTorch CUDA allocator to ``COMPUTEWISE_GPU_MEMORY_FRACTION``; call it before training.

    Returns the fraction applied, or None when none is set or there is no CUDA device (nothing to cap).
    """
    value = (os.environ if environ is None else environ).get(GPU_MEMORY_FRACTION_ENV)
    if value is None:
        return None
    try:
        fraction = float(value)
    except ValueError:
        fraction = -1.0
    if not 0 < fraction <= 1:
        raise InputError(
            f"{GPU_MEMORY_FRACTION_ENV}={value!r} is not a fraction in (0, 1]",
            f"set it to the job's GPU share, e.g. 0.25, or unset {GPU_MEMORY_FRACTION_ENV}",
        )
    import torch

    if not torch.cuda.is_available():
        return None
    device = torch.cuda.current_device()
    torch.cuda.set_per_process_memory_fraction(fraction, device)
    logger.warning(
        "computewise: this job shares GPU %d: its PyTorch memory is capped to %.0f%% of the device (%s=%s)",
        device,
        fraction * 100,
        GPU_MEMORY_FRACTION_ENV,
        value,
    )
    return fraction
