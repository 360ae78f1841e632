"""Every estimator works on numpy columns, so one formula serves ``estimate`` (one row) and
``plan`` (a million rows) alike. Scalars go in as 0-d arrays and come out with ``float()``."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

__all__ = ["FloatArray", "col", "transfer_s"]

FloatArray = npt.NDArray[np.float64]


def col(
    value: float | Sequence[float] | FloatArray | npt.NDArray[np.int64] | npt.NDArray[np.bool_],
) -> FloatArray:
    """A float64 column from a scalar or an array (no copy when it already is one)."""
    return np.asarray(value, dtype=np.float64)


def transfer_s(n_bytes: FloatArray, bytes_per_s: FloatArray) -> FloatArray:
    """Seconds to move ``n_bytes``; nothing to move takes no time even over an unknown (0) link."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(n_bytes > 0, n_bytes / bytes_per_s, 0.0)
