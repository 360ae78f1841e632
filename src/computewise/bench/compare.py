"""Measured figures against the data sheet: which catalog row a device is, and what its share says.

A GPU is matched by the driver's name and memory size (``Catalog.match_device``). A CPU is matched
only when every word of a catalog CPU's model name ("AMD EPYC 9654") is in the name the kernel
reports: a family word ("EPYC") names hundreds of parts of very different speed, and comparing
with the wrong one would be worse than not comparing, so an unmatched CPU gets a note saying how
to add its row instead of a guess.

A GPU figure below ``LOW_SHARE`` of its data sheet is flagged: dense matmuls and a bandwidth-bound
triad reach 60-90 % of the sheet on a healthy part, so half or less points at the machine (clocks
held down by heat or a power cap, a PCIe link trained at a lower width, another process on the GPU).
CPU figures are compared but not flagged: a VM's vCPUs are a slice of the socket the sheet describes.
"""

from __future__ import annotations

import re

from computewise.bench.result import BandwidthFigure, Comparison, MatmulFigure
from computewise.catalog import Catalog
from computewise.specs import Accelerator

__all__ = ["LOW_SHARE", "PCIE3_X16_GB_PER_S", "compare_bandwidth", "compare_matmul", "match_cpu"]

LOW_SHARE = 0.5
# PCI-SIG: PCIe 3.0 runs 8 GT/s per lane with 128b/130b coding, 0.985 GB/s per lane, 15.75 GB/s for x16,
# the slowest link a data-centre GPU ships on; pinned copies reach ~80 % of the link.
PCIE3_X16_GB_PER_S = 15.75

_LOW_MATMUL = "far below the data sheet: check clocks and throttling (nvidia-smi -q -d CLOCK,PERFORMANCE)"
_LOW_TRIAD = "far below the data sheet: check memory clocks, ECC errors and other processes on the GPU"
_LOW_LINK = (
    f"below half of PCIe 3.0 x16 ({PCIE3_X16_GB_PER_S:g} GB/s): check the link width and generation "
    "(nvidia-smi -q -d PCIE, lspci -vv)"
)


def _words(text: str) -> set[str]:
    cleaned = re.sub(r"\((r|tm)\)", " ", text.lower())
    return set(re.split(r"[^a-z0-9]+", cleaned)) - {""}


def match_cpu(catalog: Catalog, cpu_name: str) -> Accelerator | None:
    """The catalog CPU whose model name (before any parenthesis) is wholly in ``cpu_name``, or None."""
    found = _words(cpu_name)
    for accelerator in catalog.accelerators:
        if accelerator.kind != "cpu":
            continue
        model = accelerator.name.split("(", 1)[0]
        if _words(model) and _words(model) <= found:
            return accelerator
    return None


def compare_matmul(figure: MatmulFigure) -> Comparison | None:
    """'bf16 matmul reaches 71 % of the data sheet's 989 TFLOP/s', flagged when a GPU falls below half."""
    if not figure.datasheet_tflops:
        return None
    share = figure.peak_tflops / figure.datasheet_tflops
    label = f"{figure.dtype} matmul"
    unit = "TOPS" if figure.dtype == "int8" else "TFLOP/s"
    text = f"{label} reaches {share:.0%} of the data sheet's {figure.datasheet_tflops:.3g} {unit}".replace("%", " %")
    low = figure.device != "cpu" and share < LOW_SHARE
    return Comparison(figure.device, label, share, low, f"{text}; {_LOW_MATMUL}" if low else text)


def compare_bandwidth(figure: BandwidthFigure) -> Comparison | None:
    """The triad against the sheet's memory bandwidth; a pinned copy against PCIe 3.0 x16."""
    if figure.kind == "triad" and figure.datasheet_gb_per_s:
        share = figure.gb_per_s.median / figure.datasheet_gb_per_s
        text = f"memory bandwidth (triad) reaches {share:.0%} of the data sheet's {figure.datasheet_gb_per_s:.4g} GB/s"
        text = text.replace("%", " %")
        low = figure.device != "cpu" and share < LOW_SHARE
        return Comparison(
            figure.device, "memory bandwidth (triad)", share, low, f"{text}; {_LOW_TRIAD}" if low else text
        )
    if figure.kind.endswith("pinned"):
        share = figure.gb_per_s.median / PCIE3_X16_GB_PER_S
        if share < LOW_SHARE:
            text = f"{figure.kind} copy at {figure.gb_per_s.median:.3g} GB/s is {_LOW_LINK}"
            return Comparison(figure.device, f"{figure.kind} copy", share, True, text)
    return None
