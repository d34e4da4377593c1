"""The edge loss: the prediction's edges matched to the label's, through the op's magnitude form.

For every foreground unit c (segnet.model.foreground: a class but the background, or a region),
m(p_c) = |Sobel p_c| of its probability (the softmax's, or the region's sigmoid) and m(y_c) of
its mask in the label (ops.edge_magnitude, docs/edge-op.md), compared by their mean absolute
difference over a band around that unit's boundary in the label: the voxels within band_mm of
one where m(y_c) is not flat. This is the gradient-matching idea of Gated-SCNN's dual-task loss
and of the CPG loss: a prediction whose boundary is blurred, shifted or broken has edges of the wrong height
or place there, while Dice and cross-entropy, summed over all voxels, barely see a thin band.

The band is spacing-aware: its half-width along each axis is band_mm over that axis's spacing
(a thick-slice axis gets fewer voxels), by a max-pool dilation per case. The magnitudes are in
voxel units on both sides, so their difference needs no spacing. The background's edges are
the union of the others', so it is not a unit. Voxels next to an ignored one (the ignore label)
are left out of the band: the label's edge there is the ignored region's, not a unit's.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

import ops
from segnet.errors import ConfigError
from segnet.model.foreground import ForegroundUnits

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
    def __init__(self, units: ForegroundUnits, band_mm: float = 2.0, backend: str = "auto"):
        super().__init__()
        if band_mm < 0:
            raise ConfigError(f"loss.edge.band_mm must be 0 or more (mm around the label's boundary), got {band_mm}")
        self.units = units
        self.band_mm = float(band_mm)
        self.backend = backend

    def edges(self, x: torch.Tensor) -> torch.Tensor:
        """|Sobel x| per channel: the op's magnitude form (scripts/bench_loss.py times others)."""
        return ops.edge_magnitude(x, EPS, backend=self.backend)

    def forward(self, logits: torch.Tensor, label: torch.Tensor, spacing: Sequence[Sequence[float]]) -> torch.Tensor:
        """logits (N, outputs, *spatial), label (N, 1, *spatial) holding label values, spacing one
        per case (mm per spatial axis)."""
        probabilities = self.units.probabilities(logits)
        target = self.units.masks(label, probabilities.dtype)
        ignored = self.units.ignored(label)
        known = torch.ones_like(label[:, 0], dtype=torch.bool) if ignored is None else \
            ~dilate(ignored[:, 0], [1] * (label.dim() - 2))
        predicted_edges = self.edges(probabilities)
        with torch.no_grad():
            label_edges = self.edges(target)
            boundary = label_edges.square() > 2 * EPS  # where the label is not flat
            band = torch.stack([dilate(case, band_radius(s, self.band_mm)) for case, s in
                                zip(boundary, spacing, strict=True)]) & known[:, None]
        difference = (predicted_edges - label_edges).abs() * band
        voxels = band.flatten(2).sum(-1).sum(0)  # per unit, over the batch
        present = voxels > 0
        if not present.any():  # no unit has a boundary in this batch: nothing to match
            return logits.sum() * 0.0
        per_unit = difference.flatten(2).sum(-1).sum(0)[present] / voxels[present]
        return per_unit.mean()
