"""The training draws (segnet.data.sampling): each rank and epoch its own stream, continued from
the batches already taken, and batches that depend on the seed alone, not on the workers or on
any generator a library resets."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from helpers.data import write_decathlon
from segnet.data.sampling import DrawSampler
from segnet.training.folder_data import FolderDataModule

PATCH = [8, 8, 8]


def stream(sampler: DrawSampler, epochs: int) -> list[tuple[int, int]]:
    """The sampler's draws over `epochs` epochs, as a fit that never stops takes them."""
    batches = -(-len(sampler) // sampler.batch_size)
    draws = []
    for epoch in range(epochs):
        sampler.batches_taken = lambda e=epoch: e * batches
        draws += list(sampler)
    return draws


def test_every_rank_and_epoch_draws_its_own_stream():
    ranks = [DrawSampler(4, batch_size=2, per_rank=8, seed=0, rank=r, world=2) for r in range(2)]
    first, second = (stream(sampler, 2) for sampler in ranks)
    assert len(first) == len(second) == 16 and len(ranks[0]) == 8  # steps_per_epoch batches on every rank
    assert len({seed for _, seed in first + second}) == 32  # no draw repeats another's seed
    assert first[:8] != first[8:] and [i for i, _ in first] != [i for i, _ in second]
    assert stream(DrawSampler(4, 2, 8, seed=1, rank=0, world=2), 2) != first
    assert {i for i, _ in first + second} == {0, 1, 2, 3}


def test_a_stream_goes_on_from_the_batches_taken():
    sampler = DrawSampler(5, batch_size=3, per_rank=None, seed=0, rank=1, world=2)  # 3 draws, 1 batch per epoch
    whole = stream(sampler, 4)
    sampler.batches_taken = lambda: 2
    assert list(sampler) == whole[6:9]  # a resumed fit at the start of its third epoch
    mid = DrawSampler(3, batch_size=2, per_rank=6, seed=0)  # 3 batches per epoch
    whole = stream(mid, 2)
    mid.batches_taken = lambda: 4  # one batch into the second epoch
    assert list(mid) == whole[8:12]


def test_one_pass_per_epoch_is_split_between_the_ranks():
    epochs = []
    for epoch in range(3):
        shares = [DrawSampler(5, 1, None, seed=0, rank=r, world=2, batches_taken=lambda e=epoch: 3 * e)
                  for r in range(2)]
        cases = [[i for i, _ in share] for share in shares]
        assert len(cases[0]) == len(cases[1]) == 3  # padded to equal shares, as DistributedSampler
        assert set(cases[0] + cases[1]) == set(range(5))
        epochs.append(cases)
    assert epochs[0] != epochs[1] != epochs[2]  # shuffled anew every epoch


def batches(module: FolderDataModule, count: int = 2) -> list[dict]:
    module.setup("fit")
    loader = iter(module.train_dataloader())
    return [next(loader) for _ in range(count)]


@pytest.mark.parametrize("preprocessed", [True, False])
def test_batches_depend_on_the_seed_alone(tmp_path, preprocessed):
    root = write_decathlon(tmp_path / "Task", cases=3)

    def module(seed: int, workers: int) -> FolderDataModule:
        return FolderDataModule(str(root), patch_size=PATCH, num_folds=3, batch_size=2, steps_per_epoch=2,
                                   num_workers=workers, seed=seed, cache_dir=str(tmp_path / "cache"),
                                   preprocessed=preprocessed)

    torch.manual_seed(123), np.random.seed(123)
    reference = batches(module(0, 0))
    torch.manual_seed(456), np.random.seed(456)  # the global generators have no say
    for again in (batches(module(0, 0)), batches(module(0, 2))):
        for a, b in zip(reference, again, strict=True):
            assert torch.equal(a["image"], b["image"]) and torch.equal(a["label"], b["label"])
            assert torch.equal(a["seed"], b["seed"])
    other = batches(module(1, 0))
    assert not torch.equal(reference[0]["image"], other[0]["image"])
