"""The shipped CSV files: every row loads, carries a source and a date, and its numbers are plausible."""

from __future__ import annotations

import csv
import re
from datetime import date
from pathlib import Path

import pytest

from computewise.catalog import TABLES, Catalog, TableName, load_catalog
from computewise.catalog.loader import bundled_files

ESTIMATOR_ASSUMPTIONS = (
    "onprem_power_usd_per_kwh",
    "onprem_pue",
    "onprem_utilization",
    "cloud_pue",
    "spot_preemptions_per_h",
    "device_interruptions_per_h",
    "restart_overhead_s",
    "matmul_peak_fraction",
    "sustained_matmul_share",
    "slowest_device_share",
    "attention_share_of_matmul",
    "triton_attention_share_of_flash",
    "flash_v1_attention_share_of_flash",
    "stream_bandwidth_fraction",
    "kernel_floor_s",
    "host_s_per_kernel_eager",
    "host_s_per_kernel_transformers",
    "host_s_per_kernel_autograd",
    "host_s_per_kernel_recording",
    "host_s_per_kernel_compiled",
    "host_s_per_kernel_graphs",
    "host_s_per_convolution",
    "inter_node_network_efficiency",
    "intra_node_link_efficiency",
    "runtime_overhead_bytes",
    "runtime_overhead_fraction",
    "unlocated_pue",
    "serving_target_utilization",
    "serving_cold_start_s",
)


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog()


def test_every_bundled_row_loads(catalog: Catalog) -> None:
    for source in bundled_files():
        with Path(source.path).open(newline="", encoding="utf-8") as handle:
            raw_rows = list(csv.DictReader(handle))
        assert len(raw_rows) == len(catalog.rows(source.table)), source.path
        assert raw_rows, f"{source.path} is empty"


def test_catalog_has_the_minimum_rows(catalog: Catalog) -> None:
    assert len(catalog.accelerators) >= 25
    assert 80 <= len(catalog.offerings) <= 200
    assert {"aws", "gcp", "azure", "lambda", "coreweave"} <= set(catalog.clouds())
    assert len(catalog.onprem) >= 6


@pytest.mark.parametrize("table", TABLES)
def test_every_row_has_a_source_and_a_past_iso_date(catalog: Catalog, table: TableName) -> None:
    for row in catalog.rows(table):
        assert row.source.strip(), row
        assert date.fromisoformat(row.retrieved) <= date.today(), row


def test_required_accelerators_and_kinds(catalog: Catalog) -> None:
    slugs = {acc.slug for acc in catalog.accelerators}
    required = {
        "v100-16gb", "t4", "a10g", "l4", "l40s", "a100-40gb", "a100-80gb", "h100-sxm", "h100-pcie", "h200", "b200",
        "mi250x", "mi300x", "tpu-v4", "tpu-v5e", "tpu-v5p", "gaudi2", "gaudi3", "trainium", "inferentia2",
        "jetson-agx-orin-64gb", "jetson-xavier-nx", "epyc-9654", "xeon-8480plus",
    }  # fmt: skip
    assert required <= slugs
    assert {acc.kind for acc in catalog.accelerators} == {"gpu", "tpu", "npu", "cpu", "edge"}


def test_numbers_are_in_plausible_units(catalog: Catalog) -> None:
    """Catches a TFLOP/s or GB figure typed where FLOP/s or bytes belong."""
    for acc in catalog.accelerators:
        assert 1e9 <= acc.memory_bytes <= 2e12, acc.slug
        assert 1e10 <= acc.memory_bandwidth_bytes_per_s <= 1e14, acc.slug
        assert acc.peak_flops, acc.slug
        for flops in acc.peak_flops.values():
            assert 1e11 <= flops <= 1e16, acc.slug
        assert acc.tdp_w == 0 or 5 <= acc.tdp_w <= 2000, acc.slug
    for offering in catalog.offerings:
        assert 0.05 <= offering.on_demand_usd_per_h / offering.accelerator_count <= 20, offering
        assert offering.ram_bytes >= 1e9, offering


def test_vendor_figures_reproduce() -> None:
    catalog = load_catalog()
    h100 = catalog.accelerator("h100-sxm")
    # NVIDIA H100 Tensor Core GPU datasheet, SXM column: BF16 1,979 TFLOPS with sparsity -> 989.5 dense,
    # 80 GB, 3.35 TB/s.
    assert h100.peak_flops["bf16"] == pytest.approx(989.5e12)
    assert h100.memory_bytes == 81559 * 1024**2  # nvidia-smi on a real H100 80GB HBM3
    assert h100.memory_bandwidth_bytes_per_s == pytest.approx(3.35e12)
    # NVIDIA A100 datasheet: 312 TFLOPS BF16 dense, 19.5 TFLOPS FP32; the 80 GB SXM part has 2,039 GB/s.
    a100 = catalog.accelerator("a100-80gb")
    assert a100.peak_flops["bf16"] == pytest.approx(312e12)
    assert a100.peak_flops["fp32"] == pytest.approx(19.5e12)
    assert a100.memory_bandwidth_bytes_per_s == pytest.approx(2039e9)
    assert a100.memory_bytes == 81920 * 1024**2  # nvidia-smi on a real A100-SXM4-80GB, not 80e9
    # Cloud TPU v5e docs: 197 TFLOPs bf16 and 16 GB HBM per chip.
    assert catalog.accelerator("tpu-v5e").peak_flops["bf16"] == pytest.approx(197e12)


def test_consumer_and_workstation_gpus_train_at_their_fp32_accumulate_rate(catalog: Catalog) -> None:
    """The cards people fine-tune on, at the tensor rate PyTorch's bf16 matmuls get: they accumulate in
    fp32, which GeForce cards run at half their headline (FP16-accumulate) rate and professional cards at
    full rate. Memory is the driver's total, the figure an out-of-memory error is measured against."""
    rtx4090 = catalog.accelerator("4090")
    assert rtx4090.slug == "rtx-4090" and rtx4090.trains
    assert rtx4090.memory_bytes == 24564 * 2**20  # nvidia-smi on a GeForce RTX 4090, not 24e9
    assert rtx4090.peak_flops["bf16"] == pytest.approx(165.2e12)  # Ada whitepaper: 330.3 with FP16 accumulate
    assert rtx4090.peak_flops["fp8"] == pytest.approx(330.3e12)
    assert rtx4090.memory_bandwidth_bytes_per_s == pytest.approx(1008e9)
    geforce = {"rtx-3090": 71e12, "rtx-4090": 165.2e12, "rtx-5090": 209.5e12}
    professional = {"rtx-a6000": 154.8e12, "rtx-6000-ada": 364.2e12}
    for slug, bf16 in (geforce | professional).items():
        card = catalog.accelerator(slug)
        assert card.peak_flops["bf16"] == pytest.approx(bf16), slug
        assert card.peak_flops["fp16"] == card.peak_flops["bf16"], slug
        assert card.trains and card.kind == "gpu" and card.form_factor == "PCIe", slug
    for slug in geforce:  # TF32 at half the 16-bit rate on GeForce, as FP32 accumulate
        card = catalog.accelerator(slug)
        assert card.peak_flops["tf32"] == pytest.approx(card.peak_flops["bf16"] / 2, rel=0.01), slug
    assert catalog.accelerator("rtx-6000-ada").peak_flops["fp8"] == pytest.approx(1457e12 / 2)  # datasheet, sparse
    assert catalog.accelerator("rtx-3090").peak_flops.get("fp8", 0) == 0  # Ampere has no FP8


@pytest.mark.parametrize("slug", ["rtx-3090", "rtx-4090", "rtx-5090", "rtx-a6000"])
def test_one_gpu_workstations_can_be_owned(catalog: Catalog, slug: str) -> None:
    """``--gpu rtx-4090 --gpus 1 --pricing on-prem`` prices a one-GPU workstation, its GPU at a dated price."""
    workstation = catalog.onprem_for(slug)
    assert workstation is not None and workstation.accelerator_count == 1
    assert workstation.server_power_w > catalog.accelerator(slug).tdp_w
    assert 0.05 < workstation.usd_per_h(0.15, 1.0, 0.5) < 1.0, workstation


_MEMORY_FIGURE = re.compile(
    r"memory_bytes: (?:(?P<count>\d+) x )?(?P<value>\d+) (?P<unit>MiB|GiB|B)"
    r"(?: as (?P<tool>nvidia-smi|rocm-smi|hl-smi) reports it|, the vendor's figure)"
)
_UNIT_BYTES = {"B": 1, "MiB": 2**20, "GiB": 2**30}


def test_memory_is_what_the_driver_reports_on_every_row(catalog: Catalog) -> None:
    """One rule for every row: the memory the driver hands to CUDA (or ROCm, or SynapseAI), as its tool
    prints it, or the vendor's figure where no driver total is published, the source naming which.

    A mix (80e9 bytes beside nvidia-smi's 81559 MiB) made plans reject layouts that fit on one part
    and not on its sibling, and ``catalog list`` print 85.52 GB beside 80 GB.
    """
    for acc in catalog.accelerators:
        figures = _MEMORY_FIGURE.findall(acc.source)
        assert len(figures) == 1, f"{acc.slug}: the source must state its memory figure once, got {figures}"
        match = _MEMORY_FIGURE.search(acc.source)
        assert match is not None
        stated = int(match["count"] or 1) * int(match["value"]) * _UNIT_BYTES[match["unit"]]
        assert acc.memory_bytes == stated, acc.slug
        assert acc.memory_bytes % 2**20 == 0, f"{acc.slug}: drivers report whole MiB"
        if acc.vendor == "NVIDIA" and acc.kind == "gpu":
            assert match["tool"] == "nvidia-smi", f"{acc.slug}: an NVIDIA data-center GPU has an nvidia-smi total"


def test_prices_are_ordered_where_several_exist(catalog: Catalog) -> None:
    for row in catalog.offerings:
        if row.spot_usd_per_h is not None:
            assert row.spot_usd_per_h < row.on_demand_usd_per_h, row
        if row.reserved_1y_usd_per_h is not None:
            assert row.reserved_1y_usd_per_h < row.on_demand_usd_per_h, row
        if row.reserved_3y_usd_per_h is not None:
            assert row.reserved_1y_usd_per_h is not None, row
            assert row.reserved_3y_usd_per_h < row.reserved_1y_usd_per_h, row


def test_every_offering_prices_carbon(catalog: Catalog) -> None:
    world = catalog.carbon_for("*", "*").g_co2_per_kwh
    for row in catalog.offerings:
        assert 0 < catalog.carbon_g_per_kwh(row.cloud, row.region) <= 1000, row
    specific = [row for row in catalog.offerings if catalog.carbon_for(row.cloud, row.region).cloud != "*"]
    # Only regions without published data (GCP us-central2, a TPU-only region) fall back to the world average.
    assert len(specific) >= len(catalog.offerings) - 2
    assert catalog.carbon_g_per_kwh("nowhere", "nowhere-1") == world


def test_estimator_assumptions_are_present(catalog: Catalog) -> None:
    for key in ESTIMATOR_ASSUMPTIONS:
        value = catalog.assumption(key)
        assert value >= 0, key
    for key in (
        "onprem_utilization",
        "matmul_peak_fraction",
        "stream_bandwidth_fraction",
        "attention_share_of_matmul",
        "sustained_matmul_share",
        "slowest_device_share",
        "serving_target_utilization",
    ):
        assert 0 < catalog.assumption(key) <= 1, key


def test_onprem_rows_name_catalog_accelerators(catalog: Catalog) -> None:
    for row in catalog.onprem:
        assert catalog.accelerator(row.accelerator).slug == row.accelerator
        assert row.usd_per_h(0.1, 1.5, 0.6) > 0
