"""Numeric precision of a training step: which one the device runs, and how to run it.

The weights always stay FP32 (the master copy the optimizer updates); only the forward and
backward arithmetic drops to BF16 or FP16 under ``torch.autocast``. FP16's narrow exponent
underflows small gradients, so it gets dynamic loss scaling (``torch.amp.GradScaler``); BF16 has
FP32's exponent and needs none. TF32 is not a tensor type but a mode of the CUDA matmul and
convolution units, switched on process-wide.

``auto`` picks what the device does fastest without changing what the model learns beyond
rounding: BF16 on a GPU that has it, FP16 (with scaling) on an older GPU, FP32 on the CPU (BF16 on
a CPU is only fast with AVX512-BF16 or AMX, so it is a choice the user or the tuner makes).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from computewise.errors import ConfigError
from computewise.train.config import PrecisionChoice

if TYPE_CHECKING:
    import torch

__all__ = ["Precision", "PrecisionPolicy", "resolve_precision"]

Precision = Literal["fp32", "tf32", "bf16", "fp16"]
# TF32 tensor cores arrived with Ampere (compute capability 8.0); older GPUs have no such mode.
_TF32_MIN_CAPABILITY = (8, 0)


def _device_type(device: torch.device | str) -> str:
    import torch

    return torch.device(device).type


def resolve_precision(choice: PrecisionChoice, device: torch.device | str) -> Precision:
    """The concrete precision for ``choice`` on ``device``; one the device cannot run is a ConfigError.

    Refusing (rather than silently falling back to FP32) matters because the tuner and the user
    compare configurations by name: a "fp16" run that secretly ran FP32 would make the comparison a lie.
    """
    import torch

    kind = _device_type(device)
    if kind == "cuda":
        bf16_ok = torch.cuda.is_bf16_supported()
        if choice == "auto":
            return "bf16" if bf16_ok else "fp16"
        if choice == "bf16" and not bf16_ok:
            raise ConfigError(
                f"precision=bf16 is not supported on {torch.cuda.get_device_name(torch.device(device))}",
                "use precision=fp16 (dynamic loss scaling) or precision=auto",
            )
        if choice == "tf32" and torch.cuda.get_device_capability(torch.device(device)) < _TF32_MIN_CAPABILITY:
            raise ConfigError(
                "precision=tf32 needs an Ampere or newer GPU (compute capability >= 8.0)",
                "use precision=fp32, fp16 or auto",
            )
        return choice
    if choice == "auto":
        return "fp32"
    if choice in ("fp16", "tf32"):
        raise ConfigError(
            f"precision={choice} is not available on the {kind} device: "
            + ("TF32 is a mode of NVIDIA GPUs" if choice == "tf32" else "FP16 autocast with loss scaling is for GPUs"),
            "use precision=fp32 or bf16 on this device, or train on a CUDA GPU",
        )
    return choice


@dataclass
class PrecisionPolicy:
    """How the engine runs a step at ``precision`` on a device of type ``device_type``.

    ``scaler`` is a ``torch.amp.GradScaler`` for FP16 (dynamic loss scaling) and None otherwise;
    the engine routes backward and the optimizer step through it when present.
    """

    precision: Precision
    device_type: str
    scaler: Any = field(init=False, default=None)

    def __post_init__(self) -> None:
        if self.precision == "fp16":
            import torch

            self.scaler = torch.amp.GradScaler(self.device_type)

    @classmethod
    def for_device(cls, choice: PrecisionChoice, device: torch.device | str) -> PrecisionPolicy:
        """Resolve ``choice`` on ``device`` and build the policy for it."""
        return cls(resolve_precision(choice, device), _device_type(device))

    @property
    def autocast_dtype(self) -> torch.dtype | None:
        """The dtype autocast computes in, None when the step runs in FP32 (or TF32)."""
        import torch

        return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(self.precision)

    @contextlib.contextmanager
    def autocast(self) -> Iterator[None]:
        """Run the forward pass (and loss) inside this context; backward follows autocast's choices."""
        dtype = self.autocast_dtype
        if dtype is None:
            yield
            return
        import torch

        with torch.autocast(device_type=self.device_type, dtype=dtype):
            yield

    def apply_tf32(self) -> None:
        """Set the process-wide CUDA TF32 mode: on for TF32 and the mixed precisions, off for strict FP32.

        Under BF16/FP16 autocast some matmuls still run in FP32 (those autocast keeps in FP32);
        TF32 speeds those up as nanoGPT does. ``fp32`` means IEEE FP32 everywhere, so it switches
        TF32 off even where PyTorch's defaults would allow it for convolutions. On the CPU it
        changes nothing: ``set_float32_matmul_precision`` would let oneDNN use BF16 there, which
        would make "fp32" runs neither FP32 nor reproducible.
        """
        if self.device_type != "cuda":
            return
        import torch

        allow = self.precision != "fp32"
        torch.set_float32_matmul_precision("high" if allow else "highest")
        torch.backends.cudnn.allow_tf32 = allow
