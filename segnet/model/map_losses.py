"""The loss terms that read a map derived from the label (segnet.preprocessing.maps), cached with it
and moved with it by augmentation, so that no step computes a distance transform or a skeleton.

- BoundaryLoss (loss.boundary): Kervadec et al.'s boundary loss (MIDL 2019 / MedIA 2021): the mean
  over voxels and foreground classes of p_k * phi_k, with phi_k the signed distance (mm) to class
  k's boundary, negative inside. It is smallest when p_k covers exactly the class, and it pulls on
  every voxel by how far it lies from the boundary, where Dice and cross-entropy pull alike.
- SkeletonRecallLoss (loss.skeleton_recall): Kirchhoff et al.'s Skeleton Recall (ECCV 2024): one
  minus the soft recall of each foreground class's tubed skeleton, (sum p_k s_k + 1) / (sum s_k +
  1) over the batch, averaged over the classes: a thin structure broken in the prediction loses
  its skeleton's voxels, which Dice barely weighs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

SMOOTH = 1.0  # Skeleton Recall's: a class with no skeleton in the batch scores recall 1


def foreground_softmax(logits: torch.Tensor) -> torch.Tensor:
    return torch.softmax(logits, dim=1, dtype=torch.promote_types(logits.dtype, torch.float32))[:, 1:]


class BoundaryLoss(nn.Module):
    def __init__(self, ignore_label: int | None = None):
        super().__init__()
        self.ignore_label = ignore_label

    def forward(self, logits: torch.Tensor, label: torch.Tensor, distance: torch.Tensor) -> torch.Tensor:
        """logits (N, classes, *spatial), label (N, 1, *spatial), distance (N, classes - 1, *spatial) mm."""
        weighted = foreground_softmax(logits) * distance
        if self.ignore_label is None:
            return weighted.mean()
        known = label != self.ignore_label
        voxels = known.sum() * weighted.shape[1]
        return (weighted * known).sum() / voxels.clamp_min(1)


class SkeletonRecallLoss(nn.Module):
    def __init__(self, classes: int):
        super().__init__()
        self.classes = classes

    def forward(self, logits: torch.Tensor, label: torch.Tensor, skeleton: torch.Tensor) -> torch.Tensor:
        """logits (N, classes, *spatial), skeleton (N, 1, *spatial): class numbers on the skeletons."""
        probabilities = foreground_softmax(logits)
        tubes = F.one_hot(skeleton[:, 0].long(), self.classes).movedim(-1, 1)[:, 1:].to(probabilities.dtype)
        axes = [0, *range(2, tubes.dim())]
        recall = ((probabilities * tubes).sum(axes) + SMOOTH) / (tubes.sum(axes) + SMOOTH)
        return 1 - recall.mean()
