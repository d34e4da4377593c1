"""DataModule over the built-in synthetic data (segnet.generated.synthetic): images made on the fly,
the same for a seed, in shuffled passes split between the ranks (segnet.data.sampling)."""

from __future__ import annotations

from collections.abc import Sequence

import lightning as L
from torch.utils.data import DataLoader

from segnet.data.sampling import CasesOf, DrawLoader, DrawSampler, fit_position, validation_sampler
from segnet.errors import ConfigError
from segnet.generated.synthetic import DIFFICULTIES, SyntheticSegmentation
from segnet.training.signals import ignore_stop_signals


class SyntheticDataModule(L.LightningDataModule):
    def __init__(
        self, spatial_dims: int = 2, image_size: int = 96, num_classes: int = 3, num_train: int = 64,
        num_val: int = 16, num_objects: int = 6, noise: float = 0.4, radius: tuple[int, int] = (6, 18),
        batch_size: int = 16, num_workers: int = 0, seed: int = 0, difficulty: str = "easy",
        hard: dict | None = None, maps: Sequence[str] = (),
    ):
        super().__init__()
        if maps:
            raise ConfigError(f"the loss reads the label's {' and '.join(maps)} maps, which are made into the "
                              "preprocessed cache of a dataset folder: train on data=folder, or set those terms' "
                              "weight to 0")
        if difficulty not in DIFFICULTIES:
            raise ConfigError(f"data.difficulty={difficulty}; use {' or '.join(DIFFICULTIES)}")
        if difficulty == "hard" and (spatial_dims != 2 or num_classes != 3):
            raise ConfigError("data.difficulty=hard draws 2D images of 3 classes (background, tube, ring): "
                              "use data=synthetic2d_hard")
        common = dict(
            spatial_dims=spatial_dims, size=image_size, num_classes=num_classes, num_objects=num_objects,
            noise=noise, radius=tuple(radius), difficulty=difficulty, hard=hard,
        )
        # Train and validation draw from disjoint seeds, so validation images are never trained on.
        self.train_set = SyntheticSegmentation(num_train, seed=2 * seed, **common)
        self.val_set = SyntheticSegmentation(num_val, seed=2 * seed + 1, **common)
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.seed = seed

    def train_dataloader(self) -> DataLoader:
        # An epoch is one pass over the images, shuffled (segnet.data.sampling), split between ranks.
        rank, world, batches_taken = fit_position(self)
        drop_last = len(self.train_set) / world > self.batch_size  # no partial batch, unless it is the only one
        draws = DrawSampler(len(self.train_set), self.batch_size, None, self.seed, rank, world, batches_taken,
                            drop_last)
        return DrawLoader(
            self.train_set, batch_size=self.batch_size, sampler=CasesOf(draws), num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0, drop_last=drop_last, worker_init_fn=ignore_stop_signals,
        )

    def val_dataloader(self) -> DataLoader:
        rank, world, _ = fit_position(self)
        return DataLoader(self.val_set, batch_size=self.batch_size, num_workers=self.num_workers,
                          worker_init_fn=ignore_stop_signals, sampler=validation_sampler(self.val_set, rank, world))
