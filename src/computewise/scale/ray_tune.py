"""Ray Tune with ASHA: searches that stop losing trials early, on a Ray cluster the team already runs.

Two uses, one connection and one way of running an experiment:

- ``asha_search``: a hyperparameter search over any trainable that yields its metrics once per
  iteration. ASHA (asynchronous successive halving, Li et al. 2020, arXiv:1810.05934) compares
  each trial at rungs of ``grace_period * reduction_factor ** k`` iterations with the others that
  reached the same rung, and stops it there unless it is in their best ``1 / reduction_factor``.
  Unlike synchronous halving no trial waits for a rung to fill, so the cluster stays busy.
- ``ray_tune_trials``: the trial executor of ``computewise tune --engine ray``. The search's
  candidates (pruned by estimated memory exactly as on this machine) become Ray Tune trials; a
  trial's iterations are the halving's rungs, each one trial of that many measured steps run by
  ``tune.trial.TrialRunner`` on the worker (its own forked process, timed as locally), and ASHA's
  time unit is measured steps: its rungs are the halving's rungs. Compile finalists and the
  references run on one long-lived Ray actor with the same resources, so every figure the report
  compares was measured on the cluster. Trials measure speed, so by default they do not share a
  node's CPUs: one CPU trial per node at a time, one per GPU for GPU trials.

The address is the cluster's GCS address (``HOST:6379``, what ``ray start --head`` prints), not the
dashboard's: Tune drives trials from this process, which joins the cluster as a driver. Nothing
starts until a TCP connection to it succeeds; the connection is closed afterwards if this module
opened it. Ray resolves ``127.0.0.1`` to the machine's network address unless
``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``; a cluster that listens on loopback only (``ray start
--node-ip-address=127.0.0.1``) is refused with that fix instead of a connection that hangs.

Tune's results live in a temporary directory (not ``~/ray_results``) removed afterwards, unless a
``storage_dir`` is given; Tune's console output is silenced and the workers' logs are not forwarded.

``ray`` (with its ``tune`` dependencies, pandas and pyarrow) is imported inside functions: it is
the optional ``ray`` extra.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any, Literal, Protocol

from computewise.errors import InputError, JobEngineError, MissingExtraError, TuneError
from computewise.scale.ray_cluster import connected, gcs_address, last_line, nodes, probe
from computewise.specs.codec import Jsonable, json_property
from computewise.train.config import TrainConfig
from computewise.tune.halving import HalvingOutcome, Rung
from computewise.tune.search import HalvingObserver, TrialExecutorFactory, TrialSettings
from computewise.tune.trial import TrialResult, TrialRunner
from computewise.units import plural

__all__ = [
    "AshaResult",
    "AshaTrial",
    "RayTuneTrials",
    "asha_search",
    "ray_tune_trials",
]

Mode = Literal["min", "max"]
# An iteration function: called with one configuration, yields that trial's metrics once per iteration.
Trainable = Callable[[dict[str, Any]], Iterable[Mapping[str, Any]]]

# The single-trial actor answers within the trial's own timeout plus this, or the trial is an error.
_ACTOR_GRACE_S = 120.0
_METRIC = "samples_per_s"
# Tune's spelling of a trial's resources -> the names Ray's nodes report.
_RAY_RESOURCE_NAMES = {"cpu": "CPU", "gpu": "GPU"}
_TIME_ATTR = "measured_steps"
_ORDER_SEED = 0


@dataclass(frozen=True)
class AshaTrial(Jsonable):
    """One trial of an ASHA search: where it stopped and why.

    ``stopped_early``: ASHA stopped it at a rung before ``max_iterations`` (not the trainable
    running out of iterations itself, nor an error).
    """

    config: dict[str, Any]
    iterations: int
    value: float | None
    stopped_early: bool
    error: str | None = None


@dataclass(frozen=True)
class AshaResult(Jsonable):
    """What an ASHA search found: the best configuration by its last reported metric, and every trial.

    Written, not read back: a trial's configuration is whatever the search space held (free-form JSON).
    """

    metric: str
    mode: Mode
    max_iterations: int
    best_config: dict[str, Any]
    best_value: float
    trials: tuple[AshaTrial, ...]
    wall_s: float

    @property
    def stopped_early(self) -> tuple[AshaTrial, ...]:
        return tuple(trial for trial in self.trials if trial.stopped_early)

    @json_property(after="best_value")
    def iterations(self) -> int:
        """Iterations run in all; ``len(trials) * max_iterations`` is what running every trial out would cost."""
        return sum(trial.iterations for trial in self.trials)

    @json_property(after="iterations")
    def iterations_without_stopping(self) -> int:
        return len(self.trials) * self.max_iterations

    @json_property(after="iterations_without_stopping", name="stopped_early")
    def stopped_early_count(self) -> int:
        return len(self.stopped_early)


def asha_search(
    trainable: Trainable,
    space: Mapping[str, Any],
    *,
    metric: str,
    mode: Mode,
    max_iterations: int,
    num_samples: int = 1,
    grace_period: int = 1,
    reduction_factor: int = 3,
    address: str | None = None,
    resources_per_trial: Mapping[str, float] | None = None,
    max_concurrent_trials: int | None = None,
    seed: int | None = None,
    storage_dir: Path | None = None,
) -> AshaResult:
    """Search ``space`` with ASHA on the Ray cluster at ``address`` (``$RAY_ADDRESS`` when None).

    ``trainable(config)`` yields a mapping of metrics per iteration (it runs on the workers, so it
    must be importable or picklable there); ASHA stops it after ``max_iterations`` or earlier.
    ``space``: a list or tuple is a grid (every value tried), a Ray Tune domain (``tune.uniform``,
    ``tune.choice``...) is sampled ``num_samples`` times with ``seed``, anything else is a constant.
    ``resources_per_trial`` in Ray's names (``{"cpu": 1, "gpu": 0.5}``); one CPU by default. Trials
    reuse the worker processes of finished ones (Tune's ``reuse_actors``, a second saved per trial),
    so module-level state of the trainable's module carries over from one trial to the next.
    The best configuration is the one whose last reported ``metric`` is best.
    """
    _check_search(metric, mode, max_iterations, num_samples, grace_period, reduction_factor)
    address = gcs_address(address)
    _import_ray("an ASHA search")
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler
    from ray.tune.search.basic_variant import BasicVariantGenerator

    started = time.perf_counter()
    listener = _SearchListener(metric, max_iterations)
    param_space = {
        key: tune.grid_search(list(value)) if isinstance(value, list | tuple) else value for key, value in space.items()
    }
    scheduler = ASHAScheduler(max_t=max_iterations, grace_period=grace_period, reduction_factor=reduction_factor)
    resources = dict(resources_per_trial or {"cpu": 1})
    with connected(address):
        _nodes_that_fit(address, resources, "resources_per_trial")
        _fit(
            tune.with_parameters(_report_iterations, iterate=trainable),
            param_space,
            listener,
            scheduler=scheduler,
            metric=metric,
            mode=mode,
            num_samples=num_samples,
            resources=resources,
            max_concurrent_trials=max_concurrent_trials,
            search_alg=BasicVariantGenerator(random_state=seed),
            storage_dir=storage_dir,
            reuse_actors=True,
        )
    trials = tuple(listener.trials())
    scored = [trial for trial in trials if trial.value is not None and math.isfinite(trial.value)]
    if not scored:
        errors = "; ".join(dict.fromkeys(trial.error for trial in trials if trial.error)) or "no trial reported it"
        raise TuneError(
            f"no trial of the ASHA search reported a finite {metric!r}: {errors}",
            f"make the trainable yield {{{metric!r}: value}} every iteration",
        )
    pick = min if mode == "min" else max
    best = pick(scored, key=lambda trial: trial.value or 0.0)
    return AshaResult(
        metric=metric,
        mode=mode,
        max_iterations=max_iterations,
        best_config=best.config,
        best_value=float(best.value or 0.0),
        trials=trials,
        wall_s=time.perf_counter() - started,
    )


def ray_tune_trials(
    address: str | None, *, max_concurrent_trials: int | None = None, storage_dir: Path | None = None
) -> TrialExecutorFactory:
    """The trial executor of ``computewise tune --engine ray``, checked now: a wrong address fails before any work."""
    address = gcs_address(address)
    _import_ray("`computewise tune ENTRY --engine ray`")
    probe(address)

    def factory(settings: TrialSettings) -> RayTuneTrials:
        return RayTuneTrials(settings, address, max_concurrent_trials=max_concurrent_trials, storage_dir=storage_dir)

    return factory


class RayTuneTrials:
    """A search's trials on a Ray cluster: the halving as ASHA over Ray Tune trials, single trials on one actor."""

    def __init__(
        self,
        settings: TrialSettings,
        address: str,
        *,
        max_concurrent_trials: int | None = None,
        storage_dir: Path | None = None,
    ) -> None:
        self.settings, self.address, self.storage_dir = settings, address, storage_dir
        self._ray = _import_ray("`computewise tune ENTRY --engine ray`")
        self._connection = contextlib.ExitStack()
        self._connection.enter_context(connected(address))
        try:
            fitting = _nodes_that_fit(address, self.resources, "--threads / --device")
        except JobEngineError:
            self._connection.close()
            raise
        # Trials side by side on one node's CPUs share its cores, caches and memory bandwidth and slow each
        # other unevenly (docs/SCALE.md has the measurement), which would rank configurations by
        # their neighbours: by default one CPU trial per node at a time, one per GPU for GPU trials.
        slots = sum(int(node.get("GPU", 0.0)) for node in fitting) if settings.device == "cuda" else len(fitting)
        self.concurrent_trials = max_concurrent_trials or max(1, slots)
        self._host: Any = None
        self._summary: dict[str, Any] = {}

    @property
    def resources(self) -> dict[str, float]:
        """What one trial reserves: its torch threads as CPUs, and a whole GPU when it trains on one."""
        return {"cpu": float(self.settings.threads), "gpu": 1.0 if self.settings.device == "cuda" else 0.0}

    def run(self, config: TrainConfig, steps: int) -> TrialResult:
        """One trial on the cluster's trial host actor (started on first use, with a trial's resources)."""
        ray = self._ray
        started = time.perf_counter()
        try:
            if self._host is None:
                actor = ray.remote(_TrialHost).options(num_cpus=self.resources["cpu"], num_gpus=self.resources["gpu"])
                self._host = actor.remote(self.settings, os.getcwd())
            answer = self._host.run.remote(config.to_dict(), steps)
            payload = ray.get(answer, timeout=self.settings.timeout_s + _ACTOR_GRACE_S)
        except ray.exceptions.RayError as err:
            message = f"the Ray trial host failed: {last_line(str(err))}"
            return TrialResult("error", message, wall_s=time.perf_counter() - started)
        return TrialResult.from_dict(payload)

    def halving(
        self, configs: Sequence[TrainConfig], rungs: tuple[Rung, ...], eta: int, observer: HalvingObserver
    ) -> HalvingOutcome:
        """ASHA over one Ray Tune trial per configuration; a trial's iterations are the rungs, in measured steps."""
        from ray import tune
        from ray.tune.schedulers import ASHAScheduler

        started = time.perf_counter()
        plan = _RungPlan(self.settings, tuple(config.to_dict() for config in configs), rungs, os.getcwd())
        listener = _RungListener(rungs, observer)
        scheduler = ASHAScheduler(
            time_attr=_TIME_ATTR, max_t=rungs[-1].steps, grace_period=rungs[0].steps, reduction_factor=eta
        )
        _fit(
            tune.with_parameters(_measure_rungs, plan=plan),
            {"candidate": tune.grid_search(_arrival_order(len(configs)))},
            listener,
            scheduler=scheduler,
            metric=_METRIC,
            mode="max",
            num_samples=1,
            resources=self.resources,
            max_concurrent_trials=self.concurrent_trials,
            search_alg=None,
            storage_dir=self.storage_dir,
            reuse_actors=True,
        )
        stopped = {index: listener.steps[index] for index in sorted(listener.stopped)}
        self._summary = {
            "scheduler": "ASHA",
            "time_attr": "measured steps",
            "grace_steps": rungs[0].steps,
            "max_steps": rungs[-1].steps,
            "reduction_factor": eta,
            "ray_trials": len(configs),
            "stopped_early": [{"config": configs[i].describe(), "steps": steps} for i, steps in stopped.items()],
            "halving_wall_s": time.perf_counter() - started,
        }
        return listener.outcome()

    def describe(self) -> dict[str, Any]:
        return {
            "name": "ray",
            "address": self.address,
            "trial_resources": self.resources,
            "concurrent_trials": self.concurrent_trials,
            **self._summary,
        }

    def notes(self) -> list[str]:
        if not self._summary:
            return []
        stopped, total = len(self._summary["stopped_early"]), self._summary["ray_trials"]
        return [
            f"trials ran as Ray Tune trials on the cluster at {self.address}, {self.concurrent_trials} at a time, "
            f"each with {self.resources['cpu']:g} CPU(s) and {self.resources['gpu']:g} GPU(s): ASHA stopped "
            f"{stopped} of {total} configurations early"
        ]

    def close(self) -> None:
        """Stop the trial host actor and leave the cluster (if this executor joined it)."""
        host, self._host = self._host, None
        try:
            if host is not None:
                with contextlib.suppress(self._ray.exceptions.RayError):
                    self._ray.get(host.close.remote(), timeout=30)
                self._ray.kill(host)
        finally:
            self._connection.close()


def _arrival_order(candidates: int) -> list[int]:
    """The candidates in a fixed random order, the arrival order ASHA assumes.

    ASHA judges each trial only against those that reached a rung before it, so the space's own order
    (micro-batches ascending, often slowest first) would let every later, faster trial through to the
    top rung when few run at once.
    """
    order = list(range(candidates))
    random.Random(_ORDER_SEED).shuffle(order)
    return order


# -- on the workers ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _RungPlan:
    """What every rung trial needs on its worker: the settings, the candidates, the rungs, the driver's directory."""

    settings: TrialSettings
    configs: tuple[dict[str, Any], ...]
    rungs: tuple[Rung, ...]
    cwd: str


def _measure_rungs(config: dict[str, Any], plan: _RungPlan) -> None:
    """One candidate as one Ray Tune trial: a trial per rung, reported after each; ASHA decides whether to go on."""
    from ray import tune

    train_config = TrainConfig.from_dict(plan.configs[int(config["candidate"])])
    _enter(plan.cwd)
    runner = _worker_runner(_worker_settings(plan.settings, f"ray-worker-{os.getpid()}"))
    for rung in plan.rungs:
        result = runner.run(train_config, rung.steps)
        ok = result.status == "ok" and result.samples_per_s is not None
        # NaN, not None: ASHA multiplies the metric, and its cutoff (a nanpercentile) ignores NaN.
        samples_per_s = result.samples_per_s if ok and result.samples_per_s is not None else math.nan
        tune.report({_TIME_ATTR: rung.steps, _METRIC: samples_per_s, "rung": rung.index, "trial": result.to_dict()})
        if not ok:
            return  # a failed configuration is never promoted


# This worker process's trial server, kept for the next candidate: Tune reuses the trial's actor
# (``reuse_actors``), and a new server would import torch again, seconds per candidate. The server
# forks every trial, so candidates stay as isolated as on one machine; it exits with the worker
# (its stdin closes).
_worker_runners: list[tuple[TrialSettings, TrialRunner]] = []


def _worker_runner(settings: TrialSettings) -> TrialRunner:
    """This worker's trial server for ``settings``: the one kept from an earlier candidate, or a new one."""
    if _worker_runners and _worker_runners[0][0] == settings:
        return _worker_runners[0][1]
    for _, stale in _worker_runners:
        stale.close()
    _worker_runners[:] = [(settings, settings.runner())]
    return _worker_runners[0][1]


class _TrialHost:
    """A Ray actor with one ``TrialRunner``: the single trials of a search, one trial server start for all."""

    def __init__(self, settings: TrialSettings, cwd: str) -> None:
        _enter(cwd)
        self.runner = _worker_settings(settings, "ray-host").runner()

    def run(self, config: dict[str, Any], steps: int) -> dict[str, Any]:
        return self.runner.run(TrainConfig.from_dict(config), steps).to_dict()

    def close(self) -> None:
        self.runner.close()


def _worker_settings(settings: TrialSettings, name: str) -> TrialSettings:
    """Trial logs go to ``name`` in the driver's log directory where this node has it, else nowhere."""
    if settings.log_dir is None or not settings.log_dir.is_dir():
        return replace(settings, log_dir=None)
    log_dir = settings.log_dir / name
    log_dir.mkdir(exist_ok=True)
    return replace(settings, log_dir=log_dir)


def _enter(cwd: str) -> None:
    """Run where the driver runs, when this node has that directory: entry points like ``examples.x`` import from it."""
    if os.path.isdir(cwd):
        os.chdir(cwd)
        if cwd not in sys.path:
            sys.path.insert(0, cwd)


def _report_iterations(config: dict[str, Any], iterate: Trainable) -> None:
    """The Ray Tune function around an iteration function: one ``tune.report`` per yielded mapping."""
    from ray import tune

    for metrics in iterate(config):
        tune.report(dict(metrics))


# -- in the driver -------------------------------------------------------------------------------


class _Listener(Protocol):
    def started(self, trial_id: str, config: dict[str, Any]) -> None: ...

    def result(self, trial_id: str, config: dict[str, Any], result: dict[str, Any]) -> None: ...

    def failed(self, trial_id: str, config: dict[str, Any], error: str) -> None: ...


@dataclass
class _SearchListener:
    """Each trial's last iteration and metric, and whether ASHA stopped it (a ``done`` result before the end)."""

    metric: str
    max_iterations: int
    _trials: dict[str, AshaTrial] = field(default_factory=dict)

    def started(self, trial_id: str, config: dict[str, Any]) -> None:
        self._trials[trial_id] = AshaTrial(config=dict(config), iterations=0, value=None, stopped_early=False)

    def result(self, trial_id: str, config: dict[str, Any], result: dict[str, Any]) -> None:
        iteration = int(result.get("training_iteration", 0))
        value = result.get(self.metric)
        stopped = bool(result.get("done")) and iteration < self.max_iterations
        self._trials[trial_id] = AshaTrial(
            config=dict(config),
            iterations=iteration,
            value=float(value) if isinstance(value, int | float) else None,
            stopped_early=stopped,
        )

    def failed(self, trial_id: str, config: dict[str, Any], error: str) -> None:
        known = self._trials.get(trial_id)
        self._trials[trial_id] = AshaTrial(
            config=dict(config),
            iterations=known.iterations if known else 0,
            value=known.value if known else None,
            stopped_early=False,
            error=error,
        )

    def trials(self) -> list[AshaTrial]:
        return list(self._trials.values())


@dataclass
class _RungListener:
    """Hands every rung trial to the search as it arrives, and keeps the halving's outcome."""

    rungs: tuple[Rung, ...]
    observer: HalvingObserver
    steps: dict[int, int] = field(default_factory=dict)
    stopped: set[int] = field(default_factory=set)
    _scores: dict[int, dict[int, float | None]] = field(default_factory=dict)

    def started(self, trial_id: str, config: dict[str, Any]) -> None:
        self.observer.starting(int(config["candidate"]), self.rungs[0])

    def result(self, trial_id: str, config: dict[str, Any], result: dict[str, Any]) -> None:
        index, rung = int(config["candidate"]), self.rungs[int(result["rung"])]
        score = self.observer.measured(index, rung, TrialResult.from_dict(result["trial"]))
        self._scores.setdefault(index, {})[rung.index] = score
        self.steps[index] = rung.steps
        if result.get("done") and rung.steps < self.rungs[-1].steps:
            self.stopped.add(index)

    def failed(self, trial_id: str, config: dict[str, Any], error: str) -> None:
        index = int(config["candidate"])
        reached = max(self._scores.get(index, {}), default=-1)
        rung = self.rungs[min(reached + 1, len(self.rungs) - 1)]
        self._scores.setdefault(index, {})[rung.index] = None
        self.observer.measured(index, rung, TrialResult("error", f"the Ray trial failed: {error}"))

    def outcome(self) -> HalvingOutcome:
        """Candidates ranked by the deepest rung they reached, then by their step time there."""

        def deepest(index: int) -> tuple[int, float]:
            rung, score = max((r, s) for r, s in self._scores[index].items() if s is not None and math.isfinite(s))
            return -rung, score

        measured = [i for i, scores in self._scores.items() if any(s is not None for s in scores.values())]
        return HalvingOutcome(ranking=sorted(measured, key=deepest), scores=dict(self._scores))


@cache
def _callback_class() -> type:
    """A ``tune.Callback`` that forwards trial events to a listener in this process (built lazily: ray is optional)."""
    from ray import tune

    class _Forward(tune.Callback):
        def __init__(self, listener: _Listener) -> None:
            self.listener: _Listener | None = listener

        def on_trial_start(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
            if self.listener is not None:
                self.listener.started(trial.trial_id, trial.config)

        def on_trial_result(
            self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any], **info: Any
        ) -> None:
            if self.listener is not None:
                self.listener.result(trial.trial_id, trial.config, result)

        def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
            if self.listener is not None:
                self.listener.failed(trial.trial_id, trial.config, last_line(str(trial.get_error() or "unknown error")))

        def __getstate__(self) -> dict[str, Any]:
            # Tune pickles its run config to resume an experiment, which computewise never does; the
            # listener (the search and its progress bar) stays in this process.
            return {"listener": None}

    return _Forward


def _fit(
    trainable: Any,
    param_space: dict[str, Any],
    listener: _Listener,
    *,
    scheduler: Any,
    metric: str,
    mode: Mode,
    num_samples: int,
    resources: dict[str, float],
    max_concurrent_trials: int | None,
    search_alg: Any,
    storage_dir: Path | None,
    reuse_actors: bool = False,
) -> None:
    """Run one Tune experiment to its end, quietly, with its results in ``storage_dir`` or a temporary directory."""
    from ray import tune

    storage = storage_dir or Path(tempfile.mkdtemp(prefix="computewise-ray-tune-"))
    tuner = tune.Tuner(
        tune.with_resources(trainable, resources),
        param_space=param_space,
        tune_config=tune.TuneConfig(
            metric=metric,
            mode=mode,
            scheduler=scheduler,
            search_alg=search_alg,
            num_samples=num_samples,
            max_concurrent_trials=max_concurrent_trials,
            reuse_actors=reuse_actors,
        ),
        run_config=tune.RunConfig(
            name="computewise", storage_path=str(storage.resolve()), verbose=0, callbacks=[_callback_class()(listener)]
        ),
    )
    try:
        # Tune's newer console output prints its experiment banner even at verbose=0; the older one is silent.
        with _environment(RAY_AIR_NEW_OUTPUT="0"):
            tuner.fit()
    except tune.TuneError as err:
        raise JobEngineError(f"Ray Tune failed: {last_line(str(err))}", "check the cluster with `ray status`") from err
    finally:
        if storage_dir is None:
            shutil.rmtree(storage, ignore_errors=True)


@contextlib.contextmanager
def _environment(**values: str) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _nodes_that_fit(address: str, resources: Mapping[str, float], knobs: str) -> list[dict[str, float]]:
    """The alive nodes that can hold one trial (their total resources); none at all is refused.

    Ray would leave trials that no node can hold pending forever.
    """
    wanted = {_RAY_RESOURCE_NAMES.get(name, name): amount for name, amount in resources.items() if amount > 0}
    alive = nodes()
    fitting = [node for node in alive if all(node.get(name, 0.0) + 1e-9 >= amount for name, amount in wanted.items())]
    if fitting:
        return fitting
    largest = {name: max((node.get(name, 0.0) for node in alive), default=0.0) for name in wanted}
    asked = ", ".join(f"{amount:g} {name}" for name, amount in wanted.items())
    has = ", ".join(f"{amount:g} {name}" for name, amount in largest.items())
    raise JobEngineError(
        f"every trial asks for {asked}, and no node of the Ray cluster at {address} has that "
        f"({plural(len(alive), 'node')} alive; the largest of each: {has})",
        f"ask for less per trial ({knobs}), or add a node that has it",
    )


def _import_ray(feature: str) -> ModuleType:
    try:
        import ray
        import ray.exceptions
        import ray.tune  # fails when Tune's own dependencies, pandas and pyarrow, are missing
        import ray.util
    except ImportError as err:
        raise MissingExtraError("ray[tune]", "ray", feature) from err
    return ray


def _check_search(
    metric: str, mode: str, max_iterations: int, num_samples: int, grace_period: int, reduction_factor: int
) -> None:
    if not metric:
        raise InputError("the search needs a metric to rank trials by", "e.g. metric='accuracy', mode='max'")
    if mode not in ("min", "max"):
        raise InputError(f"mode must be 'min' or 'max', got {mode!r}", "'max' for accuracy, 'min' for a loss")
    if max_iterations < 1 or num_samples < 1:
        raise InputError("max_iterations and num_samples must be >= 1", "e.g. max_iterations=9, num_samples=8")
    if not 1 <= grace_period <= max_iterations:
        raise InputError(
            f"grace_period must be between 1 and max_iterations ({max_iterations}), got {grace_period}",
            "every trial runs grace_period iterations before ASHA may stop it: e.g. 1",
        )
    if reduction_factor < 2:
        raise InputError(f"reduction_factor must be >= 2, got {reduction_factor}", "keep the best third: 3")
