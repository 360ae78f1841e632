"""Dense matmul throughput per dtype and size: the compute a device really delivers, and how it falls off.

A square product of size n costs ``2 * n**3`` floating-point operations (n**3 multiply-adds; int8 counts
integer operations the same way, as data sheets quote TOPS). Each size is timed as products queued back to
back between one pair of synchronisations, enough of them (``timing.CALL_S``) that the clock's
resolution vanishes, and on a GPU captured in a CUDA graph so the host's launch cost (its own figure,
``bench.launch``) is not billed to a product shorter than it (``timing.time_back_to_back``); then
reduced to a median over repeats. The best median over the sweep is the peak; each size's share of it is
the efficiency curve the planner uses for small matmuls.

Which dtypes are measured is decided from what the hardware runs natively. On a CPU, torch's bf16
matmul is fast only with AVX512-BF16 or AMX (elsewhere it converts through fp32 and is slower than fp32
itself), and its int8 product (``torch._int_mm``) only with VNNI or AMX; without them the figure would
describe an emulation, so it is skipped with the reason. On an NVIDIA GPU fp32 runs with TF32 off, tf32
with it on, and int8 through ``torch._int_mm``, int8 x int8 -> int32 in cuBLASLt, where the build and
the GPU have it: IMMA tensor cores from compute capability 7.5 (Turing) on, and only for the shapes and
layout cuBLASLt runs on them (``int8_shape_problem``): more than 16 rows, k and n multiples of 8, and
the second operand column-major ("TN" in cuBLAS's terms: cuBLASLt documents its IMMA kernels for
that layout only). The first H100 run passed two row-major operands, for which cuBLASLt falls back to
a kernel without IMMA: 132 TOPS, 7 % of the data sheet while every other dtype read 70-78 %, so the
layout rather than the clocks its warning blamed (the ``gpu`` test holds int8 to at least half of bf16).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

from computewise.bench.result import MatmulFigure, MatmulPoint, Skipped
from computewise.bench.timing import CALL_S, Measured, calls_to_fill, time_back_to_back
from computewise.system.cpu import cpu_flags

if TYPE_CHECKING:
    import torch

__all__ = [
    "CPU_BF16_FLAGS",
    "CPU_INT8_FLAGS",
    "int8_operands",
    "int8_shape_problem",
    "matmul_dtypes",
    "matmul_sizes",
    "matmul_tflops",
    "measure_matmul",
]

CPU_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})
CPU_INT8_FLAGS = frozenset({"avx512_vnni", "avx_vnni", "amx_int8"})
_GPU_DTYPES = ("fp32", "tf32", "bf16", "fp16", "int8")
_INT8_TENSOR_CORES = (7, 5)  # IMMA from Turing on; Volta and older have none, and _int_mm would emulate
_INT8_PROBE = 32  # the probe's side: the smallest square _int_mm runs on a GPU is 24 (> 16 rows, x8)
_QUICK_REPEATS, _FULL_REPEATS = 5, 10


def matmul_sizes(device: str, *, quick: bool) -> tuple[int, ...]:
    """The sweep: powers of two from 128 up to what the device runs in a fraction of a second.

    A 2-core CPU needs about 1.5 s for one 4096 product, so a quick CPU sweep stops at 1024; a GPU
    finishes 8192 in milliseconds, and small sizes are where its efficiency curve bends. The full GPU
    sweep goes on to 16384 (0.2 s for an fp32 product on an H200, 1.6 GB for an int8 one): int8 there
    was still climbing at 8192 (846 TOPS at 4096, 891 at 8192), so 8192 did not read its peak.
    """
    if device == "cpu":
        return (128, 256, 512, 1024) if quick else (128, 256, 512, 1024, 2048, 4096)
    return (256, 1024, 4096) if quick else (128, 256, 512, 1024, 2048, 4096, 8192, 16384)


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
        if (major, minor) < _INT8_TENSOR_CORES:
            return f"int8 tensor cores need compute capability 7.5 (Turing) or later; this GPU is {major}.{minor}"
        try:
            _product(f"cuda:{index}", "int8", _INT8_PROBE)()
        except RuntimeError as error:
            return f"torch._int_mm failed here: {error}"
    return None


def int8_shape_problem(rows: int, inner: int, columns: int) -> str | None:
    """Why cuBLASLt would not run an (rows x inner) @ (inner x columns) int8 product on tensor cores, or None.

    torch's CUDA ``_int_mm`` refuses 16 rows or fewer and an inner or output width that is not a
    multiple of 8 (stricter than the 4-byte alignment IMMA needs); the CPU kernel takes any shape, and the sweep
    holds to the GPU's rule everywhere so both devices time the same products.
    """
    if rows <= 16:
        return f"torch._int_mm needs more than 16 rows, got {rows}"
    if inner % 8 or columns % 8:
        return f"torch._int_mm needs the inner and output widths to be multiples of 8, got {inner} and {columns}"
    return None


def matmul_tflops(size: int, seconds: float) -> float:
    """TFLOP/s of one square product of ``size`` done in ``seconds``: 2 n^3 FLOP."""
    return 2.0 * size**3 / seconds / 1e12


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
    repeats = _QUICK_REPEATS if quick else _FULL_REPEATS
    points = []
    with _tf32(dtype):
        for size in sizes:
            if progress is not None:
                progress(f"{dtype} matmul {size}x{size}")
            product = _product(device, dtype, size)
            count = calls_to_fill(product, CALL_S, device=device)
            times_s = time_back_to_back(product, count=count, warmup=1, repeats=repeats, device=device, graph=True)
            points.append(MatmulPoint(size, dtype, Measured.of([matmul_tflops(size, t) for t in times_s])))
    peak = max(p.tflops.median for p in points)
    return MatmulFigure(device, dtype, tuple(points), peak, datasheet_tflops)


def int8_operands(device: str, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Two random int8 ``size`` x ``size`` operands in the layout cuBLASLt's IMMA kernels take.

    The first row-major, the second a column-major view (the transpose of a contiguous matrix): "TN"
    in cuBLAS's terms. A size those kernels do not take is refused (``int8_shape_problem``) rather
    than timed on a slower kernel under the int8 name.
    """
    import torch as t

    problem = int8_shape_problem(size, size, size)
    if problem is not None:
        raise ValueError(f"an int8 matmul of size {size} would not run on tensor cores: {problem}")
    a = t.randint(-128, 128, (size, size), dtype=t.int8, device=device)
    b = t.randint(-128, 128, (size, size), dtype=t.int8, device=device).t()
    return a, b


def _product(device: str, dtype: str, size: int) -> Callable[[], None]:
    """One product of two random ``size`` x ``size`` matrices, written into a preallocated output."""
    import torch as t

    if dtype == "int8":
        a, b = int8_operands(device, size)
        out_int = t.empty((size, size), dtype=t.int32, device=device)

        def int_mm() -> None:
            t._int_mm(a, b, out=out_int)

        return int_mm
    torch_dtype = {"fp32": t.float32, "tf32": t.float32, "bf16": t.bfloat16, "fp16": t.float16}[dtype]
    x = t.randn((size, size), dtype=torch_dtype, device=device)
    y = t.randn((size, size), dtype=torch_dtype, device=device)
    out = t.empty((size, size), dtype=torch_dtype, device=device)

    def mm() -> None:
        t.mm(x, y, out=out)

    return mm


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
