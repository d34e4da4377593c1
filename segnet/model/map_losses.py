"""The loss terms that read a map derived from the label (segnet.preprocessing.maps), cached with it
and moved with it by augmentation, so that no step computes a distance transform or a skeleton.
Both score the foreground units (segnet.model.foreground: the classes but the background, or the
regions), one map channel each.

- BoundaryLoss (loss.boundary): Kervadec et al.'s boundary loss (MIDL 2019 / MedIA 2021): the mean
  over voxels and units of p_k * phi_k, with phi_k the signed distance (mm) to unit k's boundary,
  negative inside. It is smallest when p_k covers exactly the unit, and it pulls on every voxel by
  how far it lies from the boundary, where Dice and cross-entropy pull alike.
- SkeletonRecallLoss (loss.skeleton_recall): Kirchhoff et al.'s Skeleton Recall (ECCV 2024): one
  minus the soft recall of each unit's tubed skeleton, (sum p_k s_k + 1) / (sum s_k + 1) over the
  batch, averaged over the units: a thin structure broken in the prediction loses its skeleton's
  voxels, which Dice barely weighs.
"""

from __future__ import annotations

import torch
from torch import nn

from segnet.model.foreground import ForegroundUnits

SMOOTH = 1.0  # Skeleton Recall's: a unit with no skeleton in the batch scores recall 1


class BoundaryLoss(nn.Module):
    def __init__(self, units: ForegroundUnits):
        super().__init__()
        self.units = units

    def forward(self, logits: torch.Tensor, label: torch.Tensor, distance: torch.Tensor) -> torch.Tensor:
        """logits (N, outputs, *spatial), label (N, 1, *spatial), distance (N, units, *spatial) mm."""
        weighted = self.units.probabilities(logits) * distance
        ignored = self.units.ignored(label)
        if ignored is None:
            return weighted.mean()
        known = ~ignored
        return (weighted * known).sum() / (known.sum() * weighted.shape[1]).clamp_min(1)


class SkeletonRecallLoss(nn.Module):
    def __init__(self, units: ForegroundUnits):
        super().__init__()
        self.units = units

    def forward(self, logits: torch.Tensor, label: torch.Tensor, skeleton: torch.Tensor) -> torch.Tensor:
        """logits (N, outputs, *spatial), skeleton (N, units, *spatial): 1 on each unit's tubed skeleton."""
        probabilities = self.units.probabilities(logits)
        tubes = skeleton.to(probabilities.dtype)
        axes = [0, *range(2, tubes.dim())]
        recall = ((probabilities * tubes).sum(axes) + SMOOTH) / (tubes.sum(axes) + SMOOTH)
        return 1 - recall.mean()
