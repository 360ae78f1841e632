"""The search space of ``computewise tune``: which values of each speed setting to try.

Eight dimensions, each a short tuple of choices: precision, micro-batch size (accumulation keeps
the global batch fixed), activation checkpointing, ``torch.compile`` and its modes, whether it
compiles the loss with the model (so the cross-entropy fuses), channels-last, data-loader workers
and the fused optimizer. Defaults come from the device: a GPU tries FP32, TF32
(FP32 matmuls on tensor cores), BF16 and FP16 where it has them, and compiles in the default mode,
``reduce-overhead`` (CUDA graphs) and ``max-autotune``; a CPU tries FP32, and BF16 only when it
computes BF16 natively (AVX512-BF16 or AMX), since emulated BF16 is slower than FP32 and would only
cost trials, and compiles in the default mode only: what is skipped there is said in the notes.
Without ``micro=`` the micro-batch is found by growing it (``growth``), not from a fixed list.

The user narrows or widens it with one string, ``"precision=fp32,bf16;micro=8,16,32;compile=on,off"``;
dimensions not named keep their defaults. A space that cannot be run as asked is refused before
any trial, naming the settings that contradict: FP16 or TF32 on a CPU, channels-last or
checkpointing forced on for a model that has no convolution or no repeated blocks, micro-batches
none of which divide the global batch. Where a dimension keeps other choices, the impossible one
is dropped with a note instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from itertools import product
from typing import ClassVar, Literal, cast, get_args

from computewise.errors import SpaceError
from computewise.specs.codec import Jsonable, Layout, json_field
from computewise.system.hardware import Hardware
from computewise.train.config import CompileMode, TrainConfig
from computewise.train.precision import Precision

__all__ = ["DIMENSIONS", "DeviceKind", "ModelFacts", "SearchSpace", "default_space", "parse_space"]

DeviceKind = Literal["cpu", "cuda"]

# Names accepted in --space for each dimension (the first is the canonical one).
DIMENSIONS: dict[str, tuple[str, ...]] = {
    "precision": ("precision", "precisions"),
    "micro": ("micro", "micro_batch", "micro_batch_size", "micro_batch_sizes"),
    "checkpointing": ("checkpointing", "activation_checkpointing", "ckpt"),
    "compile": ("compile", "compile_mode", "compile_modes"),
    "compile_loss": ("compile_loss", "loss"),
    "channels_last": ("channels_last",),
    "workers": ("workers", "loader_workers"),
    "fused": ("fused", "fused_optimizer"),
}
_ALIASES = {alias: name for name, aliases in DIMENSIONS.items() for alias in aliases}
_ON = ("on", "true", "yes", "1")
_OFF = ("off", "false", "no", "0")
# Smaller micro-batches than global/32 only add accumulation steps; the memory pruner already
# finds the largest one that fits, so the default tries the six largest power-of-two divisors.
_DEFAULT_MICRO_CHOICES = 6
_MAX_DEFAULT_WORKERS = 4
_EXAMPLE = "precision=fp32,bf16;micro=8,16,32;compile=on,off"
# compile=on is torch.compile's default mode; the other modes are named as torch.compile names them.
_COMPILE_MODES: tuple[CompileMode, ...] = get_args(CompileMode)
_CUDA_MODES: tuple[CompileMode, ...] = ("default", "reduce-overhead", "max-autotune")
_GRAPHS_OFF_CUDA = "CUDA graphs are recorded on NVIDIA GPUs only"


@dataclass(frozen=True)
class ModelFacts:
    """What the space must know about the model to rule out impossible settings."""

    has_convolutions: bool
    has_blocks: bool
    global_batch_size: int


@dataclass(frozen=True)
class SearchSpace(Jsonable):
    """The choices per dimension; ``micro_batch_sizes`` None means the micro-batch is grown (``growth``).

    The grid compiles in the first of ``compile_modes``, and compiles the loss with the model as
    the first of ``compile_loss`` says; the other choices of both are tried on the winner only
    (``search``), where their compilation can pay for itself. Its JSON names each dimension as
    ``--space`` does, the compile modes beside ``compile``.
    """

    json_layout: ClassVar[Layout] = (
        "device",
        "precisions",
        "micro_batch_sizes",
        "activation_checkpointing",
        "compile",
        "compile_modes",
        "compile_loss",
        "channels_last",
        "loader_workers",
        "fused_optimizer",
        "notes",
    )

    device: DeviceKind
    precisions: tuple[Precision, ...] = field(metadata=json_field(name="precision"))
    micro_batch_sizes: tuple[int, ...] | None = field(metadata=json_field(name="micro"))
    activation_checkpointing: tuple[bool, ...] = field(metadata=json_field(name="checkpointing"))
    compile: tuple[bool, ...]
    channels_last: tuple[bool, ...]
    loader_workers: tuple[int, ...] = field(metadata=json_field(name="workers"))
    fused_optimizer: tuple[bool, ...] = field(metadata=json_field(name="fused"))
    compile_modes: tuple[CompileMode, ...] = ("default",)
    compile_loss: tuple[bool, ...] = (False,)
    notes: tuple[str, ...] = ()

    def micro_choices(self, global_batch_size: int) -> tuple[int, ...]:
        """The micro-batch sizes tried: the given ones that divide the global batch, or the default divisors."""
        if self.micro_batch_sizes is None:
            divisors = [size for size in _powers_of_two(global_batch_size) if global_batch_size % size == 0]
            if global_batch_size not in divisors:
                divisors.append(global_batch_size)
            return tuple(sorted(divisors)[-_DEFAULT_MICRO_CHOICES:])
        return tuple(size for size in self.micro_batch_sizes if global_batch_size % size == 0)

    def for_model(self, facts: ModelFacts) -> SearchSpace:
        """This space with what the model cannot run removed; SpaceError where nothing would be left."""
        notes = list(self.notes)
        global_batch = facts.global_batch_size
        if self.micro_batch_sizes is not None:
            kept = self.micro_choices(global_batch)
            dropped = [size for size in self.micro_batch_sizes if size not in kept]
            if not kept:
                divisors = [size for size in range(1, global_batch + 1) if global_batch % size == 0]
                raise SpaceError(
                    f"micro={','.join(map(str, self.micro_batch_sizes))} contradicts the global batch of "
                    f"{global_batch}: none of them divides it, so accumulation could not keep the batch fixed",
                    f"use divisors of {global_batch}: {','.join(map(str, divisors))}",
                )
            if dropped:
                notes.append(f"micro={','.join(map(str, dropped))} dropped: not a divisor of the global batch")
        channels_last = _drop_impossible(
            self.channels_last,
            possible=facts.has_convolutions,
            setting="channels_last=on",
            reason="the model has no convolution (channels-last only changes the layout of Conv2d inputs)",
            hint="drop channels_last from --space, or tune a CNN",
            notes=notes,
        )
        checkpointing = _drop_impossible(
            self.activation_checkpointing,
            possible=facts.has_blocks,
            setting="checkpointing=on",
            reason="the model has no repeated blocks to checkpoint (no nn.ModuleList, no checkpoint_blocks)",
            hint="drop checkpointing from --space, or set TrainingSetup.checkpoint_blocks",
            notes=notes,
        )
        return replace(self, channels_last=channels_last, activation_checkpointing=checkpointing, notes=tuple(notes))

    def configs(self, global_batch_size: int) -> list[TrainConfig]:
        """Every combination, as configurations the engine runs (pinned memory on CUDA, kept workers)."""
        configs = []
        for precision, micro, checkpointing, compiled, channels_last, workers, fused in product(
            self.precisions,
            self.micro_choices(global_batch_size),
            self.activation_checkpointing,
            self.compile,
            self.channels_last,
            self.loader_workers,
            self.fused_optimizer,
        ):
            configs.append(
                TrainConfig(
                    precision=precision,
                    micro_batch_size=micro,
                    activation_checkpointing=checkpointing,
                    compile=compiled,
                    compile_mode=self.compile_modes[0] if compiled else "default",
                    compile_loss=compiled and self.compile_loss[0],
                    channels_last=channels_last,
                    fused_optimizer=fused,
                    loader_workers=workers,
                    # Pinned pages make host-to-GPU copies asynchronous; on a CPU there is nothing to copy.
                    pin_memory=self.device == "cuda",
                    # Workers started once per run, not once per epoch: respawning them stalls the first steps.
                    persistent_workers=workers > 0,
                )
            )
        return configs


def default_space(
    device: DeviceKind, hardware: Hardware, *, cuda_capability: tuple[int, int] | None = None
) -> SearchSpace:
    """The space tried when the user names no dimension, from what this device runs fast.

    CUDA: FP32, then TF32 and BF16 from Ampere (compute capability 8.0) on, and FP16 everywhere.
    CPU: FP32, plus BF16 where the CPU has native BF16 arithmetic. Loader workers: none, or half
    the usable CPUs (at most 4), since workers compete with the training threads for the cores.
    """
    notes = [fused_cross_entropy_note()]
    if device == "cuda":
        modern = cuda_capability is not None and cuda_capability >= (8, 0)
        precisions: tuple[Precision, ...] = ("fp32", "tf32", "bf16", "fp16") if modern else ("fp32", "fp16")
        modes = _CUDA_MODES
        if not modern:
            notes.append("TF32 skipped: it needs an Ampere or newer GPU (compute capability >= 8.0)")
    else:
        precisions = ("fp32", "bf16") if hardware.cpu_runs_bf16 else ("fp32",)
        modes = ("default",)
        notes.append("TF32 skipped: it is a mode of NVIDIA GPUs' matmul units, and this search runs on the CPU")
        notes.append(
            f"compile modes reduce-overhead and max-autotune skipped: {_GRAPHS_OFF_CUDA}, and max-autotune "
            "benchmarks GPU kernel choices (name it with compile=max-autotune-no-cudagraphs to try it here)"
        )
    workers = min(_MAX_DEFAULT_WORKERS, hardware.threads // 2)
    return SearchSpace(
        device=device,
        precisions=precisions,
        micro_batch_sizes=None,
        activation_checkpointing=(False, True),
        compile=(False, True),
        channels_last=(False, True),
        loader_workers=(0, workers) if workers > 0 else (0,),
        fused_optimizer=(False, True),
        compile_modes=modes,
        compile_loss=(False, True),
        notes=tuple(notes),
    )


def fused_cross_entropy_note() -> str:
    """What the search can say about a fused cross-entropy: the loss is the setup's own code, so it only reports.

    PyTorch has no fused linear + cross-entropy kernel; Liger-Kernel's (Triton, GPUs) is one where
    installed. What the search does try is ``compile_loss``: the loss compiled with the model, so
    Inductor fuses the log-softmax into the loss (it cannot when only the model is compiled).
    """
    import importlib.util

    if importlib.util.find_spec("liger_kernel") is not None:
        return (
            "fused linear + cross-entropy not searched: the loss is the setup's own; Liger-Kernel is installed, so "
            "a setup may use its LigerFusedLinearCrossEntropyLoss (the logits are never materialised)"
        )
    return (
        "fused linear + cross-entropy not available: PyTorch has no such kernel and Liger-Kernel is not installed; "
        "compile_loss (the loss compiled with the model) lets Inductor fuse the log-softmax into the loss"
    )


def parse_space(text: str | None, defaults: SearchSpace) -> SearchSpace:
    """``defaults`` with the dimensions named in ``text`` replaced; SpaceError naming what is wrong."""
    if text is None or not text.strip():
        return defaults
    seen: set[str] = set()
    space = defaults
    for part in (piece.strip() for piece in text.split(";")):
        if not part:
            continue
        key, equals, values_text = part.partition("=")
        name = _ALIASES.get(key.strip().lower())
        if not equals or name is None:
            known = ", ".join(DIMENSIONS)
            raise SpaceError(
                f"--space part {part!r} is not DIMENSION=VALUES with a known dimension",
                f"dimensions: {known}; e.g. --space '{_EXAMPLE}'",
            )
        if name in seen:
            raise SpaceError(f"--space names {name} twice", "give each dimension once, values separated by commas")
        seen.add(name)
        values = tuple(value.strip().lower() for value in values_text.split(",") if value.strip())
        if not values:
            raise SpaceError(f"--space gives no value for {name}", f"e.g. --space '{_EXAMPLE}'")
        space = _with_dimension(space, name, values)
    return space


def _with_dimension(space: SearchSpace, name: str, values: tuple[str, ...]) -> SearchSpace:
    if name == "precision":
        return replace(space, precisions=_precisions(values, space.device))
    if name == "micro":
        return replace(space, micro_batch_sizes=_integers(values, name, minimum=1))
    if name == "workers":
        return replace(space, loader_workers=_integers(values, name, minimum=0))
    if name == "compile":
        return _compile_choices(space, values)
    flags = _flags(values, name)
    if name == "checkpointing":
        return replace(space, activation_checkpointing=flags)
    if name == "compile_loss":
        return replace(space, compile_loss=flags)
    if name == "channels_last":
        return replace(space, channels_last=flags)
    return replace(space, fused_optimizer=flags)


def _precisions(values: tuple[str, ...], device: DeviceKind) -> tuple[Precision, ...]:
    known = get_args(Precision)
    unknown = [value for value in values if value not in known]
    if unknown:
        raise SpaceError(f"unknown precision {', '.join(unknown)} in --space", f"choose from {', '.join(known)}")
    if device == "cpu":
        gpu_only = [value for value in values if value in ("fp16", "tf32")]
        if gpu_only:
            raise SpaceError(
                f"precision={','.join(gpu_only)} contradicts the device: this machine trains on the CPU, "
                "and FP16 autocast with loss scaling and TF32 are GPU modes",
                "use precision=fp32,bf16 on a CPU",
            )
    return tuple(cast(Precision, value) for value in dict.fromkeys(values))


def _compile_choices(space: SearchSpace, values: tuple[str, ...]) -> SearchSpace:
    """``compile=off,on,reduce-overhead,...``: on is the default mode; modes recording CUDA graphs are
    dropped off CUDA with a note, refused when nothing compiled would be left."""
    modes: list[CompileMode] = []
    flags: list[bool] = []
    for value in values:
        mode = "default" if value in _ON else value
        if value in _OFF:
            flags.append(False)
        elif mode in _COMPILE_MODES:
            flags.append(True)
            modes.append(mode)
        else:
            raise SpaceError(
                f"--space compile={value} is not on, off or a torch.compile mode",
                f"e.g. compile=off,on,{','.join(_COMPILE_MODES[1:])}",
            )
    notes = list(space.notes)
    if space.device != "cuda":
        graphs = [mode for mode in modes if mode in ("reduce-overhead", "max-autotune")]
        modes = [mode for mode in modes if mode not in graphs]
        if graphs:
            if not modes and False not in flags:
                raise SpaceError(
                    f"compile={','.join(graphs)} contradicts the device: {_GRAPHS_OFF_CUDA}, and this search runs "
                    "on the CPU",
                    "use compile=on (or max-autotune-no-cudagraphs) on a CPU",
                )
            notes.append(f"compile={','.join(graphs)} skipped: {_GRAPHS_OFF_CUDA}")
    # Compiling stays a choice only where a mode is left to compile in.
    compiled = tuple(dict.fromkeys(flag for flag in flags if modes or not flag))
    return replace(
        space, compile=compiled, compile_modes=tuple(dict.fromkeys(modes)) or ("default",), notes=tuple(notes)
    )


def _integers(values: tuple[str, ...], name: str, *, minimum: int) -> tuple[int, ...]:
    try:
        numbers = tuple(sorted({int(value) for value in values}))
    except ValueError as failure:
        raise SpaceError(
            f"--space {name}={','.join(values)} is not a list of integers", "e.g. micro=8,16,32"
        ) from failure
    if numbers[0] < minimum:
        raise SpaceError(f"--space {name} values must be >= {minimum}, got {numbers[0]}", f"e.g. {name}={minimum + 1}")
    return numbers


def _flags(values: tuple[str, ...], name: str) -> tuple[bool, ...]:
    flags = []
    for value in values:
        if value not in _ON + _OFF:
            raise SpaceError(f"--space {name}={value} is not on or off", f"e.g. {name}=on,off")
        flags.append(value in _ON)
    return tuple(dict.fromkeys(flags))


def _drop_impossible(
    choices: tuple[bool, ...], *, possible: bool, setting: str, reason: str, hint: str, notes: list[str]
) -> tuple[bool, ...]:
    """Remove ``True`` when the model cannot run it: an error when forced, a note when off is also tried."""
    if possible or True not in choices:
        return choices
    if False not in choices:
        raise SpaceError(f"{setting} contradicts the model: {reason}", hint)
    notes.append(f"{setting} dropped: {reason}")
    return (False,)


def _powers_of_two(limit: int) -> Sequence[int]:
    sizes = []
    size = 1
    while size <= limit:
        sizes.append(size)
        size *= 2
    return sizes
