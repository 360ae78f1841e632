"""Catalog accelerator slugs as each engine spells them: a Kubernetes node label, a Slurm GRES type, a SkyPilot name.

The three engines name the same device differently, and computewise users name it once (the catalog
slug or alias, e.g. ``h100``). Slurm GRES types are chosen by each site's gres.conf; the lowercase
family names below are the common convention, and a site that differs can edit the rendered script.
"""

from __future__ import annotations

from dataclasses import dataclass

from computewise.catalog import load_catalog
from computewise.errors import JobEngineError

__all__ = ["EngineNames", "engine_names"]


@dataclass(frozen=True)
class EngineNames:
    """How one device is requested on each engine."""

    slug: str
    kubernetes_product: str
    slurm_gres: str
    skypilot: str


_NAMES: dict[str, tuple[str, str, str]] = {
    # slug: (nvidia.com/gpu.product label from GPU feature discovery, Slurm GRES type, SkyPilot accelerator)
    "v100-16gb": ("Tesla-V100-SXM2-16GB", "v100", "V100"),
    "v100-32gb": ("Tesla-V100-SXM2-32GB", "v100", "V100-32GB"),
    "t4": ("Tesla-T4", "t4", "T4"),
    "a10g": ("NVIDIA-A10G", "a10g", "A10G"),
    "l4": ("NVIDIA-L4", "l4", "L4"),
    "l40s": ("NVIDIA-L40S", "l40s", "L40S"),
    "a100-40gb": ("NVIDIA-A100-SXM4-40GB", "a100", "A100"),
    "a100-80gb": ("NVIDIA-A100-SXM4-80GB", "a100", "A100-80GB"),
    "a100-80gb-pcie": ("NVIDIA-A100-80GB-PCIe", "a100", "A100-80GB"),
    "h100-sxm": ("NVIDIA-H100-80GB-HBM3", "h100", "H100"),
    "h100-pcie": ("NVIDIA-H100-PCIe", "h100", "H100"),
    "h100-nvl": ("NVIDIA-H100-NVL", "h100", "H100"),
    "h200": ("NVIDIA-H200", "h200", "H200"),
    "b200": ("NVIDIA-B200", "b200", "B200"),
}


def engine_names(accelerator: str) -> EngineNames:
    """Resolve a catalog slug or alias; an unknown name raises UnknownNameError with suggestions."""
    slug = load_catalog().accelerator(accelerator).slug
    names = _NAMES.get(slug)
    if names is None:
        raise JobEngineError(
            f"accelerator {slug!r} has no NVIDIA GPU label that Kubernetes, Slurm or SkyPilot schedules by",
            f"use one of {', '.join(sorted(_NAMES))}, or leave out --accelerator and select nodes yourself",
        )
    return EngineNames(slug, *names)
