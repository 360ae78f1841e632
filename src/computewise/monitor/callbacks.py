"""Callbacks that track PyTorch Lightning and Hugging Face ``Trainer`` runs the way ``track()`` does.

Neither library is a dependency of computewise, yet each callback must subclass the library's own
base class (Lightning checks callbacks are its ``Callback``; the Hugging Face trainer calls every
event on every callback, which ``TrainerCallback`` answers with no-ops). So the hooks live in
plain mixins here, and the public classes are built from them on first access, through this
module's ``__getattr__``: importing this module imports neither library.

    from computewise.monitor.callbacks import ComputewiseHFCallback
    trainer = Trainer(..., callbacks=[ComputewiseHFCallback(tags={"team": "nlp"}, flops_per_step=...)])

Where a step's time goes:

- **Lightning**: every training batch is a step. Compute runs from ``on_train_batch_start`` to
  ``on_train_batch_end``; the time from one batch's end to the next one's start (fetching it,
  moving it to the device) is data wait. Epoch starts and the end of validation restart the wait
  clock, so validation is counted as neither.
- **Hugging Face**: every optimizer step is a step (all of its gradient-accumulation
  micro-batches). The trainer fetches those micro-batches before ``on_step_begin``, so the time
  from ``on_step_end`` to the next ``on_step_begin`` is data wait; logging, evaluation and
  checkpoints restart the wait clock. Samples per step are nominal (per-device batch size x
  accumulation steps); tokens come from the trainer's counter when
  ``include_num_input_tokens_seen`` is on.

The keyword arguments are ``track()``'s and are checked when the callback is made; only the main
process (global rank 0) records a run. ``callback.tracker`` is the running or last tracker.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

from computewise.errors import MissingExtraError
from computewise.monitor.batches import Count, count_batch
from computewise.monitor.track import Tracker, track

# ComputewiseHFCallback and ComputewiseLightningCallback are made on first access (``__getattr__``);
# they stay out of __all__ so that a star import needs neither library.
__all__ = ["HFHooks", "LightningHooks"]


class _Hooks:
    """What both callbacks share: a tracker template checked at construction, one run per training."""

    def __init__(self, **track_kwargs: Any) -> None:
        super().__init__()
        self._template = track(**track_kwargs)
        self.tracker: Tracker | None = None

    def summary(self) -> dict[str, Any] | None:
        """The summary of the running or last tracked training (None before any)."""
        return self.tracker.summary() if self.tracker is not None else None

    def _start(self) -> None:
        self.tracker = self._template.fresh().start()
        self.tracker.begin_wait()

    def _finish(self, error: BaseException | None = None) -> None:
        if self.tracker is not None:
            self.tracker.finish(error)


class LightningHooks(_Hooks):
    """The hooks of ``ComputewiseLightningCallback``; ``samples``/``tokens`` count each batch as in ``t.loader``."""

    def __init__(self, *, samples: Count = None, tokens: Count = None, **track_kwargs: Any) -> None:
        super().__init__(**track_kwargs)
        self._samples = samples
        self._tokens = tokens

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        if trainer.is_global_zero:
            self._start()

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        if self.tracker is not None:
            self.tracker.begin_wait()

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if self.tracker is not None:
            self.tracker.begin_step(
                samples=count_batch(self._samples, batch, infer_samples=True),
                tokens=count_batch(self._tokens, batch, infer_samples=False),
            )

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.tracker is not None:
            self.tracker.end_step()

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if self.tracker is not None:
            self.tracker.begin_wait()

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self._finish()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._finish(exception)


class HFHooks(_Hooks):
    """The hooks of ``ComputewiseHFCallback``; ``samples`` overrides the nominal samples per step."""

    def __init__(self, *, samples: int | None = None, **track_kwargs: Any) -> None:
        super().__init__(**track_kwargs)
        self._samples = samples
        self._tokens_seen = 0

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.is_world_process_zero:
            self._start()
            self._tokens_seen = int(state.num_input_tokens_seen)

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.tracker is not None:
            nominal = args.per_device_train_batch_size * args.gradient_accumulation_steps
            self.tracker.begin_step(samples=self._samples if self._samples is not None else nominal)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.tracker is not None:
            seen = int(state.num_input_tokens_seen)
            tokens = seen - self._tokens_seen if seen > self._tokens_seen else None
            self._tokens_seen = seen
            self.tracker.end_step(tokens=tokens)

    def on_log(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._restart_wait()

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._restart_wait()

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._restart_wait()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._finish()

    def _restart_wait(self) -> None:
        if self.tracker is not None:
            self.tracker.begin_wait()


def __getattr__(name: str) -> Any:
    if name == "ComputewiseLightningCallback":
        return _lightning_callback()
    if name == "ComputewiseHFCallback":
        return _hf_callback()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@functools.cache
def _lightning_callback() -> type:
    base = _first_base((("lightning.pytorch", "Callback"), ("pytorch_lightning", "Callback")))
    if base is None:
        raise MissingExtraError("lightning", "lightning", "ComputewiseLightningCallback")
    return _subclass("ComputewiseLightningCallback", LightningHooks, base)


@functools.cache
def _hf_callback() -> type:
    base = _first_base((("transformers", "TrainerCallback"),))
    if base is None:
        raise MissingExtraError("transformers", "hf", "ComputewiseHFCallback")
    return _subclass("ComputewiseHFCallback", HFHooks, base)


def _first_base(candidates: tuple[tuple[str, str], ...]) -> type | None:
    for module_name, class_name in candidates:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        base: type = getattr(module, class_name)
        return base
    return None


def _subclass(name: str, hooks: type, base: type) -> type:
    return type(name, (hooks, base), {"__module__": __name__, "__qualname__": name, "__doc__": hooks.__doc__})
