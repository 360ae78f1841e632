"""``fit()``: a small training loop that composes the pieces and survives being killed.

    from computewise.train.fit import fit
    result = fit(setup, TrainConfig(precision="bf16"), max_steps=5000, checkpoint_dir="ckpt")

Run the same command again after a preemption and it continues where it stopped. What makes
that exact (the same losses, step for step, as a run never interrupted, on a deterministic CPU):

- the checkpoint holds everything a step changes: weights, optimizer moments, scheduler, loss
  scale (``StepEngine.state_dict``), every rank's RNG streams, the data position (global samples
  consumed, always a whole number of steps), the step, the early-stopping progress and the best
  metric;
- the data order is a pure function of the position (``computewise.train.data``), so the resumed
  loader draws what the uninterrupted one would have;
- RNG streams are seeded once at the start (``setup.seed + rank``) and restored on resume after
  everything that might draw from them (model preparation, the loader).

A preemption signal (``PreemptionGuard``) is acted on between steps: the step in flight finishes,
every rank agrees to stop after it, rank 0 writes the checkpoint (the others wait for its
outcome), the time from the signal to the durable checkpoint is logged, and ``Preempted`` exits
the process with code 75. Checkpoints are also written every ``checkpoint_every_steps``, whenever
the validation metric improves (so the best model is always on disk), and at the end.

Steps go through ``computewise.monitor.track`` (one ledger run per process, data wait vs
compute, FLOPs traced on the meta device for MFU, cost). Evaluation and checkpoints are left out
of the step times.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from computewise.errors import CheckpointError, ConfigError, DistributedError, ModelConfigError
from computewise.monitor.track import Tracker
from computewise.monitor.track import track as start_tracking
from computewise.train import distributed
from computewise.train.checkpoint import CheckpointStore, capture_rng, restore_rng
from computewise.train.config import TrainConfig
from computewise.train.data import make_loader
from computewise.train.distributed import Placement, ResolvedStrategy, Strategy
from computewise.train.early_stopping import EarlyStopping
from computewise.train.engine import StepEngine
from computewise.train.memory_cap import apply_gpu_memory_cap
from computewise.train.preemption import DEFAULT_GRACE_S, Preempted, PreemptionGuard
from computewise.train.setup import TrainingSetup

if TYPE_CHECKING:
    import torch

__all__ = ["STATE_FORMAT", "FitResult", "Stopped", "fit"]

Stopped = Literal["max_steps", "early_stopping", "preempted"]
# The layout of the state inside a checkpoint; a different one is refused rather than half-loaded.
STATE_FORMAT = "computewise.fit-state/1"

logger = logging.getLogger("computewise.train")


@dataclass(frozen=True)
class FitResult:
    """What one call of ``fit`` did.

    ``losses`` has one mean loss (over the global batch, all ranks) per step this call ran:
    ``losses[i]`` is step ``start_step + i + 1``. ``checkpoint`` is the last one written (None
    without a directory). ``seconds_to_checkpoint_s`` is the time from the preemption signal to
    the durable checkpoint (None unless preempted). ``tracking`` is ``track()``'s summary and
    ``run_id`` the ledger's run (None with ``track=False``).
    """

    start_step: int
    steps_done: int
    losses: list[float]
    stopped: Stopped
    best_metric: float | None
    checkpoint: Path | None
    seconds_to_checkpoint_s: float | None
    tracking: dict[str, Any] | None = field(default=None, compare=False)
    run_id: int | None = field(default=None, compare=False)

    @property
    def final_step(self) -> int:
        return self.start_step + self.steps_done


@dataclass
class _Progress:
    """The loop's own state, saved in every checkpoint beside the engine's."""

    step: int = 0
    samples_consumed: int = 0  # the data position: global samples drawn so far
    best_metric: float | None = None
    metric: float | None = None  # this step's metric, when it was evaluated
    improved: bool = False


def fit(
    setup: TrainingSetup,
    config: TrainConfig | None = None,
    *,
    max_steps: int,
    checkpoint_dir: Path | str | None = None,
    checkpoint_every_steps: int = 50,
    keep_last: int = 3,
    resume: bool = True,
    eval_every_steps: int | None = None,
    early_stopping: EarlyStopping | None = None,
    grace_s: float = DEFAULT_GRACE_S,
    strategy: Strategy = "auto",
    device: torch.device | str | None = None,
    track: bool = True,
    tags: Mapping[str, str] | None = None,
    db: str | None = None,
    on_step: Callable[[int, float], None] | None = None,
) -> FitResult:
    """Train ``setup`` for ``max_steps`` optimizer steps (in total, counting resumed ones).

    With ``checkpoint_dir`` the run is preemption-safe and, with ``resume``, continues from the
    newest valid checkpoint there. ``eval_every_steps`` runs ``setup.evaluate`` (needed by
    ``early_stopping``). ``strategy`` picks DDP/FSDP under torchrun. ``track`` records the run
    in the ledger (``db``, ``tags``); ``on_step(step, loss)`` is called after every step.

    Raises ``Preempted`` (exit code 75) after saving when a preemption signal arrives.
    """
    config = config or TrainConfig()
    _check_arguments(setup, max_steps, checkpoint_every_steps, eval_every_steps, early_stopping)
    store = CheckpointStore(checkpoint_dir, keep_last=keep_last) if checkpoint_dir is not None else None
    if store is not None:
        store.check_writable()
        if not resume and store.checkpoints():
            raise CheckpointError(
                f"{store.directory} already holds checkpoints (newest: step {store.checkpoints()[-1].step}) "
                "and resume=False would mix a new run with them",
                "pass resume=True to continue that run, or a new checkpoint_dir to start afresh",
            )
    with PreemptionGuard(grace_s=grace_s) as guard:
        # Under torchrun: joins the process group, which stays up for a later fit() in this process.
        place, _created = distributed.init_distributed(device)
        apply_gpu_memory_cap()  # a job on a shared GPU (COMPUTEWISE_GPU_MEMORY_FRACTION) keeps to its share
        return _Run(setup, config, place, strategy, device, store, early_stopping, guard).train(
            max_steps=max_steps,
            resume=resume,
            checkpoint_every_steps=checkpoint_every_steps,
            eval_every_steps=eval_every_steps,
            track=track,
            tags=tags,
            db=db,
            on_step=on_step,
        )


def _check_arguments(
    setup: TrainingSetup,
    max_steps: int,
    checkpoint_every_steps: int,
    eval_every_steps: int | None,
    early_stopping: EarlyStopping | None,
) -> None:
    """Refuse settings that cannot work before anything heavy starts."""
    if max_steps < 0:
        raise ConfigError(f"max_steps must be >= 0, got {max_steps}")
    if checkpoint_every_steps < 1:
        raise ConfigError(f"checkpoint_every_steps must be >= 1, got {checkpoint_every_steps}")
    if eval_every_steps is not None and eval_every_steps < 1:
        raise ConfigError(f"eval_every_steps must be >= 1, got {eval_every_steps}")
    if eval_every_steps is not None and setup.evaluate is None:
        raise ConfigError(
            "eval_every_steps needs a validation metric, and the training setup has no evaluate function",
            "give TrainingSetup(evaluate=...) or drop eval_every_steps",
        )
    if early_stopping is not None and eval_every_steps is None:
        raise ConfigError(
            "early_stopping needs evaluations: eval_every_steps is not set",
            "pass eval_every_steps=N to evaluate every N steps",
        )
    if early_stopping is not None and early_stopping.higher_is_better != setup.higher_is_better:
        raise ConfigError(
            f"early_stopping.higher_is_better={early_stopping.higher_is_better} contradicts the setup's "
            f"higher_is_better={setup.higher_is_better}",
            "make them agree: they describe the same metric",
        )


class _Run:
    """One call of ``fit``: the prepared engine and stores, and the loop over steps."""

    def __init__(
        self,
        setup: TrainingSetup,
        config: TrainConfig,
        place: Placement,
        strategy: Strategy,
        device: torch.device | str | None,
        store: CheckpointStore | None,
        early_stopping: EarlyStopping | None,
        guard: PreemptionGuard,
    ) -> None:
        import torch

        self.setup = setup
        self.place = place
        self.store = store
        self.early_stopping = early_stopping
        self.guard = guard
        self.strategy: ResolvedStrategy = distributed.resolve_strategy(strategy, place.world_size)
        if self.strategy == "none" and place.world_size > 1:
            raise DistributedError(
                f"strategy 'none' with {place.world_size} processes would train {place.world_size} separate models",
                "use strategy='auto' (DDP) or 'fsdp' under torchrun",
            )
        # One seed for every stream this run draws from (dropout, user code), different per rank.
        torch.manual_seed(setup.seed + place.rank)
        self.engine = StepEngine.prepare(setup, config, device=device, wrap=distributed.wrapper(strategy))
        self.config = config
        self.progress = _Progress()
        self.checkpoint: Path | None = None
        self.run_id: int | None = None  # the ledger run, once tracking starts; recorded in each manifest

    # -- the loop -------------------------------------------------------------------------------

    def train(
        self,
        *,
        max_steps: int,
        resume: bool,
        checkpoint_every_steps: int,
        eval_every_steps: int | None,
        track: bool,
        tags: Mapping[str, str] | None,
        db: str | None,
        on_step: Callable[[int, float], None] | None,
    ) -> FitResult:
        engine, progress, setup = self.engine, self.progress, self.setup
        if resume and self.store is not None:
            self._resume()
        start_step = progress.step
        loader = make_loader(
            setup,
            self.config,
            engine.micro_batch_size,
            start_sample=progress.samples_consumed,
            rank=self.place.rank,
            world_size=self.place.world_size,
        )
        rank_samples = setup.global_batch_size // self.place.world_size
        tokens = rank_samples * setup.tokens_per_sample if setup.tokens_per_sample is not None else None
        tracker = self._start_tracking(tags, db, start_step) if track else None
        self.run_id = tracker.run_id if tracker is not None else None
        losses: list[float] = []
        stopped: Stopped = "max_steps"
        try:
            while progress.step < max_steps:
                if tracker is not None:
                    tracker.begin_wait()
                micro_batches = [next(loader) for _ in range(engine.accumulation_steps)]
                if tracker is not None:
                    tracker.begin_step(samples=rank_samples, tokens=tokens)
                loss = engine.step(micro_batches)
                if tracker is not None:
                    tracker.end_step()
                loss = distributed.all_reduce_mean(loss) if self.place.world_size > 1 else loss
                progress.step += 1
                progress.samples_consumed += setup.global_batch_size
                losses.append(loss)
                if on_step is not None:
                    on_step(progress.step, loss)
                early_stop = self._evaluate_if_due(eval_every_steps)
                preempted = self.guard.stop_requested()
                if self.store is not None and (
                    preempted
                    or early_stop
                    or progress.improved
                    or progress.step % checkpoint_every_steps == 0
                    or progress.step == max_steps
                ):
                    self._save()
                    if tracker is not None:
                        tracker.flush()
                if preempted:
                    raise self._preempted(start_step, losses)
                if early_stop:
                    stopped = "early_stopping"
                    break
        except BaseException as failure:
            if tracker is not None:
                tracker.finish(failure)
            raise
        summary = tracker.finish() if tracker is not None else None
        return FitResult(
            start_step=start_step,
            steps_done=progress.step - start_step,
            losses=losses,
            stopped=stopped,
            best_metric=progress.best_metric,
            checkpoint=self.checkpoint,
            seconds_to_checkpoint_s=None,
            tracking=summary,
            run_id=tracker.run_id if tracker is not None else None,
        )

    def _evaluate_if_due(self, eval_every_steps: int | None) -> bool:
        """Evaluate on schedule; True when early stopping says stop. Rank 0's metric is everyone's."""
        progress, evaluate = self.progress, self.setup.evaluate
        progress.metric, progress.improved = None, False
        if eval_every_steps is None or evaluate is None or progress.step % eval_every_steps:
            return False
        # FSDP's forward is a collective (parameters are gathered), so every rank evaluates there.
        metric = evaluate(self.engine.raw_model) if self.place.is_main or self.strategy == "fsdp" else None
        metric = float(distributed.broadcast_object(metric))
        progress.metric = metric
        best = progress.best_metric
        if math.isfinite(metric) and (
            best is None or (metric > best if self.setup.higher_is_better else metric < best)
        ):
            progress.best_metric, progress.improved = metric, True
        if self.early_stopping is None:
            return False
        return self.early_stopping.update(metric)

    def _preempted(self, start_step: int, losses: list[float]) -> Preempted:
        """Log the time from the signal to the durable checkpoint and build the exception that exits 75."""
        seconds_s = self.guard.seconds_since_signal()
        grace_s = self.guard.grace_s
        where = f"checkpoint {self.checkpoint}" if self.checkpoint is not None else "no checkpoint_dir, nothing saved"
        timing = f"{seconds_s:.2f} s after the signal" if seconds_s is not None else "after the signal"
        verdict = "within" if seconds_s is not None and seconds_s <= grace_s else "OUTSIDE"
        log = logger.warning if self.place.is_main else logger.debug
        log(
            "preempted by %s: stopped after step %d, %s durable %s (%s the %.0f s grace window); "
            "exiting with code 75, run the same command again to resume",
            self.guard.signal_name,
            self.progress.step,
            where,
            timing,
            verdict,
            grace_s,
        )
        preempted = Preempted(self.progress.step, self.checkpoint, seconds_s, self.guard.signal_name)
        preempted.result = FitResult(
            start_step=start_step,
            steps_done=self.progress.step - start_step,
            losses=losses,
            stopped="preempted",
            best_metric=self.progress.best_metric,
            checkpoint=self.checkpoint,
            seconds_to_checkpoint_s=seconds_s,
        )
        return preempted

    # -- checkpoints ----------------------------------------------------------------------------

    def _state(self) -> dict[str, Any]:
        """The full training state; a collective under torchrun (RNG states and FSDP shards are gathered)."""
        engine = self.engine
        engine_state = engine.state_dict()
        if self.strategy == "fsdp":
            engine_state["model"], engine_state["optimizer"] = distributed.full_state(
                engine.raw_model, engine.optimizer
            )
        return {
            "format": STATE_FORMAT,
            "step": self.progress.step,
            "samples_consumed": self.progress.samples_consumed,
            "global_batch_size": self.setup.global_batch_size,
            "world_size": self.place.world_size,
            "optimizer_keys": "names" if self.strategy == "fsdp" else "indices",
            "engine": engine_state,
            "rng": distributed.gather_objects(capture_rng()),
            "early_stopping": self.early_stopping.state_dict() if self.early_stopping is not None else None,
            "best_metric": self.progress.best_metric,
        }

    def _save(self) -> None:
        """Rank 0 writes; every rank waits for the outcome, so a failed save stops all of them."""
        store = self.store
        if store is None:
            return
        state = self._state()
        failure: BaseException | None = None
        path: Path | None = None
        if self.place.is_main:
            try:
                path = store.save(
                    state,
                    self.progress.step,
                    metric=self.progress.metric,
                    higher_is_better=self.setup.higher_is_better,
                    run_id=self.run_id,
                )
            except Exception as error:
                failure = error
        outcome = distributed.broadcast_object(
            {"path": str(path) if path is not None else None, "error": None if failure is None else repr(failure)}
        )
        if failure is not None:
            raise failure
        if outcome["error"] is not None:
            raise CheckpointError(
                f"rank 0 could not write the checkpoint of step {self.progress.step}: {outcome['error']}"
            )
        self.checkpoint = Path(outcome["path"])

    def _resume(self) -> None:
        """Load the newest valid checkpoint (every rank reads it: the directory is shared) and continue from it."""
        store = self.store
        if store is None:
            return
        loaded = store.load_latest(map_location="cpu")
        if loaded is None:
            return
        state = loaded.state
        if state.get("format") != STATE_FORMAT:
            raise CheckpointError(
                f"checkpoint {loaded.path} holds state of format {state.get('format')!r}, not {STATE_FORMAT!r}",
                "resume it with the computewise version that wrote it, or start afresh in a new checkpoint_dir",
            )
        layouts = {"names": "FSDP", "indices": "DDP or a single process"}
        expected_keys = "names" if self.strategy == "fsdp" else "indices"
        if state["optimizer_keys"] != expected_keys:
            raise CheckpointError(
                f"checkpoint {loaded.path} was written by a run with {layouts[state['optimizer_keys']]} and this "
                f"run uses {layouts[expected_keys]}: their optimizer states are laid out differently",
                f"resume with strategy={'fsdp' if state['optimizer_keys'] == 'names' else 'auto'!r}",
            )
        engine, engine_state = self.engine, state["engine"]
        if self.strategy == "fsdp":
            distributed.load_full_state(
                engine.raw_model, engine.optimizer, engine_state["model"], engine_state["optimizer"]
            )
            if engine.scheduler is not None and engine_state["scheduler"] is not None:
                engine.scheduler.load_state_dict(engine_state["scheduler"])
            if engine.policy.scaler is not None and engine_state["scaler"] is not None:
                engine.policy.scaler.load_state_dict(engine_state["scaler"])
        else:
            engine.load_state_dict(engine_state)
        if self.early_stopping is not None and state["early_stopping"] is not None:
            self.early_stopping.load_state_dict(state["early_stopping"])
        rngs = state["rng"]
        if len(rngs) == self.place.world_size:
            restore_rng(rngs[self.place.rank])
        elif self.place.is_main:
            logger.warning(
                "checkpoint %s was written by %d processes and this run has %d: random streams start afresh, "
                "so the resumed losses will not match an uninterrupted run exactly",
                loaded.path,
                len(rngs),
                self.place.world_size,
            )
        self.progress.step = int(state["step"])
        self.progress.samples_consumed = int(state["samples_consumed"])
        self.progress.best_metric = state["best_metric"]
        self.checkpoint = loaded.path
        if self.place.is_main:
            logger.info("resumed from %s at step %d", loaded.path, self.progress.step)

    # -- tracking -------------------------------------------------------------------------------

    def _start_tracking(self, tags: Mapping[str, str] | None, db: str | None, first_step: int) -> Tracker:
        """Start the ledger run, numbering steps from ``first_step`` (a resumed run's steps continue, so an
        attempt's redone steps show); FLOPs are traced from the model on the meta device when it can be."""
        all_tags = dict(tags or {})
        if self.place.world_size > 1:
            all_tags.update(rank=str(self.place.rank), world_size=str(self.place.world_size))
        precision = self.engine.policy.precision
        # FSDP's parameters are shards (DTensors) that meta tracing cannot copy.
        if self.strategy != "fsdp":
            import torch

            # Tracing runs after the RNG streams were restored or seeded: it must not draw from them.
            with torch.random.fork_rng(devices=[]):
                try:
                    return start_tracking(
                        tags=all_tags,
                        db=db,
                        precision=precision,
                        first_step=first_step,
                        model=self.engine.raw_model,
                        example_inputs=self._example_inputs(),
                    ).start()
                except ModelConfigError as failure:
                    logger.warning("computewise.train: FLOPs not traced, so no MFU: %s", failure.message)
        return start_tracking(tags=all_tags, db=db, precision=precision, first_step=first_step).start()

    def _example_inputs(self) -> Any:
        """The model's inputs for one micro-batch: a batch's first element, or a dict batch as keywords."""
        from torch.utils.data import default_collate

        collate = self.setup.collate or default_collate
        size = min(self.engine.micro_batch_size, len(self.setup.dataset))
        batch = collate([self.setup.dataset[index] for index in range(size)])
        if isinstance(batch, list | tuple) and batch:
            return batch[0]
        return batch
