"""The resumable data order: which sample comes at which position, as a pure function.

A run's data position is one integer, the number of global samples consumed (optimizer steps x
global batch). The order is a stream of epochs, each a permutation drawn from its own generator
seeded with ``seed + epoch``, so position ``p`` always maps to the same sample whatever happened
before: a run resumed at ``p`` draws exactly what an uninterrupted run would have drawn next. No
generator state has to be saved, and the global RNG is never touched (the loader gets its own
generator), so building a loader cannot shift the model's dropout stream either.

Under DDP the stream is dealt out round-robin: rank ``r`` of ``w`` takes positions ``p`` with
``p % w == r``. With a global batch divisible by ``w``, every global batch is split into equal,
disjoint rank slices whose union is the batch a single process would have drawn.

The caller counts the position itself, in whole optimizer steps; the loader's prefetching (which
runs ahead of the step that consumes it) therefore never skews the checkpointed position.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from computewise.errors import ConfigError
from computewise.train.config import TrainConfig
from computewise.train.setup import TrainingSetup

__all__ = ["SampleOrder", "make_loader", "rank_batch_size"]


def rank_batch_size(global_batch_size: int, world_size: int) -> int:
    """Samples each rank processes per optimizer step; the global batch must split evenly across ranks."""
    if world_size < 1:
        raise ConfigError(f"world_size must be >= 1, got {world_size}")
    if global_batch_size % world_size:
        raise ConfigError(
            f"the global batch {global_batch_size} does not split evenly over {world_size} processes",
            "pick a global batch that is a multiple of the number of processes",
        )
    return global_batch_size // world_size


class SampleOrder:
    """The global sample stream of a dataset of ``dataset_len`` samples, and rank ``rank``'s share of it."""

    def __init__(self, dataset_len: int, seed: int, rank: int = 0, world_size: int = 1) -> None:
        if dataset_len < 1:
            raise ConfigError(f"the dataset is empty (length {dataset_len})")
        if world_size < 1 or not 0 <= rank < world_size:
            raise ConfigError(f"rank {rank} is not within a world of {world_size} processes")
        self.dataset_len = dataset_len
        self.seed = seed
        self.rank = rank
        self.world_size = world_size

    def permutation(self, epoch: int) -> list[int]:
        """The sample indices of ``epoch`` in order; a function of ``seed + epoch`` alone."""
        import torch

        generator = torch.Generator().manual_seed(self.seed + epoch)
        order: list[int] = torch.randperm(self.dataset_len, generator=generator).tolist()
        return order

    def indices_from(self, start_sample: int) -> Iterator[int]:
        """This rank's sample indices, endlessly, from global position ``start_sample`` on.

        Epochs follow one another without a gap, so a global batch may straddle two epochs; that
        keeps every batch full and the position arithmetic a plain division.
        """
        if start_sample < 0:
            raise ConfigError(f"the data position must be >= 0, got {start_sample}")
        # The first position at or after start_sample that belongs to this rank.
        position = start_sample + (self.rank - start_sample) % self.world_size
        epoch = -1
        order: list[int] = []
        while True:
            position_epoch, offset = divmod(position, self.dataset_len)
            if position_epoch != epoch:
                epoch, order = position_epoch, self.permutation(position_epoch)
            yield order[offset]
            position += self.world_size


class _MicroBatches:
    """A batch sampler over an endless index stream: lists of ``size`` indices, never exhausted."""

    def __init__(self, indices: Iterator[int], size: int) -> None:
        self._indices = indices
        self._size = size

    def __iter__(self) -> Iterator[list[int]]:
        while True:
            yield [next(self._indices) for _ in range(self._size)]


def make_loader(
    setup: TrainingSetup,
    config: TrainConfig,
    micro_batch_size: int,
    start_sample: int,
    rank: int = 0,
    world_size: int = 1,
) -> Iterator[Any]:
    """An endless iterator of this rank's micro-batches, starting at global position ``start_sample``.

    A torch ``DataLoader`` does the loading so the configuration's worker, pinning and prefetch
    settings mean what they mean in plain PyTorch. ``start_sample`` should be a whole number of
    optimizer steps times the global batch, which is what a checkpoint records.
    """
    import torch
    from torch.utils.data import DataLoader, default_collate

    if micro_batch_size < 1:
        raise ConfigError(f"micro_batch_size must be >= 1, got {micro_batch_size}")
    if config.pin_memory and not torch.cuda.is_available():
        raise ConfigError(
            "pin_memory=True needs a CUDA device: pinned memory only speeds up copies to a GPU",
            "set pin_memory to false on this machine",
        )
    order = SampleOrder(len(setup.dataset), setup.seed, rank, world_size)
    sampler = _MicroBatches(order.indices_from(start_sample), micro_batch_size)
    # Worker seeds come from this generator, not the global RNG, so building the loader leaves the
    # training RNG untouched; seeding it with the position gives a resumed run a fixed seed too.
    generator = torch.Generator().manual_seed(setup.seed * 1_000_003 + start_sample)
    loader: DataLoader[Any] = DataLoader(
        setup.dataset,
        batch_sampler=sampler,
        collate_fn=setup.collate or default_collate,
        num_workers=config.loader_workers,
        pin_memory=config.pin_memory,
        prefetch_factor=config.prefetch_factor,
        persistent_workers=config.persistent_workers,
        generator=generator,
        worker_init_fn=_ignore_preemption_signals if config.loader_workers else None,
    )
    return iter(loader)


def _ignore_preemption_signals(_worker_id: int) -> None:
    """Loader workers ignore SIGTERM/SIGUSR1: a scheduler signals the whole process group, and the
    training process must keep its workers alive while it finishes the step and saves."""
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
