"""Hardware, offerings, carbon and on-premises costs as plain values (rows of the catalog)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = [
    "DTYPES",
    "PRICINGS",
    "Accelerator",
    "Assumption",
    "CarbonIntensity",
    "Dtype",
    "KernelProfile",
    "NetworkFabric",
    "Offering",
    "OnPremCost",
    "Pricing",
]

Dtype = Literal["fp32", "tf32", "bf16", "fp16", "fp8", "int8"]
DTYPES: tuple[Dtype, ...] = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8")

Pricing = Literal["on-demand", "spot", "reserved-1y", "reserved-3y", "on-prem"]
PRICINGS: tuple[Pricing, ...] = ("on-demand", "spot", "reserved-1y", "reserved-3y", "on-prem")


@dataclass(frozen=True)
class Accelerator:
    """One accelerator (or one CPU socket). Peak FLOP/s are dense (no structured sparsity)."""

    slug: str  # lowercase, e.g. "h100-sxm"
    name: str
    vendor: str
    kind: Literal["gpu", "tpu", "npu", "cpu", "edge"]
    memory_bytes: float
    memory_bandwidth_bytes_per_s: float
    peak_flops: dict[Dtype, float]  # 0 or missing: the dtype is not supported natively
    tdp_w: float
    interconnect_bytes_per_s: float  # per device, one direction, intra-node (NVLink, xGMI, ICI)
    form_factor: str
    aliases: tuple[str, ...]
    source: str
    retrieved: str  # ISO date
    trains: bool = True  # False for inference-only chips (Inferentia): the training planner skips them
    # Device counts a job can rent of a chip sold one at a time (a Cloud TPU slice: no 2-chip v5e); () any.
    slice_sizes: tuple[int, ...] = ()

    def rents(self, devices: int) -> bool:
        """Whether ``devices`` of this accelerator can be rented together (``slice_sizes``)."""
        return not self.slice_sizes or devices in self.slice_sizes

    def peak_flops_for(self, dtype: Dtype) -> float:
        """Peak for a dtype, falling back the way frameworks do (tf32 -> fp32, fp16 <-> bf16)."""
        value = self.peak_flops.get(dtype, 0.0)
        if value:
            return value
        fallback: dict[Dtype, Dtype] = {"tf32": "fp32", "bf16": "fp16", "fp16": "bf16", "fp8": "bf16"}
        if dtype in fallback:
            return self.peak_flops.get(fallback[dtype], 0.0) or self.peak_flops.get("fp32", 0.0)
        return 0.0


@dataclass(frozen=True)
class Offering:
    """A rentable instance type in one region, with its prices per hour (None: not sold)."""

    cloud: str
    instance_type: str
    accelerator: str  # slug
    accelerator_count: int
    vcpus: int
    ram_bytes: float
    network_bytes_per_s: float  # inter-node, per instance
    region: str
    on_demand_usd_per_h: float
    spot_usd_per_h: float | None
    reserved_1y_usd_per_h: float | None
    reserved_3y_usd_per_h: float | None
    source: str
    retrieved: str
    fabric: str = ""  # slug of the inter-node network (a fabrics.csv row: efa, infiniband, ...); "" = not recorded

    def usd_per_h(self, pricing: Pricing) -> float | None:
        return {
            "on-demand": self.on_demand_usd_per_h,
            "spot": self.spot_usd_per_h,
            "reserved-1y": self.reserved_1y_usd_per_h,
            "reserved-3y": self.reserved_3y_usd_per_h,
        }.get(pricing)


@dataclass(frozen=True)
class KernelProfile:
    """What share of its data sheet an accelerator's kernels reach in a short burst (a kernel_profiles.csv row).

    Measured with ``computewise bench`` on the device, or taken from a published kernel benchmark;
    the source says which. A burst is what a benchmark times: a long job runs at the sustained
    share of it (``sustained_matmul_share`` in assumptions.csv), which the step model applies.
    """

    accelerator: str  # slug or alias; the loader stores the slug
    matmul_share: float  # a large 16-bit GEMM's FLOP/s over the data sheet's dense peak, 0..1
    fp32_matmul_share: float | None  # the same for fp32/tf32 GEMMs; None: matmul_share
    stream_share: float | None  # a STREAM triad's bandwidth over the data sheet's; None: the assumption
    source: str
    retrieved: str  # ISO date

    def matmul_share_for(self, dtype: str) -> float:
        """The burst share of a GEMM at ``dtype``: fp32 and tf32 run on their own units."""
        if dtype in ("fp32", "tf32") and self.fp32_matmul_share is not None:
            return self.fp32_matmul_share
        return self.matmul_share


@dataclass(frozen=True)
class NetworkFabric:
    """An inter-node network technology and what NCCL achieves over it (a fabrics.csv row).

    ``network_efficiency`` is the bus bandwidth a large all-reduce reaches across nodes divided by
    the NICs' line rate; ``latency_s`` is NCCL's per-hop latency over it. Both carry a source, because
    EFA, InfiniBand and RoCE differ by more than the rounding of a single default.
    """

    fabric: str  # slug, e.g. "efa", "infiniband"
    name: str
    network_efficiency: float  # achieved all-reduce bus bandwidth / NIC line rate, 0..1
    latency_s: float  # per algorithm step across nodes (NCCL's low-latency protocol)
    source: str
    retrieved: str  # ISO date


@dataclass(frozen=True)
class CarbonIntensity:
    cloud: str
    region: str
    g_co2_per_kwh: float
    source: str
    retrieved: str


@dataclass(frozen=True)
class OnPremCost:
    """Owning a server: purchase price amortised over its life, plus power at PUE.

    Hourly cost at a utilization u (fraction of hours doing paid work):
    (purchase / lifetime_hours + power_kw * pue * usd_per_kwh + ops_usd_per_h) / u.
    """

    accelerator: str
    accelerator_count: int
    purchase_usd: float
    lifetime_years: float
    server_power_w: float  # whole server at load, accelerators included
    ops_usd_per_year: float  # space, support, staff share
    source: str
    retrieved: str

    def usd_per_h(self, power_usd_per_kwh: float, pue: float, utilization: float) -> float:
        lifetime_h = self.lifetime_years * 365.25 * 24
        capital = self.purchase_usd / lifetime_h
        power = self.server_power_w / 1000 * pue * power_usd_per_kwh
        ops = self.ops_usd_per_year / (365.25 * 24)
        return (capital + power + ops) / utilization


@dataclass(frozen=True)
class Assumption:
    """A number the estimators assume (PUE, achievable MFU, ...), kept as data so it carries a source."""

    key: str  # snake_case, e.g. "onprem_pue"
    value: float
    unit: str  # e.g. "ratio", "usd/kWh", "bytes"
    source: str
    retrieved: str  # ISO date
