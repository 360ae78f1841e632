"""``TrainingSetup``: what a user's entry point hands to ``fit()``, ``computewise tune`` and ``scaletest``.

``package.module:function(config) -> TrainingSetup``: the function builds the model, the loss, the
data and an optimizer factory; computewise decides how to run them (precision, micro-batches,
compile, loaders...). The optimizer is a factory, not an object, because whether it is fused is a
speed setting computewise chooses, and it must be built after the model is moved and wrapped.

The dataset is map-style (``len`` and ``[i]``) so the data position is one integer: a resumed run
draws exactly the samples an uninterrupted one would have.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from computewise.errors import SetupError
from computewise.specs.finetune import FineTune
from computewise.system.entrypoints import import_entry_point

__all__ = ["TrainingSetup", "load_setup"]


@dataclass
class TrainingSetup:
    """A model and its data, ready to be trained however fast computewise can make it.

    - ``model``: a ``torch.nn.Module`` on the CPU; computewise moves it to the device.
    - ``loss(model, batch) -> scalar tensor``: one micro-batch's mean loss.
    - ``dataset``: map-style (``len(dataset)``, ``dataset[i]``); ``collate`` builds a batch from a
      list of samples (torch's default collation when None).
    - ``global_batch_size``: samples per optimizer step, fixed whatever the micro-batch.
    - ``make_optimizer(parameters, fused) -> Optimizer``: ``fused`` is True when the configuration
      asks for a fused optimizer (``torch.optim.AdamW(..., fused=True)``).
    - ``make_scheduler(optimizer)``: an optional learning-rate scheduler, stepped once per step.
    - ``evaluate(model) -> float``: an optional validation metric (lower is better unless
      ``higher_is_better``), for early stopping and keeping the best checkpoint.
    - ``tokens_per_sample``: for token throughput and ``--tokens`` planning (language models).
    - ``checkpoint_blocks``: the repeated blocks activation checkpointing wraps; by default the
      modules of the model's largest ``nn.ModuleList``.
    - ``seed``: seeds the model's RNG streams and the data order.
    - ``finetune``: what trains. Full training by default; LoRA or QLoRA wraps a Hugging Face
      ``model`` with PEFT adapters (``train.lora``), freezes its base and optimizes the adapters only.
    """

    model: Any
    loss: Callable[[Any, Any], Any]
    dataset: Any
    global_batch_size: int
    make_optimizer: Callable[[Iterable[Any], bool], Any]
    collate: Callable[[list[Any]], Any] | None = None
    make_scheduler: Callable[[Any], Any] | None = None
    evaluate: Callable[[Any], float] | None = None
    higher_is_better: bool = False
    tokens_per_sample: int | None = None
    checkpoint_blocks: Sequence[Any] | None = None
    seed: int = 0
    finetune: FineTune = field(default_factory=FineTune)

    def __post_init__(self) -> None:
        if self.global_batch_size < 1:
            raise SetupError(f"global_batch_size must be >= 1, got {self.global_batch_size}")
        if not callable(self.loss) or not callable(self.make_optimizer):
            raise SetupError("TrainingSetup.loss and TrainingSetup.make_optimizer must be callables")
        try:
            size = len(self.dataset)
        except TypeError as failure:
            raise SetupError(
                "TrainingSetup.dataset must be map-style (len() and [i])",
                "wrap an iterable in a list or a torch.utils.data.TensorDataset",
            ) from failure
        if size < self.global_batch_size:
            raise SetupError(f"the dataset has {size} samples, fewer than one global batch of {self.global_batch_size}")


def load_setup(spec: str, config: Mapping[str, Any] | None = None) -> TrainingSetup:
    """Call the entry point ``spec`` with ``config`` (the user's own settings) and check its answer."""
    factory = import_entry_point(spec, "training entry point", SetupError)
    if not callable(factory):
        raise SetupError(f"training entry point {spec} is not callable", "point at a function(config) -> TrainingSetup")
    try:
        setup = factory(dict(config or {}))
    except SetupError:
        raise
    except Exception as failure:
        raise SetupError(f"training entry point {spec} raised {type(failure).__name__}: {failure}") from failure
    if not isinstance(setup, TrainingSetup):
        raise SetupError(
            f"training entry point {spec} returned {type(setup).__name__}, not a TrainingSetup",
            "return computewise.train.TrainingSetup(model=..., loss=..., dataset=..., ...)",
        )
    return setup
