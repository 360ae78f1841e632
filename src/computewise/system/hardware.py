"""What this machine can run fast: CPU instruction sets, CUDA, ONNX Runtime execution providers.

The best quantization settings depend on the CPU: without VNNI, ONNX Runtime's u8s8 integer
matrix products can saturate, which is why its documentation advises ``reduce_range`` there; with
VNNI (or AMX) that advice only costs accuracy. So the report says what the CPU supports, and
``optimize`` and ``tune`` read it from here instead of guessing. torch and onnxruntime are optional:
each probe imports its library inside the function and reads "none" where it is not installed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from computewise.system.cpu import CPUINFO, cpu_flags, cpu_model_name, usable_cpus

__all__ = ["EXECUTION_PROVIDERS", "Hardware", "detect_hardware"]

# The instruction sets that change which variant wins, in the order a reader expects them.
_REPORTED_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_bf16", "amx_int8")

# Accelerated ONNX Runtime providers we know how to use, with the package that brings each one.
EXECUTION_PROVIDERS: dict[str, str] = {
    "CUDAExecutionProvider": "onnxruntime-gpu and an NVIDIA GPU",
    "TensorrtExecutionProvider": "onnxruntime-gpu built with TensorRT and an NVIDIA GPU",
    "OpenVINOExecutionProvider": "onnxruntime-openvino",
}


@dataclass(frozen=True)
class Hardware:
    """The facts about this machine that decide which variants are built and which win."""

    cpu: str
    cpu_flags: frozenset[str]
    threads: int
    cuda_device: str | None = None
    providers: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=())

    @property
    def has_vnni(self) -> bool:
        return bool(self.cpu_flags & {"avx512_vnni", "avx_vnni", "amx_int8"})

    @property
    def cpu_runs_bf16(self) -> bool:
        """Native BF16 arithmetic; elsewhere BF16 is emulated and slower than FP32."""
        return bool(self.cpu_flags & {"avx512_bf16", "amx_bf16"})

    @property
    def cpu_features(self) -> list[str]:
        """The flags that decide a variant (VNNI, BF16, ...), in a fixed order: what the report names."""
        return [flag for flag in _REPORTED_FLAGS if flag in self.cpu_flags]


def _cuda_device() -> str | None:
    try:
        import torch
    except ImportError:
        return None
    return str(torch.cuda.get_device_name(0)) if torch.cuda.is_available() else None


def _ort_providers() -> tuple[str, ...]:
    try:
        import onnxruntime
    except ImportError:
        return ()
    return tuple(onnxruntime.get_available_providers())


def detect_hardware(threads: int | None = None, cpuinfo: Path = CPUINFO) -> Hardware:
    """This machine; ``threads`` defaults to the CPUs this process may use.

    ``cpuinfo`` is the file the CPU's name and flags are read from (another machine's copy, in tests).
    """
    flags = cpu_flags(cpuinfo)
    notes: list[str] = []
    if flags and "avx2" not in flags:
        notes.append("the CPU lacks AVX2: integer kernels fall back to slow paths, expect little from INT8")
    elif flags and not flags & {"avx512_vnni", "avx_vnni", "amx_int8"}:
        notes.append(
            "the CPU has no VNNI: ONNX Runtime advises reduce_range for u8s8 products, which costs accuracy; "
            "per-channel u8 weights keep it"
        )
    return Hardware(
        cpu=cpu_model_name(cpuinfo),
        cpu_flags=flags,
        threads=threads or usable_cpus(),
        cuda_device=_cuda_device(),
        providers=_ort_providers(),
        notes=tuple(notes),
    )
