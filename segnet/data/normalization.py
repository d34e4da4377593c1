"""Intensity normalization by modality, as nnU-Net does it, from dataset.json's channel names.

- "CT" (any case): Hounsfield units mean the same on every scanner, so every volume is treated
  alike: clipped to the dataset's foreground 0.5 and 99.5 percentiles, then z-scored with the
  dataset's foreground mean and standard deviation (the fingerprint: intensities under the
  labels, not the air around the body).
- "noNorm": left as stored.
- "rescale_to_0_1": each volume scaled to [0, 1] by its minimum and maximum.
- anything else (MRI, T1, T2, FLAIR, ...): z-scored per volume over the body, its non-zero
  voxels, since MRI intensities have no absolute scale.
The plan (one entry per channel) is part of the dataset's plan (segnet.planning.planner), stored in
the checkpoint, and used as is by evaluation and prediction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from monai.config import KeysCollection
from monai.transforms import MapTransform, NormalizeIntensity, ScaleIntensity


def scheme_of(channel_name: str) -> str:
    name = channel_name.strip()
    if name.lower() == "ct":
        return "ct"
    if name in ("noNorm", "rescale_to_0_1"):
        return name
    return "zscore"


def normalization_plan(channel_names: Sequence[str], foreground: Sequence[dict[str, float]]) -> list[dict[str, Any]]:
    """One entry per channel: its scheme, and for CT the dataset's foreground statistics (the
    fingerprint's foreground_intensities, segnet.planning.fingerprint)."""
    plan = []
    for channel, name in enumerate(channel_names):
        entry: dict[str, Any] = {"channel": name, "scheme": scheme_of(name)}
        if entry["scheme"] == "ct":
            entry.update({k: foreground[channel][k] for k in ("mean", "std", "percentile_00_5", "percentile_99_5")})
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
                out[c] = normalize(image[c], self.plan[c] if self.plan else {"scheme": "zscore"})
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
    if scheme == "noNorm":
        return channel
    return NormalizeIntensity(nonzero=True)(image)[0]
