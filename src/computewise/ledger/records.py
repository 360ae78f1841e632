"""Plain rows that go into and come out of the ledger.

The monitor builds ``SampleRow``/``GpuSampleRow``/``StepRow`` while a job runs; the ledger
stores them and hands back ``RunRow``. Times are Unix epoch seconds (``*_s``), energies joules,
money US dollars. Frozen so a row read back can be passed around without defensive copies.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from computewise.specs.codec import Jsonable, Layout, json_field

__all__ = [
    "ATTEMPT_OUTCOMES",
    "PREEMPTED_EXIT_CODE",
    "RUN_KINDS",
    "RUN_STATUSES",
    "STORAGE_OUTCOMES",
    "AlertRow",
    "AttemptOutcome",
    "AttemptRow",
    "BudgetRow",
    "GpuSampleRow",
    "NewRun",
    "PriceSnapshot",
    "RunKind",
    "RunRow",
    "RunStatus",
    "SampleRow",
    "StepRow",
    "StorageAction",
    "StorageActionRow",
    "StorageApplyRow",
    "StorageOutcome",
]

# The exit code of training stopped by preemption after saving (computewise.train): the run is
# recorded as interrupted, not failed. EX_TEMPFAIL from BSD sysexits.h: "a temporary failure; the
# user is invited to retry later".
# Distinct from 1 (an error: do not retry blindly), 2 (bad input) and 128 + N (killed by signal N,
# so no checkpoint was written), it tells a job wrapper or scheduler that a checkpoint is on disk
# and a restart of the same command will resume from it.
PREEMPTED_EXIT_CODE = 75

RunStatus = Literal["running", "succeeded", "failed", "interrupted", "crashed"]
RUN_STATUSES: tuple[RunStatus, ...] = ("running", "succeeded", "failed", "interrupted", "crashed")
RunKind = Literal["command", "track", "serve", "tune"]
RUN_KINDS: tuple[RunKind, ...] = ("command", "track", "serve", "tune")
# How one submission of a logical run ended: "preempted" is exit 75 or the engine losing the node
# (the job is resubmitted and resumes), "stopped" a cancel.
AttemptOutcome = Literal["running", "succeeded", "preempted", "failed", "stopped"]
ATTEMPT_OUTCOMES: tuple[AttemptOutcome, ...] = ("running", "succeeded", "preempted", "failed", "stopped")
# What became of one file a storage apply planned to act on: "vanished" is a file gone before it was
# reached (someone else removed it), "skipped" one changed since planned and left alone: neither freed anything.
StorageOutcome = Literal["planned", "done", "vanished", "skipped", "failed"]
STORAGE_OUTCOMES: tuple[StorageOutcome, ...] = ("planned", "done", "vanished", "skipped", "failed")


@dataclass(frozen=True)
class PriceSnapshot(Jsonable):
    """The price a run was charged at, copied into the ledger so later catalog edits never rewrite history.

    ``assumed`` is True when the user gave no price and computewise picked one; ``explanation``
    says what was assumed, in words the summary prints as is. Its JSON (its fields, in order) is what the
    ledger stores, so ``from_dict`` reads every run ever recorded: keys are only ever added, with a default.
    """

    json_description: ClassVar[str] = "The price the run was charged at, as taken at launch (ledger.PriceSnapshot)."

    hourly_usd: float = field(metadata=json_field(minimum=0))
    source: str
    explanation: str
    assumed: bool = field(metadata=json_field(description="computewise picked the price: the user gave none."))
    cloud: str | None = None
    instance_type: str | None = None
    pricing: str | None = None
    region: str | None = None
    retrieved: str | None = None
    # The grid and PUE the run was priced on: always given, never a default, because they are catalog
    # assumptions with sources (``estimate.quote`` picks them) and the ledger knows nothing of carbon.
    carbon_g_per_kwh: float = field(kw_only=True)
    carbon_source: str = field(kw_only=True)
    pue: float = field(kw_only=True)


@dataclass(frozen=True)
class NewRun:
    """What is known when a run starts."""

    kind: RunKind
    command: str
    argv: tuple[str, ...]
    tags: dict[str, str]
    host: str
    pid: int
    user: str
    cwd: str
    started_at_s: float
    interval_s: float
    price: PriceSnapshot
    logical_cpus: int = 1
    gpu_count: int = 0
    gpu_name: str | None = None
    accelerator: str | None = None
    input_hash: str | None = None


@dataclass(frozen=True, kw_only=True)
class RunRow(NewRun, Jsonable):
    """A run as the ledger holds it: what was known when it started (``NewRun``, declared once there), and
    what the ledger added since (its id, heartbeat, end and outcome).

    Its JSON is the keys that open every document about a run (``runs --json``, ``runs show --json``), in that
    order; the rest of the row is in those documents' own keys, or not written. It is not read back.
    """

    json_description: ClassVar[str] = "The run (ledger.RunRow)."
    json_layout: ClassVar[Layout] = (
        "id", "kind", "command", "tags", "status", "exit_code", "host", "started_at_s", "ended_at_s",
    )  # fmt: skip

    id: int
    ended_at_s: float | None
    heartbeat_at_s: float
    status: RunStatus
    exit_code: int | None
    inferences: int
    error: str | None
    summary: dict[str, Any] | None


@dataclass(frozen=True)
class SampleRow:
    """One tick of the sampler: the process tree and host, plus the GPUs folded to one line.

    ``energy_j`` is the energy of this interval: the NVML counter's delta when ``energy_measured``,
    otherwise estimated from TDP and utilization (GPU) or busy cores (CPU only). ``idle`` is
    decided by the sampler when the row is made, so every report counts idle time the same way.
    """

    run_id: int
    t_s: float
    interval_s: float
    cpu_percent: float
    rss_bytes: int
    read_bytes: int
    write_bytes: int
    net_sent_bytes: int
    net_recv_bytes: int
    host_cpu_percent: float
    host_memory_used_bytes: int
    gpu_count: int
    gpu_util_pct: float | None
    gpu_memory_used_bytes: int | None
    gpu_power_w: float | None
    energy_j: float
    energy_measured: bool
    idle: bool


@dataclass(frozen=True)
class GpuSampleRow:
    """One GPU at one tick, as NVML reported it (None where the driver does not say)."""

    run_id: int
    t_s: float
    gpu_index: int
    utilization_pct: float | None
    sm_clock_mhz: float | None
    memory_used_bytes: int | None
    power_w: float | None
    energy_counter_j: float | None
    pcie_tx_bytes_per_s: float | None
    pcie_rx_bytes_per_s: float | None
    process_memory_bytes: int | None


@dataclass(frozen=True)
class StepRow:
    """One training step recorded by ``track()``: where its time went and how much work it did."""

    run_id: int
    step: int
    t_s: float
    data_wait_s: float
    compute_s: float
    samples: int | None = None
    tokens: int | None = None
    flops: float | None = None


@dataclass(frozen=True)
class BudgetRow:
    """A monthly budget on one scope (``team=nlp``) with the percentages that raise alerts."""

    id: int
    scope: str
    monthly_usd: float
    alert_at_pct: tuple[float, ...]
    webhook_url: str | None
    command: str | None
    created_at_s: float


@dataclass(frozen=True)
class AlertRow:
    """An alert that fired; budget alerts fire once per (budget, month, threshold)."""

    id: int
    kind: str
    scope: str | None
    budget_id: int | None
    run_id: int | None
    period: str | None
    threshold_pct: float | None
    message: str
    fired_at_s: float
    delivery: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class AttemptRow(Jsonable):
    """One submission of a logical run to an engine (``number`` from 1); open while ``ended_at_s`` is None.
    Its JSON is its fields, in order."""

    json_description: ClassVar[str] = "One submission of the run to an engine (ledger.AttemptRow)."

    run_id: int
    number: int
    backend: str
    job_id: str
    started_at_s: float
    ended_at_s: float | None
    exit_code: int | None
    outcome: AttemptOutcome


@dataclass(frozen=True)
class StorageAction:
    """One file a storage apply will delete (``to_class`` None) or archive to a colder class."""

    path: str
    action: str
    kind: str
    size_bytes: int
    from_class: str
    to_class: str | None
    usd_per_month_saved: float


@dataclass(frozen=True, kw_only=True)
class StorageActionRow(StorageAction):
    """A ``StorageAction`` as recorded (its fields declared once, there), numbered within its apply, with what
    became of it."""

    apply_id: int
    number: int
    outcome: StorageOutcome
    done_at_s: float | None
    error: str | None


@dataclass(frozen=True)
class StorageApplyRow:
    """One ``storage apply --apply``: where, under which policy, by whom, and whether it finished."""

    id: int
    location: str
    policy_sha256: str
    host: str
    pid: int
    user: str
    started_at_s: float
    finished_at_s: float | None
    status: str
