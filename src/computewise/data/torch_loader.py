"""The measured loader as a real ``torch.utils.data.DataLoader``: parts shared among workers as a sharded
``IterableDataset`` does (worker k of n reads parts k, k+n, ...).

Its own module because it subclasses a torch class at import: only ``data.loader`` imports it, and
only once torch is known to be installed.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch.utils.data

from computewise.data.sources import Item, Part, read_part

__all__ = ["PartsDataset", "parts_data_loader"]


class PartsDataset(torch.utils.data.IterableDataset[Item]):
    """The batches of ``parts``; in a worker, only that worker's share of them."""

    def __init__(self, parts: tuple[Part, ...], batch_rows: int) -> None:
        self.parts = parts
        self.batch_rows = batch_rows

    def __iter__(self) -> Iterator[Item]:
        info = torch.utils.data.get_worker_info()
        mine = self.parts if info is None else self.parts[info.id :: info.num_workers]
        for part in mine:
            yield from read_part(part, self.batch_rows)


def parts_data_loader(
    parts: tuple[Part, ...], batch_rows: int, workers: int, prefetch: int, pin_memory: bool
) -> torch.utils.data.DataLoader[Item]:
    """A DataLoader as a training script builds one; batches are made by the parts (``batch_size=None``)."""
    return torch.utils.data.DataLoader(
        PartsDataset(parts, batch_rows),
        batch_size=None,
        num_workers=workers,
        prefetch_factor=prefetch if workers > 0 else None,
        pin_memory=pin_memory,
        persistent_workers=False,
    )
