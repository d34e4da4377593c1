"""Built-in synthetic data, deterministic per sample and seed: MONAI's noisy circles/spheres
(difficulty easy), or thin tubes and rings at low contrast with partial volume (difficulty hard,
2D only: segnet.data.hard)."""

from __future__ import annotations

import lightning as L
import numpy as np
import torch
from monai.data import create_test_image_2d, create_test_image_3d
from torch.utils.data import DataLoader, Dataset

from segnet.data.hard import hard_image_2d
from segnet.data.samples import Sample
from segnet.data.sampling import CasesOf, DrawSampler, fit_position, validation_sampler
from segnet.errors import ConfigError

DIFFICULTIES = ("easy", "hard")


class SyntheticSegmentation(Dataset):
    """Sample i is always the same image for the same seed: a fresh RandomState per index."""

    def __init__(
        self, count: int, spatial_dims: int, size: int, num_classes: int, num_objects: int, noise: float,
        radius: tuple[int, int], seed: int, difficulty: str = "easy", hard: dict | None = None,
    ):
        self.count = count
        self.spatial_dims = spatial_dims
        self.size = size
        self.num_classes = num_classes
        self.num_objects = num_objects
        self.noise = noise
        self.radius = radius
        self.seed = seed
        self.difficulty = difficulty
        self.hard = dict(hard or {})
        self._drawn: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # hard images by index, this process's

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> Sample:
        state = np.random.RandomState((self.seed * 1_000_003 + index) % 2**32)
        if self.difficulty == "hard":  # drawn once: its supersampled distance maps cost more than a step
            if index not in self._drawn:
                self._drawn[index] = hard_image_2d(self.size, state, noise=self.noise, **self.hard)
            image, label = self._drawn[index]
            return {"image": torch.from_numpy(image[None]), "label": torch.from_numpy(label[None]),
                    "name": f"synthetic_{index:04d}"}
        make = create_test_image_2d if self.spatial_dims == 2 else create_test_image_3d
        image, label = make(
            *([self.size] * self.spatial_dims),
            num_objs=self.num_objects,
            rad_max=self.radius[1],
            rad_min=self.radius[0],
            noise_max=self.noise,
            num_seg_classes=self.num_classes - 1,
            random_state=state,
        )
        return {
            "image": torch.from_numpy(image[None].astype(np.float32)),
            "label": torch.from_numpy(label[None].astype(np.int64)),
            "name": f"synthetic_{index:04d}",
        }


class SyntheticDataModule(L.LightningDataModule):
    def __init__(
        self, spatial_dims: int = 2, image_size: int = 96, num_classes: int = 3, num_train: int = 64,
        num_val: int = 16, num_objects: int = 6, noise: float = 0.4, radius: tuple[int, int] = (6, 18),
        batch_size: int = 16, num_workers: int = 0, seed: int = 0, difficulty: str = "easy",
        hard: dict | None = None, **_: object,
    ):
        super().__init__()
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
        return DataLoader(
            self.train_set, batch_size=self.batch_size, sampler=CasesOf(draws), num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0, drop_last=drop_last,
        )

    def val_dataloader(self) -> DataLoader:
        rank, world, _ = fit_position(self)
        return DataLoader(self.val_set, batch_size=self.batch_size, num_workers=self.num_workers,
                          sampler=validation_sampler(self.val_set, rank, world))
