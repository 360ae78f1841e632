"""The sections of ``estimate train|infer --json``, typed.

``estimate.single`` builds them from one row of columns; ``specs.codec`` writes them and generates
``docs/schemas/estimate-train.schema.json`` and ``estimate-infer.schema.json`` from the same types, so a
figure added here is in the document and its schema at once. Where a figure is unknown (the job does not
fit, a link of unknown speed, no offering, no published TDP) it is None, written as null, never 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Literal

from computewise.catalog.track_record import Scope
from computewise.specs import AttentionKernel, Execution, FineTuneMethod, GradReduce, Loss, Pricing
from computewise.specs.codec import Jsonable, Layout, json_field
from computewise.specs.finetune import FourBitType

__all__ = [
    "Accuracy",
    "AdapterTraining",
    "Bottleneck",
    "Co2",
    "Cost",
    "Energy",
    "ErrorBand",
    "FullTraining",
    "InferCompute",
    "InferCost",
    "InferJobSection",
    "InferTime",
    "LayoutSection",
    "MemorySection",
    "Storage",
    "TrainCompute",
    "TrainJobSection",
    "TrainTime",
    "Untimed",
]

_UNTIMED = (
    "why there is no time (and so no cost, energy or CO2): the configuration does not fit, or a link has no known speed"
)


@dataclass(frozen=True)
class LayoutSection(Jsonable):
    dp: int
    tp: int
    pp: int
    zero: int
    sequence_parallel: bool
    cp: int
    ep: int
    virtual_stages: int
    zero_group: int = field(
        default=0,
        metadata=json_field(
            description="Ranks one ZeRO shard group spans (hybrid sharding, replicated across groups); 0: all dp*cp."
        ),
    )
    tp_overlap: bool = field(
        default=False,
        metadata=json_field(description="Tensor-parallel collectives hidden behind the GEMMs they feed."),
    )


@dataclass(frozen=True)
class FullTraining(Jsonable):
    """Every weight trains: nothing more to say."""

    method: Literal["full"] = "full"


@dataclass(frozen=True)
class AdapterTraining(Jsonable):
    """LoRA or QLoRA adapters on a frozen base, as ``specs.FineTune`` sets them, with their exact size."""

    method: FineTuneMethod
    rank: int = field(metadata=json_field(minimum=1))
    alpha: float
    targets: tuple[str, ...]
    train_embeddings: bool
    train_head: bool
    adapter_bytes: int = field(metadata=json_field(enum=[2, 4]))
    four_bit: FourBitType | None  # None: a 16-bit base (LoRA)
    double_quant: bool | None
    trainable_params: float


@dataclass(frozen=True)
class TrainJobSection(Jsonable):
    tokens: float
    seq_len: int
    micro_batch: int
    global_batch: int
    precision: str
    optimizer: str
    recompute: str
    flash_attention: bool
    attention: AttentionKernel
    framework: str
    execution: Execution
    loss: Loss = field(
        metadata=json_field(
            description="The cross entropy: standard (the framework's own) or fused (one kernel on the 16-bit logits)."
        )
    )
    grad_reduce: GradReduce = field(
        metadata=json_field(
            description="The width gradients are reduced in: auto (the framework's default), fp32 or 16-bit."
        )
    )
    finetune: FullTraining | AdapterTraining = field(
        metadata=json_field(
            description="What trains: full (every weight), or LoRA/QLoRA adapters with their settings and exact "
            "trainable parameter count."
        )
    )


@dataclass(frozen=True)
class InferJobSection(Jsonable):
    """The tokens of a prompt and its answer for a model that generates; what one input is for one that does not."""

    json_description: ClassVar[str] = (
        "context_len and output_len for a model that generates tokens; input (and image_size or seq_len) for an "
        "image or encoder model, which answers each input in one forward pass"
    )
    json_constraints: ClassVar[Mapping[str, object]] = {
        "oneOf": [{"required": ["context_len", "output_len"]}, {"required": ["input"]}]
    }

    batch: int
    precision: str
    framework: str
    execution: Execution
    context_len: int | None = field(default=None, metadata=json_field(omit_empty=True))
    output_len: int | None = field(default=None, metadata=json_field(omit_empty=True))
    input: str | None = field(  # estimate.single.input_kind
        default=None,
        metadata=json_field(
            omit_empty=True, enum=["images", "sequences", "samples"], description="what one request is"
        ),
    )
    image_size: int | None = field(
        default=None, metadata=json_field(omit_empty=True, description="side of the square input image in pixels")
    )
    seq_len: int | None = field(
        default=None, metadata=json_field(omit_empty=True, description="tokens per input sequence of an encoder")
    )
    json_layout: ClassVar[Layout] = (
        "batch",
        "context_len",
        "output_len",
        "input",
        "image_size",
        "seq_len",
        "precision",
        "framework",
        "execution",
    )


@dataclass(frozen=True)
class MemorySection(Jsonable):
    per_device_bytes: dict[str, float] = field(
        metadata=json_field(description="The parts, each at its largest, then allocated_peak, reserved_peak, total.")
    )
    allocated_peak_bytes: float
    reserved_peak_bytes: float
    capacity_bytes: float
    fits: bool


@dataclass(frozen=True)
class ErrorBand(Jsonable):
    median_abs_error: float
    worst_abs_error: float
    measured_runs: int
    source: str


@dataclass(frozen=True)
class LayoutsFit(Jsonable):
    published_layouts: int
    fit: int
    source: str


@dataclass(frozen=True)
class Accuracy(Jsonable):
    json_description: ClassVar[str] = (
        "How far estimates of this kind of run have been from measured runs (catalog/data/track_record.csv); "
        "null where none was measured."
    )

    scope: Scope
    time: ErrorBand | None
    memory: ErrorBand | None
    published_layouts_fit: LayoutsFit | None = field(
        default=None,
        metadata=json_field(
            description="Published runs of this kind, each of which ran: how many the memory estimate lets fit "
            "on their devices (a one-sided check of memory); null where none was published."
        ),
    )


@dataclass(frozen=True)
class TrainCompute(Jsonable):
    flops: float
    hardware_flops: float
    mfu: float | None
    compute_fraction_of_peak: float
    utilization_given: float | None


@dataclass(frozen=True)
class InferCompute(Jsonable):
    flops: float


@dataclass(frozen=True)
class Bottleneck(Jsonable):
    part: str
    share: float
    advice: str


@dataclass(frozen=True)
class Untimed(Jsonable):
    """No time, and so no cost, energy or CO2."""

    json_description: ClassVar[str] = "null seconds (and no other figure) when the estimate cannot be timed"

    seconds: None
    unavailable: str = field(metadata=json_field(description=_UNTIMED))


@dataclass(frozen=True)
class TrainTime(Jsonable):
    seconds: float
    step_seconds: float
    steps: float
    compute_seconds_per_step: float
    comm_exposed_seconds_per_step: float
    pipeline_bubble_fraction: float
    breakdown_seconds_per_step: dict[str, float]
    bottleneck: Bottleneck
    interruption_slowdown: float = field(
        metadata=json_field(
            description="what interruptions multiply the job's time by: the devices' failures, which grow with "
            "their count, and on spot capacity its preemptions; seconds includes it"
        )
    )
    tokens_per_second: float


@dataclass(frozen=True)
class InferTime(Jsonable):
    json_description: ClassVar[str] = (
        "seconds is the latency of one batch; first-token and per-token figures only for a model that generates tokens"
    )

    seconds: float
    requests_per_second: float
    time_to_first_token_seconds: float | None = field(default=None, metadata=json_field(omit_empty=True))
    seconds_per_output_token: float | None = field(default=None, metadata=json_field(omit_empty=True))
    output_tokens_per_second: float | None = field(default=None, metadata=json_field(omit_empty=True))
    json_layout: ClassVar[Layout] = (
        "seconds",
        "time_to_first_token_seconds",
        "seconds_per_output_token",
        "requests_per_second",
        "output_tokens_per_second",
    )


@dataclass(frozen=True)
class Cost(Jsonable):
    usd: float | None
    pricing: Pricing
    usd_per_hour: float | None
    hardware: str
    share_of_instance: bool
    unavailable: str | None = field(
        default=None, metadata=json_field(omit_empty=True, description="why there is no price")
    )


@dataclass(frozen=True)
class InferCost(Cost):
    usd_per_1000_requests: float | None = None
    json_layout: ClassVar[Layout] = (
        "usd",
        "usd_per_1000_requests",
        "pricing",
        "usd_per_hour",
        "hardware",
        "share_of_instance",
        "unavailable",
    )


@dataclass(frozen=True)
class Energy(Jsonable):
    kwh: float | None
    pue: float
    counts: Literal["whole server", "device"] = field(
        metadata=json_field(
            description="what the energy counts: the whole server around each GPU, TPU or NPU (CPUs, memory, "
            "network, fans), or the device alone (a CPU socket, an edge module)"
        )
    )


@dataclass(frozen=True)
class Co2(Jsonable):
    kg: float | None
    g_per_kwh: float


@dataclass(frozen=True)
class Storage(Jsonable):
    read_bytes_per_second: float | None
    checkpoint_bytes: float
    checkpoint_interval_seconds: float | None
