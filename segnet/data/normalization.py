"""Intensity normalization by modality, as nnU-Net does it, from dataset.json's channel names.

Names are matched casefolded, as nnU-Net matches them.
- "CT": Hounsfield units mean the same on every scanner, so every volume is treated
  alike: clipped to the dataset's foreground 0.5 and 99.5 percentiles, then z-scored with the
  dataset's foreground mean and standard deviation (the fingerprint: intensities under the
  labels, not the air around the body).
- "noNorm": left as stored.
- "rescale_to_0_1": each volume scaled to [0, 1] by its minimum and maximum.
- "rgb_to_0_1": 8-bit colour values divided by 255 (every photograph on one scale).
- anything else (MRI, T1, T2, FLAIR, ...): z-scored per volume, since MRI intensities have no
  absolute scale; over its non-zero voxels only where the dataset is masked (its cases' non-zero
  bounding boxes have a median share of the volume under MASKED_BELOW: skull-stripped brains),
  else over every voxel of the plan's crop (segnet.data.cropping: the box around the anatomy,
  cut before normalizing, as nnU-Net crops to the non-zero region first), so that the air or the
  zero border around a scan moves no tissue's z-score. nnU-Net decides this once per dataset too.
  Deciding it per volume, by whichever voxels happen to be zero, does not carry across scanners:
  a magnitude image stored in integers has an air background of exact zeros on a quiet scanner
  and of noise on another, and the same tissue then lands on different z-scores
  (docs/results/resampling-and-normalization.md).
The plan (one entry per channel) is part of the dataset's plan (segnet.planning.planner), stored in
the checkpoint, and used as is by evaluation and prediction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from monai.config import KeysCollection
from monai.transforms import MapTransform, NormalizeIntensity, ScaleIntensity

MASKED_BELOW = 0.75  # nnU-Net's: cropping to the non-zero region would drop over a quarter of the volume
UNPLANNED = {"scheme": "zscore", "nonzero": True}  # each channel, where no normalization plan is given


SCHEMES = {"ct": "ct", "nonorm": "noNorm", "rescale_to_0_1": "rescale_to_0_1", "rgb_to_0_1": "rgb_to_0_1"}


def scheme_of(channel_name: str) -> str:
    """A channel's scheme from its name in dataset.json, which nnU-Net matches casefolded (NoNorm,
    RGB_to_0_1 and CT are schemes too); any other name is z-scored."""
    return SCHEMES.get(channel_name.strip().casefold(), "zscore")


def is_masked(nonzero_shares: Sequence[float]) -> bool:
    """Whether a dataset's background is masked to zero: its cases' non-zero bounding boxes take up a
    median share of their volumes under MASKED_BELOW (nnU-Net's rule, on its crop to the non-zero region)."""
    return bool(nonzero_shares) and float(np.median(nonzero_shares)) < MASKED_BELOW


def normalization_plan(
    channel_names: Sequence[str], foreground: Sequence[dict[str, float]], nonzero_shares: Sequence[float],
) -> list[dict[str, Any]]:
    """One entry per channel: its scheme, for CT the dataset's foreground statistics (the
    fingerprint's foreground_intensities, segnet.planning.fingerprint), for z-scores whether over the
    non-zero voxels (is_masked, from the fingerprint's per-case nonzero_share)."""
    plan = []
    for channel, name in enumerate(channel_names):
        entry: dict[str, Any] = {"channel": name, "scheme": scheme_of(name)}
        if entry["scheme"] == "ct":
            entry.update({k: foreground[channel][k] for k in ("mean", "std", "percentile_00_5", "percentile_99_5")})
        if entry["scheme"] == "zscore":
            entry["nonzero"] = is_masked(nonzero_shares)
        plan.append(entry)
    return plan


class NormalizeChannelsd(MapTransform):
    """Applies a normalization plan channel by channel (channel-first images); no plan: every
    channel z-scored per volume over its non-zero voxels."""

    def __init__(self, keys: KeysCollection, plan: Sequence[dict[str, Any]] | None = None):
        super().__init__(keys)
        self.plan = list(plan) if plan else None

    def __call__(self, data):
        d = dict(data)
        for key in self.key_iterator(d):
            image = d[key].float()  # a MetaTensor keeps its geometry and applied operations
            out = image.clone()
            for c in range(image.shape[0]):
                out[c] = normalize(image[c], self.plan[c] if self.plan else UNPLANNED)
            d[key] = out
        return d


def normalize(channel: torch.Tensor, entry: dict[str, Any]) -> torch.Tensor:
    """One channel (spatial) by its plan entry, with MONAI's intensity transforms."""
    scheme, image = entry["scheme"], channel[None]
    if scheme == "ct":
        clipped = image.clamp(entry["percentile_00_5"], entry["percentile_99_5"])
        return NormalizeIntensity(subtrahend=entry["mean"], divisor=max(entry["std"], 1e-8))(clipped)[0]
    if scheme == "rescale_to_0_1":
        return ScaleIntensity(minv=0.0, maxv=1.0)(image)[0]
    if scheme == "rgb_to_0_1":
        return channel / 255.0
    if scheme == "noNorm":
        return channel
    return NormalizeIntensity(nonzero=entry["nonzero"])(image)[0]
