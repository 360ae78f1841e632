"""Dense matmul throughput per dtype and size: the compute a device really delivers, and how it falls off.

A square product of size n costs ``2 * n**3`` floating-point operations (n**3 multiply-adds; int8 counts
integer operations the same way, as data sheets quote TOPS). Each size is timed as calls of several
products back to back, long enough (``_CALL_S``) that the clock's resolution and the call overhead
vanish, then reduced to a median over repeats (``bench.timing``). The best median over the sweep is the
peak; each size's share of it is the efficiency curve the planner uses for small matmuls.

Which dtypes are measured is decided from what the hardware runs natively. On a CPU, torch's bf16
matmul is fast only with AVX512-BF16 or AMX (elsewhere it converts through fp32 and is slower than fp32
itself), and its int8 product (``torch._int_mm``) only with VNNI or AMX; without them the figure would
describe an emulation, so it is skipped with the reason. On an NVIDIA GPU fp32 runs with TF32 off, tf32
with it on, and int8 through ``torch._int_mm`` (cuBLASLt), where the build and the GPU have it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from computewise.bench.result import MatmulFigure, MatmulPoint, Skipped
from computewise.bench.timing import Measured, time_repeats
from computewise.system.cpu import cpu_flags

__all__ = ["CPU_BF16_FLAGS", "CPU_INT8_FLAGS", "matmul_dtypes", "matmul_sizes", "matmul_tflops", "measure_matmul"]

CPU_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})
CPU_INT8_FLAGS = frozenset({"avx512_vnni", "avx_vnni", "amx_int8"})
_GPU_DTYPES = ("fp32", "tf32", "bf16", "fp16", "int8")

_CALL_S = 0.01  # one timed call lasts at least this long: 1000x the clock's resolution and a kernel launch
_QUICK_REPEATS, _FULL_REPEATS = 5, 10


def matmul_sizes(device: str, *, quick: bool) -> tuple[int, ...]:
    """The sweep: powers of two from 128 up to what the device runs in a fraction of a second.

    A 2-core CPU needs about 1.5 s for one 4096 product, so a quick CPU sweep stops at 1024; a GPU
    finishes 8192 in milliseconds, and small sizes are where its efficiency curve bends.
    """
    if device == "cpu":
        return (128, 256, 512, 1024) if quick else (128, 256, 512, 1024, 2048, 4096)
    return (256, 1024, 4096) if quick else (128, 256, 512, 1024, 2048, 4096, 8192)


def matmul_dtypes(device: str) -> tuple[tuple[str, ...], tuple[Skipped, ...]]:
    """The dtypes with a native kernel on ``device``, and those skipped with the reason."""
    import torch

    if device == "cpu":
        flags = cpu_flags()
        dtypes = ["fp32"]
        skipped: list[Skipped] = []
        if flags & CPU_BF16_FLAGS:
            dtypes.append("bf16")
        else:
            skipped.append(
                Skipped(
                    "cpu", "bf16 matmul", "the CPU has no AVX512-BF16 or AMX: torch would convert through fp32, slower"
                )
            )
        if flags & CPU_INT8_FLAGS and hasattr(torch, "_int_mm"):
            dtypes.append("int8")
        else:
            skipped.append(
                Skipped(
                    "cpu",
                    "int8 matmul",
                    "the CPU has no VNNI or AMX-INT8: torch._int_mm has no fast kernel here"
                    if hasattr(torch, "_int_mm")
                    else "this torch has no torch._int_mm",
                )
            )
        return tuple(dtypes), tuple(skipped)
    index = torch.device(device).index or 0
    dtypes, skipped = [], []
    for dtype in _GPU_DTYPES:
        reason = _gpu_dtype_missing(index, dtype)
        if reason is None:
            dtypes.append(dtype)
        else:
            skipped.append(Skipped(device, f"{dtype} matmul", reason))
    return tuple(dtypes), tuple(skipped)


def _gpu_dtype_missing(index: int, dtype: str) -> str | None:
    import torch

    major, minor = torch.cuda.get_device_capability(index)
    if dtype == "tf32" and major < 8:
        return f"TF32 needs compute capability 8.0 (Ampere) or later; this GPU is {major}.{minor}"
    if dtype == "bf16" and not torch.cuda.is_bf16_supported():
        return "torch reports no bf16 support on this GPU"
    if dtype == "int8":
        if not hasattr(torch, "_int_mm"):
            return "this torch has no torch._int_mm"
        try:
            a = torch.ones((32, 32), dtype=torch.int8, device=f"cuda:{index}")
            torch._int_mm(a, a)
        except RuntimeError as error:
            return f"torch._int_mm failed here: {error}"
    return None


def matmul_tflops(size: int, seconds: float, products: int = 1) -> float:
    """TFLOP/s of ``products`` square products of ``size`` done in ``seconds``: 2 n^3 FLOP each."""
    return products * 2.0 * size**3 / seconds / 1e12


def measure_matmul(
    device: str,
    dtype: str,
    sizes: Sequence[int],
    *,
    quick: bool,
    datasheet_tflops: float | None = None,
    progress: Callable[[str], None] | None = None,
) -> MatmulFigure:
    """The sweep of one dtype on one device: a median TFLOP/s (with its spread) per size, and the peak."""
    import torch

    sync = (lambda: torch.cuda.synchronize(device)) if device.startswith("cuda") else None
    repeats = _QUICK_REPEATS if quick else _FULL_REPEATS
    points = []
    with _tf32(dtype):
        for size in sizes:
            if progress is not None:
                progress(f"{dtype} matmul {size}x{size}")
            product = _product(device, dtype, size)
            products = _products_per_call(product, sync)
            call = _repeat(product, products)
            times_s = time_repeats(call, warmup=1, repeats=repeats, sync=sync)
            rates = [matmul_tflops(size, t, products) for t in times_s]
            points.append(MatmulPoint(size, dtype, Measured.of(rates)))
    peak = max(p.tflops.median for p in points)
    return MatmulFigure(device, dtype, tuple(points), peak, datasheet_tflops)


def _product(device: str, dtype: str, size: int) -> Callable[[], None]:
    """One product of two fresh random ``size`` x ``size`` matrices, written into a preallocated output."""
    import torch as t

    if dtype == "int8":
        a = t.randint(-128, 128, (size, size), dtype=t.int8, device=device)
        b = t.randint(-128, 128, (size, size), dtype=t.int8, device=device)

        def int_mm() -> None:
            t._int_mm(a, b)

        return int_mm
    torch_dtype = {"fp32": t.float32, "tf32": t.float32, "bf16": t.bfloat16, "fp16": t.float16}[dtype]
    x = t.randn((size, size), dtype=torch_dtype, device=device)
    y = t.randn((size, size), dtype=torch_dtype, device=device)
    out = t.empty((size, size), dtype=torch_dtype, device=device)

    def mm() -> None:
        t.mm(x, y, out=out)

    return mm


def _products_per_call(product: Callable[[], None], sync: Callable[[], None] | None) -> int:
    """How many products make one call last ``_CALL_S``, from one warmed-up, timed product."""
    once_s = min(time_repeats(product, warmup=1, repeats=2, sync=sync))
    return max(1, math.ceil(_CALL_S / max(once_s, 1e-9)))


def _repeat(product: Callable[[], None], count: int) -> Callable[[], None]:
    def call() -> None:
        for _ in range(count):
            product()

    return call


@contextmanager
def _tf32(dtype: str) -> Iterator[None]:
    """TF32 on for the tf32 figure and off for fp32 (torch's default varies by version), restored after."""
    import torch

    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before
