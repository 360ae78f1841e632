"""The data order is a pure function of (seed, position): what exact resume and DDP sharding rely on."""

from __future__ import annotations

import itertools

import pytest

from computewise.errors import ConfigError
from computewise.train.config import TrainConfig
from computewise.train.data import SampleOrder, make_loader, rank_batch_size
from computewise.train.setup import TrainingSetup

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.torch


def take(order: SampleOrder, start: int, count: int) -> list[int]:
    return list(itertools.islice(order.indices_from(start), count))


def indexed_setup(samples: int = 50, seed: int = 3) -> TrainingSetup:
    """A dataset whose sample i is the number i, so a batch shows which samples it holds."""
    dataset = torch.utils.data.TensorDataset(torch.arange(samples))
    return TrainingSetup(
        model=torch.nn.Linear(1, 1),
        loss=lambda model, batch: batch[0].float().mean(),
        dataset=dataset,
        global_batch_size=10,
        make_optimizer=lambda params, fused: torch.optim.SGD(params, lr=0.1),
        seed=seed,
    )


def test_every_epoch_is_a_permutation_fixed_by_seed_and_epoch() -> None:
    order = SampleOrder(dataset_len=7, seed=5)
    stream = take(order, 0, 21)
    assert [sorted(stream[i : i + 7]) for i in (0, 7, 14)] == [list(range(7))] * 3
    assert stream[:7] != stream[7:14]  # each epoch is reshuffled
    assert take(SampleOrder(7, seed=5), 0, 21) == stream
    assert take(SampleOrder(7, seed=6), 0, 7) != stream[:7]
    assert order.permutation(2) == SampleOrder(7, seed=4).permutation(3)  # seed + epoch, nothing else


def test_starting_anywhere_continues_the_same_stream() -> None:
    """Position p gives what an uninterrupted stream gives after p samples, across epoch boundaries too."""
    order = SampleOrder(dataset_len=7, seed=1)
    stream = take(order, 0, 40)
    for start in (1, 6, 7, 13, 20):
        assert take(order, start, 40 - start) == stream[start:]


def test_ranks_split_every_global_batch_into_disjoint_slices() -> None:
    single = take(SampleOrder(23, seed=0), 0, 60)
    ranks = [take(SampleOrder(23, seed=0, rank=rank, world_size=3), 0, 20) for rank in range(3)]
    for step in range(5):  # a global batch of 12 = 3 ranks x 4
        shares = [ranks[rank][step * 4 : step * 4 + 4] for rank in range(3)]
        assert sorted(itertools.chain.from_iterable(shares)) == sorted(single[step * 12 : step * 12 + 12])
    # Resumed at a step boundary, every rank continues its own slice.
    assert take(SampleOrder(23, seed=0, rank=2, world_size=3), 24, 8) == ranks[2][8:16]


def test_the_loader_resumes_at_a_position_and_leaves_the_global_rng_alone() -> None:
    setup, config = indexed_setup(), TrainConfig()
    rng_before = torch.get_rng_state()
    from_start = make_loader(setup, config, micro_batch_size=5, start_sample=0)
    batches = [next(from_start)[0].tolist() for _ in range(30)]  # 3 epochs of 50
    assert torch.equal(torch.get_rng_state(), rng_before)
    resumed = make_loader(setup, config, micro_batch_size=5, start_sample=40)
    assert [next(resumed)[0].tolist() for _ in range(22)] == batches[8:]
    assert sorted(itertools.chain.from_iterable(batches[:10])) == list(range(50))


def test_loader_workers_load_the_same_batches() -> None:
    setup = indexed_setup()
    plain = make_loader(setup, TrainConfig(), micro_batch_size=5, start_sample=10)
    workers = make_loader(
        setup,
        TrainConfig(loader_workers=2, prefetch_factor=3, persistent_workers=True),
        micro_batch_size=5,
        start_sample=10,
    )
    assert [next(workers)[0].tolist() for _ in range(12)] == [next(plain)[0].tolist() for _ in range(12)]


def test_bad_positions_and_shapes_are_config_errors() -> None:
    assert rank_batch_size(32, 4) == 8
    with pytest.raises(ConfigError, match="does not split evenly over 3 processes"):
        rank_batch_size(32, 3)
    with pytest.raises(ConfigError, match="rank 2 is not within a world of 2"):
        SampleOrder(10, seed=0, rank=2, world_size=2)
    with pytest.raises(ConfigError, match="must be >= 0"):
        next(SampleOrder(10, seed=0).indices_from(-1))
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="pin_memory=True needs a CUDA device"):
            make_loader(indexed_setup(), TrainConfig(pin_memory=True), micro_batch_size=5, start_sample=0)
