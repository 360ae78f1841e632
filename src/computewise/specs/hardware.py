"""Hardware, offerings, carbon and on-premises costs as plain values (rows of the catalog)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from computewise.specs.codec import Jsonable, json_field

__all__ = [
    "CLOUD_PRICINGS",
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

_RETRIEVED = "The day the source was read (ISO date)."
_NOT_SOLD = "Per hour at this pricing; null: not sold so."

Pricing = Literal["on-demand", "spot", "reserved-1y", "reserved-3y", "on-prem"]
PRICINGS: tuple[Pricing, ...] = ("on-demand", "spot", "reserved-1y", "reserved-3y", "on-prem")
CLOUD_PRICINGS: tuple[Pricing, ...] = PRICINGS[:-1]  # what a cloud offering can be priced at: all but on-prem


@dataclass(frozen=True)
class Accelerator(Jsonable):
    """One accelerator (or one CPU socket). Peak FLOP/s are dense (no structured sparsity)."""

    slug: str = field(metadata=json_field(description='The catalog\'s name for it, lowercase, e.g. "h100-sxm".'))
    name: str
    vendor: str
    kind: Literal["gpu", "tpu", "npu", "cpu", "edge"]
    memory_bytes: float
    memory_bandwidth_bytes_per_s: float
    peak_flops: dict[Dtype, float] = field(
        metadata=json_field(description="Dense peak FLOP/s (OP/s for int8) by dtype; 0 or missing: not native.")
    )
    tdp_w: float
    interconnect_bytes_per_s: float = field(
        metadata=json_field(description="Per device, one direction, within a node (NVLink, xGMI, ICI); 0: none.")
    )
    form_factor: str
    aliases: tuple[str, ...]
    source: str
    retrieved: str = field(metadata=json_field(description=_RETRIEVED))
    trains: bool = field(
        default=True,
        metadata=json_field(
            description="False for inference-only chips (Inferentia): the training planner skips them."
        ),
    )
    slice_sizes: tuple[int, ...] = field(
        default=(),
        metadata=json_field(
            description="Device counts a job can rent of a chip sold one at a time (a Cloud TPU slice: no 2-chip "
            "v5e); empty: any."
        ),
    )

    def slice_chips(self, devices: int) -> int:
        """The chips of each slice a job of ``devices`` chips runs on, for a chip sold in slices.

        A slice's chips talk over the chip-to-chip links (a TPU's ICI); slices talk over the data
        center's network (Cloud TPU Multislice joins slices of one shape). A job runs on the fewest
        slices that hold it: one slice of its own size where there is one, else equal slices of the
        largest size that divides it (a 512-chip v5e job: two 256-chip pods). 0: no arrangement
        (6 chips of v5p, whose smallest slice is 4); ``devices`` itself for a chip without slices.
        """
        if not self.slice_sizes:
            return devices
        return next((size for size in reversed(self.slice_sizes) if devices > 0 and devices % size == 0), 0)

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
class Offering(Jsonable):
    """A rentable instance type in one region, with its prices per hour (None: not sold)."""

    cloud: str
    instance_type: str
    accelerator: str = field(metadata=json_field(description="The accelerator's slug."))
    accelerator_count: int
    vcpus: int
    ram_bytes: float
    network_bytes_per_s: float = field(
        metadata=json_field(description="Between nodes, per instance; 0: not published.")
    )
    region: str
    on_demand_usd_per_h: float
    spot_usd_per_h: float | None = field(metadata=json_field(description=_NOT_SOLD))
    reserved_1y_usd_per_h: float | None = field(metadata=json_field(description=_NOT_SOLD))
    reserved_3y_usd_per_h: float | None = field(metadata=json_field(description=_NOT_SOLD))
    source: str
    retrieved: str = field(metadata=json_field(description=_RETRIEVED))
    fabric: str = field(
        default="",
        metadata=json_field(
            description="The network between nodes, a fabrics row's slug (efa, infiniband, ...); empty: not recorded."
        ),
    )

    def usd_per_h(self, pricing: Pricing) -> float | None:
        return {
            "on-demand": self.on_demand_usd_per_h,
            "spot": self.spot_usd_per_h,
            "reserved-1y": self.reserved_1y_usd_per_h,
            "reserved-3y": self.reserved_3y_usd_per_h,
        }.get(pricing)


@dataclass(frozen=True)
class KernelProfile(Jsonable):
    """What share of its data sheet an accelerator's kernels reach in a short burst (a kernel_profiles.csv row).

    Measured with ``computewise bench`` on the device, or taken from a published kernel benchmark;
    the source says which. A burst is what a benchmark times: a long job on several devices runs at
    the sustained share of it, which the step model applies: a GPU's clocks drop at its power limit
    and a synchronous step waits for the slowest GPU (``sustained_matmul_share`` and
    ``slowest_device_share`` in assumptions.csv), unless the profile gives its own ``sustained_share``.
    """

    accelerator: str = field(metadata=json_field(description="The accelerator's slug (a file may give an alias)."))
    matmul_share: float = field(
        metadata=json_field(description="A large 16-bit GEMM's FLOP/s over the data sheet's dense peak, 0..1.")
    )
    fp32_matmul_share: float | None = field(
        metadata=json_field(
            description="The same for fp32 GEMMs (tf32's run on the tensor cores: matmul_share); null: matmul_share."
        )
    )
    stream_share: float | None = field(
        metadata=json_field(description="A STREAM triad's bandwidth over the data sheet's; null: the assumption.")
    )
    source: str
    retrieved: str = field(metadata=json_field(description=_RETRIEVED))
    sustained_share: float | None = field(
        default=None,
        metadata=json_field(
            description="What a long step synchronised over several devices sustains of the burst, 0..1; null: "
            "the GPU figures (sustained_matmul_share x slowest_device_share in assumptions.csv)."
        ),
    )

    def matmul_share_for(self, dtype: str) -> float:
        """The burst share of a GEMM at ``dtype``: fp32 runs on its own units, tf32 on the tensor cores
        (an H100 reaches 73 % of its tf32 data sheet, 74 % of bf16's, 78 % of fp32's: bench.json of
        shared/measured/h100-2026-11-26)."""
        if dtype == "fp32" and self.fp32_matmul_share is not None:
            return self.fp32_matmul_share
        return self.matmul_share


@dataclass(frozen=True)
class NetworkFabric(Jsonable):
    """An inter-node network technology and what NCCL achieves over it (a fabrics.csv row).

    ``network_efficiency`` is the bus bandwidth a large all-reduce reaches across nodes divided by
    the NICs' line rate; ``latency_s`` is NCCL's per-hop latency over it. Both carry a source, because
    EFA, InfiniBand and RoCE differ by more than the rounding of a single default.
    """

    fabric: str = field(metadata=json_field(description='Its slug, e.g. "efa", "infiniband".'))
    name: str
    network_efficiency: float = field(
        metadata=json_field(description="The bus bandwidth a large all-reduce reaches over the NICs' line rate, 0..1.")
    )
    latency_s: float = field(
        metadata=json_field(description="Per algorithm step across nodes (NCCL's low-latency protocol).")
    )
    source: str
    retrieved: str = field(metadata=json_field(description=_RETRIEVED))


@dataclass(frozen=True)
class CarbonIntensity(Jsonable):
    """The grid's carbon intensity where a cloud region draws its power (a carbon.csv row)."""

    cloud: str = field(metadata=json_field(description='The cloud, or "*" for the world average used as fallback.'))
    region: str
    g_co2_per_kwh: float
    source: str
    retrieved: str = field(metadata=json_field(description=_RETRIEVED))


@dataclass(frozen=True)
class OnPremCost(Jsonable):
    """Owning a server: purchase price amortised over its life, plus power at PUE.

    Hourly cost at a utilization u (fraction of hours doing paid work):
    (purchase / lifetime_hours + power_kw * pue * usd_per_kwh + ops_usd_per_h) / u.
    """

    accelerator: str
    accelerator_count: int
    purchase_usd: float
    lifetime_years: float
    server_power_w: float = field(metadata=json_field(description="The whole server at load, accelerators included."))
    ops_usd_per_year: float = field(metadata=json_field(description="Space, support and a share of staff."))
    source: str
    retrieved: str = field(metadata=json_field(description=_RETRIEVED))

    def usd_per_h(self, power_usd_per_kwh: float, pue: float, utilization: float) -> float:
        lifetime_h = self.lifetime_years * 365.25 * 24
        capital = self.purchase_usd / lifetime_h
        power = self.server_power_w / 1000 * pue * power_usd_per_kwh
        ops = self.ops_usd_per_year / (365.25 * 24)
        return (capital + power + ops) / utilization


@dataclass(frozen=True)
class Assumption(Jsonable):
    """A number the estimators assume (PUE, achievable MFU, ...), kept as data so it carries a source."""

    key: str = field(metadata=json_field(description='Its name, snake_case, e.g. "onprem_pue".'))
    value: float
    unit: str = field(metadata=json_field(description='e.g. "ratio", "usd/kWh", "bytes".'))
    source: str
    retrieved: str = field(metadata=json_field(description=_RETRIEVED))
