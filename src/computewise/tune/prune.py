"""Which configurations can fit, decided from a meta-device trace before any trial runs.

A trial that runs out of memory costs a process start, a model build and often a compilation;
the estimate costs one trace. So the model's loss is traced once on the meta device
(``computewise.models.trace``: no data, no real memory) and every configuration's memory is
predicted with the planner's formulas (``computewise.estimate.memory``):

- **Model states**: the weights stay FP32 under autocast (they are the master copy), so weights,
  gradients and optimizer states are those of FP32 training whatever the precision, plus the
  16-bit copies of the weights autocast caches for BF16/FP16 (2 bytes a parameter).
- **Activations**: what autograd saves for backward, measured per sample by the trace, times the
  micro-batch, halved for BF16/FP16 (the estimate module's scaling of traced activations).
- **LoRA and QLoRA** (the setup's ``finetune``): the model states are ``estimate.adapters``' as
  ``estimate train --method lora`` counts them (``Adapters.of``): the frozen base at its storage
  width (the model's own dtype, 4 bits for QLoRA's linear layers), the adapters with their
  gradients and optimizer states; under 16-bit autocast, one 16-bit copy of every weight, which
  autograd keeps for the input gradients of the frozen layers. The activations are the traced full
  model's: the frozen layers still save what the adapters' gradients need (``estimate.adapters``).
- **Checkpointing**: each block's share is measured by tracing the block alone on the inputs it
  received in the full trace; with checkpointing a block keeps only its input, and during
  backward one block at a time is rebuilt, so the saved total becomes
  ``outside the blocks + the block inputs + the largest block``.
- **Overhead**: the catalog's allocator fraction, plus its fixed CUDA context on a GPU.

Configurations whose estimate exceeds the device (the GPU's memory, the host's available RAM, or
``--memory``) are dropped. So is checkpointing where the same settings fit without it: it only
recomputes, so it never makes a step faster at the same micro-batch. When nothing fits, the
error gives the smallest requirement and the largest micro-batch that would fit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from computewise.errors import ComputewiseError, ConfigError, InputError, ModelConfigError, NothingFitsError, SetupError
from computewise.estimate.adapters import Adapters
from computewise.estimate.arrays import col
from computewise.estimate.assumptions import Assumptions
from computewise.estimate.memory import bytes_per_value, model_state_bytes, optimizer_bytes_per_param
from computewise.models.hf_config import from_hf_config
from computewise.models.trace import measure_module
from computewise.specs import FineTune, ModelSpec, Optimizer
from computewise.specs.codec import Jsonable, Layout, json_property
from computewise.specs.finetune import FULL_TRAINING
from computewise.train.config import TrainConfig
from computewise.train.setup import TrainingSetup
from computewise.tune.space import DeviceKind, ModelFacts
from computewise.tune.trial import with_lora_rank
from computewise.units import format_bytes

__all__ = [
    "Capacity",
    "MemoryEstimate",
    "ModelProfile",
    "Pruning",
    "device_capacity",
    "estimate_memory",
    "profile_setup",
    "prune",
]

_TRACE_BATCH = 2  # per-sample figures scale linearly; two samples keep batch-norm statistics meaningful
_AUTOCAST_COPY_BYTES = 2.0  # autocast caches one 16-bit copy of each weight a matmul uses


@dataclass(frozen=True)
class ModelProfile(Jsonable):
    """What one trace of the setup's loss says about its memory and work, per sample.

    Its JSON (``tune --json``'s ``model``) is the trace's figures; what the setup fine-tunes and the shape
    its adapters are counted on stay out of it.
    """

    json_layout: ClassVar[Layout] = (
        "name",
        "params",
        "optimizer",
        "activation_bytes_per_sample",
        "checkpointed_activation_bytes_per_sample",
        "forward_flops_per_sample",
        "has_convolutions",
        "global_batch_size",
        "tokens_per_sample",
        "notes",
    )

    name: str
    params: int
    optimizer: Optimizer
    activation_bytes_per_sample: float  # FP32, no checkpointing
    checkpointed_activation_bytes_per_sample: float | None  # None: the model has no blocks to checkpoint
    forward_flops_per_sample: float | None  # causal-aware, as computewise.track counts; None: not traced
    has_convolutions: bool
    global_batch_size: int
    tokens_per_sample: int | None
    notes: tuple[str, ...] = ()
    finetune: FineTune = FULL_TRAINING  # what the setup trains; LoRA/QLoRA states come from ``adapters``
    spec: ModelSpec | None = field(default=None, compare=False)  # the Hugging Face config's shape, LoRA only
    base_bytes: float = 4.0  # bytes per value of the model's weights as the setup built them
    adapters: Adapters | None = field(default=None, compare=False)

    @property
    def facts(self) -> ModelFacts:
        return ModelFacts(
            has_convolutions=self.has_convolutions,
            has_blocks=self.checkpointed_activation_bytes_per_sample is not None,
            global_batch_size=self.global_batch_size,
        )

    def with_rank(self, rank: int) -> ModelProfile:
        """The profile of the same setup with LoRA adapters of ``rank`` (alpha / rank kept): a rank search's trial.

        The rank is checked against the model's layers here (``Adapters.of``), before any trial runs.
        """
        if not self.finetune.adapted:
            raise InputError(
                "a LoRA rank search needs a setup that fine-tunes with LoRA or QLoRA, and this one trains every "
                "weight (method full)",
                "set TrainingSetup(finetune=FineTune(method='lora', ...)) in the entry point, or drop --lora-ranks",
            )
        return _with_adapters(replace(self, finetune=with_lora_rank(self.finetune, rank)))


def _with_adapters(profile: ModelProfile) -> ModelProfile:
    """``profile`` with its LoRA/QLoRA adapters counted on its Hugging Face shape (None for full training)."""
    if profile.spec is None or not profile.finetune.adapted:
        return profile
    return replace(profile, adapters=Adapters.of(profile.spec, profile.finetune, profile.optimizer))


@dataclass(frozen=True)
class MemoryEstimate(Jsonable):
    """Predicted peak bytes of one configuration on one device."""

    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    overhead_bytes: float

    @json_property()
    def total_bytes(self) -> float:
        return (
            self.weights_bytes
            + self.gradients_bytes
            + self.optimizer_bytes
            + self.activations_bytes
            + self.overhead_bytes
        )


@dataclass(frozen=True)
class Capacity:
    """The memory a configuration may use, and where that figure came from."""

    bytes: float
    source: str


@dataclass(frozen=True)
class Pruning:
    """Configurations kept (with their estimates) and dropped (with the reason), in the space's order."""

    kept: tuple[tuple[TrainConfig, MemoryEstimate], ...]
    dropped: tuple[tuple[TrainConfig, MemoryEstimate, str], ...]


def profile_setup(setup: TrainingSetup) -> ModelProfile:
    """Trace ``setup.loss`` on two samples of its dataset, on the meta device; the model is not touched."""
    import torch
    from torch import nn
    from torch.utils.data import default_collate

    from computewise.train.engine import find_checkpoint_blocks

    model = setup.model
    if not isinstance(model, nn.Module):
        raise SetupError(f"TrainingSetup.model must be a torch.nn.Module, got {type(model).__name__}")
    samples = min(_TRACE_BATCH, len(setup.dataset))
    batch = (setup.collate or default_collate)([setup.dataset[index] for index in range(samples)])
    try:
        blocks = find_checkpoint_blocks(setup)
    except ConfigError:
        blocks = []
    block_inputs: dict[int, tuple[Any, ...]] = {}

    def remember_input(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        # Only positional tensor inputs can be replayed on one block alone; keyword inputs disable the split.
        block_inputs.setdefault(id(module), args if not kwargs else ())

    hooks = [block.register_forward_pre_hook(remember_input, with_kwargs=True) for block in blocks]
    notes: list[str] = []
    optimizer, optimizer_note = _optimizer_kind(setup, model)
    if optimizer_note:
        notes.append(optimizer_note)
    # What is known without a trace: the model states bound the memory from below, trials find the rest.
    untraced = ModelProfile(
        name=type(model).__name__,
        params=sum(p.numel() for p in {id(p): p for p in model.parameters()}.values()),
        optimizer=optimizer,
        activation_bytes_per_sample=0.0,
        checkpointed_activation_bytes_per_sample=0.0 if blocks else None,
        forward_flops_per_sample=None,
        has_convolutions=any(isinstance(module, torch.nn.Conv2d) for module in model.modules()),
        global_batch_size=setup.global_batch_size,
        tokens_per_sample=setup.tokens_per_sample,
        finetune=setup.finetune,
        spec=_hf_spec(model, setup.finetune, notes),
        base_bytes=float(max((p.element_size() for p in model.parameters() if p.is_floating_point()), default=4)),
    )
    untraced = _with_adapters(untraced)
    try:
        measured = measure_module(_loss_module(model, setup.loss), (batch,))
    except ModelConfigError as failure:  # measurement degrades; the search goes on
        notes.append(
            f"the loss could not be traced ({failure.message}): memory is estimated from the model states alone "
            "and MFU is not computed"
        )
        return replace(untraced, notes=tuple(notes))
    finally:
        for hook in hooks:
            hook.remove()
    checkpointed = _checkpointed_activation_bytes(blocks, block_inputs, measured.activation_bytes, notes)
    per_sample = 1.0 / measured.batch_size
    return replace(
        untraced,
        params=measured.params,
        activation_bytes_per_sample=measured.activation_bytes * per_sample,
        checkpointed_activation_bytes_per_sample=None if checkpointed is None else checkpointed * per_sample,
        forward_flops_per_sample=measured.forward_flops_causal_aware * per_sample,
        notes=tuple(notes),
    )


def _hf_spec(model: Any, finetune: FineTune, notes: list[str]) -> ModelSpec | None:
    """The shape ``estimate.adapters`` counts a LoRA setup's adapters on: the model's Hugging Face config."""
    if not finetune.adapted:
        return None
    config = getattr(model, "config", None)
    try:
        if not hasattr(config, "to_dict"):
            raise ModelConfigError("the model has no Hugging Face config")
        return from_hf_config(config.to_dict())  # type: ignore[union-attr]
    except ComputewiseError as failure:
        notes.append(
            f"{finetune.method} memory estimated as full training ({failure.message}): the adapters are counted "
            "on a Hugging Face config"
        )
        return None


def _loss_module(model: Any, loss: Any) -> Any:
    """The model and its loss as one module, so the trace sees the loss's activations (the logits) too."""
    from torch import nn

    class LossOf(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, batch: Any) -> Any:
            return loss(self.model, batch)

    return LossOf()


def _checkpointed_activation_bytes(
    blocks: Sequence[Any], block_inputs: dict[int, tuple[Any, ...]], total_bytes: float, notes: list[str]
) -> float | None:
    """Saved bytes with every block checkpointed: outside the blocks + their inputs + the largest block."""
    if not blocks:
        return None
    inside: list[float] = []
    kept_inputs = 0.0
    for block in blocks:
        inputs = block_inputs.get(id(block), ())
        tensors = [value for value in inputs if hasattr(value, "untyped_storage")]
        if not inputs or len(tensors) != len(inputs):
            notes.append("checkpointing saving not estimated (a block takes keyword or non-tensor inputs)")
            return total_bytes
        try:
            inside.append(float(measure_module(block, tuple(inputs)).activation_bytes))
        except ModelConfigError as failure:
            notes.append(f"checkpointing saving not estimated: a block alone cannot be traced ({failure.message})")
            return total_bytes
        kept_inputs += sum(float(t.numel() * t.element_size()) for t in tensors)
    outside = max(0.0, total_bytes - sum(inside))
    return min(total_bytes, outside + kept_inputs + max(inside))


def _optimizer_kind(setup: TrainingSetup, model: Any) -> tuple[Optimizer, str | None]:
    """The optimizer-state size class of the setup's optimizer (built, never stepped, so no state is allocated)."""
    try:
        optimizer = setup.make_optimizer(list(model.parameters()), False)
    except Exception as failure:  # the trials will report it properly; memory assumes Adam's two moments
        return "adamw", f"optimizer not inspected ({type(failure).__name__}: {failure}); assumed AdamW's state"
    name = type(optimizer).__name__.lower()
    if name in ("adamw", "adam"):
        return "adamw", None
    if name == "sgd":
        return "sgd", None
    return "adamw", f"optimizer {type(optimizer).__name__} sized like AdamW (two FP32 moments per parameter)"


def estimate_memory(
    profile: ModelProfile, config: TrainConfig, device: DeviceKind, assumptions: Assumptions
) -> MemoryEstimate:
    """Predicted peak memory of one training step of ``config`` (formulas in the module docstring)."""
    weights, gradients, optimizer = _state_bytes(profile)
    if config.precision in ("bf16", "fp16"):
        weights += _autocast_copied_params(profile) * _AUTOCAST_COPY_BYTES
    activations = _activation_bytes(profile, config)
    subtotal = weights + gradients + optimizer + activations
    fixed = assumptions.runtime_overhead_bytes if device == "cuda" else 0.0
    overhead = subtotal * assumptions.runtime_overhead_fraction + fixed
    return MemoryEstimate(weights, gradients, optimizer, activations, overhead)


def _state_bytes(profile: ModelProfile) -> tuple[float, float, float]:
    """Weights, gradients and optimizer states: FP32 training's, or a LoRA setup's frozen base and adapters."""
    adapters = profile.adapters
    if adapters is not None and profile.spec is not None:
        width = col(profile.base_bytes)
        trained = _scalar(adapters.trainable_bytes(width))
        frozen = _scalar(adapters.frozen_bytes(profile.spec, width))
        return frozen + trained, trained, _scalar(adapters.optimizer_bytes(width))
    weights, gradients, optimizer = (
        _scalar(value)
        for value in model_state_bytes(
            float(profile.params),
            col(bytes_per_value("fp32")),
            col(optimizer_bytes_per_param(profile.optimizer, "fp32")),
            tp=col(1.0),
            pp=col(1.0),
            dp=col(1.0),
            zero=col(0.0),
        )
    )
    return weights, gradients, optimizer


def _autocast_copied_params(profile: ModelProfile) -> float:
    """Weights autocast keeps a 16-bit copy of: every weight of FP32 training (its cache); under LoRA the
    fp32 adapters (cached, they need a gradient) and a wider-than-16-bit base (each frozen matrix's cast is
    saved for its input gradient)."""
    adapters = profile.adapters
    if adapters is None:
        return float(profile.params)
    wide_adapters = adapters.trainable_params if adapters.finetune.adapter_bytes > _AUTOCAST_COPY_BYTES else 0.0
    return wide_adapters + (profile.params if profile.base_bytes > _AUTOCAST_COPY_BYTES else 0.0)


def _scalar(value: Any) -> float:
    return float(col(value).reshape(-1)[0])


def device_capacity(device: DeviceKind, cap_bytes: float | None) -> Capacity:
    """``--memory`` when given, else the GPU's total memory, else the host's available RAM."""
    if cap_bytes is not None:
        return Capacity(cap_bytes, f"--memory {format_bytes(cap_bytes)}")
    if device == "cuda":
        import torch

        properties = torch.cuda.get_device_properties(0)
        return Capacity(float(properties.total_memory), f"{properties.name} total memory")
    import psutil

    return Capacity(float(psutil.virtual_memory().available), "available host memory")


def prune(
    configs: Sequence[TrainConfig],
    profile: ModelProfile,
    capacity: Capacity,
    device: DeviceKind,
    assumptions: Assumptions,
) -> Pruning:
    """Drop what cannot fit and checkpointing that buys nothing; NothingFitsError when nothing is left."""
    estimates = [(config, estimate_memory(profile, config, device, assumptions)) for config in configs]
    fitting = {config for config, estimate in estimates if estimate.total_bytes <= capacity.bytes}
    kept: list[tuple[TrainConfig, MemoryEstimate]] = []
    dropped: list[tuple[TrainConfig, MemoryEstimate, str]] = []
    for config, estimate in estimates:
        if config not in fitting:
            dropped.append(
                (config, estimate, f"needs {format_bytes(estimate.total_bytes)} of {format_bytes(capacity.bytes)}")
            )
        elif config.activation_checkpointing and replace(config, activation_checkpointing=False) in fitting:
            dropped.append((config, estimate, "checkpointing only recomputes: the same settings fit without it"))
        else:
            kept.append((config, estimate))
    if not kept:
        raise _nothing_fits(configs, profile, capacity, device, assumptions, estimates)
    return Pruning(tuple(kept), tuple(dropped))


def _nothing_fits(
    configs: Sequence[TrainConfig],
    profile: ModelProfile,
    capacity: Capacity,
    device: DeviceKind,
    assumptions: Assumptions,
    estimates: Sequence[tuple[TrainConfig, MemoryEstimate]],
) -> NothingFitsError:
    """The error naming the smallest requirement and the largest micro-batch (any divisor) that would fit."""
    smallest_config, smallest = min(estimates, key=lambda pair: pair[1].total_bytes)
    global_batch = profile.global_batch_size
    # The leanest settings the space allows, at every micro-batch dividing the global batch.
    lean = replace(smallest_config, micro_batch_size=1)
    fitting_micro = [
        micro
        for micro in range(1, global_batch + 1)
        if global_batch % micro == 0
        and estimate_memory(profile, replace(lean, micro_batch_size=micro), device, assumptions).total_bytes
        <= capacity.bytes
    ]
    message = (
        f"every configuration of the search space runs out of memory: {len(configs)} estimated, the smallest "
        f"({smallest_config.describe()}) needs {format_bytes(smallest.total_bytes)} of the "
        f"{format_bytes(capacity.bytes)} available ({capacity.source})"
    )
    if fitting_micro:
        largest = max(fitting_micro)
        needed = estimate_memory(profile, replace(lean, micro_batch_size=largest), device, assumptions).total_bytes
        hint = (
            f"the largest micro-batch that would fit is {largest} ({format_bytes(needed)}): "
            f"add micro={largest} to --space, or raise --memory"
        )
    else:
        at_one = estimate_memory(profile, lean, device, assumptions)
        states = at_one.weights_bytes + at_one.gradients_bytes + at_one.optimizer_bytes
        hint = (
            f"even a micro-batch of 1 needs {format_bytes(at_one.total_bytes)} (the weights, gradients and optimizer "
            f"states alone take {format_bytes(states)}): use a device with more memory, raise --memory, "
            "or shrink the model"
        )
    return NothingFitsError(message, hint)


def _activation_bytes(profile: ModelProfile, config: TrainConfig) -> float:
    """Saved activations of one micro-batch: traced FP32 bytes per sample, halved for 16-bit autocast."""
    micro = config.micro_batch_size or profile.global_batch_size
    per_sample = profile.activation_bytes_per_sample
    if config.activation_checkpointing and profile.checkpointed_activation_bytes_per_sample is not None:
        per_sample = profile.checkpointed_activation_bytes_per_sample
    low_precision = config.precision in ("bf16", "fp16")
    scale = bytes_per_value("bf16") / bytes_per_value("fp32") if low_precision else 1.0
    return per_sample * micro * scale
