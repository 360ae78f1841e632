"""``computewise bench``: the real machine measured, so plans rest on figures reproduced here.

Dense matmul TFLOP/s per dtype and size (``matmul``), STREAM-triad memory bandwidth and host<->device
copies (``memory``), collective bus bandwidth (``collectives``), storage read throughput
(``storage``) and a reference training step (``reference``), each a median over repeats with its
spread (``timing``), compared with the catalog's data sheet (``compare``) and gathered in one
``BenchResult`` (``result``) by ``run_bench`` (``suite``). torch is imported inside the measuring
functions, so importing this package stays cheap.
"""

from computewise.bench.result import (
    BandwidthFigure,
    BenchResult,
    Comparison,
    Device,
    MatmulFigure,
    MatmulPoint,
    Skipped,
)
from computewise.bench.suite import BenchOptions, run_bench
from computewise.bench.timing import Measured, time_repeats

__all__ = [
    "BandwidthFigure",
    "BenchOptions",
    "BenchResult",
    "Comparison",
    "Device",
    "MatmulFigure",
    "MatmulPoint",
    "Measured",
    "Skipped",
    "run_bench",
    "time_repeats",
]
