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
    "gh200": ("NVIDIA-GH200-480GB", "gh200", "GH200"),  # nvidia-smi: "NVIDIA GH200 480GB" (96 GB HBM3 + 480 GB LPDDR5X)
    "b200": ("NVIDIA-B200", "b200", "B200"),
}


def engine_names(accelerator: str) -> EngineNames:
    """Resolve a catalog slug or alias; an unknown name raises UnknownNameError with suggestions.

    The accelerator may come from ``--accelerator`` or from a plan's recommendation, so the refusal
    names both ways out rather than a flag the user may not have given.
    """
    device = load_catalog().accelerator(accelerator)
    names = _NAMES.get(device.slug)
    if names is None:
        raise JobEngineError(
            f"{device.slug} ({device.vendor} {device.kind}) has no GPU label that computewise's Kubernetes, Slurm "
            "or SkyPilot manifests request; they schedule NVIDIA GPUs and CPUs",
            f"choose one of {', '.join(sorted(_NAMES))} (--accelerator, or `plan train --gpu`), or render with "
            "neither --accelerator nor --plan and select the nodes in the manifest yourself",
        )
    return EngineNames(device.slug, *names)
