"""``StepEngine``: one optimizer step of a ``TrainingSetup``, run the way a ``TrainConfig`` says.

``prepare`` turns the setup's CPU model into the module to call, in an order that matters: LoRA
adapters when the setup fine-tunes (``train.lora``: every later step sees the frozen base), move
to the device, channels-last, activation checkpointing (on the raw blocks, so state_dict keys do
not change), the caller's distributed wrapper (DDP/FSDP must see the final parameters on the
device), ``torch.compile`` last (so it compiles what will actually run), then the optimizer over
the wrapped parameters (FSDP replaces them), the scheduler, and the precision policy.

``step`` keeps the global batch fixed whatever the micro-batch: each micro-batch's mean loss is
divided by the number of micro-batches before backward, so the accumulated gradient equals the
gradient of the whole batch's mean loss. Under DDP only the last micro-batch all-reduces.

Everything here is deterministic on the CPU for a fixed seed, thread count and data order, which
is what exact resume relies on.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from computewise.errors import ConfigError, SetupError
from computewise.train.config import TrainConfig
from computewise.train.data import rank_batch_size
from computewise.train.lora import adapt
from computewise.train.precision import PrecisionPolicy
from computewise.train.setup import TrainingSetup

if TYPE_CHECKING:
    import torch
    from torch import nn

__all__ = ["StepEngine", "default_device", "find_checkpoint_blocks", "move_batch"]


def default_device() -> torch.device:
    """The GPU this process owns (``LOCAL_RANK`` under torchrun) when CUDA is present, else the CPU."""
    import torch

    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")


def find_checkpoint_blocks(setup: TrainingSetup) -> list[nn.Module]:
    """The blocks activation checkpointing wraps: the setup's own, else the model's largest ModuleList.

    The largest ``ModuleList`` is where a transformer keeps its repeated layers; checkpointing
    each of them keeps one block's activations alive at a time during backward.
    """
    from torch import nn

    blocks: list[nn.Module]
    if setup.checkpoint_blocks is not None:
        blocks = list(setup.checkpoint_blocks)
    else:
        lists: list[nn.ModuleList] = [module for module in setup.model.modules() if isinstance(module, nn.ModuleList)]
        sizes = [len(modules) for modules in lists]
        blocks = list(lists[sizes.index(max(sizes))]) if lists else []
    if not blocks:
        raise ConfigError(
            "activation_checkpointing has no blocks to checkpoint: the model has no nn.ModuleList",
            "set TrainingSetup.checkpoint_blocks to the model's repeated layers, or turn checkpointing off",
        )
    strays = [type(block).__name__ for block in blocks if not isinstance(block, nn.Module)]
    if strays:
        raise ConfigError(f"checkpoint_blocks must be nn.Modules, got {', '.join(strays)}")
    return blocks


def _checkpointed(forward: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run ``forward`` under non-reentrant checkpointing while gradients are recorded, plainly otherwise.

    Without gradients (evaluation) there is nothing to save, so checkpointing would only cost time.
    The RNG state is preserved (the default), so dropout recomputes the same mask.
    """
    import torch
    from torch.utils.checkpoint import checkpoint

    if not torch.is_grad_enabled():
        return forward(*args, **kwargs)
    return checkpoint(forward, *args, use_reentrant=False, **kwargs)


def move_batch(batch: Any, device: torch.device, *, non_blocking: bool = False, channels_last: bool = False) -> Any:
    """``batch`` (tensors, or tuples, lists and dicts of them) on ``device``; anything else unchanged.

    With ``channels_last`` the 4-D floating-point tensors (image batches) are laid out NHWC like
    the convolution weights, so the first convolution does not convert them on every step.
    """
    import torch

    if isinstance(batch, torch.Tensor):
        moved = batch.to(device, non_blocking=non_blocking)
        if channels_last and moved.dim() == 4 and moved.is_floating_point():
            moved = moved.contiguous(memory_format=torch.channels_last)
        return moved
    if isinstance(batch, Mapping):
        return {
            key: move_batch(value, device, non_blocking=non_blocking, channels_last=channels_last)
            for key, value in batch.items()
        }
    if isinstance(batch, tuple | list):
        moved_items = [
            move_batch(item, device, non_blocking=non_blocking, channels_last=channels_last) for item in batch
        ]
        return type(batch)(moved_items) if not hasattr(batch, "_fields") else type(batch)(*moved_items)
    return batch


@dataclass
class StepEngine:
    """A prepared model, optimizer, scheduler and precision policy; ``step`` runs one optimizer step.

    ``model`` is what to call (wrapped and compiled); ``raw_model`` is the same weights unwrapped,
    whose ``state_dict`` has the user's own key names. ``loss_fn(model, batch)`` is the setup's loss,
    or under ``compile_loss`` that loss compiled with the model inside it (``model`` is then the
    uncompiled wrapped module, which evaluation runs eagerly). ``micro_batch_size`` and
    ``accumulation_steps`` are per process: under DDP each rank covers ``global_batch_size /
    world_size`` samples a step.
    """

    setup: TrainingSetup
    config: TrainConfig
    device: torch.device
    model: nn.Module
    raw_model: nn.Module
    loss_fn: Callable[[Any, Any], Any]
    optimizer: torch.optim.Optimizer
    scheduler: Any
    policy: PrecisionPolicy
    micro_batch_size: int
    accumulation_steps: int
    world_size: int
    _wrapped: nn.Module

    @classmethod
    def prepare(
        cls,
        setup: TrainingSetup,
        config: TrainConfig,
        device: torch.device | str | None = None,
        wrap: Callable[[nn.Module], nn.Module] | None = None,
    ) -> StepEngine:
        """Apply ``config`` to ``setup``; ``wrap`` (DDP/FSDP) sees the model on the device, before compile.

        Every setting the model or device cannot honour is a ``ConfigError`` here, before any step.
        """
        import torch
        import torch.distributed as dist
        from torch import nn

        target = torch.device(device) if device is not None else default_device()
        if not isinstance(setup.model, nn.Module):
            raise SetupError(f"TrainingSetup.model must be a torch.nn.Module, got {type(setup.model).__name__}")
        raw_model = adapt(setup.model, setup.finetune)  # LoRA/QLoRA: the PEFT model, its base frozen
        world_size = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
        per_rank = rank_batch_size(setup.global_batch_size, world_size)
        accumulation = config.accumulation_steps(per_rank)
        policy = PrecisionPolicy.for_device(config.precision, target)
        policy.apply_tf32()

        raw_model.to(target)
        if config.channels_last:
            if not any(isinstance(module, nn.Conv2d) for module in raw_model.modules()):
                raise ConfigError(
                    "channels_last needs a CNN: the model has no nn.Conv2d layer to lay out NHWC",
                    "turn channels_last off for this model",
                )
            raw_model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        if config.activation_checkpointing:
            for block in find_checkpoint_blocks(setup):
                # An instance attribute shadows the class's forward; the module tree and its state_dict keys stay.
                block.forward = functools.partial(_checkpointed, block.forward)

        wrapped = wrap(raw_model) if wrap is not None else raw_model
        model: nn.Module = wrapped
        if config.cuda_graphs and target.type != "cuda":
            raise ConfigError(
                f"compile_mode={config.compile_mode} records CUDA graphs, and this device is {target.type}",
                "use compile_mode=default (or max-autotune-no-cudagraphs) off a CUDA GPU",
            )
        loss_fn: Callable[[Any, Any], Any] = setup.loss
        if config.compile_loss:
            # One graph from the batch to the scalar loss; the model stays uncompiled so it is not compiled twice.
            loss_fn = torch.compile(setup.loss, mode=config.compile_mode)
        elif config.compile:
            model = cast("nn.Module", torch.compile(wrapped, mode=config.compile_mode))

        optimizer = cls._build_optimizer(setup, config, wrapped, target)
        scheduler = setup.make_scheduler(optimizer) if setup.make_scheduler is not None else None
        return cls(
            setup=setup,
            config=config,
            device=target,
            model=model,
            raw_model=raw_model,
            loss_fn=loss_fn,
            optimizer=optimizer,
            scheduler=scheduler,
            policy=policy,
            micro_batch_size=per_rank // accumulation,
            accumulation_steps=accumulation,
            world_size=world_size,
            _wrapped=wrapped,
        )

    @staticmethod
    def _build_optimizer(
        setup: TrainingSetup, config: TrainConfig, wrapped: nn.Module, device: torch.device
    ) -> torch.optim.Optimizer:
        """The setup's optimizer over the wrapped trainable parameters; a fused request must really be fused."""
        import torch

        try:
            # Frozen weights (a LoRA base, layers the user froze) get no gradient, so no optimizer state either.
            trainable = (parameter for parameter in wrapped.parameters() if parameter.requires_grad)
            optimizer = setup.make_optimizer(trainable, config.fused_optimizer)
        except RuntimeError as failure:
            if not config.fused_optimizer:
                raise
            raise ConfigError(
                f"fused_optimizer is not supported for this model on {device.type}: {failure}",
                "turn fused_optimizer off",
            ) from failure
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise SetupError(f"make_optimizer returned {type(optimizer).__name__}, not a torch.optim.Optimizer")
        if config.fused_optimizer and not optimizer.defaults.get("fused"):
            raise ConfigError(
                f"fused_optimizer=True but make_optimizer built a non-fused {type(optimizer).__name__}",
                "pass the `fused` argument on, e.g. torch.optim.AdamW(params, fused=fused)",
            )
        return optimizer

    @property
    def global_batch_size(self) -> int:
        return self.setup.global_batch_size

    def to_device(self, batch: Any) -> Any:
        """``batch`` on the engine's device, copied asynchronously when it comes from pinned memory."""
        return move_batch(
            batch,
            self.device,
            non_blocking=self.config.pin_memory and self.device.type == "cuda",
            channels_last=self.config.channels_last,
        )

    def _gradient_sync(self, last: bool) -> contextlib.AbstractContextManager[Any]:
        """Gradient sync only on the last micro-batch: one all-reduce (or reduce-scatter) per step, not per micro-batch.

        DDP has ``no_sync()``; FSDP2 modules instead take ``set_requires_gradient_sync(flag)``, set
        before every micro-batch so the last one syncs again.
        """
        set_sync = getattr(self._wrapped, "set_requires_gradient_sync", None)
        if set_sync is not None:
            set_sync(last)
            return contextlib.nullcontext()
        no_sync = getattr(self._wrapped, "no_sync", None)
        if last or no_sync is None:
            return contextlib.nullcontext()
        context: contextlib.AbstractContextManager[Any] = no_sync()
        return context

    def step(self, micro_batches: Sequence[Any]) -> float:
        """One optimizer step over ``micro_batches`` (normally ``accumulation_steps`` of them); the mean loss.

        The returned loss is the mean of the micro-batches' unscaled losses, i.e. the global
        batch's mean loss on this rank.
        """
        import torch

        if not micro_batches:
            raise ValueError("StepEngine.step needs at least one micro-batch")
        scaler = self.policy.scaler
        count = len(micro_batches)
        self.model.train()
        if self.config.cuda_graphs:
            self._own_gradients()
        else:
            self.optimizer.zero_grad(set_to_none=True)
        losses = []
        for index, batch in enumerate(micro_batches):
            if self.config.cuda_graphs:
                # Each micro-batch is a new replay: the graphs may reuse the previous one's buffers.
                torch.compiler.cudagraph_mark_step_begin()  # type: ignore[no-untyped-call]
            with self._gradient_sync(last=index == count - 1):
                with self.policy.autocast():
                    loss = self.loss_fn(self.model, self.to_device(batch))
                scaled = loss / count
                (scaler.scale(scaled) if scaler is not None else scaled).backward()
            # A copy: under CUDA graphs the next micro-batch's replay may reuse an output's memory.
            losses.append(loss.detach().float().clone())
        if self.config.grad_clip_norm is not None:
            if scaler is not None:
                scaler.unscale_(self.optimizer)
            self._clip(self.config.grad_clip_norm)
        stepped = True
        if scaler is not None:
            scale_before = scaler.get_scale()
            scaler.step(self.optimizer)
            scaler.update()
            # The scaler skips the update (and lowers the scale) when gradients overflowed.
            stepped = scaler.get_scale() >= scale_before
        else:
            self.optimizer.step()
        if self.scheduler is not None and stepped:
            self.scheduler.step()
        return float(torch.stack(losses).mean())

    def _own_gradients(self) -> None:
        """Zeroed gradients allocated once outside the CUDA graphs' memory pool.

        A gradient left for autograd to create is the backward graph's output buffer itself, which
        the next micro-batch's replay overwrites ("accessing tensor output of CUDAGraphs that has
        been overwritten", seen on an H200 with GPT-2 at two micro-batches a step). A gradient that
        already exists is accumulated into in place instead.
        """
        import torch

        for group in self.optimizer.param_groups:
            for parameter in group["params"]:
                if parameter.requires_grad and parameter.grad is None:
                    parameter.grad = torch.zeros_like(parameter)
        self.optimizer.zero_grad(set_to_none=False)

    def _clip(self, max_norm: float) -> None:
        """Clip the global gradient norm; FSDP computes it across shards with its own method."""
        import torch

        own_clip = getattr(self._wrapped, "clip_grad_norm_", None)
        if own_clip is not None:
            own_clip(max_norm)
        else:
            torch.nn.utils.clip_grad_norm_(self._wrapped.parameters(), max_norm)

    def state_dict(self) -> dict[str, Any]:
        """Everything a step changes: weights, optimizer moments, scheduler position, loss scale."""
        scaler = self.policy.scaler
        return {
            "model": self.raw_model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict() if self.scheduler is not None else None,
            "scaler": scaler.state_dict() if scaler is not None else None,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what ``state_dict`` saved, into this engine's (already prepared) objects."""
        self.raw_model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.scheduler is not None and state.get("scheduler") is not None:
            self.scheduler.load_state_dict(state["scheduler"])
        scaler = self.policy.scaler
        if scaler is not None and state.get("scaler") is not None:
            scaler.load_state_dict(state["scaler"])
