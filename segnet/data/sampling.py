"""Who draws what in training. Every random choice of the data stream (which case, where its crops
lie, how the workers augment them, how the device augments the batch) comes from one seed per
draw, made from the run's `seed`, the rank and the draw's place in that rank's stream: nothing
depends on the number of workers, on which worker makes a draw, or on a generator's state that a
DataLoader or a library could reset.

The stream's place is the number of batches the fit has taken (Lightning's count of training
batches, which every checkpoint holds), so at every new iterator, a resumed fit's first one
included, the stream goes on where the uninterrupted fit would be: at an epoch's end or in the
middle of one, whatever `num_workers` was or is.

The samplers shard the data themselves (each rank draws its own share), so the Trainer runs with
`use_distributed_sampler=False` (conf/trainer/default.yaml) and never replaces them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import NamedTuple

import numpy as np
from monai.data.utils import set_rnd
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Sampler

SEEDS = 2**31  # a draw's seed: below MONAI's MAX_SEED and a torch int64


class Draw(NamedTuple):
    index: int  # of the case
    seed: int  # for everything random about this draw


class DrawSampler(Sampler[Draw]):
    """The training draws of one rank.

    `per_rank`: draws per epoch on every rank (steps_per_epoch x batch_size), cases drawn with
    replacement, so an epoch has that many steps whatever the number of cases or ranks; None: an
    epoch is one pass over the cases, shuffled alike on every rank and split between the ranks
    as DistributedSampler does (padded with repeats to equal shares). `batches_taken` says how
    many batches of `batch_size` draws this rank has taken so far (0 without a trainer);
    `drop_last` as the DataLoader's: an epoch's last, partial batch is not taken."""

    def __init__(self, cases: int, batch_size: int, per_rank: int | None, seed: int, rank: int = 0, world: int = 1,
                 batches_taken: Callable[[], int] = lambda: 0, drop_last: bool = False):
        if cases < 1:
            raise ValueError("there are no cases to draw from")
        self.cases, self.batch_size, self.per_rank = cases, batch_size, per_rank
        self.seed, self.rank, self.world = seed, rank, world
        self.batches_taken, self.drop_last = batches_taken, drop_last

    def __len__(self) -> int:
        return self.per_rank if self.per_rank is not None else math.ceil(self.cases / self.world)

    def __iter__(self) -> Iterator[Draw]:
        batches = len(self) // self.batch_size if self.drop_last else math.ceil(len(self) / self.batch_size)
        epoch, batch = divmod(self.batches_taken(), max(1, batches))
        cases = self.epoch_cases(epoch)
        seeds = np.random.default_rng([self.seed, self.rank, epoch, 1]).integers(SEEDS, size=len(self))
        for position in range(batch * self.batch_size, len(self)):
            yield Draw(int(cases[position]), int(seeds[position]))

    def epoch_cases(self, epoch: int) -> np.ndarray:
        if self.per_rank is not None:
            return np.random.default_rng([self.seed, self.rank, epoch]).integers(self.cases, size=self.per_rank)
        order = np.random.default_rng([self.seed, epoch]).permutation(self.cases)
        return np.resize(order, len(self) * self.world)[self.rank :: self.world]


class CasesOf(Sampler[int]):
    """The case indices alone of a DrawSampler, for data with no random choices of its own (the
    generated datasets, the same image for the same index)."""

    def __init__(self, draws: DrawSampler):
        self.draws = draws

    def __len__(self) -> int:
        return len(self.draws)

    def __iter__(self) -> Iterator[int]:
        return (draw.index for draw in self.draws)


class SeededDraws(Dataset):
    """A dataset of random crops indexed by Draws: its random parts (MONAI's Randomizable ones,
    found as MONAI's own worker seeding finds them) are seeded by the draw before it is made, and
    each crop carries the draw's seed (for the device augmentation of its batch)."""

    def __init__(self, dataset: Dataset):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, draw: Draw) -> list[dict]:
        set_rnd(self.dataset, draw.seed)
        crops = self.dataset[draw.index]
        return [{**crop, "seed": draw.seed} for crop in (crops if isinstance(crops, list) else [crops])]


class DrawLoader(DataLoader):
    """The DataLoader of a DrawSampler's draws. Where it is in the stream is the sampler's, read
    from the fit's count of batches, which every checkpoint holds: it has no state of its own to
    save or restore. Its state_dict and load_state_dict say so to Lightning, which otherwise warns,
    at a resume in the middle of an epoch, that the loader "is not resumable" and the results
    unreliable."""

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state_dict: dict) -> None:
        pass


def validation_sampler(dataset: Dataset, rank: int, world: int) -> DistributedSampler | None:
    """Each rank its share of the validation cases, in order (padded with repeats, which the
    validation's gathering counts once); None on one process."""
    return DistributedSampler(dataset, world, rank, shuffle=False) if world > 1 else None


def fit_position(datamodule) -> tuple[int, int, Callable[[], int]]:
    """(rank, world size, batches taken so far) of the fit a data module serves; one process at
    the start without a trainer."""
    trainer = datamodule.trainer
    if trainer is None:
        return 0, 1, lambda: 0
    return trainer.global_rank, trainer.world_size, lambda: trainer.fit_loop.epoch_loop.batch_progress.total.ready
