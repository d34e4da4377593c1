"""Cropping a scan to its anatomy before it is normalized, as nnU-Net crops to the non-zero region,
so that what surrounds the anatomy changes neither its intensities nor what the network sees.

The plan's `crop` (segnet.planning.planner decides it per dataset) is one of CROPS:
- "body": the bounding box of the voxels brighter than the background: over each channel's non-zero
  voxels (clipped above their CLIPPED_ABOVE percentile), Otsu's threshold between the dark
  background and the rest; the voxels above it in the connected parts, above it too once the
  channel is averaged over SMOOTHED voxels per axis, of at least KEPT_PART of the largest part's
  size (so that neither a few noise voxels over the threshold nor the air of a low-SNR scan,
  whose noise reaches the tissue's values, stretch the box). For scans whose air is noise
  (magnitude MRI) or a constant (CT's -1000): the same head gets the same box however much air
  the field of view holds, and so the same z-scores and the same windows. The planner takes it
  where every training case's labels lie well inside their box (segnet.planning.planner.crop_rule);
- "nonzero": nnU-Net's, the bounding box of the voxels non-zero in any channel: a zero-filled
  border (a padded export, another reconstruction's field of view) is cut;
- "none": the whole volume (also what a run whose plan names no crop does).

Training and prediction crop alike (MONAI's CropForegroundd in the loading chain, which Invertd
undoes: a prediction is written on the image's whole grid, background outside the box). The box
is found on a grid of at most MAX_VOXELS (every stride-th voxel, widened by a stride on each side
where it was subsampled), so that finding it costs the same on any size of scan.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from monai.transforms import CropForegroundd
from scipy import ndimage
from skimage.filters import threshold_otsu

from segnet.errors import ConfigError

CROPS = ("none", "nonzero", "body")
KEPT_PART = 0.01  # a connected part above the threshold counts if it has this share of the largest's voxels
MAX_VOXELS = 2**23
# Each channel's values above this percentile are clipped before Otsu's threshold, so that a few
# hot voxels spread no histogram. It is a percentile of the non-zero voxels, air included, so it
# lies in the anatomy only while that is more than 100 - CLIPPED_ABOVE % of them: a lower one puts
# the clip, and so the threshold, into the noise of a small head in a wide field of view (the box
# then takes the whole field). 99.9 holds a head in a 900 x 900 field.
CLIPPED_ABOVE = 99.9
# Voxels per axis each channel is averaged over before the body threshold: a low-SNR scan's air
# (noise up to the tissue's values) otherwise crosses the threshold in parts as large as a
# structure, and the box takes the whole field
SMOOTHED = 3

Box = tuple[list[int], list[int]]  # start, end (exclusive) along each spatial axis


def crop_box(image: np.ndarray, crop: str) -> Box:
    """Where `crop` (one of CROPS) cuts a channel-first image (C, *spatial); the whole volume where
    nothing is found (an empty or constant scan)."""
    spatial = image.shape[1:]
    whole = ([0] * len(spatial), list(spatial))
    if checked_crop(crop) == "none":
        return whole
    stride = max(1, math.ceil((math.prod(spatial) / MAX_VOXELS) ** (1 / len(spatial))))
    coarse = np.asarray(image[(slice(None), *(slice(None, None, stride) for _ in spatial))])
    mask = (coarse != 0).any(0) if crop == "nonzero" else body_mask(coarse)
    if not mask.any():
        return whole
    start, end = [], []
    for axis in range(mask.ndim):
        filled = np.flatnonzero(mask.any(axis=tuple(a for a in range(mask.ndim) if a != axis)))
        start.append(max(0, int(filled[0]) * stride - (stride - 1)))
        end.append(min(spatial[axis], int(filled[-1]) * stride + stride))
    return start, end


def body_mask(image: np.ndarray) -> np.ndarray:
    """The voxels of a channel-first image brighter than its background in any channel, in the
    connected parts (of the channels averaged over SMOOTHED voxels per axis) of at least KEPT_PART
    of the largest part's size."""
    above = np.zeros(image.shape[1:], bool)  # the voxels over the threshold
    smoothed_above = np.zeros(image.shape[1:], bool)  # and where the channel averaged is: not the air's noise
    for channel in image:
        values = channel[channel != 0]
        if values.size == 0:
            continue
        values = np.minimum(values, np.percentile(values, CLIPPED_ABOVE))
        if values.min() == values.max():
            continue
        threshold = threshold_otsu(values)
        above |= channel > threshold
        smoothed_above |= ndimage.uniform_filter(channel.astype(np.float32), SMOOTHED) > threshold
    parts, count = ndimage.label(smoothed_above)
    if count == 0:
        return smoothed_above
    sizes = np.bincount(parts.ravel())[1:]
    kept = np.isin(parts, np.flatnonzero(sizes >= KEPT_PART * sizes.max()) + 1)
    # the kept parts' own voxels, to their sharp edge, which the averaging blurred
    return above & ndimage.binary_dilation(kept, iterations=SMOOTHED // 2)


class InBox:
    """MONAI's select_fn for CropForegroundd: a mask that is true in the crop's box."""

    def __init__(self, crop: str):
        self.crop = crop

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        start, end = crop_box(image.detach().cpu().numpy(), self.crop)
        mask = torch.zeros((1, *image.shape[1:]), dtype=torch.bool)
        mask[(slice(None), *(slice(s, e) for s, e in zip(start, end, strict=True)))] = True
        return mask


def checked_crop(crop: str | None) -> str:
    """`crop` as loading applies it: one of CROPS, "none" for None (a plan that names no crop)."""
    if crop is None:
        return "none"
    if crop not in CROPS:
        raise ConfigError(f"data.crop={crop!r}: use one of {', '.join(CROPS)}, or null for the plan's choice")
    return crop


def crop_transform(keys: Sequence[str], crop: str | None) -> list:
    """The loading chain's crop of `keys` to the box `crop` finds in the image (nothing for
    "none" or None)."""
    if checked_crop(crop) == "none":
        return []
    return [CropForegroundd(keys=list(keys), source_key="image", select_fn=InBox(crop), allow_smaller=True,
                            start_coord_key=None, end_coord_key=None)]
