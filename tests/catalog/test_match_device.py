"""Driver device names (NVML, torch.cuda.get_device_name) map to catalog accelerators."""

from __future__ import annotations

import pytest

from computewise.catalog import Catalog


@pytest.mark.parametrize(
    ("name", "memory_bytes", "slug"),
    [
        ("NVIDIA H100 80GB HBM3", 85_520_809_984, "h100-sxm"),
        ("NVIDIA H100 PCIe", 85_520_809_984, "h100-pcie"),
        ("NVIDIA H100 NVL", 99_857_989_632, "h100-nvl"),
        ("NVIDIA H200", 150_754_820_096, "h200"),
        ("NVIDIA A100-SXM4-40GB", 42_949_672_960, "a100-40gb"),
        ("NVIDIA A100-SXM4-80GB", 85_899_345_920, "a100-80gb"),
        ("NVIDIA A100 80GB PCIe", 85_899_345_920, "a100-80gb-pcie"),
        ("NVIDIA A100-SXM4-40GB", None, "a100-40gb"),  # the size in the name decides without the driver's figure
        ("Tesla V100-SXM2-16GB", None, "v100-16gb"),
        ("Tesla T4", 16_106_127_360, "t4"),
        ("NVIDIA A10G", 24_146_608_128, "a10g"),
        ("NVIDIA L4", 24_152_899_584, "l4"),
        ("NVIDIA GeForce RTX 4090", 25_757_220_864, "rtx-4090"),
        ("NVIDIA GeForce RTX 4090", None, "rtx-4090"),
        ("NVIDIA GeForce RTX 3090", 25_769_803_776, "rtx-3090"),
        ("NVIDIA GeForce RTX 5090", 34_190_917_632, "rtx-5090"),
        ("NVIDIA RTX A6000", 51_527_024_640, "rtx-a6000"),
        ("NVIDIA RTX 6000 Ada Generation", 51_527_024_640, "rtx-6000-ada"),
        # "RTX" names a dozen cards: one the catalog lacks matches none, not the row nearest its memory.
        ("NVIDIA GeForce RTX 3060", 12_884_901_888, None),
        ("NVIDIA GeForce RTX 4080", 17_171_480_576, None),
        ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", 102_642_532_352, None),
    ],
)
def test_device_names_map_to_catalog_slugs(catalog: Catalog, name: str, memory_bytes: int | None, slug: str) -> None:
    accelerator = catalog.match_device(name, memory_bytes)
    assert (accelerator.slug if accelerator else None) == slug
