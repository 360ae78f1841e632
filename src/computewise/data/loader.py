"""The loaders ``data bench`` measures: one over a ``Source``'s parts, or the user's own from an entry point.

Over a source, the loader is a real ``torch.utils.data.DataLoader`` (workers, ``prefetch_factor``,
``pin_memory``) when torch is installed, and a plain iterator in this process otherwise (workers 0
only: there is nothing to scale without torch's worker processes).

An entry point ``package.module:function`` returns a DataLoader or any iterable; where the function
takes a ``num_workers`` argument, ``data bench`` calls it once per worker count and so measures the
user's own loader scaling. A batch's samples are counted the way a training loop sees them: the
first dimension of a tensor or array, of the first value of a dict, of the first element of a tuple.
"""

from __future__ import annotations

import importlib.util
import inspect
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from computewise.data.sources import Item, Source, read_part
from computewise.errors import InputError
from computewise.system.entrypoints import import_entry_point

__all__ = ["EntryLoader", "LoaderConfig", "count_batch", "cuda_available", "parts_loader", "torch_available"]


@dataclass(frozen=True)
class LoaderConfig:
    """How a loader is set up: worker processes (0: the main process), batches each keeps ready, pinning."""

    workers: int
    prefetch: int = 2  # torch's default prefetch_factor
    pin_memory: bool = False

    @property
    def label(self) -> str:
        pinned = ", pinned" if self.pin_memory else ""
        return f"{self.workers} workers, prefetch {self.prefetch}{pinned}" if self.workers else f"main process{pinned}"


def torch_available() -> bool:
    return importlib.util.find_spec("torch") is not None


def cuda_available() -> bool:
    """Pinned memory only matters (and only works) with a CUDA device to copy to."""
    if not torch_available():
        return False
    import torch

    return bool(torch.cuda.is_available())


def parts_loader(source: Source, batch_rows: int, config: LoaderConfig) -> Iterable[Item]:
    """The batches of ``source``, read by ``config.workers`` torch workers (or this process)."""
    if torch_available():
        from computewise.data.torch_loader import parts_data_loader

        return parts_data_loader(source.parts, batch_rows, config.workers, config.prefetch, config.pin_memory)
    return _in_process(source, batch_rows)


def _in_process(source: Source, batch_rows: int) -> Iterator[Item]:
    for part in source.parts:
        yield from read_part(part, batch_rows)


def count_batch(batch: Any) -> tuple[int, int]:
    """(samples, bytes) of one batch of a user's loader: the first dimension and the memory of its arrays."""
    if isinstance(batch, Mapping):
        values = list(batch.values())
        return (_rows(values[0]) if values else 0), sum(_nbytes(v) for v in values)
    if isinstance(batch, tuple | list) and batch and hasattr(batch[0], "shape"):
        return _rows(batch[0]), sum(_nbytes(v) for v in batch)
    if isinstance(batch, tuple | list):
        return len(batch), sum(_nbytes(v) for v in batch)
    return _rows(batch), _nbytes(batch)


def _rows(value: Any) -> int:
    shape = getattr(value, "shape", None)
    if shape is not None:
        return int(shape[0]) if len(shape) else 1
    return len(value) if isinstance(value, list | tuple) else 1


def _nbytes(value: Any) -> int:
    if hasattr(value, "element_size") and hasattr(value, "numel"):  # a torch tensor
        return int(value.element_size() * value.numel())
    if hasattr(value, "nbytes"):
        return int(value.nbytes)
    if isinstance(value, bytes | bytearray | str):
        return len(value)
    if isinstance(value, Mapping):
        return sum(_nbytes(v) for v in value.values())
    if isinstance(value, list | tuple):
        return sum(_nbytes(v) for v in value)
    return 0


@dataclass(frozen=True)
class EntryLoader:
    """A user's loader factory: ``build(workers)`` returns its iterable (``workers`` only if it takes them)."""

    spec: str
    function: Callable[..., Any]
    takes_workers: bool

    @classmethod
    def load(cls, spec: str) -> EntryLoader:
        function = import_entry_point(spec, "the data loader", InputError)
        if not callable(function):
            raise InputError(f"{spec} is not callable", "name a function that returns a DataLoader or an iterable")
        try:
            takes = "num_workers" in inspect.signature(function).parameters
        except (TypeError, ValueError):  # a builtin without a signature
            takes = False
        return cls(spec, function, takes)

    def build(self, workers: int | None) -> Iterable[Any]:
        loader = self.function(num_workers=workers) if self.takes_workers and workers is not None else self.function()
        if isinstance(loader, str | bytes) or not isinstance(loader, Iterable):
            raise InputError(
                f"{self.spec} returned {type(loader).__name__}, not an iterable of batches",
                "return the DataLoader (or any iterable of batches) itself, e.g. `return DataLoader(dataset, ...)`",
            )
        return loader
