"""Catalog accelerators as each engine asks for them: Kubernetes resources and node labels, Slurm GRES, SkyPilot.

The engines name the same device differently, and computewise users name it once (the catalog
slug or alias, e.g. ``h100``). Kubernetes counts a device through its vendor's device plugin and
picks the model by node labels; Slurm GRES types are chosen by each site's gres.conf (the lowercase
family names below are the common convention, and a site that differs can edit the rendered script).

Sources of the names (checked 2026-11 against the vendors' documentation):

- NVIDIA: ``nvidia.com/gpu`` (NVIDIA device plugin), the model in GPU feature discovery's
  ``nvidia.com/gpu.product`` label.
- AMD: ``amd.com/gpu`` (ROCm k8s-device-plugin, instinct.docs.amd.com/projects/k8s-device-plugin; also
  kubernetes.io "Schedule GPUs"); the model in the ROCm node labeller's ``amd.com/gpu.device-id`` label, the
  PCI device id (MI300X: ``74a1`` in AMD's example labels), which, unlike ``amd.com/gpu.product-name``, does
  not change spelling between labeller releases. Slurm schedules AMD GPUs as ``gpu`` GRES (gres.conf
  ``AutoDetect=rsmi``).
- Cloud TPU on GKE: ``google.com/tpu`` chips, with the ``cloud.google.com/gke-tpu-accelerator`` and
  ``cloud.google.com/gke-tpu-topology`` node selectors (cloud.google.com/kubernetes-engine/docs/concepts/
  plan-tpus). A pod asks for every chip of its TPU VM, so a single-host job is one of the shapes below
  (Cloud TPU docs: v5e 1x1, 2x2 and 2x4 on one host; v4 and v5p 2x2x1, a host of four chips). Slurm does
  not schedule Cloud TPUs: Google runs them as TPU VMs (GKE, queued resources).
- AWS Trainium and Inferentia: ``aws.amazon.com/neuron`` whole Neuron devices (the AWS Neuron device
  plugin, awsdocs-neuron "Kubernetes environment setup for Neuron"; ``aws.amazon.com/neuroncore`` would
  count cores), on nodes picked by the well-known ``node.kubernetes.io/instance-type`` label, as the Neuron
  docs do: no label names the chip. Slurm has no GRES for Neuron devices (AWS ParallelCluster gives trn1
  jobs whole nodes), so a Slurm script is refused rather than guessed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from computewise.catalog import load_catalog
from computewise.errors import JobEngineError

__all__ = [
    "NEURON_CORES_PER_DEVICE",
    "KubernetesRequest",
    "kubernetes_request",
    "processes_per_device",
    "single_host_tpu_chips",
    "skypilot_resources",
    "slurm_gres",
]

_NVIDIA: dict[str, tuple[str, str, str]] = {
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
    # workstation cards (GFD spells nvidia-smi's name with dashes: "NVIDIA GeForce RTX 3090" -> NVIDIA-GeForce-RTX-3090)
    "rtx-3090": ("NVIDIA-GeForce-RTX-3090", "rtx3090", "RTX3090"),
    "rtx-4090": ("NVIDIA-GeForce-RTX-4090", "rtx4090", "RTX4090"),
    "rtx-5090": ("NVIDIA-GeForce-RTX-5090", "rtx5090", "RTX5090"),
    "rtx-a6000": ("NVIDIA-RTX-A6000", "a6000", "A6000"),
    "rtx-6000-ada": ("NVIDIA-RTX-6000-Ada-Generation", "rtx6000ada", "RTX6000-Ada"),
}
_AMD: dict[str, tuple[str, str, str]] = {
    # slug: (amd.com/gpu.device-id label of the ROCm node labeller, Slurm GRES type, SkyPilot accelerator)
    "mi300x": ("74a1", "mi300x", "MI300X"),
}
_TPU: dict[str, tuple[str, dict[int, str], str, int]] = {
    # slug: (cloud.google.com/gke-tpu-accelerator, {chips on one host: gke-tpu-topology}, SkyPilot name stem,
    # units per chip in that name: SkyPilot, like gcloud's accelerator types, counts v4 and v5p slices in
    # TensorCores, two per chip, and v5e slices in chips)
    "tpu-v4": ("tpu-v4-podslice", {4: "2x2x1"}, "tpu-v4", 2),
    "tpu-v5e": ("tpu-v5-lite-podslice", {1: "1x1", 4: "2x2", 8: "2x4"}, "tpu-v5litepod", 1),
    "tpu-v5p": ("tpu-v5p-slice", {4: "2x2x1"}, "tpu-v5p", 2),
}
_NEURON: dict[str, dict[str, int]] = {
    # slug: {EC2 instance type: Neuron devices}, smallest first (AWS Neuron docs' Trn1 and Inf2 architecture pages)
    "trainium": {"trn1.2xlarge": 1, "trn1.32xlarge": 16, "trn1n.32xlarge": 16},
    "inferentia2": {"inf2.xlarge": 1, "inf2.8xlarge": 1, "inf2.24xlarge": 6, "inf2.48xlarge": 12},
}
_RENDERED = {*_NVIDIA, *_AMD, *_TPU, *_NEURON}
# Trainium and Inferentia2 have two NeuronCore-v2 each, and PyTorch NeuronX gives each process one (logical)
# NeuronCore (AWS Neuron, "Developer Guide for Training with PyTorch NeuronX"): two workers per device.
NEURON_CORES_PER_DEVICE = 2


@dataclass(frozen=True)
class KubernetesRequest:
    """How a pod asks for its devices: the device plugin's extended resource, and the nodes that have them.

    ``node_selector`` names the model (and a TPU slice's shape); ``instance_types`` (any of them, by node
    affinity) stands in where no label names the device, as for AWS Neuron.
    """

    resource: str
    node_selector: dict[str, str] = field(default_factory=dict)
    instance_types: tuple[str, ...] = ()


def _slug(accelerator: str) -> str:
    """The catalog slug of a slug or alias; an unknown name raises UnknownNameError with suggestions.

    The accelerator may come from ``--gpu`` or from a plan's recommendation, so the refusal names both
    ways out rather than a flag the user may not have given.
    """
    catalog = load_catalog()
    device = catalog.accelerator(accelerator)
    if device.slug not in _RENDERED:
        rendered = sorted(a.slug for a in catalog.accelerators if a.slug in _RENDERED)
        raise JobEngineError(
            f"{device.slug} ({device.vendor} {device.kind}) has no device that computewise's Kubernetes, Slurm "
            "or SkyPilot manifests request; they schedule NVIDIA and AMD GPUs, Cloud TPUs, AWS Trainium and "
            "Inferentia, and CPUs",
            f"choose one of {', '.join(rendered)} (--gpu, or `plan train --gpu`), or render with neither "
            "--gpu nor --plan and select the nodes in the manifest yourself",
        )
    return device.slug


def processes_per_device(accelerator: str) -> int:
    """Worker processes one device takes under torchrun: one per GPU or TPU chip, one per NeuronCore."""
    return NEURON_CORES_PER_DEVICE if load_catalog().accelerator(accelerator).slug in _NEURON else 1


def single_host_tpu_chips(accelerator: str) -> tuple[int, ...]:
    """The chip counts one TPU VM of this generation has on GKE (empty for what is not a Cloud TPU)."""
    shape = _TPU.get(load_catalog().accelerator(accelerator).slug)
    return tuple(shape[1]) if shape else ()


def _tpu_topology(slug: str, chips: float) -> str:
    """The GKE topology of a single-host slice of ``chips``; other counts are refused with the ones that exist."""
    shapes = _TPU[slug][1]
    if chips not in shapes:
        *others, last = map(str, shapes)
        counts = f"{', '.join(others)} or {last}" if others else last
        fit = min((count for count in shapes if count >= chips), default=max(shapes))
        raise JobEngineError(
            f"a {slug} job runs on whole TPU VMs: {counts} chips on one host, not {chips:g}",
            f"ask for {counts} chips (--gpu {slug} --gpus {fit}, without --plan); a slice over several hosts runs "
            "one pod per host (a JobSet), which computewise does not render",
        )
    return shapes[int(chips)]


def kubernetes_request(accelerator: str, count: float) -> KubernetesRequest:
    """The resource and node selection for ``count`` devices of ``accelerator`` (a catalog slug or alias)."""
    slug = _slug(accelerator)
    if slug in _NVIDIA:
        return KubernetesRequest("nvidia.com/gpu", {"nvidia.com/gpu.product": _NVIDIA[slug][0]})
    if slug in _AMD:
        return KubernetesRequest("amd.com/gpu", {"amd.com/gpu.device-id": _AMD[slug][0]})
    if slug in _TPU:
        selector = {"cloud.google.com/gke-tpu-accelerator": _TPU[slug][0]}
        selector["cloud.google.com/gke-tpu-topology"] = _tpu_topology(slug, count)
        return KubernetesRequest("google.com/tpu", selector)
    instances = _NEURON[slug]
    holding = tuple(name for name, devices in instances.items() if devices >= count)
    if not holding:
        raise JobEngineError(
            f"no {slug} instance holds {count} Neuron devices (at most {max(instances.values())})",
            "ask for fewer devices (--gpus), or plan for one machine (--max-gpus)",
        )
    return KubernetesRequest("aws.amazon.com/neuron", instance_types=holding)


def slurm_gres(accelerator: str) -> str:
    """The GRES type a ``--gres=gpu:TYPE:N`` line names; Cloud TPUs and AWS Neuron devices are no Slurm GRES."""
    slug = _slug(accelerator)
    if slug in _NVIDIA:
        return _NVIDIA[slug][1]
    if slug in _AMD:
        return _AMD[slug][1]
    if slug in _TPU:
        raise JobEngineError(
            f"Slurm does not schedule Cloud TPUs ({slug}): Google runs them as TPU VMs, not as GRES on a node",
            "render the job for GKE (--engine kubernetes) or SkyPilot (--engine skypilot)",
        )
    raise JobEngineError(
        f"Slurm has no GRES for AWS Neuron devices ({slug}): clusters such as AWS ParallelCluster give trn1 and "
        "inf2 jobs whole nodes",
        "render the job for EKS with the Neuron device plugin (--engine kubernetes) or SkyPilot (--engine "
        "skypilot); or write the script for the cluster's Neuron partition with #SBATCH --exclusive",
    )


def skypilot_resources(accelerator: str, count: float) -> dict[str, str]:
    """SkyPilot's resources for ``count`` devices: ``accelerators: H100:8`` or ``tpu-v5litepod-4``, else the VM.

    A TPU slice is one accelerator named by its size (chips for v5e, TensorCores for v4 and v5p), as
    ``sky show-gpus`` lists them (docs.skypilot.co, "GPUs and Accelerators"). AWS Neuron devices are asked
    for by instance type, the smallest that holds them, as EC2 sells them.
    """
    slug = _slug(accelerator)
    if slug in _TPU:
        _tpu_topology(slug, count)  # the same single-host slices as on GKE
        _, _, stem, units_per_chip = _TPU[slug]
        return {"accelerators": f"{stem}-{int(count) * units_per_chip}"}
    if slug in _NEURON:
        if count != int(count):
            raise JobEngineError(
                f"SkyPilot rents whole {slug} devices, not {count:g} of one",
                "ask for whole devices (--gpus 1), or share one with the ray engine",
            )
        (holding, *_) = kubernetes_request(slug, count).instance_types
        return {"instance_type": holding}
    name = _NVIDIA[slug][2] if slug in _NVIDIA else _AMD[slug][2]
    return {"accelerators": f"{name}:{int(count) if count == int(count) else count}"}
