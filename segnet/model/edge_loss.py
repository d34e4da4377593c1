"""The edge loss: the softmax's edges matched to the label's, through the op's magnitude form.

For every foreground class c, m(p_c) = |Sobel p_c| of the softmax and m(y_c) of the one-hot
label (ops.edge_magnitude, docs/edge-op.md), compared by their mean absolute difference over a
band around the label's boundary of that class: the voxels within band_mm of one where m(y_c)
is not flat. This is the gradient-matching idea of Gated-SCNN's dual-task loss and of the CPG
loss: a prediction whose boundary is blurred, shifted or broken has edges of the wrong height
or place there, while Dice and cross-entropy, summed over all voxels, barely see a thin band.

The band is spacing-aware: its half-width along each axis is band_mm over that axis's spacing
(a thick-slice axis gets fewer voxels), by a max-pool dilation per case. The magnitudes are in
voxel units on both sides, so their difference needs no spacing. The background's edges are
the union of the others', so it is left out. Voxels next to an ignored one (the ignore label)
are left out of the band: the label's edge there is the ignored region's, not a class's.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

import ops
from segnet.errors import ConfigError

EPS = 1e-6  # the op's default: a flat region's magnitude is sqrt(EPS)


def band_radius(spacing: Sequence[float], band_mm: float) -> list[int]:
    """The band's half-width in voxels along each axis: band_mm / spacing, rounded."""
    return [max(0, round(band_mm / float(s))) for s in spacing]


def dilate(mask: torch.Tensor, radius: Sequence[int]) -> torch.Tensor:
    """mask (C, *spatial) bool, grown by `radius` voxels along each axis (a box)."""
    if not any(radius):
        return mask
    pool = F.max_pool2d if mask.dim() == 3 else F.max_pool3d
    kernel = [2 * r + 1 for r in radius]
    return pool(mask[None].float(), kernel, stride=1, padding=list(radius))[0] > 0


class EdgeMatchingLoss(nn.Module):
    def __init__(self, classes: int, band_mm: float = 2.0, backend: str = "auto", ignore_label: int | None = None):
        super().__init__()
        if band_mm < 0:
            raise ConfigError(f"loss.edge.band_mm must be 0 or more (mm around the label's boundary), got {band_mm}")
        self.classes = classes
        self.band_mm = float(band_mm)
        self.backend = backend
        self.ignore_label = ignore_label

    def edges(self, x: torch.Tensor) -> torch.Tensor:
        """|Sobel x| per channel: the op's magnitude form (scripts/bench_loss.py times others)."""
        return ops.edge_magnitude(x, EPS, backend=self.backend)

    def forward(self, logits: torch.Tensor, label: torch.Tensor, spacing: Sequence[Sequence[float]]) -> torch.Tensor:
        """logits (N, classes, *spatial), label (N, 1, *spatial) holding class numbers, spacing
        one per case (mm per spatial axis)."""
        probabilities = torch.softmax(logits, dim=1, dtype=torch.promote_types(logits.dtype, torch.float32))[:, 1:]
        classes = label[:, 0].long()
        known = torch.ones_like(classes, dtype=torch.bool)
        if self.ignore_label is not None:
            ignored = classes == self.ignore_label
            known = ~dilate(ignored, [1] * (classes.dim() - 1))
            classes = classes.masked_fill(ignored, 0)
        target = F.one_hot(classes, self.classes).movedim(-1, 1)[:, 1:].to(probabilities.dtype)
        predicted_edges = self.edges(probabilities)
        with torch.no_grad():
            label_edges = self.edges(target)
            boundary = label_edges.square() > 2 * EPS  # where the label is not flat
            band = torch.stack([dilate(case, band_radius(s, self.band_mm)) for case, s in
                                zip(boundary, spacing, strict=True)]) & known[:, None]
        difference = (predicted_edges - label_edges).abs() * band
        voxels = band.flatten(2).sum(-1).sum(0)  # per class, over the batch
        present = voxels > 0
        if not present.any():  # no class has a boundary in this batch: nothing to match
            return logits.sum() * 0.0
        per_class = difference.flatten(2).sum(-1).sum(0)[present] / voxels[present]
        return per_class.mean()
