"""Numbers the estimators assume, each read from the catalog's assumptions.csv (with its source)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from computewise.catalog import Catalog


__all__ = ["Assumptions"]


@dataclass(frozen=True)
class Assumptions:
    """Defaults a user may override per call (``dataclasses.replace``); sources live in the CSV.

    What prices, grids and PUE assume (``cloud_pue``, ``onprem_*``, ``cpu_usd_per_vcpu_h``, ...) is read by
    ``estimate.quote`` alone, so every verb prices by the same numbers.
    """

    matmul_peak_fraction: float  # a large GEMM's burst share of the data sheet's peak (no profile, no calibration)
    sustained_matmul_share: float  # what a long job sustains of a benchmark's burst (clocks at the power limit)
    slowest_device_share: float  # a synchronous multi-device step waits for its slowest device
    attention_share_of_matmul: float  # fused attention's rate over a large GEMM's
    triton_attention_share_of_flash: float  # FlashAttention in Triton over FlashAttention-2's CUDA kernels
    flash_v1_attention_share_of_flash: float  # the first FlashAttention (and xformers') over FlashAttention-2
    stream_bandwidth_fraction: float  # an elementwise kernel's share of the data sheet's bandwidth
    kernel_floor_s: float
    host_s_per_kernel_eager: float
    host_s_per_kernel_transformers: float
    host_s_per_kernel_recording: float
    host_s_per_kernel_autograd: float
    host_s_per_kernel_compiled: float
    host_s_per_kernel_graphs: float
    host_s_per_convolution: float  # what a cuDNN convolution call adds on the host to an eager launch
    intra_node_link_efficiency: float
    inter_node_network_efficiency: float
    runtime_overhead_bytes: float
    runtime_overhead_fraction: float
    gpu_power_fraction_of_tdp: float
    server_host_power_fraction_of_tdp: float  # the host server's draw on top of its accelerators' TDP
    spot_preemptions_per_h: float  # per instance
    device_interruptions_per_h: float  # failures per device-hour: a job's rate grows with its devices
    restart_overhead_s: float
    checkpoint_write_bytes_per_s: float
    serving_target_utilization: float
    serving_cold_start_s: float

    @classmethod
    def from_catalog(cls, catalog: Catalog) -> Assumptions:
        return cls(**{f.name: catalog.assumption(f.name) for f in fields(cls)})
