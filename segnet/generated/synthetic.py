"""Built-in synthetic data, deterministic per sample and seed: MONAI's noisy circles/spheres
(difficulty easy), or thin tubes and rings at low contrast with partial volume (difficulty hard,
2D only: segnet.generated.hard)."""

from __future__ import annotations

import numpy as np
import torch
from monai.data import create_test_image_2d, create_test_image_3d
from torch.utils.data import Dataset

from segnet.data.samples import Sample
from segnet.generated.hard import hard_image_2d

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
