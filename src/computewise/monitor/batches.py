"""Counting what a batch holds, for ``track()``: samples by the leading dimension of its first array, or
as the caller says (a constant, a function of the batch)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["Count", "batch_samples", "count_batch"]

# A count per batch: a constant, a function of the batch, or None (inferred for samples, unknown for tokens).
Count = int | Callable[[Any], int | None] | None


def batch_samples(batch: Any) -> int | None:
    """Samples in a batch: the leading dimension of its first array, found depth-first.

    An array is anything with a ``shape`` of at least one dimension (a torch tensor, a NumPy
    array). Tuples and lists are searched in order, mappings in insertion order (a Hugging Face
    batch ``{"input_ids": ..., "labels": ...}`` counts ``input_ids``). A list or tuple holding no
    array is a list of examples and counts its length. Anything else: None (unknown).
    """
    found = _leading_dim(batch)
    if found is None and isinstance(batch, list | tuple):
        return len(batch)
    return found


def _leading_dim(value: Any) -> int | None:
    shape = getattr(value, "shape", None)
    if shape is not None:
        try:
            return int(shape[0]) if len(shape) > 0 else None
        except (TypeError, ValueError):
            return None
    items: Iterable[Any]
    if isinstance(value, Mapping):
        items = value.values()
    elif isinstance(value, list | tuple):
        items = value
    else:
        return None
    for item in items:
        found = _leading_dim(item)
        if found is not None:
            return found
    return None


def count_batch(count: Count, batch: Any, *, infer_samples: bool) -> int | None:
    """Apply a ``Count`` to a batch; None means ``batch_samples`` when ``infer_samples``, else unknown."""
    if count is None:
        return batch_samples(batch) if infer_samples else None
    if isinstance(count, int):
        return count
    return count(batch)
