"""Datasets over the preprocessed cache (segnet.preprocessing): training crops read from memory
maps, so a worker touches only the bytes of its crops and memory does not grow with the number
of cases; validation reads whole volumes.

Crops are foreground-aware as the worker chain's RandCropByPosNegLabeld: a share of them
(`foreground_share`, data.foreground_share) centred on a foreground voxel (a class drawn uniformly
among those the case holds, then one of its sampled voxels, nnU-Net's way, so small structures are
seen as often as large ones), the rest anywhere; the patch stays inside the volume where it fits
and is centred on a padded volume where it does not. A crop may be read with a margin around the
patch (the device augmentation's rotations and scalings sample there); what lies outside the
volume reads as zero. Maps derived from the label (segnet.preprocessing.maps), where a loss term
asks for them, are cropped by the same box, and every crop carries its case's spacing (mm, of
the preprocessed grid). A cascade's crop also carries its first stage's label map, cropped by the
same box, one-hot and perturbed as nnU-Net perturbs it (segnet.data.cascade_input), before the
augmentation moves it with the label.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch
from monai.transforms import Randomizable
from monai.utils import MAX_SEED
from torch.utils.data import Dataset

from segnet.data.cascade_input import one_hot, perturb
from segnet.data.samples import FOREGROUND_SHARE, PREVIOUS
from segnet.preprocessing.cache import PreprocessedCase
from segnet.preprocessing.previous_maps import PreviousMaps

if TYPE_CHECKING:  # scipy and scikit-image load where maps are made, not in every worker
    from segnet.preprocessing.maps import DerivedMaps


def patch_start(size: int, patch: int, centre: int) -> int:
    """Where a patch centred near `centre` starts along an axis of `size` voxels: inside the
    volume where it fits, centred on the symmetric padding where it does not."""
    if size < patch:
        return -((patch - size) // 2)
    return min(max(centre - patch // 2, 0), size - patch)


def read_box(array: np.ndarray, start: Sequence[int], size: Sequence[int]) -> np.ndarray:
    """array[:, start : start + size] of a (C, *spatial) array, zeros outside it: only the
    overlapping bytes are read from a memory map."""
    out = np.zeros((array.shape[0], *size), dtype=array.dtype)
    inside, target = [slice(None)], [slice(None)]
    for axis, (s, n) in enumerate(zip(start, size, strict=True)):
        lo, hi = max(s, 0), min(s + n, array.shape[axis + 1])
        if hi <= lo:
            return out
        inside.append(slice(lo, hi))
        target.append(slice(lo - s, hi - s))
    out[tuple(target)] = array[tuple(inside)]
    return out


class CropDataset(Dataset, Randomizable):
    """samples_per_volume crops of each case: {"image": float32 (C, *crop), "label": (1, *crop),
    "spacing": float64 (3,), and each of the label's derived `maps` (its (units, *crop) crop)}.

    `patch` is the training patch (3 axes; a 2D patch is one slice thick), `margin` the voxels
    read beyond it on each side, `augment` what the workers do to each crop afterwards (the
    MONAI chain when augmentation runs in the workers), `squeeze_last` drops the slice axis of a
    2D crop; `foreground_share` of the crops are centred on the foreground. The crops' centres and
    the augmentation draw from this dataset's random state (MONAI's Randomizable):
    segnet.data.sampling seeds it per draw. A foreground-centred crop
    picks one of the case's classes, then a voxel of it; with `regions` (their label values,
    segnet.data.regions), one of the case's regions, then a voxel of it, as nnU-Net samples
    regions: every centre lies in the regions' union. With `previous` (a cascade's first stage)
    each crop also holds its one-hot channels of `previous_values`, perturbed from the same state."""

    def __init__(self, entries: Sequence[PreprocessedCase], patch: Sequence[int], samples_per_volume: int,
                 margin: Sequence[int] = (0, 0, 0), augment: Randomizable | None = None, squeeze_last: bool = False,
                 maps: DerivedMaps | None = None, regions: Sequence[Sequence[int]] | None = None,
                 previous: PreviousMaps | None = None, previous_values: Sequence[int] = (),
                 foreground_share: float = FOREGROUND_SHARE):
        self.entries = list(entries)
        self.foreground_share = foreground_share
        self.previous, self.previous_values = previous, list(previous_values)
        self.regions = [list(values) for values in regions] if regions else None
        self.maps = maps
        self.patch, self.margin = list(patch), list(margin)
        self.samples_per_volume = samples_per_volume
        self.augment = augment
        self.squeeze_last = squeeze_last

    def __len__(self) -> int:
        return len(self.entries)

    def set_random_state(self, seed: int | None = None, state: np.random.RandomState | None = None) -> CropDataset:
        super().set_random_state(seed, state)
        if self.augment is not None:
            self.augment.set_random_state(seed=int(self.R.randint(MAX_SEED, dtype="uint32")))
        return self

    def centre(self, shape: Sequence[int], foreground: np.ndarray) -> list[int]:
        if len(foreground) and self.R.rand() < self.foreground_share:
            if self.regions is None:
                classes = np.unique(foreground[:, 0])
                chosen = foreground[foreground[:, 0] == classes[self.R.randint(len(classes))]]
            else:
                present = [np.isin(foreground[:, 0], values) for values in self.regions]
                present = [inside for inside in present if inside.any()]
                chosen = foreground[present[self.R.randint(len(present))]]
            return chosen[self.R.randint(len(chosen)), 1:].tolist()
        return [int(self.R.randint(s)) for s in shape]

    def crop(self, image: np.ndarray, label: np.ndarray, foreground: np.ndarray,
             maps: dict[str, np.ndarray] | None = None) -> dict:
        centre = self.centre(image.shape[1:], foreground)
        start = [patch_start(s, p, c) - m for s, p, c, m in zip(image.shape[1:], self.patch, centre, self.margin,
                                                                strict=True)]
        size = [p + 2 * m for p, m in zip(self.patch, self.margin, strict=True)]
        arrays = {"image": image, "label": label, **(maps or {})}
        # distances: float16 on disk, float32 in the crop, which augmentation resamples and the loss sums
        sample = {key: torch.from_numpy(read_box(array, start, size).astype(np.float32 if array.dtype == np.float16
                                                                           else array.dtype))
                  for key, array in arrays.items() if key != PREVIOUS}
        if PREVIOUS in arrays:
            channels = perturb(one_hot(read_box(arrays[PREVIOUS], start, size), self.previous_values), self.R)
            sample[PREVIOUS] = torch.from_numpy(channels)
        if self.squeeze_last:
            sample = {key: value[..., 0] for key, value in sample.items()}
        return self.augment(sample) if self.augment is not None else sample

    def __getitem__(self, index: int) -> list[dict]:
        entry = self.entries[index]
        image, label, foreground = entry.image(), entry.label(), entry.foreground()
        maps = self.maps.read(entry) if self.maps is not None else {}
        if self.previous is not None:
            maps = {**maps, PREVIOUS: self.previous.read(entry)}
        spacing = torch.tensor(entry.properties()["spacing"], dtype=torch.float64)
        return [{**self.crop(image, label, foreground, maps), "spacing": spacing}
                for _ in range(self.samples_per_volume)]


class VolumeDataset(Dataset):
    """Whole preprocessed volumes for validation: {"image", "label" (int64), "name", "spacing" (mm,
    float64, of the preprocessed grid: what validation's distances are measured in)}; a cascade's
    also its first stage's one-hot channels, as they are."""

    def __init__(self, entries: Sequence[PreprocessedCase], previous: PreviousMaps | None = None,
                 previous_values: Sequence[int] = ()):
        self.entries = list(entries)
        self.previous, self.previous_values = previous, list(previous_values)

    def __len__(self) -> int:
        return len(self.entries)

    def __getitem__(self, index: int) -> dict:
        entry = self.entries[index]
        item = {"image": torch.from_numpy(entry.image(mmap=False)),
                "label": torch.from_numpy(entry.label(mmap=False).astype(np.int64)), "name": entry.name,
                "spacing": torch.tensor(entry.properties()["spacing"], dtype=torch.float64)}
        if self.previous is not None:
            item[PREVIOUS] = torch.from_numpy(one_hot(self.previous.read(entry, mmap=False), self.previous_values))
        return item
