"""``run_tune``: the fastest training configuration of an entry point, in a few short trials.

The order of work, cheapest knowledge first:

1. **Build and trace** the setup once (``prune.profile_setup``): memory and FLOPs per sample.
2. **The space** from the device's defaults and ``--space``, with what the model cannot run
   removed or refused (``space``).
3. **Prune** what cannot fit, and checkpointing where the same settings fit without it (``prune``);
   a space none of whose configurations fits is refused here, before any trial.
4. **Grow the micro-batch** (``growth``) where ``--space`` names no ``micro=``: one configuration
   (the leanest precision, eager), doubled then bisected until memory or throughput stops it; the
   rest of the search tries the fastest size and the one below it. The growth's two largest sizes
   also say whether the step is launch-bound (the host, not the device, sets its pace).
5. **Successive halving** over the eager configurations (``halving``), each trial in its own
   process (``trial``). Where the trials run is a ``TrialExecutor``: ``LocalTrials`` forks them on
   this machine; ``scale.ray_tune`` runs them as Ray Tune trials that ASHA stops early.
6. **Compilation last**: ``torch.compile`` costs seconds to minutes per configuration before its
   first step (a CPU compiles C++), more than the short trials themselves; so the halving runs
   eager and compilation is tried on its finalists only, at the top rung's length. This assumes
   compilation rarely lifts a configuration that eager mode ranked far down;
   ``benchmarks/tune_efficiency.py`` checks the pick against the full grid, compiled included.
   The other compile modes of the space (CUDA graphs, max-autotune) are tried on the fastest
   compiled configuration, reduce-overhead first when the step is launch-bound, and then the
   loss compiled with the model (``compile_loss``: the cross-entropy fuses) on the fastest of
   those; a variant is not tried where it could not repay its compilation within the planned run
   (``_cannot_pay``).
7. **References**, measured like the winner: the naive baseline (FP32, default loader, no compile,
   the largest micro-batch that fits) and the largest-batch rule (the best configuration among
   those at the largest micro-batch that fits); a trial is added only where none was run.
   With a planned run (``--run-hours``/``--tokens``) the winner is the fastest over that run,
   its warm-up (compilation) included, not the fastest step: a compilation the run cannot repay
   does not win.
8. **LoRA rank** (``--lora-ranks``, a setup that fine-tunes with LoRA or QLoRA): steps 3 to 7 run
   once per rank, each pruned with that rank's adapters (``prune``) and each trial training that
   rank (``trial``); ``ranks`` then picks the cheapest rank whose quality is within the tolerance
   of the best, and the result is that rank's search, with every rank's trials and verdicts.
   With ``--time-budget``, no search trial (growth, halving, compilation) starts once that long has
   passed since the command started, and the best so far is the pick; the references still run,
   since the speed-ups are measured against them.
9. **Worth**: speed-ups, MFU, the planned run's time and dollars, the break-even (``savings``);
   the tuning is recorded in the ledger as a run priced like any other, and the winner is
   written with ``write_config`` when asked.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar, Literal, Protocol

from computewise.catalog import Catalog, load_catalog
from computewise.catalog.calibration import calibration_catalog_paths, calibration_for, measured_peak_flops
from computewise.errors import InputError, NothingFitsError, TuneError
from computewise.estimate.assumptions import Assumptions
from computewise.estimate.quote import PriceRequest
from computewise.ledger import Ledger, NewRun, PriceSnapshot
from computewise.monitor.pricing import DetectedHardware
from computewise.monitor.recorded import RecordedRun
from computewise.monitor.watch import priced_row
from computewise.specs.codec import Document, Jsonable, Layout, json_field, json_property
from computewise.specs.hardware import Accelerator
from computewise.system.hardware import Hardware, detect_hardware
from computewise.train.config import TrainConfig, write_config
from computewise.train.engine import default_device
from computewise.train.setup import TrainingSetup, load_setup
from computewise.tune.diagnosis import Diagnosis, diagnose
from computewise.tune.growth import Growth, HostBound, Probe, grow_micro_batch, host_bound
from computewise.tune.halving import HalvingOutcome, Rung, plan_rungs, successive_halving
from computewise.tune.prune import (
    Capacity,
    MemoryEstimate,
    ModelProfile,
    Pruning,
    device_capacity,
    estimate_memory,
    profile_setup,
    prune,
)
from computewise.tune.ranks import DEFAULT_QUALITY_TOLERANCE, RankSearch, RankTrial, judge_ranks
from computewise.tune.savings import DescribedConfig, Measured, TunedConfigFile, TuneWorth, mfu, tune_worth
from computewise.tune.space import DeviceKind, SearchSpace, default_space, parse_space
from computewise.tune.trial import TrialResult, TrialRunner
from computewise.units import format_duration

__all__ = [
    "HalvingObserver",
    "LocalTrials",
    "Stage",
    "TrialExecutor",
    "TrialExecutorFactory",
    "TrialRecord",
    "TrialSettings",
    "TuneDocument",
    "TuneOptions",
    "TuneProgress",
    "TuneResult",
    "run_tune",
]

Stage = Literal["batch-growth", "halving", "compile", "baseline", "largest-batch"]
ProgressCallback = Callable[["TuneProgress"], None]


@dataclass(frozen=True)
class TuneOptions:
    """The knobs of ``computewise tune``; ``steps`` is the measured length of the top rung (and of references)."""

    setup_config: dict[str, Any] = field(default_factory=dict)
    space: str | None = None
    steps: int = 27
    eta: int = 3
    min_steps: int = 3
    warmup_steps: int = 2
    compile_finalists: int = 2
    memory_bytes: float | None = None
    accelerator: str | None = None
    calibration: Path | None = None  # a `bench --save` file for the MFU peak; default: the one saved for the device
    hourly_usd: float | None = None
    run_hours: float | None = None
    tokens: float | None = None
    out: Path | None = None
    device: DeviceKind | None = None
    threads: int | None = None
    trial_timeout_s: float = 600.0
    db: str | None = None
    record: bool = True
    tags: dict[str, str] = field(default_factory=dict)
    log_dir: Path | None = None  # trial logs kept here; by default a temporary directory, kept only on failure
    lora_ranks: tuple[int, ...] = ()  # LoRA ranks to search (the setup fine-tunes with LoRA); empty: the setup's
    quality_tolerance: float = DEFAULT_QUALITY_TOLERANCE  # a rank qualifies within this fraction of the best
    time_budget_s: float | None = None  # no search trial starts after this long from the start; None: no bound

    def __post_init__(self) -> None:
        if self.steps < 1 or self.min_steps < 1 or self.warmup_steps < 1:
            raise InputError("--steps, the minimum rung steps and warm-up steps must be >= 1", "e.g. --steps 27")
        if self.eta < 2:
            raise InputError(f"--eta must be >= 2, got {self.eta}", "keep the best 1/eta per rung: e.g. --eta 3")
        if self.run_hours is not None and self.tokens is not None:
            raise InputError("give --run-hours or --tokens, not both", "both say how long the planned run is")
        if self.run_hours is not None and not self.run_hours > 0:
            raise InputError(f"--run-hours must be positive, got {self.run_hours}", "e.g. --run-hours 72")
        if self.tokens is not None and not self.tokens > 0:
            raise InputError(f"--tokens must be positive, got {self.tokens}", "e.g. --tokens 10B")
        if not self.trial_timeout_s > 0:
            raise InputError("--trial-timeout must be positive", "e.g. --trial-timeout 10m")
        if self.time_budget_s is not None and not self.time_budget_s > 0:
            raise InputError("--time-budget must be positive", "e.g. --time-budget 3m")
        if self.threads is not None and self.threads < 1:
            raise InputError(f"--threads must be >= 1, got {self.threads}", "e.g. --threads 4")
        if any(rank < 1 for rank in self.lora_ranks) or len(set(self.lora_ranks)) != len(self.lora_ranks):
            raise InputError(
                f"--lora-ranks must be distinct ranks of at least 1, got {','.join(map(str, self.lora_ranks))}",
                "e.g. --lora-ranks 4,8,16,32 (a rank is the width of each adapter: 1 or more)",
            )
        if not 0 <= self.quality_tolerance < 1:
            raise InputError(
                f"--quality-tolerance must be a fraction from 0 to below 1, got {self.quality_tolerance:g}",
                f"e.g. --quality-tolerance 0.01 (1 %, the default: {DEFAULT_QUALITY_TOLERANCE})",
            )


@dataclass(frozen=True)
class TrialSettings:
    """What every trial of one search shares: a ``TrialExecutor`` builds its trial runners from it."""

    entry: str
    setup_config: dict[str, Any]
    device: DeviceKind
    threads: int
    timeout_s: float
    warmup_steps: int
    log_dir: Path | None
    lora_rank: int | None = None  # a rank search's rank, which every trial trains

    def runner(self) -> TrialRunner:
        """A ``TrialRunner`` (one trial server, a forked process per trial) with these settings."""
        return TrialRunner(
            self.entry,
            self.setup_config,
            self.device,
            self.threads,
            timeout_s=self.timeout_s,
            warmup_steps=self.warmup_steps,
            log_dir=self.log_dir,
            lora_rank=self.lora_rank,
        )


@dataclass(frozen=True)
class HalvingObserver:
    """How an executor tells the search about its halving trials.

    ``starting(candidate, rung)`` before a trial (for the progress bar); ``measured(candidate, rung,
    result)`` after it, which records the trial and returns its score (the median step time, None
    when it failed), the value successive halving ranks by. ``out_of_time()`` before each trial:
    True when the tuning's time budget is spent, and the trial is not run (scored None).
    """

    starting: Callable[[int, Rung], None]
    measured: Callable[[int, Rung, TrialResult], float | None]
    out_of_time: Callable[[], bool]


class TrialExecutor(Protocol):
    """Where the trials of a search run: forked on this machine (``LocalTrials``) or on an engine's workers."""

    def run(self, config: TrainConfig, steps: int) -> TrialResult:
        """One trial of ``steps`` measured steps: compile finalists and the references."""
        ...

    def halving(
        self, configs: Sequence[TrainConfig], rungs: tuple[Rung, ...], eta: int, observer: HalvingObserver
    ) -> HalvingOutcome:
        """Measure ``configs`` over ``rungs``, stopping the slow ones early; every trial goes through ``observer``."""
        ...

    def describe(self) -> dict[str, Any]:
        """Where and how the trials ran, for the JSON result (``search.backend``)."""
        ...

    def notes(self) -> list[str]:
        """What the user should know about how the trials ran (shown with the search's notes)."""
        ...

    def close(self) -> None: ...


TrialExecutorFactory = Callable[[TrialSettings], TrialExecutor]


class LocalTrials:
    """Trials forked on this machine through one ``TrialRunner``; the halving is ``successive_halving``."""

    def __init__(self, settings: TrialSettings) -> None:
        self.runner = settings.runner()

    def run(self, config: TrainConfig, steps: int) -> TrialResult:
        return self.runner.run(config, steps)

    def halving(
        self, configs: Sequence[TrainConfig], rungs: tuple[Rung, ...], eta: int, observer: HalvingObserver
    ) -> HalvingOutcome:
        def evaluate(index: int, rung: Rung) -> float | None:
            if observer.out_of_time():
                return None
            observer.starting(index, rung)
            return observer.measured(index, rung, self.runner.run(configs[index], rung.steps))

        return successive_halving(len(configs), rungs, evaluate)

    def describe(self) -> dict[str, Any]:
        return {"name": "local", "scheduler": "successive halving"}

    def notes(self) -> list[str]:
        return []

    def close(self) -> None:
        self.runner.close()


@dataclass(frozen=True)
class TuneProgress:
    """One step of the search for a progress bar: trials done of planned, what runs, the best so far."""

    done: int
    total: int
    stage: str
    current: str
    best: str | None


@dataclass(frozen=True)
class TrialRecord(Jsonable):
    """One trial as the search ran it.

    Its JSON (an item of ``tune --json``'s ``trials``) carries the estimate's total only and the result's
    keys in place, so it is written, not read back: ``from_dict`` asks for the ``estimate`` it does not hold.
    """

    json_layout: ClassVar[Layout] = (
        "number",
        "stage",
        "rung",
        "steps",
        "config",
        "describe",
        "lora_rank",
        "estimate",
        "estimated_memory_bytes",
        "result",
    )

    number: int
    stage: Stage
    rung: int | None
    steps: int
    config: TrainConfig
    estimate: MemoryEstimate = field(metadata=json_field(written=False))
    result: TrialResult = field(metadata=json_field(inline=True))
    # The rank it trained, in a rank search; written only there.
    lora_rank: int | None = field(
        default=None,
        metadata=json_field(
            omit_empty=True, minimum=1, description="The LoRA rank the trial trained (a --lora-ranks search only)."
        ),
    )

    @property
    def ok(self) -> bool:
        return self.result.status == "ok" and self.result.median_step_s is not None

    @json_property()
    def describe(self) -> str:
        """The configuration in one line, as the report names it."""
        return self.config.describe()

    @json_property()
    def estimated_memory_bytes(self) -> float:
        return self.estimate.total_bytes


@dataclass(frozen=True)
class TuneResult:
    """Everything the search found, for the report; ``--json`` prints its ``document()``, a ``TuneDocument``."""

    entry: str
    options: TuneOptions
    device: DeviceKind
    hardware: Hardware
    threads: int
    profile: ModelProfile
    space: SearchSpace
    capacity: Capacity
    pruning: Pruning
    rungs: tuple[Rung, ...]
    trials: tuple[TrialRecord, ...]
    best: TrialRecord
    baseline: TrialRecord | None
    largest_batch: TrialRecord | None
    peak: tuple[Accelerator, str] | None
    peak_note: str
    price: PriceSnapshot
    wall_s: float
    ledger_run_id: int | None
    notes: tuple[str, ...]
    worth: TuneWorth
    backend: dict[str, Any] = field(default_factory=lambda: {"name": "local", "scheduler": "successive halving"})
    growth: Growth | None = None
    diagnosis: Diagnosis | None = None
    lora: RankSearch | None = None  # the rank search, when --lora-ranks asked for one

    @property
    def trial_s(self) -> float:
        return sum(record.result.wall_s for record in self.trials)

    @property
    def trial_cpu_s(self) -> float:
        return sum(record.result.cpu_s or 0.0 for record in self.trials)

    @property
    def device_name(self) -> str | None:
        """The GPU's name on CUDA, the CPU's otherwise."""
        return self.hardware.cuda_device if self.device == "cuda" else self.hardware.cpu

    @property
    def staged_compile(self) -> bool:
        """Compilation was tried on the halving's finalists only (the module docstring's step 6)."""
        return any(record.stage == "compile" for record in self.trials)

    @property
    def mfu_note(self) -> str:
        """Which peak MFU divides by, or why there is no MFU."""
        return self.peak_note if self.profile.forward_flops_per_sample is not None else "no FLOPs traced"

    def to_dict(self) -> dict[str, Any]:
        """What ``tune --json`` prints (``TuneDocument``)."""
        return self.document().to_dict()

    def document(self) -> TuneDocument:
        """The ``tune --json`` document: the search's figures, the worth computed when the result was built."""
        options = self.options
        peak = None
        if self.peak is not None:
            accelerator, how = self.peak
            peak = PeakBasis(accelerator.slug, accelerator.name, how, accelerator.source)
        return TuneDocument(
            entry=self.entry,
            setup_config=options.setup_config,
            device=TuneDevice(self.device, self.device_name, self.threads, self.capacity.bytes, self.capacity.source),
            model=self.profile,
            space=self.space,
            search=SearchSummary(
                configs=len(self.pruning.kept) + len(self.pruning.dropped),
                pruned=len(self.pruning.dropped),
                eta=options.eta,
                rungs=self.rungs,
                top_steps=self.rungs[-1].steps,
                warmup_steps=options.warmup_steps,
                compile_finalists=options.compile_finalists,
                staged_compile=self.staged_compile,
                backend=self.backend,
                growth=self.growth,
            ),
            pruned=tuple(PrunedConfig(config, e.total_bytes, why) for config, e, why in self.pruning.dropped),
            trials=self.trials,
            worth=self.worth,
            mfu=MfuBasis(peak, self.mfu_note),
            tuning=TuningCost(
                wall_s=self.wall_s,
                trial_s=self.trial_s,
                trial_cpu_s=self.trial_cpu_s,
                trials=len(self.trials),
                hourly_usd=self.price.hourly_usd,
                price_explanation=self.price.explanation,
                cost_usd=self.worth.tuning_cost_usd,
            ),
            diagnosis=self.diagnosis,
            ledger_run_id=self.ledger_run_id,
            out=str(options.out) if options.out is not None else None,
            notes=self.notes,
            lora=self.lora,
        )


@dataclass(frozen=True)
class TuneDevice(Jsonable):
    """The device the trials ran on, and the memory a configuration was allowed."""

    kind: DeviceKind
    name: str | None
    threads: int
    capacity_bytes: float
    capacity_source: str


@dataclass(frozen=True)
class SearchSummary(Jsonable):
    """How the search ran: the configurations tried and pruned, its rungs, where the trials ran, the batch growth."""

    configs: int
    pruned: int
    eta: int
    rungs: tuple[Rung, ...]
    top_steps: int
    warmup_steps: int
    compile_finalists: int
    staged_compile: bool
    backend: dict[str, Any]
    growth: Growth | None


@dataclass(frozen=True)
class PrunedConfig(DescribedConfig):
    """A configuration pruned before any trial, and why (it cannot fit, or a leaner one fits as well)."""

    config: TrainConfig
    estimated_memory_bytes: float
    reason: str


@dataclass(frozen=True)
class PeakBasis(Jsonable):
    """The accelerator whose peak MFU divides by, how it was found, and the peak's source."""

    accelerator: str
    name: str
    how: str
    source: str


@dataclass(frozen=True)
class MfuBasis(Jsonable):
    """Which peak MFU is measured against, or why there is none."""

    peak: PeakBasis | None
    note: str


@dataclass(frozen=True)
class TuningCost(Jsonable):
    """What the tuning itself took: time, trials and dollars at the price it ran at."""

    wall_s: float
    trial_s: float
    trial_cpu_s: float
    trials: int
    hourly_usd: float
    price_explanation: str
    cost_usd: float


@dataclass(frozen=True)
class TuneDocument(Jsonable):
    """What ``tune --json`` prints, built by ``TuneResult.document``.

    It is written, not read back (a trial keeps only its estimate's total); ``TuneWorth.from_dict`` reads its
    worth. ``docs/schemas/tune.schema.json`` is generated from it, the setup's settings and the backend as any
    JSON object.
    """

    json_document: ClassVar[Document | None] = Document(
        "tune",
        "tune --json",
        "The tuning: search, trials, the winner against its references and what it is worth (tune.search.TuneResult; "
        "the worth is tune.savings.TuneWorth, read back with TuneWorth.from_dict).",
    )

    entry: str
    setup_config: dict[str, Any]
    device: TuneDevice
    model: ModelProfile
    space: SearchSpace
    search: SearchSummary
    pruned: tuple[PrunedConfig, ...]
    trials: tuple[TrialRecord, ...]
    worth: TuneWorth = field(metadata=json_field(inline=True))
    mfu: MfuBasis
    tuning: TuningCost
    diagnosis: Diagnosis | None
    ledger_run_id: int | None
    out: str | None
    notes: tuple[str, ...]
    lora: RankSearch | None = field(default=None, metadata=json_field(omit_empty=True))


def run_tune(
    entry: str,
    options: TuneOptions,
    progress: ProgressCallback | None = None,
    trials: TrialExecutorFactory = LocalTrials,
) -> TuneResult:
    """Search ``entry``'s configurations (the order of work is in the module docstring); ``trials`` runs them."""
    import torch

    started_s, started_perf = time.time(), time.perf_counter()
    deadline_s = started_perf + options.time_budget_s if options.time_budget_s is not None else None
    device = _device(options.device)
    hardware = detect_hardware()
    setup = load_setup(entry, options.setup_config)
    if options.tokens is not None and not setup.tokens_per_sample:
        raise InputError(
            f"--tokens needs the tokens per sample, and {entry} does not set TrainingSetup.tokens_per_sample",
            "give the planned run's length with --run-hours, or set tokens_per_sample in the setup",
        )
    profile = profile_setup(setup)
    capability = torch.cuda.get_device_capability(0) if device == "cuda" else None
    space = parse_space(options.space, default_space(device, hardware, cuda_capability=capability))
    space = space.for_model(profile.facts)
    catalog = load_catalog(calibration_catalog_paths(options.calibration))  # the file's own device row, if any
    assumptions = Assumptions.from_catalog(catalog)
    capacity = device_capacity(device, options.memory_bytes)

    def search_for(rank: int | None) -> _Search:
        """The search of the setup as it is, or of one LoRA rank: pruned with that rank's adapters."""
        ranked = profile if rank is None else profile.with_rank(rank)
        pruning = prune(space.configs(setup.global_batch_size), ranked, capacity, device, assumptions)
        search = (entry, options, device, threads, ranked, space, pruning, capacity, assumptions, progress)
        return _Search(*search, trials, rank, deadline_s)

    threads = options.threads or torch.get_num_threads()
    by_rank: dict[int, _Search] = {}
    unfit: dict[int, NothingFitsError] = {}
    for rank in options.lora_ranks:  # every rank checked before any trial
        try:
            by_rank[rank] = search_for(rank)
        except NothingFitsError as error:  # judged as not measured, unless no rank fits
            unfit[rank] = error
    if unfit and not by_rank:
        raise unfit[options.lora_ranks[0]]
    single = None if options.lora_ranks else search_for(None)
    peak, peak_note = _peak(catalog, options.accelerator, hardware, device, options.calibration)
    row = priced_row(
        catalog,
        "tune",
        ("computewise", "tune", entry),
        _detected(hardware, device),
        PriceRequest(hourly_usd=options.hourly_usd),
        tags=options.tags,
        interval_s=options.trial_timeout_s,
        started_at_s=started_s,
    )
    price = row.price
    with contextlib.ExitStack() as recording:
        record = _recorded(recording, options, row)
        lora: RankSearch | None = None
        if single is not None:
            single.run()
            search, searches = single, [single]
        else:
            lora = _search_ranks(options.lora_ranks, by_rank, unfit, setup, options.quality_tolerance, price.hourly_usd)
            search, searches = by_rank[lora.picked], list(by_rank.values())
        wall_s = time.perf_counter() - started_perf
        worth = _worth(search, search.profile, peak, options, price.hourly_usd, wall_s)
        result = TuneResult(
            entry=entry,
            options=options,
            device=device,
            hardware=hardware,
            threads=threads,
            profile=search.profile,
            space=space,
            capacity=capacity,
            pruning=search.pruning,
            rungs=search.rungs,
            trials=tuple(trial for each in searches for trial in each.records),
            best=search.best,
            baseline=search.baseline,
            largest_batch=search.largest_batch,
            peak=peak,
            peak_note=peak_note,
            price=price,
            wall_s=wall_s,
            ledger_run_id=record.run_id if record is not None else None,
            notes=tuple(dict.fromkeys((*space.notes, *profile.notes, *(n for each in searches for n in each.notes)))),
            worth=worth,
            backend=search.backend,
            growth=search.growth,
            diagnosis=diagnose(device, search.growth, search.host, worth.best),
            lora=lora,
        )
        if options.out is not None:
            write_config(
                TunedConfigFile(config=search.best.config, entry=entry, measured=result.worth.best), options.out
            )
        if record is not None:
            record.declare(summary=_ledger_summary(result))
    return result


def _search_ranks(
    ranks: Sequence[int],
    by_rank: dict[int, _Search],
    unfit: dict[int, NothingFitsError],
    setup: TrainingSetup,
    tolerance: float,
    hourly_usd: float,
) -> RankSearch:
    """Run each rank's search, numbering the trials on from the last rank's, and judge the ranks (``ranks``).

    A rank that fits nowhere, or whose every trial failed, is judged as not measured; the others are
    still compared.
    """
    measured: list[RankTrial] = []
    numbered = 0
    for rank in ranks:
        if rank in unfit:
            message = f"does not fit: {unfit[rank].message}"
            measured.append(RankTrial(rank, None, None, None, None, None, None, failure=message))
            continue
        search = by_rank[rank]
        search.first_number = numbered
        try:
            search.run()
        except TuneError as failure:
            measured.append(RankTrial(rank, None, None, None, None, None, None, failure=failure.message))
        else:
            best = search.best
            result = best.result
            measured.append(
                RankTrial(
                    rank,
                    best.number,
                    result.samples_per_s,
                    result.tokens_per_s,
                    result.peak_memory_bytes,
                    best.estimate.total_bytes,
                    result.quality,
                )
            )
        numbered += len(search.records)
    if setup.evaluate is not None:
        metric, higher = "TrainingSetup.evaluate after the trial", setup.higher_is_better
    else:
        metric, higher = "training loss of the trial's last step (the setup has no evaluate)", False
    judged = judge_ranks(measured, metric, higher, tolerance, hourly_usd)
    by_rank[judged.picked].notes.append(
        f"LoRA rank {judged.picked} picked: set FineTune(rank={judged.picked}) in the entry point "
        "(a written configuration holds the speed settings only)"
    )
    return judged


class _Search:
    """The trials of one tuning: batch growth, halving over eager configurations, compile finalists and
    modes, references."""

    def __init__(
        self,
        entry: str,
        options: TuneOptions,
        device: DeviceKind,
        threads: int,
        profile: ModelProfile,
        space: SearchSpace,
        pruning: Pruning,
        capacity: Capacity,
        assumptions: Assumptions,
        progress: ProgressCallback | None,
        trials: TrialExecutorFactory = LocalTrials,
        lora_rank: int | None = None,
        deadline_s: float | None = None,
    ) -> None:
        self.entry, self.options, self.device, self.threads = entry, options, device, threads
        self.lora_rank = lora_rank
        self.deadline_s = deadline_s  # perf_counter time after which no search trial starts; None: no bound
        self.first_number = 0  # trials are numbered on from here (the ranks searched before this one)
        self.profile, self.space, self.capacity = profile, space, capacity
        self.assumptions, self.progress, self.trials = assumptions, progress, trials
        self.backend: dict[str, Any] = {}
        self.records: list[TrialRecord] = []
        self.notes: list[str] = []
        self.stage_text = ""
        self._best: TrialRecord | None = None
        self.baseline: TrialRecord | None = None
        self.largest_batch: TrialRecord | None = None
        self.growth: Growth | None = None
        self.host: HostBound | None = None
        self.growth_configs: dict[int, TrainConfig] = {}
        self.skipped = 0  # planned search trials not run because the time budget was spent
        self._plan(pruning)

    def _out_of_time(self, trials: int = 1) -> bool:
        """Whether the time budget is spent, counting ``trials`` planned trials as not run if it is.

        A search always runs until one trial succeeds: a budget spent on building the setup still
        leaves a configuration to recommend, measured.
        """
        if self.deadline_s is None or time.perf_counter() < self.deadline_s or not any(r.ok for r in self.records):
            return False
        self.skipped += trials
        return True

    def _plan(self, pruning: Pruning) -> None:
        """The halving's candidates and rungs over ``pruning``'s configurations (again once growth chose sizes)."""
        options = self.options
        self.pruning = pruning
        self.space_configs = {config for config, _ in pruning.kept}
        compile_choices = {config.compile for config, _ in pruning.kept}
        # With both compile choices, the halving runs eager and compile waits for the finalists.
        self.staged_compile = compile_choices == {False, True}
        self.candidates = [pair for pair in pruning.kept if not (self.staged_compile and pair[0].compile)]
        self.rungs = plan_rungs(len(self.candidates), options.steps, options.eta, options.min_steps)
        finalists = min(options.compile_finalists, self.rungs[-1].candidates) if self.staged_compile else 0
        self.planned = len(self.records) + sum(rung.candidates for rung in self.rungs) + finalists
        self._best = min((r for r in self.records if r.ok and r.config in self.space_configs), key=_rank, default=None)

    @property
    def top_steps(self) -> int:
        return self.rungs[-1].steps

    @property
    def best(self) -> TrialRecord:
        if self._best is None:
            raise TuneError("no trial has finished yet")
        return self._best

    def run(self) -> None:
        """All the trials; temporary logs are deleted after a success and kept (and named) after a failure."""
        log_dir = self.options.log_dir or Path(tempfile.mkdtemp(prefix="computewise-tune-"))
        log_dir.mkdir(parents=True, exist_ok=True)
        settings = TrialSettings(
            self.entry,
            self.options.setup_config,
            self.device,
            self.threads,
            timeout_s=self.options.trial_timeout_s,
            warmup_steps=self.options.warmup_steps,
            log_dir=log_dir,
            lora_rank=self.lora_rank,
        )
        runner = self.trials(settings)
        try:
            self._grow(runner)
            outcome = self._halving(runner)
            self._compile_finalists(runner, outcome)
            if self.skipped:
                budget = format_duration(self.options.time_budget_s or 0.0)
                self.notes.append(
                    f"the time budget ({budget}) was spent: {self.skipped} planned search trial(s) did not run, and "
                    "the best so far is the pick; the references still ran"
                )
            if self._best is None:
                raise TuneError(
                    f"every trial failed, so there is no configuration to recommend: {self._failures()}",
                    f"run one configuration with computewise.train to see the full error; trial logs are in {log_dir}",
                )
            self.baseline = self._reference(runner, self._naive(), "baseline")
            self._compile_modes(runner)
            self._compile_loss(runner)
            self.largest_batch = self._largest_batch(runner)
            self._settle()
        finally:
            runner.close()
        self.backend = runner.describe()
        self.notes.extend(runner.notes())
        if self.options.log_dir is None:
            shutil.rmtree(log_dir, ignore_errors=True)

    def _grow(self, runner: TrialExecutor) -> None:
        """Grow the micro-batch of one eager configuration (``growth``) where ``--space`` names no sizes."""
        if self.space.micro_batch_sizes is not None:
            return
        base = _growth_base(self.space)
        global_batch = self.profile.global_batch_size
        steps = max(self.options.min_steps, self.options.steps // self.options.eta)
        self.stage_text = f"batch growth ({steps} steps)"

        def config_at(micro: int) -> TrainConfig:
            return self.growth_configs.setdefault(
                micro, replace(base, micro_batch_sizes=(micro,)).configs(global_batch)[0]
            )

        def fits(micro: int) -> bool:
            return self._estimate(config_at(micro)).total_bytes <= self.capacity.bytes

        def measure(micro: int) -> Probe:
            if self._out_of_time():
                return Probe("out-of-time", message="the time budget is spent")
            config = config_at(micro)
            record = self._trial(runner, config, self._estimate(config), "batch-growth", None, steps)
            result = record.result
            if record.ok:
                return Probe("measured", result.samples_per_s, result.median_step_s)
            return Probe("oom" if result.status == "oom" else "failed", message=result.message)

        self.growth = growth = grow_micro_batch(global_batch, fits, measure)
        self.host = host_bound(growth)
        if growth.best is None:
            self.notes.append(f"batch growth found no micro-batch ({growth.stopped}): the default sizes are searched")
            return
        grown = replace(self.space, micro_batch_sizes=growth.choices())
        self._plan(prune(grown.configs(global_batch), self.profile, self.capacity, self.device, self.assumptions))

    def _halving(self, runner: TrialExecutor) -> HalvingOutcome:
        def starting(index: int, rung: Rung) -> None:
            self.stage_text = f"rung {rung.index + 1}/{len(self.rungs)} ({rung.steps} steps)"
            self._report(self.candidates[index][0].describe())

        def measured(index: int, rung: Rung, result: TrialResult) -> float | None:
            self.stage_text = f"rung {rung.index + 1}/{len(self.rungs)} ({rung.steps} steps)"
            config, estimate = self.candidates[index]
            record = self._record(config, estimate, "halving", rung.index, rung.steps, result)
            return record.result.median_step_s if record.ok else None

        configs = [config for config, _ in self.candidates]
        observer = HalvingObserver(starting, measured, self._out_of_time)
        return runner.halving(configs, self.rungs, self.options.eta, observer)

    def _compile_finalists(self, runner: TrialExecutor, outcome: HalvingOutcome) -> None:
        if not self.staged_compile:
            return
        self.stage_text = f"compile ({self.top_steps} steps)"
        finalists = [self.candidates[index][0] for index in outcome.ranking[: self.options.compile_finalists]]
        for done, config in enumerate(finalists):
            if self._out_of_time(len(finalists) - done):
                return
            compiled = replace(config, compile=True)
            self._trial(runner, compiled, self._estimate(compiled), "compile", None, self.top_steps)

    def _compile_modes(self, runner: TrialExecutor) -> None:
        """The space's other compile modes on the fastest compiled configuration, where they can pay."""
        extra = list(self.space.compile_modes[1:])
        base = self._fastest_compiled()
        if not extra or base is None:
            return
        if self.host is not None and self.host.launch_bound and "reduce-overhead" in extra:
            extra.remove("reduce-overhead")
            extra.insert(0, "reduce-overhead")  # the remedy for a launch-bound step first
        self.planned += len(extra)
        for mode in extra:
            # CUDA graphs save at most the host-side time growth measured; any other mode, the whole step.
            host_only = mode == "reduce-overhead"
            self._on_winner(runner, base, replace(base.config, compile_mode=mode), f"compile_mode={mode}", host_only)

    def _compile_loss(self, runner: TrialExecutor) -> None:
        """The loss compiled with the model (or not) on the fastest compiled configuration, where it can pay."""
        base = self._fastest_compiled()
        if base is None:
            return
        extra = [flag for flag in self.space.compile_loss[1:] if flag != base.config.compile_loss]
        self.planned += len(extra)
        for flag in extra:
            self._on_winner(runner, base, replace(base.config, compile_loss=flag), f"compile_loss={flag}", False)

    def _fastest_compiled(self) -> TrialRecord | None:
        compiled = [r for r in self.records if r.ok and r.config.compile and r.config in self.space_configs]
        return min(compiled, key=_rank) if compiled else None

    def _on_winner(
        self, runner: TrialExecutor, base: TrialRecord, config: TrainConfig, what: str, host_only: bool
    ) -> None:
        """One top-rung trial of ``config`` (``base`` with one compile setting changed), unless it cannot pay."""
        if self._out_of_time():
            self.notes.append(f"{what} not tried: the time budget was spent")
            return
        reason = self._cannot_pay(base, host_only)
        if reason is not None:
            self.notes.append(f"{what} not tried: {reason}")
            return
        self.space_configs.add(config)
        self.stage_text = f"compile {what} ({self.top_steps} steps)"
        self._trial(runner, config, self._estimate(config), "compile", None, self.top_steps)

    def _cannot_pay(self, base: TrialRecord, host_only: bool) -> str | None:
        """Why a compile variant of ``base`` cannot repay its compilation within the planned run; None where it
        might (or no run is given).

        Its compilation takes at least what ``base``'s took (it compiles the same graphs, or more);
        its saving is at most the whole run's step time, and with ``host_only`` (CUDA graphs) at
        most the fixed, host-side time growth measured (all CUDA graphs remove).
        """
        run_steps = self._run_steps()
        step_s = base.result.median_step_s
        if run_steps is None or step_s is None:
            return None
        compile_s = _warmup_overhead_s(base.result, self.options.warmup_steps)
        saving_s, what = run_steps * step_s, "all of the planned run's step time"
        if host_only and self.host is not None:
            saving_s, what = run_steps * self.host.fixed_step_s, "all host-side time of the planned run"
        if saving_s >= compile_s:
            return None
        return (
            f"even saving {what} ({format_duration(saving_s)}) would not repay its compilation, at least the "
            f"{format_duration(compile_s)} that {base.config.describe()} took"
        )

    def _run_steps(self) -> float | None:
        """Optimizer steps of the planned run: ``--tokens`` over tokens a step, or ``--run-hours`` at naive speed."""
        profile, options = self.profile, self.options
        if options.tokens is not None and profile.tokens_per_sample:
            return options.tokens / (profile.global_batch_size * profile.tokens_per_sample)
        naive_s = self.baseline.result.median_step_s if self.baseline is not None else None
        if options.run_hours is not None and naive_s:
            return options.run_hours * 3600.0 / naive_s
        return None

    def _settle(self) -> None:
        """With a planned run, the winner is the configuration that finishes it first, warm-up included."""
        run_steps = self._run_steps()
        fastest = self._best
        if run_steps is None or fastest is None:
            return
        warmup = self.options.warmup_steps
        contenders = [r for r in self.records if r.ok and r.steps == fastest.steps and r.config in self.space_configs]

        def over_run(record: TrialRecord) -> float:
            return (record.result.median_step_s or 0.0) * run_steps + _warmup_overhead_s(record.result, warmup)

        pick = min(contenders, key=over_run)
        if pick is not fastest and over_run(pick) < over_run(fastest):
            self.notes.append(
                f"{fastest.config.describe()} has the fastest step, but its warm-up "
                f"({format_duration(_warmup_overhead_s(fastest.result, warmup))}, compilation included) is not repaid "
                f"within the planned run of {run_steps:,.0f} steps: {pick.config.describe()} finishes it first"
            )
            self._best = pick

    def _trial(
        self,
        runner: TrialExecutor,
        config: TrainConfig,
        estimate: MemoryEstimate,
        stage: Stage,
        rung: int | None,
        steps: int,
    ) -> TrialRecord:
        self._report(config.describe())
        return self._record(config, estimate, stage, rung, steps, runner.run(config, steps))

    def _record(
        self,
        config: TrainConfig,
        estimate: MemoryEstimate,
        stage: Stage,
        rung: int | None,
        steps: int,
        result: TrialResult,
    ) -> TrialRecord:
        number = self.first_number + len(self.records) + 1
        record = TrialRecord(number, stage, rung, steps, config, estimate, result, self.lora_rank)
        self.records.append(record)
        if record.ok and record.config in self.space_configs and _rank(record) < _rank(self._best):
            self._best = record
        self._report(config.describe())
        return record

    def _report(self, current: str) -> None:
        if self.progress is None:
            return
        best = None
        if self._best is not None and self._best.result.samples_per_s is not None:
            best = f"{self._best.config.describe()} · {self._best.result.samples_per_s:,.0f} samples/s"
        total = max(self.planned, len(self.records))
        stage = self.stage_text if self.lora_rank is None else f"rank {self.lora_rank}: {self.stage_text}"
        self.progress(TuneProgress(len(self.records), total, stage, current, best))

    def _estimate(self, config: TrainConfig) -> MemoryEstimate:
        return estimate_memory(self.profile, config, self.device, self.assumptions)

    def _top_record(self, config: TrainConfig) -> TrialRecord | None:
        """A successful top-rung measurement of ``config``, if the search already made one."""
        for record in self.records:
            if record.config == config and record.steps == self.top_steps and record.ok:
                return record
        return None

    def _reference(self, runner: TrialExecutor, config: TrainConfig | None, stage: Stage) -> TrialRecord | None:
        if config is None:
            return None
        found = self._top_record(config)
        if found is not None:
            return found
        self.stage_text = f"{stage} ({self.top_steps} steps)"
        record = self._trial(runner, config, self._estimate(config), stage, None, self.top_steps)
        if not record.ok:
            self.notes.append(f"the {stage} configuration failed ({record.result.status}): {record.result.message}")
            return None
        return record

    def _naive(self) -> TrainConfig | None:
        """FP32, default loader, no compile, no checkpointing, the largest micro-batch the estimate says fits."""
        global_batch = self.profile.global_batch_size
        for micro in sorted((m for m in range(1, global_batch + 1) if global_batch % m == 0), reverse=True):
            naive = TrainConfig(precision="fp32", micro_batch_size=micro)
            if self._estimate(naive).total_bytes <= self.capacity.bytes:
                return naive
        self.notes.append("no naive baseline: FP32 without checkpointing does not fit at any micro-batch")
        return None

    def _largest_batch(self, runner: TrialExecutor) -> TrialRecord | None:
        """The best configuration at the largest micro-batch that fits (Lightning's and Accelerate's rule).

        Where growth measured a larger size than the search went on with (it was no faster), that size
        is the largest that fits, and growth's configuration there is the reference.
        """
        largest = max(config.micro_batch_size or self.profile.global_batch_size for config, _ in self.pruning.kept)
        grown = self.growth.largest_fitting if self.growth is not None else None
        if grown is not None and grown > largest:
            return self._reference(runner, self.growth_configs[grown], "largest-batch")
        measured = [
            r for r in self.records if r.ok and r.config in self.space_configs and r.config.micro_batch_size == largest
        ]
        if not measured:
            first = next((config for config, _ in self.candidates if config.micro_batch_size == largest), None)
            return self._reference(runner, first, "largest-batch")
        # Deepest rung first (its measurement is the longest), then the fastest there.
        pick = min(measured, key=lambda r: (-r.steps, r.result.median_step_s or float("inf")))
        return self._reference(runner, pick.config, "largest-batch")

    def _failures(self) -> str:
        messages = dict.fromkeys(f"{r.result.status}: {r.result.message}" for r in self.records if not r.ok)
        shown = list(messages)[:3]
        return "; ".join(shown) + (f" (and {len(messages) - 3} more)" if len(messages) > 3 else "")


def _worth(
    search: _Search,
    profile: ModelProfile,
    peak: tuple[Accelerator, str] | None,
    options: TuneOptions,
    hourly_usd: float,
    wall_s: float,
) -> TuneWorth:
    """The winner against the references, priced at the tuning's rate: computed once, as the result is built."""
    tokens_per_step = profile.global_batch_size * profile.tokens_per_sample if profile.tokens_per_sample else None

    def measured(record: TrialRecord | None) -> Measured | None:
        return None if record is None else _measured(record, profile, peak, options.calibration)

    return tune_worth(
        _measured(search.best, profile, peak, options.calibration),
        measured(search.baseline),
        measured(search.largest_batch),
        hourly_usd,
        wall_s,
        run_hours=options.run_hours,
        tokens=options.tokens,
        tokens_per_step=tokens_per_step,
    )


def _measured(
    record: TrialRecord, profile: ModelProfile, peak: tuple[Accelerator, str] | None, calibration: Path | None
) -> Measured:
    """A trial's figures, with its MFU against the peak at the trial's precision (fp32 for ``auto``)."""
    result, flops = record.result, profile.forward_flops_per_sample
    utilization = None
    if peak is not None and result.samples_per_s is not None and flops is not None:
        precision = record.config.precision if record.config.precision != "auto" else "fp32"
        benched = measured_peak_flops(
            peak[0].slug, precision, calibration
        )  # ``bench --save``: the peak this device reaches
        peak_flops = peak[0].peak_flops_for(precision) if benched is None else benched[0]
        utilization = mfu(flops, result.samples_per_s, peak_flops)
    return Measured(
        trial=record.number,
        config=record.config,
        median_step_s=result.median_step_s,
        samples_per_s=result.samples_per_s,
        tokens_per_s=result.tokens_per_s,
        warmup_s=result.warmup_s,
        peak_memory_bytes=result.peak_memory_bytes,
        peak_memory_kind=result.peak_memory_kind,
        estimated_memory_bytes=record.estimate.total_bytes,
        mfu=utilization,
    )


def _growth_base(space: SearchSpace) -> SearchSpace:
    """One choice per dimension for growing the micro-batch: the leanest precision, eager, no recomputation.

    The 16-bit precisions halve the activations, so growth finds the largest size any precision
    can use; loading gets the most workers, so the data never caps what growth measures.
    """
    lean = [p for p in ("bf16", "fp16", "tf32", "fp32") if p in space.precisions] or list(space.precisions)

    def prefer(choices: tuple[bool, ...], value: bool) -> tuple[bool, ...]:
        return (value,) if value in choices else choices[:1]

    return replace(
        space,
        precisions=(lean[0],),
        activation_checkpointing=prefer(space.activation_checkpointing, False),
        compile=prefer(space.compile, False),
        channels_last=prefer(space.channels_last, False),
        loader_workers=(max(space.loader_workers),),
        fused_optimizer=prefer(space.fused_optimizer, True),
    )


def _warmup_overhead_s(result: TrialResult, warmup_steps: int) -> float:
    """What the warm-up cost beyond as many ordinary steps: compilation, allocator growth, loader start-up."""
    if result.warmup_s is None or result.median_step_s is None:
        return 0.0
    return max(0.0, result.warmup_s - warmup_steps * result.median_step_s)


def _rank(record: TrialRecord | None) -> tuple[int, float]:
    """Longer measurements first (a top-rung figure beats any shorter one), then the faster step."""
    if record is None or record.result.median_step_s is None:
        return (1, float("inf"))
    return (-record.steps, record.result.median_step_s)


def _device(choice: DeviceKind | None) -> DeviceKind:
    import torch

    if choice == "cuda" and not torch.cuda.is_available():
        raise InputError("--device cuda was asked for, but no CUDA device is available", "use --device cpu")
    if choice is not None:
        return choice
    return "cuda" if default_device().type == "cuda" else "cpu"


def _detected(hardware: Hardware, device: DeviceKind) -> DetectedHardware:
    memory = None
    if device == "cuda":
        import torch

        memory = float(torch.cuda.get_device_properties(0).total_memory)
    return DetectedHardware(
        gpu_count=1 if device == "cuda" else 0,
        gpu_name=hardware.cuda_device if device == "cuda" else None,
        gpu_memory_total_bytes=memory,
        logical_cpus=os.cpu_count() or 1,
    )


def _peak(
    catalog: Catalog, name: str | None, hardware: Hardware, device: DeviceKind, calibration: Path | None
) -> tuple[tuple[Accelerator, str] | None, str]:
    """The catalog device whose peak MFU is measured against, and how it was found (or why there is none)."""
    if name is not None:
        accelerator = catalog.accelerator(name)
        return (accelerator, "given by --gpu"), _peak_note(accelerator, calibration)
    if device == "cuda" and hardware.cuda_device:
        found = catalog.match_device(hardware.cuda_device)
        if found is not None:
            return (found, f"detected from {hardware.cuda_device!r}"), _peak_note(found, calibration)
        return None, f"{hardware.cuda_device!r} is not in the catalog: name the closest with --gpu"
    return None, "a CPU's peak is not detected: name it with --gpu (e.g. xeon-8480plus) to get MFU"


def _peak_note(accelerator: Accelerator, path: Path | None) -> str:
    """Which peak MFU divides by: the one ``bench`` measured on this device (``--calibration FILE``, else the
    one saved for it), else the data sheet's. A file for another device is refused here, before any trial."""
    calibration = calibration_for(accelerator.slug, path, accelerator.aliases)
    if calibration is None:
        return f"MFU against the dense peak of {accelerator.name}"
    return f"MFU against the matmul peak of {accelerator.name} that bench measured ({calibration.note})"


def _recorded(stack: contextlib.ExitStack, options: TuneOptions, row: NewRun) -> RecordedRun | None:
    """The tuning as a ledger run of kind ``tune``, priced at launch: what finding the configuration cost."""
    if not options.record:
        return None
    ledger = stack.enter_context(Ledger.open(options.db))
    return stack.enter_context(RecordedRun(ledger, row))


def _ledger_summary(result: TuneResult) -> dict[str, Any]:
    """What ``runs show`` keeps of a finished tuning: the winner and what the search took."""
    best = result.best
    return {
        "tune": {
            "best": best.config.to_dict(),
            "describe": best.config.describe(),
            "samples_per_s": best.result.samples_per_s,
            "tokens_per_s": best.result.tokens_per_s,
            "speedup_vs_baseline": result.worth.speedup_vs_baseline,
            "trials": len(result.trials),
            "trial_s": result.trial_s,
            **({"lora_rank": result.lora.picked} if result.lora is not None else {}),
        }
    }
