"""The cascade's extra input (nnU-Net's 3d_cascade_fullres): the low-resolution stage's label map
as one channel per foreground label value, and what training does to those channels so that the
full-resolution stage learns to correct the first stage's mistakes, not to copy them.

The label map is moved with the label by the spatial augmentation (nearest neighbour) and by
nothing else: intensity augmentation never touches it. Before that, each crop's channels get
nnU-Net's two perturbations, drawn from the crop's own random state (segnet.data.sampling seeds it
per draw):
- with probability 0.4, every channel in random order: a dilation, erosion, opening or closing
  by a ball of radius uniform in [1, 8] voxels; voxels a channel gains leave the other channels,
  so each voxel stays in one channel at most;
- with probability 0.2 per channel: one connected component, chosen at random among those
  smaller than 15 % of the crop, removed (nnU-Net fills it with background).
nnU-Net perturbs after its spatial transforms; here the crop is perturbed before, so the radius is
in the crop's voxels before rotation and scaling. A ball of radius r is what the Euclidean
distance transform gives at distance <= r, computed in time that does not grow with r.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from segnet.data.regions import Regions, foreground_units
from segnet.data.samples import PREVIOUS

OPERATOR_PROBABILITY = 0.4
RADIUS_RANGE = (1.0, 8.0)
COMPONENT_PROBABILITY = 0.2
COMPONENT_LARGEST_SHARE = 0.15


def previous_values(num_classes: int, regions: Regions | None) -> list[int]:
    """The label values the previous stage's label map is one-hot encoded by: every foreground
    value (of every region, for region-based labels)."""
    return sorted({value for unit in foreground_units(num_classes, regions) for value in unit})


def one_hot(label: np.ndarray, values: Sequence[int]) -> np.ndarray:
    """uint8 (len(values), *spatial): 1 where a (1, *spatial) label map holds each value."""
    return np.stack([label[0] == value for value in values]).astype(np.uint8)


def network_input(item: dict, channel_dim: int) -> torch.Tensor:
    """An item's (or a batch's) image, with a cascade's first-stage channels after its own."""
    image = item["image"]
    if PREVIOUS not in item:
        return image
    image = image.as_tensor() if hasattr(image, "as_tensor") else image
    return torch.cat([image, item[PREVIOUS].to(image.device, image.dtype)], dim=channel_dim)


def dilate(mask: np.ndarray, radius: float) -> np.ndarray:
    from scipy import ndimage  # where a cascade trains, not in every loader worker

    if not mask.any():
        return mask
    return ndimage.distance_transform_edt(~mask) <= radius


def erode(mask: np.ndarray, radius: float) -> np.ndarray:
    from scipy import ndimage

    if mask.all():
        return mask
    return ndimage.distance_transform_edt(mask) > radius


OPERATORS = {
    "dilation": dilate,
    "erosion": erode,
    "opening": lambda mask, radius: dilate(erode(mask, radius), radius),
    "closing": lambda mask, radius: erode(dilate(mask, radius), radius),
}


def perturb_with_operators(channels: np.ndarray, random: np.random.RandomState) -> np.ndarray:
    """Each channel, in random order, by a random morphological operator; what one gains, the
    others lose."""
    out = channels.astype(bool)
    names = list(OPERATORS)
    for c in random.permutation(len(out)):
        operator = OPERATORS[names[random.randint(len(names))]]
        result = operator(out[c], random.uniform(*RADIUS_RANGE))
        out[:, result] = False
        out[c] = result
    return out.astype(channels.dtype)


def remove_a_component(channel: np.ndarray, random: np.random.RandomState) -> np.ndarray:
    """The channel without one of its connected components smaller than COMPONENT_LARGEST_SHARE of
    it, chosen at random (unchanged where there is none)."""
    from scipy import ndimage

    components, count = ndimage.label(channel)
    if count == 0:
        return channel
    sizes = np.bincount(components.ravel())[1:]
    small = np.flatnonzero(sizes < COMPONENT_LARGEST_SHARE * channel.size) + 1
    if len(small) == 0:
        return channel
    return np.where(components == small[random.randint(len(small))], 0, channel).astype(channel.dtype)


def perturb(channels: np.ndarray, random: np.random.RandomState) -> np.ndarray:
    """nnU-Net's perturbations of one crop's previous-stage channels (K, *spatial)."""
    if random.rand() < OPERATOR_PROBABILITY:
        channels = perturb_with_operators(channels, random)
    for c in range(len(channels)):
        if random.rand() < COMPONENT_PROBABILITY:
            channels = channels.copy()
            channels[c] = remove_a_component(channels[c], random)
    return channels
