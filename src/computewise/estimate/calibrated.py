"""The achievable-compute model with measured figures: what a calibration changes in a training estimate.

Uncalibrated, a step's kernels run at the data sheet's peak and bandwidth times the shares the
accelerator's catalog profile gives (kernel_profiles.csv, measured for the H100, published for others)
or the catalog's assumed ones (``estimate.kernels``). With a calibration of the same device
(``catalog.calibration``, written by ``computewise bench --save``: the user's own profile) and a
measured peak at the job's precision:

- on a GPU, a large GEMM runs at the measured matmul peak (the sweep's largest sizes, where launch
  latency no longer counts) and an elementwise kernel at the measured triad bandwidth; the size
  dependence of smaller GEMMs and the launch costs stay the kernel model's, because bench times
  small products one synchronised call at a time, which measures the launch, not the kernel;
- on a CPU, at fp32, when bench timed reference training steps, the whole step runs at the share
  of the measured peak those steps reached, interpolated at the job's equivalent matmul size
  (``TrainHardware.utilization``): there the host is the device, and the reference steps hold the
  framework's overhead that no kernel model of a GPU describes.

The equivalent size is that of one device's micro-batch: ``micro_batch * seq_len / cp`` tokens
through a ``hidden / tp`` wide layer (``catalog.calibration.equivalent_matmul_size``). ``estimate
train`` evaluates one row, ``plan train`` every candidate of a calibrated accelerator, both here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from computewise.estimate.arrays import FloatArray, col

if TYPE_CHECKING:
    from computewise.catalog.calibration import Calibration, Curve
    from computewise.specs import ModelSpec

__all__ = ["CalibratedCompute", "calibrated_compute", "calibration_note", "matmul_sizes"]

STEP_BASIS = "reference training steps"


@dataclass(frozen=True)
class CalibratedCompute:
    """Measured inputs of the compute model for rows of one accelerator and precision."""

    peak_flops: float
    memory_bandwidth_bytes_per_s: float | None  # None: the catalog's
    share: FloatArray  # of ``peak_flops``, per row
    whole_step: bool  # True: ``share`` is the whole step's (reference steps); False: a large GEMM's (1.0)
    basis: str  # "reference training steps" or "<dtype> matmul peak and triad"

    @property
    def utilization(self) -> FloatArray | None:
        """``TrainHardware.utilization``: the whole-step share, when that is what was measured."""
        return self.share if self.whole_step else None

    @property
    def matmul_fraction(self) -> FloatArray | None:
        """``TrainHardware.matmul_fraction``: a large GEMM's share of the measured peak, the kernel model around it."""
        return None if self.whole_step else self.share


def matmul_sizes(
    model: ModelSpec, micro_batch: FloatArray, seq_len: FloatArray, cp: FloatArray, tp: FloatArray
) -> FloatArray:
    """Equivalent square matmul size of one device's micro-batch, per row (module docstring)."""
    hidden = float(model.hidden_size or model.params**0.5) / np.maximum(col(tp), 1.0)
    tokens = col(micro_batch) * col(seq_len) / np.maximum(col(cp), 1.0)
    sizes: FloatArray = np.cbrt(np.maximum(tokens, 1.0) * np.maximum(hidden, 1.0) ** 2)
    return sizes


def _interpolate(curve: Curve, sizes: FloatArray) -> FloatArray:
    """Linear in log size between the curve's points, flat beyond its ends."""
    points = sorted(curve)
    return np.interp(np.log(sizes), np.log([p.size for p in points]), [p.fraction for p in points])


def calibrated_compute(
    calibration: Calibration, precision: str, sizes: FloatArray, *, whole_steps: bool
) -> CalibratedCompute | None:
    """The measured peak, bandwidth and share for rows of ``sizes``; None when ``precision`` was not measured.

    ``whole_steps``: the device is a CPU, whose reference steps stand for the whole step (module docstring).
    """
    peak = calibration.peak_flops.get(precision, 0.0)
    if peak <= 0:
        return None
    if whole_steps and precision == "fp32" and calibration.step_curve:
        share = _interpolate(calibration.step_curve, sizes)
        return CalibratedCompute(peak, calibration.memory_bandwidth_bytes_per_s, share, True, STEP_BASIS)
    share = np.ones_like(col(sizes))
    return CalibratedCompute(
        peak, calibration.memory_bandwidth_bytes_per_s, share, False, f"{precision} matmul peak and triad"
    )


def calibration_note(calibration: Calibration, precision: str, size: float, measured: CalibratedCompute) -> str:
    """What an estimate prints when a calibration set its compute time."""
    peak = f"{calibration.note}: {precision} matmul peak {measured.peak_flops / 1e12:.3g} TFLOP/s measured"
    if not measured.whole_step:
        return f"{peak}, each kernel timed against it and the measured bandwidth ({measured.basis})"
    share = float(measured.share.reshape(-1)[0])
    return f"{peak}, a step of this size (equivalent {size:.0f}^3 matmul) reaches {share:.0%} of it ({measured.basis})"
