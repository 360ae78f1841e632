"""The sane range of every quantity a user can type, and why: one table, keyed by flag.

A value outside its range is a typo or a unit mix-up (``--tokens 1e30``, ``--port 80000``), never a
plan: it is refused with the range and the reason instead of answered with a 30-digit cost. The
bounds are generous on purpose (an order of magnitude past the largest real cases) so no real job is
ever refused. ``units`` checks a flag's range when it parses it; ``cli.common.bounded`` does the same
for flags typed as plain numbers; the library checks the quantities of a job where it is built.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

__all__ = ["FLAG_LIMITS", "Limit", "limit_for"]

Kind = Literal["count", "duration", "usd", "bytes"]
"""How the bounds are shown: a plain number (with ``unit``), a duration, dollars or bytes."""


@dataclass(frozen=True)
class Limit:
    """Inclusive bounds of one quantity, the reason for them, and an example to show in the hint."""

    low: float
    high: float
    why: str
    example: str
    kind: Kind = "count"
    unit: str = ""
    integer: bool = False


_YEAR_S = 365.0 * 86400.0

MODEL_PARAMETERS = Limit(1, 1e14, "the largest published models have about 2e12 parameters", "7.5B", unit="parameters")
TOKENS = Limit(1, 1e15, "the largest published training runs use about 4e13 tokens", "10B")
SEQUENCE_TOKENS = Limit(
    1, 1e7, "the longest context windows of published models are about 1e7 tokens", "4096", unit="tokens", integer=True
)
ACCELERATORS = Limit(
    1, 1e6, "the largest clusters ever built have a few hundred thousand accelerators", "8", integer=True
)
REPLICA_ACCELERATORS = Limit(
    1,
    1024,
    "the largest published serving replicas span a few hundred GPUs, 320 in DeepSeek-V3's decoding unit",
    "8",
    integer=True,
)
ACCELERATOR_SHARE = Limit(
    0, 1e6, "0 means none; a fraction below 1 shares one; no cluster has more than 1e6", "1", unit="GPUs"
)
BATCH = Limit(1, 1e8, "the largest published batches are about 1e5 sequences", "256", unit="sequences", integer=True)
MICRO_BATCH = Limit(
    1, 1e5, "no accelerator holds more than 1e5 samples at once", "4", unit="sequences per device", integer=True
)
TOTAL_USD = Limit(0.01, 1e10, "$10 billion is above the largest training budget ever reported", "5000", kind="usd")
HOURLY_USD = Limit(
    0.0001, 1e6, "$1 million an hour is above the rent of the largest GPU clusters", "32.77", kind="usd", unit="an hour"
)
DEADLINE_S = Limit(1, 10 * _YEAR_S, "a job longer than 10 years is not a plan", "72h", kind="duration")
LATENCY_S = Limit(1e-4, 3600, "a request answered after an hour is not a service", "2s", kind="duration")
SAMPLING_INTERVAL_S = Limit(
    0.01, 3600, "samples closer than 10 ms cost more than they measure; an hour apart misses the job", "1s", "duration"
)
IDLE_S = Limit(1, 30 * 86400, "idle longer than 30 days is a job nobody watches", "15min", kind="duration")
GRACE_S = Limit(1, 86400, "a job that needs more than a day to stop is not stopping", "60s", kind="duration")
LOAD_DURATION_S = Limit(0.1, 86400, "a load test of more than a day should be a series of runs", "30s", "duration")
SEARCH_BUDGET_S = Limit(1, 7 * 86400, "a search of more than a week should be split", "15m", kind="duration")
LAUNCH_TIMEOUT_S = Limit(1, 86400, "a launch that takes more than a day has hung", "5m", kind="duration")
REQUEST_TIMEOUT_S = Limit(0.001, 3600, "a request waiting more than an hour has been lost", "10", "count", "seconds")
LATENCY_MS = Limit(0.01, 3.6e6, "a latency objective above an hour is not one", "100", unit="ms")
QUEUE_DELAY_MS = Limit(0, 60_000, "waiting more than a minute to fill a batch starves every request", "10", unit="ms")
COLD_START_S = Limit(0, 86400, "a replica that takes more than a day to start never serves", "60", unit="seconds")
RUN_HOURS = Limit(0.001, 10 * _YEAR_S / 3600, "a run longer than 10 years is not a plan", "100", unit="hours")
RATE_RPS = Limit(0.001, 1e7, "no single service or load tester reaches 1e7 requests/s", "50", unit="requests/s")
UTILIZATION = Limit(0.01, 1, "a share of a replica, at most all of it", "0.65")
REPLICAS = Limit(0, 1e5, "no service runs more than 1e5 replicas", "1", integer=True)
MEMORY_BYTES = Limit(1e6, 1e14, "no machine has more than about 30 TB of memory", "32GB", kind="bytes")
MESSAGE_BYTES = Limit(1, 1e13, "a buffer above 10 TB exceeds every node's memory", "1GiB", kind="bytes")
BODY_BYTES = Limit(1, 1e10, "a request body above 10 GB is not an HTTP request", "1048576", unit="bytes", integer=True)
PORT = Limit(0, 65535, "TCP ports are 1 to 65535; 0 picks any free port", "8000", integer=True)
CPUS = Limit(0.01, 1e4, "no node has more than 1e4 cores", "4", unit="cores")
PROCESSES = Limit(1, 1e4, "no node runs more than 1e4 training processes", "8", integer=True)
THREADS = Limit(1, 1e4, "no machine has more than 1e4 hardware threads", "8", integer=True)
RESTARTS = Limit(0, 1e4, "a job restarted more than 1e4 times is failing, not preempted", "3", integer=True)
STEPS = Limit(1, 1e6, "a measurement of more than 1e6 steps is a training run", "10", integer=True)
WARMUP_STEPS = Limit(0, 1e6, "more than 1e6 untimed steps is a training run", "3", integer=True)
HALVING_ETA = Limit(2, 100, "keeping less than 1/100 of a rung leaves nothing to compare", "3", integer=True)
ITEMS = Limit(1, 1e7, "no console reads more than 1e7 rows", "20", integer=True)
QUEUE_ITEMS = Limit(1, 1e8, "a queue of more than 1e8 inputs outlives every timeout", "256", integer=True)
BANDWIDTH_GB_S = Limit(0.001, 1e5, "no link moves more than 1e5 GB/s", "100", unit="GB/s")
TOKENS_PER_INPUT = Limit(1, 1e7, "no model reads more than 1e7 tokens at once", "128", integer=True)
PARALLEL_DEGREE = Limit(
    1, 1e6, "1 means no split; no parallel degree of a real job nears a million ranks", "8", integer=True
)
ZERO_STAGE = Limit(0, 3, "ZeRO has stages 0 (no sharding) to 3 (parameters sharded too, as FSDP)", "3", integer=True)
ZERO_GROUP = Limit(
    0, 1e6, "0 shards over every data-parallel rank; no shard group of a real job nears a million", "8", integer=True
)
ACHIEVED_FRACTION = Limit(0.001, 1, "a share of the peak FLOP/s; no job achieves more than all of it", "0.4")
ANOMALY_WINDOW_DAYS = Limit(
    3, 90, "fewer than 3 days has no baseline; after 90 the baseline is stale", "14", integer=True
)
LINK_BITS_PER_S = Limit(
    1e3, 1e12, "below 1 kbit/s no model moves; no client link reaches 1 Tbit/s (20Mbps reads too)", "20e6", unit="bit/s"
)
ANOMALY_Z = Limit(1, 100, "below 1 every ordinary day is flagged; above 100 nothing ever is", "3.5")

FLAG_LIMITS: Final[dict[str, Limit]] = {
    "--model": MODEL_PARAMETERS,
    "--tokens": TOKENS,
    "--seq-len": SEQUENCE_TOKENS,
    "--input-len": SEQUENCE_TOKENS,
    "--output-len": SEQUENCE_TOKENS,
    "--max-length": TOKENS_PER_INPUT,
    "--gpus": ACCELERATORS,
    "--gpus-per-replica": REPLICA_ACCELERATORS,
    "--per-node": ACCELERATORS,
    "--micro-batch": MICRO_BATCH,
    "--global-batch": BATCH,
    "--max-batch-size": BATCH,
    "--batch-sizes": MICRO_BATCH,
    "--budget": TOTAL_USD,
    "--monthly-usd": TOTAL_USD,
    "--hourly-usd": HOURLY_USD,
    "--deadline": DEADLINE_S,
    "--max-latency": LATENCY_S,
    "--interval": SAMPLING_INTERVAL_S,
    "--idle-minutes": IDLE_S,
    "--idle-grace": GRACE_S,
    "--duration": LOAD_DURATION_S,
    "--time-budget": SEARCH_BUDGET_S,
    "--timeout": LAUNCH_TIMEOUT_S,
    "--trial-timeout": LAUNCH_TIMEOUT_S,
    "--timeout-s": REQUEST_TIMEOUT_S,
    "--slo-p99-ms": LATENCY_MS,
    "--latency-ms": LATENCY_MS,
    "--max-queue-delay-ms": QUEUE_DELAY_MS,
    "--cold-start-s": COLD_START_S,
    "--run-hours": RUN_HOURS,
    "--rate": RATE_RPS,
    "--max-rate": RATE_RPS,
    "--mean-rps": RATE_RPS,
    "--peak-rps": RATE_RPS,
    "--capacity-rps": RATE_RPS,
    "--max-usd-per-hour": HOURLY_USD,
    "--alert-lead": Limit(
        60, 31 * 86400, "under a minute nobody can act; over a month is more than the budget's period", "1d", "duration"
    ),
    "--clients": Limit(1, 1e10, "more clients than people on Earth is a typo", "1000", integer=True),
    "--rounds": Limit(1, 1e6, "federated training runs use hundreds to a few thousand rounds", "100", integer=True),
    "--local-steps": Limit(1, 1e6, "more steps than a whole training run between two averages", "5", integer=True),
    "--local-batch": MICRO_BATCH,
    "--participation": Limit(1e-9, 1, "a share of the clients in each round, above 0 and at most all", "0.1"),
    "--server-vcpus": Limit(1, 1e4, "no server has more than 1e4 vCPUs", "8", integer=True),
    "--topk-ratio": Limit(1e-6, 1, "a share of the values sent, above 0 and at most all of them", "0.01"),
    "--uplink": LINK_BITS_PER_S,
    "--downlink": LINK_BITS_PER_S,
    "--target-utilization": UTILIZATION,
    "--min-replicas": REPLICAS,
    "--memory": MEMORY_BYTES,
    "--dataset-size": Limit(
        1e6, 1e17, "a dataset above 100 PB is larger than any training corpus on record", "2TB", kind="bytes"
    ),
    "--bytes": MESSAGE_BYTES,
    "--max-body-bytes": BODY_BYTES,
    "--port": PORT,
    "--prometheus-port": PORT,
    "--cpus": CPUS,
    "--replica-cpus": CPUS,
    "--nproc": PROCESSES,
    "--threads": THREADS,
    "--epochs": Limit(1, 10_000, "more than 10,000 passes over the same inputs only overfits them", "10", integer=True),
    "--learning-rate": Limit(1e-8, 1.0, "AdamW diverges above 1 and learns nothing below 1e-8", "1e-4"),
    "--held-out": Limit(
        0.01, 0.9, "a share of the inputs: at least 1 % to grade on, at most 90 % so some train", "0.2"
    ),
    "--max-restarts": RESTARTS,
    "--max-preemptions": RESTARTS,
    "--steps": STEPS,
    "--warmup-steps": WARMUP_STEPS,
    "--eta": HALVING_ETA,
    "--limit": ITEMS,
    "--top": Limit(0, 1e7, "0 shows every candidate; no console reads more than 1e7 rows", "10", integer=True),
    "--queue-limit": QUEUE_ITEMS,
    "--link-gb-per-s": BANDWIDTH_GB_S,
    "--max-gpus": ACCELERATORS,
    "--tp": PARALLEL_DEGREE,
    "--pp": PARALLEL_DEGREE,
    "--cp": PARALLEL_DEGREE,
    "--ep": PARALLEL_DEGREE,
    "--virtual-stages": PARALLEL_DEGREE,
    "--zero": ZERO_STAGE,
    "--zero-group": ZERO_GROUP,
    "--mfu": ACHIEVED_FRACTION,
    "--window": ANOMALY_WINDOW_DAYS,
    "--threshold": ANOMALY_Z,
    "--cache-size": Limit(
        1e4, 1e13, "under 10 kB holds a few outputs; above 10 TB exceeds every machine's memory", "256MB", kind="bytes"
    ),
    "--cache-ttl": Limit(
        0.001, 30 * 86400, "an output older than 30 days outlives any model version", "10m", kind="duration"
    ),
    "--repeat-ratio": Limit(0, 1, "a share of the requests: none (0) to all but the first (1)", "0.5"),
    "--cache-hit-ratio": Limit(
        0, 0.999, "a share of the requests; a cache answering all of them would need no model at all", "0.5"
    ),
    "--max-workers": Limit(
        1, 1024, "no data loader runs more than 1024 worker processes on one host", "4", integer=True
    ),
    "--time-per-config": Limit(
        0.1, 3600, "an hour per loader configuration is an epoch, not a benchmark", "10", unit="s"
    ),
    "--batch-size": Limit(
        1, 1e7, "a batch of more than 1e7 samples does not fit any loader's memory", "256", integer=True
    ),
    "--demand": Limit(0.001, 1e9, "no training job consumes more than 1e9 samples/s", "3400", unit="samples/s"),
    "--lora-rank": Limit(
        1, 4096, "a rank above 4096 is wider than most layers it adapts: train in full instead", "16", integer=True
    ),
    "--lora-alpha": Limit(0.01, 1e6, "alpha scales the adapter's update by alpha / rank; usually 2x the rank", "32"),
}
"""Every flag that takes a quantity, on every verb. A flag's meaning is the same wherever it appears."""


def limit_for(flag: str) -> Limit | None:
    """The range of ``flag`` (``"--tokens"``), or None for a name that is not a flag (library callers)."""
    return FLAG_LIMITS.get(flag)
